"""The rings (csrc/ring.hpp, csrc/any_ring.hpp): fixed-size slots in a `Segment` that processes
push messages to and pop them from."""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_CheckExact, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cython.operator cimport dereference as deref
from libc.stdint cimport int64_t, uint32_t, uint64_t
from libc.string cimport memcpy
from libcpp.memory cimport unique_ptr
from libcpp.utility cimport move

from mizu.includes.any_ring cimport AnyRing
from mizu.includes.ring cimport Reservation, RingBase, RingKind, RingLayout
from mizu.includes.segment cimport Segment as CSegment
from mizu.includes.spin cimport cpu_relax, now_ns
from mizu.includes.waiter cimport WaitOptions, WaitStats, WaitStatus, Waiter
from mizu._liveness cimport PeerWatch
from mizu._segment cimport Segment, _bounded
from mizu._waiter cimport _deadline, _hook_signals

import operator

from mizu._liveness import PeerDiedError

__all__ = ["SpscRing", "MpmcRing"]

# A blocking pop first polls about this long with the GIL held (less if its
# waiter's spin budget or the deadline is shorter): a peer that answers
# within it (a round trip's result, the next task of a busy client) costs no
# GIL release and re-acquisition, which are a few hundred instructions each way
# on the critical path. Other threads wait about this long for the GIL.
cdef int64_t _HELD_SPIN_NS = 2000


cdef int _reraise() except -1:
    return -1


cdef dict _stats_dict(const WaitStats& s):
    return {"spin_wins": s.spin_wins, "sleeps": s.sleeps, "late_wakeups": s.late_wakeups}


cdef class _Ring:
    def __init__(self, Segment segment not None, capacity, max_message):
        cdef uint64_t cap = _bounded("ring capacity", capacity, 1 << 62)
        cdef uint32_t msg = _bounded("max_message", max_message, 1 << 31)
        cdef size_t nbytes = self.footprint(cap, msg)
        cdef CSegment* seg = segment.seg.get()
        cdef size_t offset = seg.alloc(nbytes)
        self._bind(segment, offset, AnyRing.create(self._kind(), seg.base() + offset, nbytes, cap, msg,
                                                    seg.waiter_backend()))

    @staticmethod
    def footprint(capacity, max_message):
        """footprint(capacity, max_message)

        Bytes of a segment that a ring of this shape takes.
        """
        return RingBase.footprint(_bounded("ring capacity", capacity, 1 << 62),
                                  _bounded("max_message", max_message, 1 << 31))

    @classmethod
    def attach(cls, Segment segment not None, offset):
        """attach(segment, offset)

        Attach to a ring of this kind that lives at `offset` in `segment`.

        Raises
        ------
        ValueError
            No ring of this kind is there.
        """
        cdef _Ring self = cls.__new__(cls)
        cdef CSegment* seg = segment.seg.get()
        cdef size_t off = operator.index(offset)
        cdef char* mem = seg.at(off, sizeof(RingLayout))
        self._bind(segment, off, AnyRing.attach(self._kind(), mem, seg.size() - off))
        return self

    cdef RingKind _kind(self) except *:
        raise NotImplementedError

    cdef _bind(self, Segment segment, size_t offset, unique_ptr[AnyRing] ring):
        self.segment = segment
        self.offset = offset
        self.ring = move(ring)
        self.max_msg = self.ring.get().base().max_message()
        gate = &segment.seg.get().header().spin_gate
        self.pop_waiter.reset(new Waiter(gate))
        self.push_waiter.reset(new Waiter(gate))

    def __reduce__(self):
        return type(self).attach, (self.segment, self.offset)

    @property
    def capacity(self):
        """Number of slots."""
        return self.ring.get().base().capacity()

    @property
    def max_message(self):
        """Largest message in bytes (the requested limit rounded up to fill the slot)."""
        return self.max_msg

    @property
    def closed(self):
        """Whether `close` was called, in any process."""
        return self.ring.get().base().closed()

    def __len__(self):
        return self.ring.get().base().size()

    @property
    def popped(self):
        """Messages popped so far, by any process."""
        return self.ring.get().base().popped()

    def claim(self, ticket):
        """The consumer claims the message numbered `ticket` before acting on it; False if it was withdrawn.

        A ring's messages carry increasing tickets that its producer gives
        them; a ring with one consumer only.
        """
        return self._claim(ticket)

    def answer(self):
        """The consumer has the outcome of the ticket it claimed last: the producer withdraws behind it now only if
        asked to (withdraw's behind_answered)."""
        self.ring.get().base().answer()

    def withdraw(self, acting, last, behind_answered=False):
        """The producer withdraws the tickets after `acting` up to `last`; whether it did.

        It does only while the consumer's last claim is `acting` (or a
        withdrawal since), not yet answered unless `behind_answered`: then
        the consumer will claim none of them.
        """
        return self._withdraw(acting, last, behind_answered)

    def last_claim(self):
        """(the consumer's last claim, when it made it): a ticket, or 2**63 | the last ticket withdrawn since.

        2**62 is added once the consumer has answered the ticket it acts on.

        The time is now_ns's clock (CLOCK_MONOTONIC, in ns), and never
        earlier than the claim of the ticket returned.
        """
        cdef int64_t at = 0
        word = self._last_claim(&at)
        return word, at

    def reset_consumer(self):
        """The producer, once the one consumer has died: drop what it left unread; tickets start afresh."""
        self.ring.get().base().reset_consumer()

    def set_owner(self, owner):
        """An MpmcRing's producer names itself `owner` (a process id) in each slot it claims."""
        self.ring.get().set_owner(owner)

    def void_abandoned(self, owner):
        """Once producer `owner` has died: complete as empty messages the slots it claimed and never completed.

        Consumers would otherwise wait on the first of them forever. Returns
        how many there were.
        """
        return self.ring.get().void_abandoned(owner)

    cdef bint _claim(self, uint64_t ticket) noexcept:
        return self.ring.get().base().claim(ticket, now_ns())

    cdef bint _withdraw(self, uint64_t acting, uint64_t last, bint behind_answered=False) noexcept:
        return self.ring.get().base().withdraw(acting, last, behind_answered)

    cdef uint64_t _last_claim(self, int64_t* at) noexcept:
        return self.ring.get().base().last_claim(at[0])

    def close(self):
        """Close the ring for every process: pushes fail, pops drain what is left and then raise EOFError."""
        self.ring.get().base().close()

    @property
    def spin_ns(self):
        """Longest time a blocking call spins before it sleeps; 0 sleeps at once."""
        return self.pop_waiter.get().spin_limit_ns()

    @spin_ns.setter
    def spin_ns(self, value):
        self.pop_waiter.get().set_spin_limit_ns(value)
        self.push_waiter.get().set_spin_limit_ns(value)

    @property
    def slice_ns(self):
        """Longest single sleep: how often a blocked call checks its peer and signals."""
        return self.pop_waiter.get().slice_ns()

    @slice_ns.setter
    def slice_ns(self, value):
        self.pop_waiter.get().set_slice_ns(value)
        self.push_waiter.get().set_slice_ns(value)

    def wait_stats(self):
        """Counters of this handle's waits: ``{"pop": {...}, "push": {...}}``.

        ``late_wakeups`` counts sleeps that ran to the end of their slice
        although the ring was ready: non-zero means a wake-up was lost.
        """
        return {"pop": _stats_dict(self.pop_waiter.get().stats()),
                "push": _stats_dict(self.push_waiter.get().stats())}

    cdef int _check(self, Py_ssize_t n) except -1:
        if n > self.max_msg:
            raise ValueError(f"message of {n} bytes exceeds the ring's limit of {self.max_msg} bytes per message")
        if self.ring.get().base().closed():
            raise BrokenPipeError("cannot push to a closed ring")
        return 0

    cdef int _push(self, const char* data, Py_ssize_t n, bint wait, object timeout, PeerWatch peer) except -1:
        cdef Reservation res
        cdef WaitOptions opt
        cdef WaitStatus st
        self._check(n)
        if not self.ring.get().begin_push(<uint32_t>n, res):
            if not wait:
                return 0
            opt.deadline_ns = _deadline(timeout)
            if peer is not None:
                opt.peer = peer.watch.get()
            _hook_signals(opt)
            with nogil:
                st = self.ring.get().wait_push(<uint32_t>n, res, deref(self.push_waiter), opt)
            if st != WaitStatus.ready:
                self._raise_for(st, peer)
        memcpy(res.data(), data, n)
        self.ring.get().end_push(res)
        return 1

    cdef object _take(self, Reservation& res):
        try:
            return PyBytes_FromStringAndSize(res.data(), res.size())
        finally:
            self.ring.get().end_pop(res)

    cdef int _raise_for(self, WaitStatus st, PeerWatch peer) except -1:
        if st == WaitStatus.timed_out:
            raise TimeoutError("timed out waiting on the ring")
        if st == WaitStatus.peer_died:
            raise PeerDiedError(peer.pid)
        if st == WaitStatus.closed:
            raise BrokenPipeError("cannot push to a closed ring")
        return _reraise()

    cdef int _with_buffer(self, object data, bint wait, object timeout, PeerWatch peer) except -1:
        cdef Py_buffer view
        if PyBytes_CheckExact(data):
            return self._push(PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data), wait, timeout, peer)
        PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
        try:
            return self._push(<const char*>view.buf, view.len, wait, timeout, peer)
        finally:
            PyBuffer_Release(&view)

    def try_push(self, data):
        """try_push(data)

        Push a bytes-like message if a slot is free.

        Returns
        -------
        bool
            False if the ring is full.

        Raises
        ------
        ValueError
            The message is longer than `max_message`.
        BrokenPipeError
            The ring is closed.
        """
        return self._with_buffer(data, False, None, None) == 1

    def push(self, data, timeout=None, *, PeerWatch peer=None):
        """push(data, timeout=None, *, peer=None)

        Push a bytes-like message, waiting while the ring is full.

        Raises
        ------
        TimeoutError
            No slot came free within `timeout` seconds.
        PeerDiedError
            The process `peer` watches exited.
        BrokenPipeError
            The ring is or became closed.
        ValueError
            The message is longer than `max_message`.
        """
        self._with_buffer(data, True, timeout, peer)

    def try_pop(self):
        """try_pop()

        The next message as bytes, or None if the ring is empty.
        """
        return self._try_pop()

    def pop(self, timeout=None, *, PeerWatch peer=None):
        """pop(timeout=None, *, peer=None)

        The next message as bytes, waiting while the ring is empty.

        A message that arrives within about 2 us is taken with the GIL held;
        after that the GIL is released while waiting, and signal handlers run
        within a slice (`slice_ns`), so Ctrl-C interrupts a blocked pop.

        Raises
        ------
        TimeoutError
            Nothing arrived within `timeout` seconds.
        PeerDiedError
            The process `peer` watches exited, and the ring is empty.
        EOFError
            The ring is closed and empty.
        """
        return self._pop(_deadline(timeout), peer, True)

    cdef object _try_pop(self):
        cdef Reservation res
        if self.ring.get().begin_pop(res):
            return self._take(res)
        return None

    cdef object _pop(self, int64_t deadline_ns, PeerWatch peer, bint spin):
        """pop() by deadline_ns (now_ns's clock, or kForever); spin False sleeps after a few polls, without the held
        or the timed spin."""
        cdef Reservation res
        cdef WaitOptions opt
        cdef WaitStatus st
        cdef int64_t until
        cdef int i
        if self.ring.get().begin_pop(res):
            return self._take(res)
        opt.deadline_ns = deadline_ns
        opt.spin = spin
        if spin and self.pop_waiter.get().budget_ns() > 0:
            until = now_ns() + min(_HELD_SPIN_NS, self.pop_waiter.get().budget_ns())
            until = min(until, opt.deadline_ns)
            while now_ns() < until:
                for i in range(8):
                    cpu_relax()
                    if self.ring.get().begin_pop(res):
                        return self._take(res)
        if peer is not None:
            opt.peer = peer.watch.get()
        _hook_signals(opt)
        with nogil:
            st = self.ring.get().wait_pop(res, deref(self.pop_waiter), opt)
        if st == WaitStatus.ready:
            return self._take(res)
        if st == WaitStatus.closed:
            raise EOFError("the ring is closed and empty")
        self._raise_for(st, peer)

    def wait_readable(self, timeout=None, *, PeerWatch peer=None):
        """wait_readable(timeout=None, *, peer=None)

        Wait until a message can be popped, without popping it.

        Returns
        -------
        bool
            True if a message is there, False if `timeout` passed first.

        Raises
        ------
        PeerDiedError
            The process `peer` watches exited, and the ring is empty.
        EOFError
            The ring is closed and empty.
        """
        cdef WaitOptions opt
        cdef WaitStatus st
        opt.deadline_ns = _deadline(timeout)
        if peer is not None:
            opt.peer = peer.watch.get()
        _hook_signals(opt)
        with nogil:
            st = self.ring.get().wait_readable(deref(self.pop_waiter), opt)
        if st == WaitStatus.ready:
            return True
        if st == WaitStatus.timed_out:
            return False
        if st == WaitStatus.closed:
            raise EOFError("the ring is closed and empty")
        self._raise_for(st, peer)


cdef class SpscRing(_Ring):
    """SpscRing(segment, capacity, max_message)

    A ring for one producing process and one consuming process.

    Parameters
    ----------
    segment : Segment
        Where the ring lives; it takes ``footprint`` bytes of it.
    capacity : int
        Number of slots, a power of two from 2 to 2**24.
    max_message : int
        Largest message in bytes, up to 2**24 - 16.

    Notes
    -----
    Each side keeps private copies of the other's index, so a handle must be
    used by one thread at a time, and only one process may push and one pop.
    """

    cdef RingKind _kind(self) except *:
        return RingKind.spsc


cdef class MpmcRing(_Ring):
    """MpmcRing(segment, capacity, max_message)

    A ring any number of processes and threads push to and pop from.

    Parameters are those of `SpscRing`. Each message is popped exactly once.
    """

    cdef RingKind _kind(self) except *:
        return RingKind.mpmc
