from mizu.includes.py_errors cimport raise_py_error
from libc.stdint cimport int64_t, uint32_t, uint64_t

from mizu.includes.waiter cimport WaitBackend

cdef extern from "harness.hpp" namespace "mizu" nogil:
    cdef cppclass StressResult:
        uint64_t received
        uint64_t duplicates
        uint64_t corrupt
        uint64_t missing
        int failed_children

    double pingpong_floor_ns(uint64_t rounds, bint one_line, bint pin) except +raise_py_error
    double pingpong_ring_ns(uint64_t rounds, uint32_t msg_size, int64_t spin_limit_ns, WaitBackend backend,
                            bint pin) except +raise_py_error
    bint pin_to_cpu(int cpu)
    StressResult stress_mpmc(int producers, int consumers, uint64_t per_producer, uint64_t capacity,
                             uint32_t max_message, WaitBackend backend) except +raise_py_error
