from libc.stdint cimport int64_t, uint32_t, uint64_t
from libcpp cimport bool

from mizu.includes.liveness cimport PeerWatch

cdef extern from "waiter.hpp" namespace "mizu" nogil:
    cdef enum class WaitBackend(uint32_t):
        native
        portable

    cdef cppclass SpinGate:
        uint32_t limit

    cdef enum class WaitStatus(int):
        ready
        timed_out
        peer_died
        stopped
        closed

    cdef cppclass SliceHook:
        bool (*fn)(void* ctx) noexcept
        void* ctx

    cdef cppclass WaitOptions:
        int64_t deadline_ns
        const PeerWatch* peer
        SliceHook hook
        bool spin

    cdef cppclass WaitStats:
        uint64_t spin_wins
        uint64_t sleeps
        uint64_t late_wakeups

    cdef cppclass Waiter:
        Waiter(SpinGate* gate)
        void set_spin_limit_ns(int64_t ns)
        int64_t spin_limit_ns()
        int64_t budget_ns()
        void set_slice_ns(int64_t ns)
        int64_t slice_ns()
        const WaitStats& stats()
