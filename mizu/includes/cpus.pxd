cdef extern from "cpus.hpp" namespace "mizu" nogil:
    unsigned usable_cpus()
