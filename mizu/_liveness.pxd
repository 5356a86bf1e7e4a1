# The peer watch's extension type, for other Cython modules of mizu to call at C speed.

from libcpp.memory cimport unique_ptr

from mizu.includes.liveness cimport PeerWatch as CPeerWatch


cdef class PeerWatch:
    cdef unique_ptr[CPeerWatch] watch
