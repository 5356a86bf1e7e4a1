"""Whole-process harnesses of the C++ core, for benchmarks and stress tests.

Each call forks its peer processes, runs only C++ in them and reaps them
before returning; the calling process must not hold locks that a forked
child would need (no other threads running Python-visible work).
"""

from mizu.includes.harness cimport StressResult, pin_to_cpu, pingpong_floor_ns, pingpong_ring_ns, stress_mpmc
from mizu.includes.waiter cimport WaitBackend

from mizu._waiter import _backend

__all__ = ["pin_process", "pingpong_floor", "pingpong_ring", "stress"]


def pingpong_floor(rounds, *, one_line=False, pin=True):
    """pingpong_floor(rounds, *, one_line=False, pin=True)

    Nanoseconds per round trip of a counter sent to a forked child on one
    cache line and echoed back on another, busy-polling: the least a
    request/reply pair of channels between two processes can cost. With
    `one_line`, both directions share a line (the hardware's cache-line round
    trip). With `pin`, the two processes run on different CPUs.
    """
    cdef unsigned long long n = rounds
    cdef bint one = one_line, p = pin
    cdef double ns
    with nogil:
        ns = pingpong_floor_ns(n, one, p)
    return ns


def pingpong_ring(rounds, msg_size=8, spin_ns=50000, waiter=None, *, pin=True):
    """pingpong_ring(rounds, msg_size=8, spin_ns=50000, waiter=None, *, pin=True)

    Nanoseconds per round trip of a message through two single-producer
    rings between two processes, written in C++ against the core. With
    ``spin_ns=0`` every wait goes through the sleep path.
    """
    cdef unsigned long long n = rounds
    cdef unsigned int size = msg_size
    cdef long long spin = spin_ns
    cdef WaitBackend backend = <WaitBackend><int>_backend(waiter)
    cdef bint p = pin
    cdef double ns
    with nogil:
        ns = pingpong_ring_ns(n, size, spin, backend, p)
    return ns


def pin_process(cpu):
    """pin_process(cpu)

    Bind the calling process to one CPU; False where the OS cannot.
    """
    return pin_to_cpu(cpu)


def stress(producers, consumers, per_producer, capacity=1024, max_message=200, waiter=None):
    """stress(producers, consumers, per_producer, capacity=1024, max_message=200, waiter=None)

    Push ``producers * per_producer`` messages of varying length through one
    multi-producer ring, popped by `consumers` processes, and check each.

    Returns
    -------
    dict
        ``received``, ``duplicates``, ``corrupt``, ``missing`` and
        ``failed_children`` counts.
    """
    cdef int p = producers, c = consumers
    cdef unsigned long long n = per_producer, cap = capacity
    cdef unsigned int msg = max_message
    cdef WaitBackend backend = <WaitBackend><int>_backend(waiter)
    cdef StressResult r
    with nogil:
        r = stress_mpmc(p, c, n, cap, msg, backend)
    return {"received": r.received, "duplicates": r.duplicates, "corrupt": r.corrupt,
            "missing": r.missing, "failed_children": r.failed_children}
