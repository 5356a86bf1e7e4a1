from mizu.includes.py_errors cimport raise_py_error
from posix.types cimport pid_t

cdef extern from "liveness.hpp" namespace "mizu" nogil:
    cdef cppclass PeerWatch:
        PeerWatch(pid_t pid) except +raise_py_error
        bint alive()
        bint wait_exit(long long timeout_ns)
        pid_t pid()
        @staticmethod
        bint any_exited(PeerWatch** peers, size_t n) except +raise_py_error
        @staticmethod
        void die_with(pid_t pid) except +raise_py_error
        long wait_for_index(int socket_fd) except +raise_py_error
