# The future's state as C fields, and its fast state changes, for the Executor.

cdef class Cell:
    cdef public object state, result, exception, condition, pool
    cdef bint pinned    # the future has had attributes or a Condition: the collector always visits it


cdef object new_future(type cls, Cell cell)
cdef bint set_running(object future, Cell cell) except -1
cdef int set_result(object future, Cell cell, object result) except -1
cdef int set_exception(object future, Cell cell, object exception) except -1
cdef bint is_done(Cell cell) noexcept
