# The future's state as C fields, and its fast state changes, for the Executor.

from libc.stdint cimport int64_t

cdef class Cell:
    cdef public object state, result, exception, condition
    cdef readonly object pool   # a weak reference to the pool, or None: set only in C
    cdef object waiters, callbacks   # the stdlib's _waiters and _done_callbacks, made on first use
    cdef bint observed  # a thread has taken the Condition or added a callback: state changes take the slow path
    cdef bint pinned    # the future has had attributes or a Condition: the collector always visits it
    # The Executor's task, until it ends: the call's parts as its task
    # message carries them (mizu._messages), (kind, task_id, fn, first,
    # second), and the calls it stands for.
    cdef int kind
    cdef unsigned long long task_id
    cdef object fn, first, second
    cdef Py_ssize_t calls
    cdef int64_t timeout_ns   # the seconds it may run once started, in ns; 0: no limit


cdef class Condition:
    cdef object lock       # an RLock, as threading.Condition's default
    cdef list sleepers     # a lock per thread in wait(), made by the first

    cdef int wake(self, Py_ssize_t n) except -1


cdef object new_future(type cls, Cell cell)
cdef Cell cell_of(object future)
cdef Cell own_cell(object future)
cdef Py_ssize_t slot_offset(type cls, str name) except -1
cdef bint set_running(object future, Cell cell) except -1
cdef int set_result(object future, Cell cell, object result) except -1
cdef int set_exception(object future, Cell cell, object exception) except -1
cdef int set_cancelled(object future, Cell cell) except -1
cdef bint is_done(Cell cell) noexcept


cdef inline void drop_task(Cell cell) noexcept:
    """Let go of the call of a task that has ended (or never will run): its arguments may be large."""
    cell.fn = cell.first = cell.second = None
