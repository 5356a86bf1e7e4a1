# cython: auto_pickle=False
"""The pool's locks and queues: a mutex and a queue of futures that Cython code works without a Python call."""

from cpython.exc cimport PyErr_CheckSignals
from cpython.list cimport PyList_GET_ITEM, PyList_SET_ITEM
from cpython.ref cimport Py_DECREF, Py_INCREF, PyObject

from mizu.includes.spin cimport kForever, now_ns

__all__ = ["Fifo", "Lock"]

# How often a blocked take wakes to run signal handlers.
cdef int64_t _SLICE_NS = 20_000_000

cdef class Lock:
    """A mutex that Cython takes and releases without a Python call (mizu/thread_lock.hpp).

    Uncontended, a take and a give are an atomic operation each. A blocking
    take releases the GIL and wakes at least every slice to run signal
    handlers, so Ctrl-C interrupts it as it does threading.Lock.acquire().
    """

    cdef bint take(self, int64_t deadline_ns) except -1:
        """Acquire by deadline_ns (now_ns's clock; 0: only if free, kForever: no limit)."""
        cdef int64_t step
        cdef bint taken
        if self.lock.try_take():
            return True
        while deadline_ns != 0:
            step = _SLICE_NS if deadline_ns == kForever else min(_SLICE_NS, deadline_ns - now_ns())
            if step <= 0:
                return False
            with nogil:
                taken = self.lock.take_or_sleep(step)
            if taken:
                return True
            PyErr_CheckSignals()
        return False

    cdef void give(self) noexcept:
        self.lock.give()

    def __enter__(self):
        self.take(kForever)
        return self

    def __exit__(self, *exc_info):
        self.give()


cdef class Fifo:
    """A first-in, first-out queue of futures that Cython code works in C.

    Each operation runs no Python code and, until the queue is changed,
    allocates nothing that could start a collection (whose finalizers could
    let another thread in), so under the GIL it is atomic, as a deque's
    are. The items live in a list from `head` on; the consumed front, left
    as None, is cut off once it is long and half the list.
    """

    def __cinit__(self):
        self.items = []

    cdef object oldest(self):
        """The first item, or None if empty."""
        return <object>PyList_GET_ITEM(self.items, self.head) if self.size() else None

    cdef object at(self, Py_ssize_t i):
        """The item i places from the first (0 <= i < size())."""
        return <object>PyList_GET_ITEM(self.items, self.head + i)

    cdef object pop_oldest(self):
        """Take the first item (the queue is not empty)."""
        item = <object>PyList_GET_ITEM(self.items, self.head)
        Py_DECREF(item)          # the list's reference, which item now holds
        Py_INCREF(None)
        PyList_SET_ITEM(self.items, self.head, None)
        self.head += 1
        if self.head >= 64 and 2 * self.head >= PyList_GET_SIZE(self.items):
            _delete_slice(self.items, 0, self.head, NULL)   # allocates nothing, so no collection runs
            self.head = 0
        return item

    cdef object pop_newest(self):
        """Take the last item (the queue is not empty)."""
        return self.items.pop()

    cdef int push_oldest(self, x) except -1:
        """Put x before the first item."""
        if self.head:
            self.head -= 1
            consumed = <object>PyList_GET_ITEM(self.items, self.head)   # None
            Py_DECREF(consumed)      # the list's reference
            Py_INCREF(x)
            PyList_SET_ITEM(self.items, self.head, x)
        else:
            self.items.insert(0, x)
        return 0

    cdef Py_ssize_t index(self, x) noexcept:
        """How many places from the first x is, or -1 if it is not there."""
        cdef Py_ssize_t i
        for i in range(self.head, PyList_GET_SIZE(self.items)):
            if <object>PyList_GET_ITEM(self.items, i) is x:
                return i - self.head
        return -1

    cdef bint remove(self, x) except -1:
        """Take x out of the queue; False if it was not there."""
        cdef Py_ssize_t i
        for i in range(self.head, PyList_GET_SIZE(self.items)):
            if self.items[i] is x:
                del self.items[i]
                return True
        return False

    cdef list snapshot(self):
        return self.items[self.head:]

    cdef list take_all(self):
        """Empty the queue, returning what it held."""
        fresh = []
        items, head = self.items, self.head
        self.items, self.head = fresh, 0
        return items[head:]
