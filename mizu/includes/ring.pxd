from mizu.includes.py_errors cimport raise_py_error
from libc.stdint cimport int64_t, uint32_t, uint64_t

from mizu.includes.arena cimport HeldTable

cdef extern from "ring.hpp" namespace "mizu" nogil:
    cdef enum class RingKind(uint32_t):
        spsc
        mpmc

    const uint64_t kWithdrawn
    const uint64_t kTicketBits

    cdef cppclass Reservation:
        char* data()
        uint32_t size()

    cdef cppclass RingBase:
        @staticmethod
        size_t footprint(uint64_t capacity, uint32_t max_message) except +raise_py_error
        uint64_t capacity()
        uint32_t max_message()
        RingKind kind()
        uint64_t size()
        uint64_t popped()
        bint claim(uint64_t ticket, int64_t at)
        void answer()
        uint64_t answered()
        void note_answered(uint64_t ticket)
        uint64_t last_claim(int64_t& at)
        bint withdraw(uint64_t acting, uint64_t last, bint behind_answered)
        void reset_consumer()
        void close()
        bint closed()
        RingLayout* layout()

    cdef cppclass RingLayout:
        HeldTable held
