# The wire codec's entry points, for other Cython modules of mizu to call at C speed.

cpdef object encode_plain(object obj)
cpdef object decode(object data)
