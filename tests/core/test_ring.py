"""Rings against a Python model: hypothesis state machines in one process and across two."""

import collections
import multiprocessing
import os
import pickle

import pytest
from hypothesis import given, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import core_children
from mizu import _core

RINGS = [_core.SpscRing, _core.MpmcRing]


def message(n, tag):
    return bytes((tag + i) % 251 for i in range(n))


def serve_far(ring):
    """(conn, process): a forked process attached to ring, running the commands sent over conn (core_children.serve)."""
    ctx = multiprocessing.get_context("fork")
    conn, there = ctx.Pipe()
    far = ctx.Process(target=core_children.serve, args=(there,))
    far.start()
    conn.send(("attach", pickle.loads(pickle.dumps(ring))))
    conn.recv()
    return conn, far


class RingModel(RuleBasedStateMachine):
    """A ring behaves as a bounded FIFO of byte strings."""

    def __init__(self):
        super().__init__()
        self.model = collections.deque()
        self.tag = 0

    @initialize(kind=st.sampled_from(RINGS), log_capacity=st.integers(1, 5), max_message=st.integers(1, 300))
    def make(self, kind, log_capacity, max_message):
        self.segment = _core.Segment(1 << 20)
        self.ring = kind(self.segment, 1 << log_capacity, max_message)
        self.producer = self.consumer = self.ring

    def push_one(self, data):
        return self.producer.try_push(data)

    def pop_one(self):
        return self.consumer.try_pop()

    @rule(n=st.integers(0, 400))
    def push(self, n):
        self.tag += 1
        data = message(n, self.tag)
        if n > self.ring.max_message:
            with pytest.raises(ValueError, match="exceeds the ring's limit"):
                self.push_one(data)
            return
        pushed = self.push_one(data)
        assert pushed == (len(self.model) < self.ring.capacity)
        if pushed:
            self.model.append(data)

    @rule()
    def pop(self):
        got = self.pop_one()
        assert got == (self.model.popleft() if self.model else None)

    @rule(k=st.integers(1, 70))
    def fill_then_drain(self, k):
        """Many laps around the ring, crossing the wrap point."""
        for i in range(k):
            data = message(i % (self.ring.max_message + 1), i)
            if self.push_one(data):
                self.model.append(data)
            assert self.pop_one() == self.model.popleft()

    @invariant()
    def size_matches(self):
        if hasattr(self, "ring"):
            assert len(self.ring) == len(self.model)


TestRingModel = RingModel.TestCase


class CrossProcessRingModel(RingModel):
    """The same model with the consumer (and, for MPMC rings, a second producer) in another process."""

    @initialize(kind=st.sampled_from(RINGS), log_capacity=st.integers(1, 5), max_message=st.integers(1, 300))
    def make(self, kind, log_capacity, max_message):
        super().make(kind, log_capacity, max_message)
        self.conn, self.far = serve_far(self.ring)
        self.remote_producer = kind is _core.MpmcRing

    def teardown(self):
        if hasattr(self, "far"):
            self.conn.send(("stop", None))
            self.far.join(10)

    def pop_one(self):
        self.conn.send(("pop", None))
        return self.conn.recv()

    @precondition(lambda self: getattr(self, "remote_producer", False))
    @rule(n=st.integers(0, 300))
    def push_remote(self, n):
        self.tag += 1
        data = message(n, self.tag)
        self.conn.send(("push", data))
        result = self.conn.recv()
        if n > self.ring.max_message:
            assert isinstance(result, ValueError)
            return
        assert result == (len(self.model) < self.ring.capacity)
        if result:
            self.model.append(data)


TestCrossProcessRingModel = CrossProcessRingModel.TestCase


class TicketModel(RuleBasedStateMachine):
    """Tickets: each message the consumer takes is claimed by it or withdrawn by the producer, never both.

    The producer numbers its messages; the consumer takes them in order,
    claims each and works on it until it sends the outcome, which the
    producer receives later. The producer withdraws the tickets behind the
    oldest it awaits, which works while the consumer is on that one and has
    not marked it answered.
    """

    @initialize(kind=st.sampled_from(RINGS), far=st.booleans())
    def make(self, kind, far):
        self.segment = _core.Segment(1 << 16)
        self.ring = kind(self.segment, 64, 16)
        self.conn, self.far = serve_far(self.ring) if far else (None, None)
        self.next_ticket = 1
        self.queued = collections.deque()     # tickets in the ring
        self.awaited = collections.deque()    # tickets whose outcome the producer awaits, oldest first
        self.withdrawn = set()
        self.claimed = []
        self.working = None                   # the ticket the consumer works on
        self.answered = None                  # the ticket claimed last, once the consumer has marked it answered
        self.outcomes = collections.deque()   # sent by the consumer, not yet received

    def teardown(self):
        if getattr(self, "far", None) is not None:
            self.conn.send(("stop", None))
            self.far.join(10)

    def consumer(self, command, *arg):
        if self.far is None:
            return getattr(self.ring, command)(*arg)
        self.conn.send((command, *arg) if arg else (command, None))
        return self.conn.recv()

    @precondition(lambda self: len(self.queued) < 64)
    @rule()
    def push(self):
        ticket = self.next_ticket
        self.next_ticket += 1
        assert self.ring.try_push(ticket.to_bytes(8, "little"))
        self.queued.append(ticket)
        self.awaited.append(ticket)

    @precondition(lambda self: self.working is None and self.queued)
    @rule()
    def take(self):
        ticket = int.from_bytes(self.ring.try_pop(), "little")
        assert ticket == self.queued.popleft()
        claimed = self.consumer("claim", ticket)
        assert claimed == (ticket not in self.withdrawn)
        if claimed:
            self.claimed.append(ticket)
            self.working = ticket
            self.answered = None

    @precondition(lambda self: self.working is not None)
    @rule(mark=st.booleans())
    def finish(self, mark):
        if mark:
            self.consumer("answer")
            self.answered = self.working
        self.outcomes.append(self.working)
        self.working = None

    @precondition(lambda self: self.outcomes)
    @rule()
    def receive(self):
        assert self.awaited.popleft() == self.outcomes.popleft()

    @precondition(lambda self: self.awaited)
    @rule(last=st.integers(0, 3))
    def withdraw(self, last):
        acting = self.awaited[0]
        last = self.awaited[min(last, len(self.awaited) - 1)]
        # The consumer is on the oldest awaited ticket: at work on it, or
        # done with it and the outcome not yet received.
        on_it = bool(self.claimed) and self.claimed[-1] == acting
        done = self.ring.withdraw(acting, last)
        assert done == (on_it and last > acting and self.answered != acting)
        if done:
            taken = [t for t in self.awaited if acting < t <= last]
            self.withdrawn.update(taken)
            self.awaited = collections.deque(t for t in self.awaited if t not in self.withdrawn)

    @invariant()
    def claimed_or_withdrawn(self):
        if hasattr(self, "claimed"):
            assert not self.withdrawn.intersection(self.claimed)
            assert self.claimed == sorted(self.claimed)


TestTicketModel = TicketModel.TestCase


@pytest.mark.parametrize("kind", RINGS)
@given(max_message=st.integers(1, 3000), data=st.data())
def test_arbitrary_bytes_of_any_size_round_trip(kind, max_message, data):
    """Messages of 0 bytes, of exactly the limit and of any size between come back identical from any
    buffer type; one byte more is refused and leaves the ring as it was."""
    ring = kind(_core.Segment(1 << 16), 4, max_message)
    limit = ring.max_message
    in_flight = collections.deque()
    for _ in range(data.draw(st.integers(1, 12), label="messages")):
        n = data.draw(st.sampled_from([0, limit, limit + 1]) | st.integers(0, limit + 1), label="size")
        payload = data.draw(st.binary(min_size=n, max_size=n), label="payload")
        buffer = data.draw(st.sampled_from([bytes, bytearray, memoryview]), label="type")(payload)
        if n > limit:
            with pytest.raises(ValueError, match=f"message of {n} bytes exceeds the ring's limit of {limit} bytes"):
                ring.push(buffer)
            assert len(ring) == len(in_flight)
            continue
        if len(in_flight) == ring.capacity:
            assert ring.pop(timeout=1) == in_flight.popleft()
        ring.push(buffer, timeout=1)
        in_flight.append(payload)
    while in_flight:
        assert ring.try_pop() == in_flight.popleft()
    assert ring.try_pop() is None


@pytest.mark.parametrize("kind", RINGS)
def test_the_largest_messages_cross_and_one_byte_more_is_refused(kind):
    limit = (1 << 24) - 16
    ring = kind(_core.Segment(kind.footprint(2, limit) + (1 << 16)), 2, limit)
    assert ring.max_message == limit
    payload = os.urandom(limit)
    ring.push(payload)
    assert ring.pop(timeout=5) == payload
    with pytest.raises(ValueError, match=f"message of {limit + 1} bytes exceeds"):
        ring.push(payload + b"x")
    assert len(ring) == 0
    with pytest.raises(ValueError, match="max_message"):
        kind(_core.Segment(1 << 16), 2, limit + 1)


@pytest.mark.parametrize("kind", RINGS)
def test_bad_shapes_are_rejected(kind):
    seg = _core.Segment(1 << 20)
    for capacity in (0, 1, 3, 1000, 1 << 25, -4):
        with pytest.raises(ValueError, match="capacity"):
            kind(seg, capacity, 16)
    for max_message in (0, -1, 1 << 24, 1 << 40):
        with pytest.raises(ValueError, match="max_message"):
            kind(seg, 4, max_message)
    with pytest.raises(MemoryError, match="bytes free"):
        kind(seg, 1 << 12, 1 << 12)
    with pytest.raises(TypeError):
        kind(None, 4, 16)


@pytest.mark.parametrize("kind", RINGS)
def test_bad_messages_and_timeouts_are_rejected(kind):
    ring = kind(_core.Segment(1 << 16), 2, 16)
    with pytest.raises(ValueError, match="48 bytes per message"):
        ring.push(b"x" * 49)
    with pytest.raises(TypeError):
        ring.push("text is not bytes")
    with pytest.raises(ValueError, match="timeout"):
        ring.pop(timeout=-1)
    with pytest.raises(TimeoutError):
        ring.pop(timeout=0)
    ring.push(b"a")
    ring.push(b"b")
    with pytest.raises(TimeoutError):
        ring.push(b"c", timeout=0.01)
    assert not ring.try_push(b"c")


@pytest.mark.parametrize("kind", RINGS)
def test_close_drains_then_reports_eof(kind):
    ring = kind(_core.Segment(1 << 16), 4, 16)
    ring.push(b"last")
    ring.close()
    assert ring.closed
    with pytest.raises(BrokenPipeError):
        ring.push(b"more")
    assert ring.pop() == b"last"
    with pytest.raises(EOFError):
        ring.pop(timeout=5)
