"""A concurrent.futures.Future that builds its Condition only when a thread waits.

The stock Future creates a threading.Condition and two lists in __init__
and takes the Condition in every state change, which costs more than a
whole round trip to a worker. Here a new future sets no attribute at all:
its state, result and exception start as class attributes, and the
Condition and the waiter and callback lists are made on first use (by a
waiting thread, wait(), as_completed() or a callback). The state changes
below take the fast path while nobody uses the Condition. They run in C
with the GIL held, so no other thread can run between their check of the
Condition and their write of the state; a thread that creates the
Condition afterwards sees the new state. Callbacks and waiters are only
ever added with the Condition held, so a future without one has neither.
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


cdef class _InstanceList:
    """A class attribute that gives each instance its own list on first access."""

    cdef str name

    def __init__(self, name):
        self.name = name

    def __get__(self, instance, owner):
        if instance is None:
            return self
        # Stored in the instance, which then shadows this descriptor.
        value = instance.__dict__[self.name] = []
        return value


class LazyFuture(_base.Future):
    """concurrent.futures.Future with a lazily created Condition."""

    _lazy_condition = None
    _state = PENDING
    _result = None
    _exception = None
    _waiters = _InstanceList("_waiters")
    _done_callbacks = _InstanceList("_done_callbacks")
    # Not Future.__init__: a new future has nothing of its own yet.
    __init__ = object.__init__

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


cpdef bint set_running(object future) except -1:
    """Future.set_running_or_notify_cancel, without the Condition when nobody waits."""
    if future._lazy_condition is None and future._state is PENDING:
        future._state = RUNNING
        return True
    return _set_running(future)


cdef inline bint _unobserved(future) except -1:
    # No Condition means no thread waits and no waiter or callback is attached.
    state = future._state
    return future._lazy_condition is None and (state is RUNNING or state is PENDING)


cdef _complete(object future, bint ok, object value):
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


cpdef set_result(object future, object result):
    """Future.set_result, without the Condition when nobody waits or called back."""
    _complete(future, True, result)


cpdef set_exception(object future, object exception):
    """Future.set_exception, without the Condition when nobody waits or called back."""
    _complete(future, False, exception)
