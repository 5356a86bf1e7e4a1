# The segment's extension type, for other Cython modules of mizu to call at C speed.

from libc.stdint cimport uint64_t
from libcpp.memory cimport unique_ptr

from mizu.includes.segment cimport Segment as CSegment


cdef class Segment:
    cdef unique_ptr[CSegment] seg


cdef uint64_t _bounded(str what, object value, uint64_t limit) except? 0
