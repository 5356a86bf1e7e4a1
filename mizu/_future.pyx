"""A concurrent.futures.Future that builds its Condition only when a thread waits.

The stock Future creates a threading.Condition in __init__ and takes it in
every state change, which costs more than a whole round trip to a worker.
Here the Condition is made on first use (by a waiting thread, wait(),
as_completed() or a callback), and the state changes below take the fast
path while nobody uses it. They run in C with the GIL held, so no other
thread can run between their check of the Condition and their write of the
state; a thread that creates the Condition afterwards sees the new state.
"""

import threading
from concurrent.futures import _base

cdef object PENDING = _base.PENDING
cdef object RUNNING = _base.RUNNING
cdef object FINISHED = _base.FINISHED
cdef object CANCELLED = _base.CANCELLED
cdef object CANCELLED_AND_NOTIFIED = _base.CANCELLED_AND_NOTIFIED

cdef object _creation = threading.Lock()
cdef object _Condition = threading.Condition
cdef object _set_running = _base.Future.set_running_or_notify_cancel
cdef object _set_result = _base.Future.set_result
cdef object _set_exception = _base.Future.set_exception


class LazyFuture(_base.Future):
    """concurrent.futures.Future with a lazily created Condition."""

    def __init__(self):
        self._lazy_condition = None
        self._state = PENDING
        self._result = None
        self._exception = None
        self._waiters = []
        self._done_callbacks = []

    @property
    def _condition(self):
        cond = self._lazy_condition
        if cond is None:
            with _creation:
                cond = self._lazy_condition
                if cond is None:
                    cond = self._lazy_condition = _Condition()
            self._watched()
        return cond

    def _watched(self):
        """Called once, when a thread first waits on this future or registers a callback."""

    def done(self):
        return self._state is FINISHED or self._state is CANCELLED or self._state is CANCELLED_AND_NOTIFIED

    def running(self):
        return self._state is RUNNING

    def cancelled(self):
        return self._state is CANCELLED or self._state is CANCELLED_AND_NOTIFIED

    def result(self, timeout=None):
        if self._state is FINISHED:
            if self._exception is not None:
                try:
                    raise self._exception
                finally:
                    self = None
            return self._result
        return _base.Future.result(self, timeout)

    def exception(self, timeout=None):
        if self._state is FINISHED:
            return self._exception
        return _base.Future.exception(self, timeout)

    def set_running_or_notify_cancel(self):
        return set_running(self)

    def set_result(self, result):
        set_result(self, result)

    def set_exception(self, exception):
        set_exception(self, exception)


cpdef bint set_running(future) except -1:
    """Future.set_running_or_notify_cancel, without the Condition when nobody waits."""
    if future._lazy_condition is None and future._state is PENDING:
        future._state = RUNNING
        return True
    return _set_running(future)


cdef inline bint _unobserved(future) except -1:
    # No Condition means no thread waits and no waiter list is attached; no
    # callbacks means nothing else must run on completion.
    state = future._state
    return future._lazy_condition is None and not future._done_callbacks and (state is RUNNING or state is PENDING)


cdef _complete(future, bint ok, value):
    if _unobserved(future):
        if ok:
            future._result = value
        else:
            future._exception = value
        future._state = FINISHED
    elif ok:
        _set_result(future, value)
    else:
        _set_exception(future, value)


cpdef set_result(future, result):
    """Future.set_result, without the Condition when nobody waits or called back."""
    _complete(future, True, result)


cpdef set_exception(future, exception):
    """Future.set_exception, without the Condition when nobody waits or called back."""
    _complete(future, False, exception)
