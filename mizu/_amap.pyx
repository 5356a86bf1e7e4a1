# cython: auto_pickle=False
"""The async iterator of Executor.amap: a batch's values handed to `async for` with no frame resumed for each.

`async for` awaits what __anext__ returns. An async generator resumes its
frame for each value it yields; here a value already collected comes in a
_Ready, an awaitable that is done from the start: its send (am_send, which
the interpreter calls on Python 3.10 and 3.11) returns the value, and on
3.12 on, where the interpreter calls __next__ instead, that raises the
StopIteration carrying it. Only when no value is left does __anext__
return a coroutine, which awaits the next batch.
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
    PyObject* PyObject_CallOneArg(PyObject* callable, PyObject* arg)
    void PyErr_SetObject(PyObject* type, PyObject* value)
    void PyErr_SetString(PyObject* type, const char* message)


__all__ = ["AsyncMapResults"]

cdef object _TAKEN = object()   # a _Ready's value once awaited


@cython.final
@cython.freelist(8)
cdef class _Ready:
    """What __anext__ returns for a value already there: awaiting it gives the value without suspending."""

    cdef object value

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
    # An instance, not the bare value: a tuple or an exception would be taken for the exception's arguments.
    cdef PyObject* stop = PyObject_CallOneArg(<PyObject*>StopIteration, value)
    Py_DECREF(<object>value)
    if stop is not NULL:
        PyErr_SetObject(<PyObject*>StopIteration, stop)
        Py_DECREF(<object>stop)
    return NULL


# Slots Cython cannot write: __next__ raising from Cython would record a traceback for each value.
(<_TypeSlots*>_Ready).tp_as_async.am_send = _ready_send
(<_TypeSlots*>_Ready).tp_iternext = _ready_next


@cython.final
cdef class AsyncMapResults:
    """The async iterator amap returns: the values of each list that `batches` (an async generator) yields, popped
    from its end.

    Popped, not iterated: a value the caller has dropped stays alive nowhere
    here. Once iteration has begun, aclose() closes `batches`, which cancels
    the tasks not yet started; dropping it does too, once the event loop
    closes the dropped async generator.
    """

    cdef list values
    cdef object batches
    cdef object __weakref__

    def __cinit__(self, batches):
        self.values = []
        self.batches = batches

    def __aiter__(self):
        return self

    def __anext__(self):
        cdef _Ready ready
        if PyList_GET_SIZE(self.values):
            ready = _Ready.__new__(_Ready)
            ready.value = self.values.pop()
            return ready
        return _next_batch_value(self)

    async def aclose(self):
        """Stop early: once iteration has begun, tasks not yet started are cancelled."""
        if self.batches is not None:
            # Raises, and changes nothing, while another task awaits the next batch.
            await self.batches.aclose()
        self.values = []
        self.batches = None


async def _next_batch_value(AsyncMapResults results):
    """The first value of the next batch that has any; StopAsyncIteration once `batches` has ended."""
    while not PyList_GET_SIZE(results.values):
        if results.batches is None:
            raise StopAsyncIteration
        try:
            results.values = await results.batches.__anext__()
        except StopAsyncIteration:
            results.batches = None
            raise
    return results.values.pop()
