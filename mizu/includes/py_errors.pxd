cdef extern from "py_errors.hpp" namespace "mizu":
    cdef void raise_py_error()
