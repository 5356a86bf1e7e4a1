# The future's state as C fields, and its fast state changes, for the Executor.

cdef class Cell:
    cdef public object state, result, exception, condition, pool
    cdef bint pinned    # the future has had attributes or a Condition: the collector always visits it
    # The Executor's task, until it ends: the call's parts as its task
    # message carries them (mizu._messages), (kind, task_id, fn, first,
    # second), and the calls it stands for.
    cdef int kind
    cdef unsigned long long task_id
    cdef object fn, first, second
    cdef Py_ssize_t calls


cdef object new_future(type cls, Cell cell)
cdef Cell cell_of(object future)
cdef bint set_running(object future, Cell cell) except -1
cdef int set_result(object future, Cell cell, object result) except -1
cdef int set_exception(object future, Cell cell, object exception) except -1
cdef bint is_done(Cell cell) noexcept
