# The pool with its manager thread, for the pool's final class and a forked child to reach at C speed.

from mizu._dispatch cimport Dispatcher


cdef class Manager(Dispatcher):
    cdef public object manager
    cdef int owner                      # the process that made the pool

    cdef start_manager(self)
    cdef bint give_back(self) except -1
    cdef release(self)
