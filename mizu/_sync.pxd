# The pool's synchronization primitives, for its Cython modules to use at C speed.

cimport cython
from cpython.list cimport PyList_Append, PyList_GET_SIZE
from cpython.pyport cimport PY_SSIZE_T_MAX
from cpython.ref cimport PyObject
from libc.stdint cimport int64_t


cdef extern from "Python.h":
    int _delete_slice "PyList_SetSlice"(object list, Py_ssize_t low, Py_ssize_t high, PyObject* itemlist) except -1


cdef inline int clear_list(list items) except -1:
    """items.clear(), without looking the method up or making a slice."""
    return _delete_slice(items, 0, PY_SSIZE_T_MAX, NULL)


cdef extern from "thread_lock.hpp" namespace "mizu" nogil:
    cdef cppclass ThreadLock:
        bint try_take() noexcept
        bint take_or_sleep(int64_t timeout_ns) noexcept
        void give() noexcept


cdef class Lock:
    cdef ThreadLock lock

    cdef bint take(self, int64_t deadline_ns) except -1
    cdef void give(self) noexcept


@cython.final
cdef class Fifo:
    cdef list items
    cdef Py_ssize_t head

    cdef inline Py_ssize_t size(self) noexcept:
        return PyList_GET_SIZE(self.items) - self.head

    cdef inline int push(self, x) except -1:
        return PyList_Append(self.items, x)

    cdef object oldest(self)
    cdef object at(self, Py_ssize_t i)
    cdef object pop_oldest(self)
    cdef object pop_newest(self)
    cdef int push_oldest(self, x) except -1
    cdef Py_ssize_t index(self, x) noexcept
    cdef bint remove(self, x) except -1
    cdef list snapshot(self)
    cdef list take_all(self)
