"""A concurrent.futures.Future whose state C code reads and writes directly.

The stock Future creates a threading.Condition and two lists in __init__
and takes the Condition in every state change, which costs more than a
whole round trip to a worker. Here a future's state, result, exception and
Condition live in a `Cell`, an extension object the Executor holds too, so
its hot path reads and changes them as C fields; the stdlib's methods,
which Future inherits, reach them through properties of the same names.
The Condition and the waiter and callback lists are made on first use (by
a waiting thread, wait(), as_completed() or a callback), and the state
changes below take the fast path while nobody uses the Condition. They run
in C with the GIL held, so no other thread can run between their check of
the Condition and their write of the state; a thread that creates the
Condition afterwards sees the new state. Callbacks and waiters are only
ever added with the Condition held, so a future without one has neither.
"""

from cpython.object cimport PyObject, PyTypeObject
from cpython.ref cimport Py_INCREF

import threading
from concurrent.futures import _base

__all__ = ["Cell", "LazyFuture"]


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

cdef object _creation = threading.Lock()
cdef object _Condition = threading.Condition
cdef object _set_running = _base.Future.set_running_or_notify_cancel
cdef object _set_result = _base.Future.set_result
cdef object _set_exception = _base.Future.set_exception
cdef object _future_result = _base.Future.result
cdef object _future_exception = _base.Future.exception
cdef object _setattr = object.__setattr__
cdef object _instance_dict = _base.Future.__dict__["__dict__"]


cdef class Cell:
    """The state of one LazyFuture, and (weakly) the pool it belongs to."""

    def __cinit__(self):
        self.state = PENDING


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


def _cell_field(name):
    """A property of the future that is the cell's field `name`."""
    def get(self):
        return getattr(self._cell, name)

    def put(self, value):   # reached through __setattr__, which pins the future
        setattr(self._cell, name, value)

    return property(get, put)


class LazyFuture(_base.Future):
    """concurrent.futures.Future with its state in a Cell and a lazily created Condition."""

    _state = _cell_field("state")
    _result = _cell_field("result")
    _exception = _cell_field("exception")
    _waiters = _InstanceList("_waiters")
    _done_callbacks = _InstanceList("_done_callbacks")
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

    @property
    def _condition(self):
        cdef Cell cell = self._cell
        cond = cell.condition
        if cond is None:
            with _creation:
                cond = cell.condition
                if cond is None:
                    _pin(self)
                    cond = cell.condition = _Condition()
            self._observed()
        return cond

    def _observed(self):
        """Called once, when a thread first waits on this future or registers a callback."""

    def done(self):
        return is_done(self._cell)

    def running(self):
        return (<Cell>self._cell).state is RUNNING

    def cancelled(self):
        state = (<Cell>self._cell).state
        return state is CANCELLED or state is CANCELLED_AND_NOTIFIED

    def result(self, timeout=None):
        cdef Cell cell = self._cell
        if cell.state is FINISHED:
            # A traceback through Cython code holds no frame with this
            # future in it, so raising here makes no reference cycle.
            if cell.exception is not None:
                raise cell.exception
            return cell.result
        return _future_result(self, timeout)

    def exception(self, timeout=None):
        cdef Cell cell = self._cell
        if cell.state is FINISHED:
            return cell.exception
        return _future_exception(self, timeout)

    def set_running_or_notify_cancel(self):
        return set_running(self, self._cell)

    def set_result(self, result):
        _complete(self, self._cell, True, result)

    def set_exception(self, exception):
        _complete(self, self._cell, False, exception)


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


# Where a LazyFuture keeps its cell, to fill it in without a Python call.
cdef Py_ssize_t _cell_offset = (<PyMemberDescrObject*>LazyFuture.__dict__["_cell"]).d_member.offset
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


cdef bint set_running(object future, Cell cell) except -1:
    """Future.set_running_or_notify_cancel, without the Condition when nobody waits."""
    if cell.condition is None and cell.state is PENDING:
        cell.state = RUNNING
        return True
    return _set_running(future)


cdef int _complete(object future, Cell cell, bint ok, object value) except -1:
    # No Condition means no thread waits and no waiter or callback is attached.
    state = cell.state
    if cell.condition is None and (state is RUNNING or state is PENDING):
        if ok:
            cell.result = value
        else:
            cell.exception = value
        cell.state = FINISHED
        if ok and _leads_nowhere(cell, value):
            PyObject_GC_UnTrack(<void*>cell)
            PyObject_GC_UnTrack(<void*>future)
    elif ok:
        _set_result(future, value)
    else:
        _set_exception(future, value)
    return 0


cdef int set_result(object future, Cell cell, object result) except -1:
    """Future.set_result, without the Condition when nobody waits or called back."""
    return _complete(future, cell, True, result)


cdef int set_exception(object future, Cell cell, object exception) except -1:
    """Future.set_exception, without the Condition when nobody waits or called back."""
    return _complete(future, cell, False, exception)
