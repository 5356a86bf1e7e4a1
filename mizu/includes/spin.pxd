from libc.stdint cimport int64_t

cdef extern from "spin.hpp" namespace "mizu" nogil:
    int64_t now_ns()
    void cpu_relax()
    const int64_t kForever
