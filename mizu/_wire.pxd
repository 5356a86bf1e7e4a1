# The wire codec's entry points, for other Cython modules of mizu to call at C speed.

cpdef object encode_plain(object obj)
cpdef object decode(object data)
cdef object encode_plain_after(const void* header, Py_ssize_t n, object obj)
cdef object decode_at(const char* data, Py_ssize_t size)
