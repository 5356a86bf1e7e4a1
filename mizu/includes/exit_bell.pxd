from mizu.includes.py_errors cimport raise_py_error
from libc.stdint cimport uint16_t
from posix.types cimport pid_t

from mizu.includes.any_ring cimport AnyRing

cdef extern from "exit_bell.hpp" namespace "mizu" nogil:
    cdef cppclass ExitBell:
        ExitBell(AnyRing& results) except +raise_py_error
        void watch(uint16_t index, pid_t pid) except +raise_py_error
