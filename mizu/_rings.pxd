# The rings' extension types, for other Cython modules of mizu to call at C speed.

from libc.stdint cimport int64_t, uint32_t, uint64_t
from libcpp.memory cimport unique_ptr

from mizu.includes.any_ring cimport AnyRing
from mizu.includes.ring cimport Reservation, RingKind
from mizu.includes.waiter cimport WaitStatus, Waiter
from mizu._liveness cimport PeerWatch
from mizu._segment cimport Segment


cdef class _Ring:
    cdef unique_ptr[AnyRing] ring
    cdef unique_ptr[Waiter] pop_waiter
    cdef unique_ptr[Waiter] push_waiter
    cdef readonly Segment segment
    cdef readonly size_t offset
    cdef uint32_t max_msg

    cdef RingKind _kind(self) except *
    cdef _bind(self, Segment segment, size_t offset, unique_ptr[AnyRing] ring)
    cdef int _check(self, Py_ssize_t n) except -1
    cdef int _push(self, const char* data, Py_ssize_t n, bint wait, object timeout, PeerWatch peer) except -1
    cdef object _take(self, Reservation& res)
    cdef int _raise_for(self, WaitStatus st, PeerWatch peer) except -1
    cdef int _with_buffer(self, object data, bint wait, object timeout, PeerWatch peer) except -1
    cdef object _try_pop(self)
    cdef object _pop(self, int64_t deadline_ns, PeerWatch peer, bint spin)
    cdef bint _claim(self, uint64_t ticket) noexcept
    cdef bint _withdraw(self, uint64_t acting, uint64_t last, bint behind_answered=*) noexcept
    cdef uint64_t _last_claim(self, int64_t* at) noexcept


cdef class SpscRing(_Ring):
    pass


cdef class MpmcRing(_Ring):
    pass
