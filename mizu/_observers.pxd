# What follows the engine's work without being part of it, told through one hook (Roster.tell).

from libcpp.vector cimport vector

from mizu._future cimport Cell

cdef enum Event:
    LAUNCHED     # a worker's first process started
    REPLACED     # a successor started for a worker whose process retired
    UP           # a worker said it takes tasks
    SETTLED      # a task ran for `seconds` and its future is about to settle
    RELEASED     # the pool let go of its workers
    ABANDONED    # a child forked from the pool's process let go of it


cdef class Observer:
    cdef int notify(self, Event event, Py_ssize_t index, Cell cell, double seconds) except -1


cdef class WorkFigures(Observer):
    cdef list roster                    # the pool's Workers, as the pool starts and lets go of them
    cdef vector[double] launched_at, up_at, busy   # by worker index: monotonic seconds, and seconds its tasks ran
    cdef vector[Py_ssize_t] calls
    cdef list slowest                   # the slowest tasks: (seconds, worker, task_repr), longest first
    cdef double slow_floor              # the seconds a task must exceed to join them
    cdef object stopped_at              # monotonic seconds when the workers were let go, or None
    cdef object final                   # the workers' figures then (workers)

    cdef note_slow(self, Py_ssize_t index, Cell cell, double seconds)


cdef class ProgressBars(Observer):
    cdef readonly dict counters         # cell -> what counts its calls when it settles (a map's progress bar)


cdef class SentByValue(Observer):
    cdef list kept                      # by worker index: the callables sent by value it keeps -> their ids, oldest first

    cdef unsigned long long id_for(self, Py_ssize_t index, object fn, dict registered,
                                   unsigned long long* last_id) except 0
