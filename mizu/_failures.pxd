# Watching the workers for a death, and breaking the pool, for the engine's other modules to call at C speed.

from mizu._roster cimport Roster, Worker


cdef class Watchdog(Roster):
    cdef collect_ready(self)
    cdef replace(self, Worker worker)
    cdef check_workers(self)
    cdef drain(self)
    cdef check_deadlines(self)
    cdef recover(self, Worker worker)
    cdef str obituary_of(self, Worker worker)
    cdef terminate_broken(self, detail, remote=*, pool_text=*, future_text=*)

