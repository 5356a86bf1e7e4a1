# The wire codec's entry points, for other Cython modules of mizu to call at C speed.

from mizu.includes.wire cimport Writer

cpdef object encode_plain(object obj)
cpdef object decode(object data, object buffers=*)
cdef int encode_plain_into(Writer& w, const void* header, Py_ssize_t n, object obj) except -1
cdef list encode_peer_into(Writer& w, const void* header, Py_ssize_t n, object obj, str language)
cdef object decode_at(const char* data, Py_ssize_t size, object buffers)
