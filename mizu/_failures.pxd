# Watching the workers for a death, and breaking the pool, for the engine's other modules to call at C speed.

from mizu._roster cimport Roster, Worker


cdef class Watchdog(Roster):
    cdef collect_ready(self)
    cdef check_workers(self)
    cdef str obituary_of(self, Worker worker)
    cdef terminate_broken(self, detail, remote=*, pool_text=*, future_text=*)

