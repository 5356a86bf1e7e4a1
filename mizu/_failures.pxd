# Watching the workers for a death, and breaking the pool, for the engine's other modules to call at C speed.

from libcpp.memory cimport unique_ptr

from mizu._rings cimport _Ring
from mizu._roster cimport Roster, Worker
from mizu.includes.exit_bell cimport ExitBell as CExitBell


cdef class ExitBell:
    cdef unique_ptr[CExitBell] bell
    cdef _Ring results

    cdef void abandon(self) noexcept


cdef class Watchdog(Roster):
    cdef ExitBell bell                  # a pool that replaces dead workers hears of each death at once
    cdef collect_ready(self)
    cdef replace(self, Worker worker, bint exited=*)
    cdef check_workers(self)
    cdef drain(self)
    cdef check_deadlines(self)
    cdef recover(self, Worker worker)
    cdef watch_exit(self, Worker worker)
    cdef str obituary_of(self, Worker worker)
    cdef terminate_broken(self, detail, remote=*, pool_text=*, future_text=*)


cdef reap(object proc)
