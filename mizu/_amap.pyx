# cython: auto_pickle=False
"""The async iterator of Executor.amap: a batch's values handed to `async for` with no frame resumed for each.

`async for` awaits what __anext__ returns. An async generator resumes its
frame for each value it yields; here a value already collected comes in a
_Ready, an awaitable that is done from the start: its send (am_send, which
the interpreter calls on Python 3.10 and 3.11) returns the value, and on
3.12 on, where the interpreter calls __next__ instead, that raises the
StopIteration carrying it: the iterator's own, reused from value to value
while no one else holds it, for creating one costs as much as the rest of
the step. Only when no value is left does __anext__ return a coroutine,
which awaits the next batch.
"""

cimport cython
from cpython.list cimport PyList_GET_SIZE
from cpython.ref cimport Py_DECREF, Py_INCREF, PyObject


cdef extern from "Python.h":
    ctypedef enum PySendResult:
        PYGEN_RETURN
        PYGEN_ERROR
    ctypedef PySendResult (*sendfunc)(PyObject*, PyObject*, PyObject**) noexcept
    ctypedef PyObject* (*iternextfunc)(PyObject*) noexcept
    ctypedef struct PyAsyncMethods:
        sendfunc am_send
    ctypedef struct _TypeSlots "PyTypeObject":
        PyAsyncMethods* tp_as_async
        iternextfunc tp_iternext
    ctypedef struct PyStopIterationObject:
        PyObject* value
    Py_ssize_t Py_REFCNT(PyObject* o)
    PyObject* PyObject_CallOneArg(PyObject* callable, PyObject* arg)
    void PyErr_Restore(PyObject* type, PyObject* value, PyObject* traceback)
    void PyErr_SetString(PyObject* type, const char* message)
    int PyException_SetTraceback(PyObject* exc, PyObject* traceback)


__all__ = ["AsyncMapResults"]

cdef object _TAKEN = object()   # a _Ready's value once awaited


@cython.final
@cython.freelist(8)
cdef class _Ready:
    """What __anext__ returns for a value already there: awaiting it gives the value without suspending."""

    cdef object value
    cdef object stop   # the StopIteration of the iterator that made it

    def __await__(self):
        return self


cdef PyObject* _take(_Ready ready) noexcept:
    """ready's value, a new reference; NULL, with RuntimeError set, if it was awaited before."""
    value = ready.value
    if value is _TAKEN:
        PyErr_SetString(<PyObject*>RuntimeError, "cannot reuse already awaited __anext__()")
        return NULL
    ready.value = _TAKEN
    Py_INCREF(value)
    return <PyObject*>value


cdef PySendResult _ready_send(PyObject* ready, PyObject* arg, PyObject** result) noexcept:
    result[0] = _take(<_Ready>ready)
    return PYGEN_ERROR if result[0] is NULL else PYGEN_RETURN


cdef PyObject* _ready_next(PyObject* ready) noexcept:
    cdef PyObject* value = _take(<_Ready>ready)
    if value is NULL:
        return NULL
    cdef PyObject* stop = <PyObject*>(<_Ready>ready).stop
    if Py_REFCNT(stop) == 2:   # its iterator's and ready's: no raise of it is still held
        _carry(stop, value)
        PyException_SetTraceback(stop, <PyObject*>None)
        Py_INCREF(<object>stop)
    else:
        # An instance, not the bare value: a tuple or an exception would be taken for the exception's arguments.
        stop = PyObject_CallOneArg(<PyObject*>StopIteration, value)
        Py_DECREF(<object>value)
        if stop is NULL:
            return NULL
    Py_INCREF(StopIteration)
    PyErr_Restore(<PyObject*>StopIteration, stop, NULL)   # takes both references
    return NULL


cdef void _carry(PyObject* stop, PyObject* value) noexcept:
    """Make value, a reference this takes, the one that the StopIteration stop carries."""
    cdef PyObject* before = (<PyStopIterationObject*>stop).value
    (<PyStopIterationObject*>stop).value = value
    if before is not NULL:
        Py_DECREF(<object>before)


# Slots Cython cannot write: __next__ raising from Cython would record a traceback for each value.
(<_TypeSlots*>_Ready).tp_as_async.am_send = _ready_send
(<_TypeSlots*>_Ready).tp_iternext = _ready_next


@cython.final
cdef class AsyncMapResults:
    """The async iterator amap returns: the values of each list that `batches` (an async generator) yields, popped
    from its end.

    Popped, not iterated: a value the caller has dropped stays alive nowhere
    here (from Python 3.12, but for the last one handed out, which its
    StopIteration carries until the next step). Once iteration has begun,
    aclose() closes `batches`, which cancels the tasks not yet started;
    dropping it does too, once the event loop closes the dropped async
    generator.
    """

    cdef list values
    cdef object batches
    cdef object stop   # what a _Ready raises from Python 3.12 on: it carries the last value handed out
    cdef object __weakref__

    def __cinit__(self, batches):
        self.values = []
        self.batches = batches
        self.stop = StopIteration()

    def __aiter__(self):
        return self

    def __anext__(self):
        cdef _Ready ready
        if PyList_GET_SIZE(self.values):
            ready = _Ready.__new__(_Ready)
            ready.value = self.values.pop()
            ready.stop = self.stop
            return ready
        return _next_batch_value(self)

    async def aclose(self):
        """Stop early: once iteration has begun, tasks not yet started are cancelled."""
        if self.batches is not None:
            # Raises, and changes nothing, while another task awaits the next batch.
            await self.batches.aclose()
        self.values = []
        self.batches = None
        self.forget_last()

    cdef void forget_last(self) noexcept:
        """Let go of the last value handed out, which its StopIteration carries."""
        Py_INCREF(None)
        _carry(<PyObject*>self.stop, <PyObject*>None)


async def _next_batch_value(AsyncMapResults results):
    """The first value of the next batch that has any; StopAsyncIteration once `batches` has ended."""
    results.forget_last()
    while not PyList_GET_SIZE(results.values):
        if results.batches is None:
            raise StopAsyncIteration
        try:
            results.values = await results.batches.__anext__()
        except StopAsyncIteration:
            results.batches = None
            raise
    return results.values.pop()
