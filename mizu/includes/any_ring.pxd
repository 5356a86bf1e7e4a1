from mizu.includes.py_errors cimport raise_py_error
from libc.stdint cimport uint32_t, uint64_t
from libcpp.memory cimport unique_ptr

from mizu.includes.ring cimport RingBase, RingKind, Reservation
from mizu.includes.waiter cimport WaitBackend, WaitOptions, WaitStatus, Waiter

cdef extern from "any_ring.hpp" namespace "mizu" nogil:
    cdef cppclass AnyRing:
        @staticmethod
        unique_ptr[AnyRing] create(RingKind kind, void* mem, size_t bytes, uint64_t capacity, uint32_t max_message,
                       WaitBackend backend) except +raise_py_error
        @staticmethod
        unique_ptr[AnyRing] attach(RingKind kind, void* mem, size_t bytes) except +raise_py_error
        RingBase& base()
        bint begin_push(uint32_t len, Reservation& res)
        void end_push(const Reservation& res)
        bint begin_pop(Reservation& res)
        void end_pop(const Reservation& res)
        WaitStatus wait_push(uint32_t len, Reservation& res, Waiter& w, const WaitOptions& opt) except +raise_py_error
        WaitStatus wait_pop(Reservation& res, Waiter& w, const WaitOptions& opt) except +raise_py_error
        WaitStatus wait_readable(Waiter& w, const WaitOptions& opt) except +raise_py_error
        void set_owner(uint32_t owner)
        size_t void_abandoned(uint32_t owner)
