# Sending tasks to the workers, for the engine's other modules to call at C speed.

from libc.stdint cimport int64_t

from mizu._control cimport Controller
from mizu._future cimport Cell
from mizu._roster cimport Worker
from mizu.includes.wire cimport Writer


cdef class Dispatcher(Controller):
    cdef readonly object ref
    cdef unsigned long send_owner       # the thread in dispatch, holding send_lock
    cdef bint launching                 # start() is starting the workers
    cdef size_t backlogged             # submits that left tasks waiting in `pending`, so far
    cdef unsigned long long last_task_id, last_fn_id     # under send_lock

    cdef start(self, first)
    cpdef submit(self, int kind, fn, first, second, Py_ssize_t calls, counter=*, int64_t timeout_ns=*)
    cdef int refuse_if_closed(self) except -1
    cdef reserve(self)
    cdef bytes task_message(self, Worker worker, Cell cell, Writer& w)
    cdef Worker pick(self, Py_ssize_t depth)
    cdef bint rebalance(self) except -1
    cdef send(self, Worker worker, const char* data, Py_ssize_t n, bytes message)
    cdef flush(self, Worker worker)
    cdef bint sending(self)


cdef void interpreter_exits() noexcept
