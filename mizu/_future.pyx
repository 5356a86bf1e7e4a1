"""A concurrent.futures.Future whose state C code reads and writes directly.

The stock Future creates a threading.Condition and two lists in __init__
and takes the Condition in every state change, which costs more than a
whole round trip to a worker. Here a future's state, result, exception,
Condition, waiters and callbacks live in a `Cell`, an extension object the
Executor holds too, so its hot path reads and changes them as C fields; the
stdlib's code, which Future inherits and which wait() and as_completed()
run, reaches them through descriptors of the stdlib's attribute names.

A future is observed once a thread takes its Condition (to wait, or for
wait() and as_completed() to install their waiters) or adds a callback.
Until then the state changes below take the fast path: they run in C with
the GIL held, so no other thread runs between their check of `observed`
and their write of the state, and a thread that observes the future
afterwards sees the new state. The Condition and the lists are made on
first use, in C. A future that has settled (finished, or cancelled and
notified) never changes again, so the stdlib's code gets a shared
Condition that locks nothing and a waiter list that keeps nothing for it:
wait() and as_completed() over futures that are already done allocate
nothing per future.
"""

cimport cython
from cpython.list cimport PyList_Append
from cpython.object cimport PyObject, PyObject_TypeCheck, PyTypeObject
from cpython.ref cimport Py_INCREF

import _thread
from time import monotonic as _monotonic
from concurrent.futures import _base

__all__ = ["Cell", "Condition", "LazyFuture"]


cdef extern from "Python.h":
    int PyObject_GC_IsTracked(object o)
    bint PyObject_IS_GC(object o)
    void PyObject_GC_Track(void* o)
    void PyObject_GC_UnTrack(void* o)
    ctypedef struct PyMemberDef:
        Py_ssize_t offset
    ctypedef struct PyMemberDescrObject:
        PyMemberDef* d_member

cdef object PENDING = _base.PENDING
cdef object RUNNING = _base.RUNNING
cdef object FINISHED = _base.FINISHED
cdef object CANCELLED = _base.CANCELLED
cdef object CANCELLED_AND_NOTIFIED = _base.CANCELLED_AND_NOTIFIED

cdef object _RLock = _thread.RLock
cdef object _allocate_lock = _thread.allocate_lock
cdef object _InvalidStateError = _base.InvalidStateError
cdef object _LOGGER = _base.LOGGER
cdef object _set_running = _base.Future.set_running_or_notify_cancel
cdef object _future_result = _base.Future.result
cdef object _future_exception = _base.Future.exception
cdef object _setattr = object.__setattr__
cdef object _instance_dict = _base.Future.__dict__["__dict__"]
cdef tuple _none = ()


cdef inline bint _settled(object state) noexcept:
    """Whether a future in state will never change again: what wait() counts as done."""
    return state is FINISHED or state is CANCELLED_AND_NOTIFIED


cdef inline bint _ended(object state) noexcept:
    """Whether a future in state takes no more callbacks: they have run, or run as it is notified."""
    return state is FINISHED or state is CANCELLED or state is CANCELLED_AND_NOTIFIED


@cython.freelist(16)
cdef class Cell:
    """The state of one LazyFuture, and (weakly) the pool it belongs to."""

    def __cinit__(self):
        self.state = PENDING


cdef class Condition:
    """threading.Condition over an RLock, made in C: the Condition of a future that has yet to settle."""

    def __cinit__(self):
        self.lock = _RLock()

    def acquire(self, blocking=True, timeout=-1):
        return self.lock.acquire(blocking, timeout)

    def release(self):
        self.lock.release()

    def __enter__(self):
        return self.lock.acquire()

    def __exit__(self, *exc_info):
        self.lock.release()

    def wait(self, timeout=None):
        """As threading.Condition.wait: release the lock until notified or timeout, then take it again."""
        if not self.lock._is_owned():
            raise RuntimeError("cannot wait on un-acquired lock")
        sleeper = _allocate_lock()
        sleeper.acquire()
        if self.sleepers is None:
            self.sleepers = []
        self.sleepers.append(sleeper)
        saved = self.lock._release_save()
        woken = False
        try:
            if timeout is None:
                woken = sleeper.acquire()
            elif timeout > 0:
                woken = sleeper.acquire(True, timeout)
            else:
                woken = sleeper.acquire(False)
            return woken
        finally:
            self.lock._acquire_restore(saved)
            if not woken:
                try:
                    self.sleepers.remove(sleeper)
                except ValueError:
                    pass

    def wait_for(self, predicate, timeout=None):
        """As threading.Condition.wait_for."""
        cdef object end = None
        left = timeout
        result = predicate()
        while not result:
            if left is not None:
                if end is None:
                    end = _monotonic() + left
                else:
                    left = end - _monotonic()
                    if left <= 0:
                        break
            self.wait(left)
            result = predicate()
        return result

    def notify(self, n=1):
        if not self.lock._is_owned():
            raise RuntimeError("cannot notify on un-acquired lock")
        self.wake(n)

    def notify_all(self):
        self.notify(len(self.sleepers) if self.sleepers else 0)

    notifyAll = notify_all

    def _is_owned(self):
        return self.lock._is_owned()

    cdef int wake(self, Py_ssize_t n) except -1:
        """Wake up to n threads in wait(); the lock is held."""
        # Each sleeper is taken off the list before its release, so each is
        # released once: one whose wait() timed out is still locked.
        sleepers = self.sleepers
        while sleepers and n > 0:
            sleepers.pop(0).release()
            n -= 1
        return 0


@cython.final
cdef class _SettledCondition:
    """The Condition of every future that has settled: nothing about it changes, so nothing needs locking or waiting."""

    def acquire(self, blocking=True, timeout=-1):
        return True

    def release(self):
        pass

    def __enter__(self):
        return True

    def __exit__(self, *exc_info):
        pass

    def wait(self, timeout=None):
        return True

    def wait_for(self, predicate, timeout=None):
        return predicate()

    def notify(self, n=1):
        pass

    def notify_all(self):
        pass


@cython.final
cdef class _NoWaiters:
    """The waiters of a future that has settled: none will ever be notified, so none is kept."""

    def append(self, waiter):
        pass

    def remove(self, waiter):
        pass

    def __iter__(self):
        return iter(_none)

    def __len__(self):
        return 0


cdef tuple _STAND_INS = (_SettledCondition(), _NoWaiters(), _none)   # for CONDITION, WAITERS, CALLBACKS


cdef Cell _cell_of_instance(object future):
    cdef PyObject* cell = _cell_slot(future)
    if cell == NULL:
        raise AttributeError("this future has no state yet")
    return <Cell>cell


cdef int _observe(object future, Cell cell) except -1:
    """Mark the future observed, so that its state changes take the slow path (lock, waiters, callbacks); tell its pool once."""
    _pin(future)
    if not cell.observed:
        cell.observed = True
        future._observed()
    return 0


cdef enum Field:
    STATE, RESULT, EXCEPTION, CONDITION, WAITERS, CALLBACKS

cdef tuple _NAMES = ("_state", "_result", "_exception", "_condition", "_waiters", "_done_callbacks")


@cython.final
cdef class _CellField:
    """One of the stdlib's private attributes of a Future, kept in the future's cell."""

    cdef Field field

    def __cinit__(self, int field):
        self.field = <Field>field

    def __get__(self, instance, owner):
        if instance is None:
            return self
        cdef Cell cell = _cell_of_instance(instance)
        if self.field == STATE:
            return cell.state
        if self.field == RESULT:
            return cell.result
        if self.field == EXCEPTION:
            return cell.exception
        return _made_on_first_use(instance, cell, self.field)

    def __set__(self, instance, value):   # reached through __setattr__, which pins the future
        cdef Cell cell = _cell_of_instance(instance)
        if self.field == STATE:
            cell.state = value
        elif self.field == RESULT:
            cell.result = value
        elif self.field == EXCEPTION:
            cell.exception = value
        else:
            raise AttributeError(f"a mizu future makes its own {_NAMES[self.field]}, on first use; it cannot be set")


cdef inline object _kept(Cell cell, Field field):
    return cell.condition if field == CONDITION else cell.waiters if field == WAITERS else cell.callbacks


cdef inline bint _past_use(Cell cell, Field field) noexcept:
    """Whether the future has gone past the use of field: settled, or for callbacks, ended."""
    return _ended(cell.state) if field == CALLBACKS else _settled(cell.state)


cdef object _made_on_first_use(object future, Cell cell, Field field):
    """The future's Condition, waiter list or callback list; a shared stand-in once it is past their use."""
    kept = _kept(cell, field)
    if kept is not None:
        return kept
    if _past_use(cell, field):
        return _STAND_INS[field - CONDITION]
    fresh = Condition() if field == CONDITION else []
    # The allocation may have started a collection whose finalizers let
    # another thread run: it may have made one, or settled the future.
    if _kept(cell, field) is None:
        if _past_use(cell, field):
            return _STAND_INS[field - CONDITION]
        if field == CONDITION:
            cell.condition = fresh
        elif field == WAITERS:
            cell.waiters = fresh
        else:
            cell.callbacks = fresh
        _observe(future, cell)
    return _kept(cell, field)


class LazyFuture(_base.Future):
    """concurrent.futures.Future with its state in a Cell and a lazily created Condition."""

    _state = _CellField(STATE)
    _result = _CellField(RESULT)
    _exception = _CellField(EXCEPTION)
    _condition = _CellField(CONDITION)
    _waiters = _CellField(WAITERS)
    _done_callbacks = _CellField(CALLBACKS)
    __slots__ = ("_cell",)

    def __init__(self):
        _setattr(self, "_cell", Cell())

    def __setattr__(self, name, value):
        _pin(self)
        _setattr(self, name, value)

    @property
    def __dict__(self):
        _pin(self)
        return _instance_dict.__get__(self)

    @__dict__.setter
    def __dict__(self, value):
        _pin(self)
        _instance_dict.__set__(self, value)

    def _observed(self):
        """Called once, when a thread first waits on this future or registers a callback."""

    def done(self):
        return is_done(own_cell(self))

    def running(self):
        return own_cell(self).state is RUNNING

    def cancelled(self):
        state = own_cell(self).state
        return state is CANCELLED or state is CANCELLED_AND_NOTIFIED

    def result(self, timeout=None):
        cdef Cell cell = own_cell(self)
        if cell.state is FINISHED:
            # A traceback through Cython code holds no frame with this
            # future in it, so raising here makes no reference cycle.
            if cell.exception is not None:
                raise cell.exception
            return cell.result
        return _future_result(self, timeout)

    def exception(self, timeout=None):
        cdef Cell cell = own_cell(self)
        if cell.state is FINISHED:
            return cell.exception
        return _future_exception(self, timeout)

    def add_done_callback(self, fn):
        cdef Cell cell = own_cell(self)
        if not _ended(cell.state):
            if cell.callbacks is None:
                fresh = []
                if cell.callbacks is None:
                    cell.callbacks = fresh
            # From the check to the append nothing allocates or runs Python
            # code, so the settling thread sees fn, or fn sees the end.
            if not _ended(cell.state):
                PyList_Append(cell.callbacks, fn)
                _observe(self, cell)
                return
        _call_back(self, fn)

    def set_running_or_notify_cancel(self):
        return set_running(self, own_cell(self))

    def set_result(self, result):
        _complete(self, own_cell(self), RESULT_SET, result)

    def set_exception(self, exception):
        _complete(self, own_cell(self), EXCEPTION_SET, exception)


cdef int _call_back(object future, object fn) except -1:
    try:
        fn(future)
    except Exception:
        _LOGGER.exception("exception calling callback for %r", future)
    return 0


# A finished future whose result is a plain value (an int, a str, a tuple of
# such) can lead nowhere back to itself, nor can its cell, so the collector
# need not visit them: untracked, they cost nothing to the collections that
# a program holding many futures runs. A future that has, or had, anything
# else to lead to (an attribute, a Condition, a field written by the
# stdlib's methods) is pinned: tracked again and never untracked. Containers
# other than tuples are not plain, as a dict the collector does not track
# now may hold anything later.

cdef inline bint _leads_nowhere(Cell cell, object value) noexcept:
    """Whether cell, done with value, leads to no object the collector tracks (but its pool's weakref)."""
    return (not cell.pinned and cell.fn is None and cell.first is None and cell.second is None
            and (not PyObject_IS_GC(value) or (type(value) is tuple and not PyObject_GC_IsTracked(value))))


cdef inline void _track(object o) noexcept:
    if not PyObject_GC_IsTracked(o):
        PyObject_GC_Track(<void*>o)


cdef inline PyObject* _cell_slot(object future) noexcept:
    return (<PyObject**>(<char*><PyObject*>future + _cell_offset))[0]


cdef int _pin(object future) except -1:
    # The cell is missing while copy or pickle rebuilds a future.
    cdef PyObject* cell = _cell_slot(future)
    if cell != NULL:
        (<Cell>cell).pinned = True
        _track(<Cell>cell)
    _track(future)
    return 0


cdef bint is_done(Cell cell) noexcept:
    """Future.done() of the future whose state is cell."""
    state = cell.state
    return state is not RUNNING and state is not PENDING


cdef Py_ssize_t slot_offset(type cls, str name) except -1:
    """Where instances of cls keep the slot name (of its __slots__), to read and write it without a Python call."""
    return (<PyMemberDescrObject*>cls.__dict__[name]).d_member.offset


# Where a LazyFuture keeps its cell, to fill it in without a Python call.
cdef Py_ssize_t _cell_offset = slot_offset(LazyFuture, "_cell")
cdef PyTypeObject* _lazy_future = <PyTypeObject*>LazyFuture
cdef tuple _no_arguments = ()


cdef object new_future(type cls, Cell cell):
    """A future of class cls (a LazyFuture without __init__ of its own) whose state is cell."""
    future = (<PyTypeObject*>cls).tp_new(cls, <PyObject*>_no_arguments, NULL)
    Py_INCREF(cell)
    (<PyObject**>(<char*><PyObject*>future + _cell_offset))[0] = <PyObject*>cell
    return future


cdef Cell cell_of(object future):
    """The cell of a future that new_future made."""
    return <Cell>_cell_slot(future)


cdef Cell own_cell(object future):
    """future._cell, read in C when future is a LazyFuture (self in its methods is not always one)."""
    if PyObject_TypeCheck(future, _lazy_future):
        return _cell_of_instance(future)
    return future._cell


cdef bint set_running(object future, Cell cell) except -1:
    """Future.set_running_or_notify_cancel, without the Condition while the future is not observed."""
    if not cell.observed and cell.state is PENDING:
        cell.state = RUNNING
        return True
    return _set_running(future)


cdef enum Outcome:
    RESULT_SET, EXCEPTION_SET, CANCELLED_SET


cdef int _complete(object future, Cell cell, Outcome outcome, object value) except -1:
    state = cell.state
    if not cell.observed and (state is RUNNING or state is PENDING):
        if outcome == RESULT_SET:
            cell.result = value
        elif outcome == EXCEPTION_SET:
            cell.exception = value
        cell.state = CANCELLED_AND_NOTIFIED if outcome == CANCELLED_SET else FINISHED
        if outcome == RESULT_SET and _leads_nowhere(cell, value):
            PyObject_GC_UnTrack(<void*>cell)
            PyObject_GC_UnTrack(<void*>future)
        return 0
    # As the stdlib's set_result and set_exception. Without a Condition no
    # thread can have installed a waiter, nor take one before the state is
    # set: nothing from here to there runs Python code.
    cdef Condition cond = cell.condition
    interrupted = None
    if cond is not None:
        # A signal handler that raises while the lock is contended must not
        # cut this short: the future would never settle. What it raised is
        # raised once the future has.
        while True:
            try:
                cond.lock.acquire()
                break
            except BaseException as exc:
                interrupted = exc
    try:
        state = cell.state
        if _ended(state):
            raise _InvalidStateError(f"{state}: {future!r}")
        if outcome == RESULT_SET:
            cell.result = value
        elif outcome == EXCEPTION_SET:
            cell.exception = value
        cell.state = CANCELLED_AND_NOTIFIED if outcome == CANCELLED_SET else FINISHED
        if cell.waiters:
            for waiter in cell.waiters:
                if outcome == RESULT_SET:
                    waiter.add_result(future)
                elif outcome == EXCEPTION_SET:
                    waiter.add_exception(future)
                else:
                    waiter.add_cancelled(future)
        if cond is not None and cond.sleepers:
            cond.wake(len(cond.sleepers))
    finally:
        if cond is not None:
            cond.lock.release()
    # The state has ended, so no callback joins the list now.
    if cell.callbacks:
        for fn in cell.callbacks:
            _call_back(future, fn)
    if interrupted is not None:
        raise interrupted
    return 0


cdef int set_result(object future, Cell cell, object result) except -1:
    """Future.set_result, without the Condition while the future is not observed."""
    return _complete(future, cell, RESULT_SET, result)


cdef int set_exception(object future, Cell cell, object exception) except -1:
    """Future.set_exception, without the Condition while the future is not observed."""
    return _complete(future, cell, EXCEPTION_SET, exception)


cdef int set_cancelled(object future, Cell cell) except -1:
    """Cancel a future that is pending or running, as if it had been cancelled before it ran (Executor.stop)."""
    return _complete(future, cell, CANCELLED_SET, None)
