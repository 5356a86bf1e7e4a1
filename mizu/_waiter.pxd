# The wait helpers that the other bindings over csrc/waiter.hpp call at C speed.

from libc.stdint cimport int64_t

from mizu.includes.waiter cimport WaitOptions


cdef int64_t _deadline(object timeout) except? -1
cdef void _hook_signals(WaitOptions& opt) noexcept
