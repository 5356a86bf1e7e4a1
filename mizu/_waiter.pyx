"""How the bindings fill in a wait (csrc/waiter.hpp): the backend by name, a deadline from a
timeout, and the hook that runs signal handlers while a blocked call sleeps."""

from libc.stdint cimport int64_t
from libcpp cimport bool

from mizu.includes.spin cimport kForever, now_ns
from mizu.includes.waiter cimport WaitBackend, WaitOptions

import os
import threading

__all__ = []

_BACKENDS = {"native": <int>WaitBackend.native, "portable": <int>WaitBackend.portable}
_BACKEND_NAMES = {v: k for k, v in _BACKENDS.items()}


def _backend(waiter):
    name = os.environ.get("MIZU_WAITER", "native") if waiter is None else waiter
    try:
        return _BACKENDS[name]
    except (KeyError, TypeError):
        what = "MIZU_WAITER" if waiter is None else "waiter"
        raise ValueError(f"{what} must be one of {sorted(_BACKENDS)}, got {name!r}") from None


cdef int64_t _deadline(object timeout) except? -1:
    if timeout is None:
        return kForever
    if not timeout >= 0:
        raise ValueError(f"timeout must be None or a non-negative number of seconds, got {timeout!r}")
    return now_ns() + <int64_t>(min(float(timeout), 1e9) * 1e9)


cdef extern from "Python.h":
    # Declared without an exception value: the hook below leaves a raised
    # exception pending for the blocking call to re-raise after the wait.
    int _check_signals "PyErr_CheckSignals"()


cdef bool _run_signal_handlers(void* ctx) noexcept with gil:
    return _check_signals() == 0


cdef extern from "pythread.h":
    unsigned long PyThread_get_thread_ident() nogil


# Signal handlers run in the main thread only, so only there does a blocked
# call take the GIL each slice to run them. Another thread must never take
# it from inside the core's C++ frames: while the interpreter finalizes,
# CPython ends a daemon thread that asks for the GIL by unwinding its stack,
# and a C++ frame's catch-all on the way would abort the process.
cdef unsigned long _main_thread = threading.main_thread().ident


def _forked_in_child():
    global _main_thread
    _main_thread = PyThread_get_thread_ident()   # the thread that forked is the child's main thread


os.register_at_fork(after_in_child=_forked_in_child)


cdef void _hook_signals(WaitOptions& opt) noexcept:
    if PyThread_get_thread_ident() == _main_thread:
        opt.hook.fn = _run_signal_handlers

