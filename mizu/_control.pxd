# The controls of running work (deadlines, stopping a task, replacing workers), for the engine's other modules.

from mizu._collect cimport Collector
from mizu._roster cimport Worker


cdef class Controller(Collector):
    cdef bint end_running(self, Worker worker, future) except -1
    cdef close_ended(self, list ended)
