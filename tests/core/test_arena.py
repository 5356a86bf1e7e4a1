"""The shared arena against a model: blocks never overlap, keep their bytes, and all come back."""

import multiprocessing
import os
import pickle
import struct
import sys
import threading

import numpy as np
import pytest
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, consumes, initialize, rule

import core_children
from core_children import arena_fill, arena_intact
from helpers import mapped_segments, mappings_of
from mizu import _arena


def assert_empty(arena):
    """Nothing in use, and each segment one free block again: no leak, no lasting fragmentation."""
    s = arena.stats()
    assert (s["in_use"], s["blocks"]) == (0, 0), s
    assert s["free_blocks"] == s["segments"], s


def address(block):
    return np.frombuffer(block, np.uint8).ctypes.data


def block_of(holder):
    """The Block behind a holder: itself, or the base of a numpy view."""
    return holder if isinstance(holder, _arena.Block) else holder.base


class Peer:
    """A child process running core_children.arena_peer, asked one command at a time."""

    def __init__(self, method="fork"):
        ctx = multiprocessing.get_context(method)
        self.conn, there = ctx.Pipe()
        self.process = ctx.Process(target=core_children.arena_peer, args=(there, 1 << 16))
        self.process.start()

    def ask(self, *cmd):
        self.conn.send(cmd)
        return self.conn.recv()

    def stop(self):
        """Stop the child; its exit code."""
        self.conn.send(("stop",))
        self.process.join(30)
        return self.process.exitcode


class ArenaModel(RuleBasedStateMachine):
    """Random allocations, shares and drops in one process, checked against the set of live blocks."""

    holders = Bundle("holders")

    def __init__(self):
        super().__init__()
        self.tag = 0
        self.live = {}  # tag -> [holders]; a holder is a Block or a numpy view of one

    @initialize(segment_size=st.sampled_from([1 << 14, 1 << 16, 1 << 20]))
    def make(self, segment_size):
        self.arena = _arena.Arena(segment_size=segment_size, limit=64 << 20)

    @rule(target=holders, n=st.one_of(st.integers(0, 3000), st.integers(0, 300000)))
    def alloc(self, n):
        self.tag += 1
        block = self.arena.alloc(n)
        assert len(block) == block.nbytes == n
        assert address(block) % 128 == 0
        for holders in self.live.values():
            b = block_of(holders[0])
            if b.segment_id == block.segment_id:
                assert b.offset + len(b) <= block.offset or block.offset + n <= b.offset
        arena_fill(block, self.tag)
        self.live[self.tag] = [block]
        return self.tag

    @rule(tag=consumes(holders))
    def drop(self, tag):
        assert arena_intact(self.live[tag][0], tag)
        del self.live[tag]

    @rule(tag=holders)
    def share_and_open(self, tag):
        """A second reference through share/open_block; the first is kept, so the block stays."""
        first = block_of(self.live[tag][0])
        second = _arena.open_block(first.share())
        assert address(second) == address(first) and second.refs == first.refs == len(self.live[tag]) + 1
        self.live[tag].append(second)

    @rule(tag=holders)
    def keep_only_a_numpy_view(self, tag):
        """numpy keeps the block alive through its base."""
        block = block_of(self.live[tag][0])
        view = np.frombuffer(block, np.uint8)
        self.live[tag][0] = view
        assert view.base is block

    def teardown(self):
        if not hasattr(self, "arena"):
            return
        assert all(arena_intact(holder, tag) for tag, holders in self.live.items() for holder in holders)
        self.live.clear()
        assert_empty(self.arena)


TestArenaModel = ArenaModel.TestCase


class CrossProcessArenaModel(RuleBasedStateMachine):
    """Blocks cross to a child and back: each side frees what the other allocated."""

    parent_blocks = Bundle("parent_blocks")
    child_blocks = Bundle("child_blocks")

    def __init__(self):
        super().__init__()
        self.tag = 0
        self.mine = {}  # tag -> Block held here (of either arena)
        self.theirs = set()  # tags the child holds

    @initialize()
    def start(self):
        self.arena = _arena.Arena(segment_size=1 << 16, limit=64 << 20)
        self.far = Peer()
        self.ask = self.far.ask

    @rule(target=parent_blocks, n=st.integers(0, 200000), keep=st.booleans())
    def send_to_child(self, n, keep):
        self.tag += 1
        block = self.arena.alloc(n)
        arena_fill(block, self.tag)
        assert self.ask("open", block.share(), self.tag)
        self.theirs.add(self.tag)
        if keep:
            self.mine[self.tag] = block
        return self.tag

    @rule(target=child_blocks, n=st.integers(0, 200000))
    def receive_from_child(self, n):
        self.tag += 1
        block = _arena.open_block(self.ask("alloc", n, self.tag))
        assert arena_intact(block, self.tag) and block.refs == 1
        self.mine[self.tag] = block
        return self.tag

    @rule(tag=consumes(parent_blocks))
    def child_drops(self, tag):
        assert self.ask("check", tag)
        self.ask("drop", tag)
        self.theirs.discard(tag)

    @rule(tag=consumes(child_blocks))
    def parent_drops(self, tag):
        assert arena_intact(self.mine.pop(tag), tag)

    def teardown(self):
        if not hasattr(self, "far"):
            return
        try:
            for tag in self.theirs:
                assert self.ask("check", tag)
                self.ask("drop", tag)
            assert all(arena_intact(block, tag) for tag, block in self.mine.items())
            self.mine.clear()
            assert_empty(self.arena)
            child = self.ask("stats")
            assert (child["in_use"], child["blocks"]) == (0, 0) and child["free_blocks"] == child["segments"]
        finally:
            exitcode = self.far.stop()
        assert exitcode == 0


TestCrossProcessArenaModel = CrossProcessArenaModel.TestCase


def test_numpy_views_share_the_block_and_keep_it_alive():
    arena = _arena.Arena(segment_size=1 << 20)
    block = arena.alloc(8 * 1000)
    a = np.frombuffer(block, np.float64)
    b = np.ndarray((10, 100), np.float64, buffer=block)
    a[:] = np.arange(1000)
    assert b[3, 7] == 307.0 and np.shares_memory(a, b) and a.ctypes.data % 128 == 0
    del block
    assert arena.stats()["blocks"] == 1
    del a
    assert b.sum() == 999 * 1000 / 2
    del b
    assert_empty(arena)


def test_a_million_allocations_reuse_the_first_segment():
    arena = _arena.Arena(segment_size=1 << 20)
    capacity = arena.stats()["capacity"]
    held = [None] * 8
    for i in range(1_000_000):
        held[i % 8] = arena.alloc(i * 7919 % 50000)
    assert arena.stats()["capacity"] == capacity
    del held
    assert_empty(arena)


def test_exhaustion_is_a_clear_memory_error_and_the_arena_recovers():
    arena = _arena.Arena(segment_size=1 << 16, limit=1 << 18)
    blocks = []
    with pytest.raises(MemoryError, match=r"cannot allocate 10000 bytes: \d+ bytes are left .*MIZU_ARENA_LIMIT"):
        while True:
            blocks.append(arena.alloc(10000))
    assert len(blocks) > 20 and arena.stats()["segments"] == 4
    with pytest.raises(MemoryError, match=r"Arena\(limit=\.\.\.\)"):
        arena.alloc(1 << 40)
    del blocks
    big = arena.alloc(200000)  # the empty segments make way for one of its own
    arena_fill(big, 1)
    assert arena_intact(big, 1)
    del big
    assert_empty(arena)


def test_an_interrupt_while_a_new_segment_is_mapped_leaks_no_block(monkeypatch):
    """A Ctrl-C that lands between the allocation and its Block (in the Python code that notes the new segment's
    mapping) gives the block back."""

    class Interrupted(type(_arena._mappings)):
        def __setitem__(self, key, value):
            raise KeyboardInterrupt

    arena = _arena.Arena(segment_size=1 << 16, limit=1 << 22)
    monkeypatch.setattr(_arena, "_mappings", Interrupted())
    with pytest.raises(KeyboardInterrupt):
        arena.alloc(1 << 20)   # a segment of its own, mapped here for the first time
    monkeypatch.undo()
    assert_empty(arena)
    block = arena.alloc(1 << 20)
    arena_fill(block, 3)
    assert arena_intact(block, 3)
    del block
    assert_empty(arena)
    arena.close()


def test_limit_from_the_environment(monkeypatch):
    monkeypatch.setenv("MIZU_ARENA_LIMIT", "3M")
    assert _arena.Arena(segment_size=1 << 20).limit == 3 << 20
    assert _arena.Arena(segment_size=1 << 20, limit=1 << 21).limit == 1 << 21
    monkeypatch.setenv("MIZU_ARENA_LIMIT", "lots")
    with pytest.raises(ValueError, match="MIZU_ARENA_LIMIT must be a positive number of bytes"):
        _arena.Arena()


def test_bad_arguments_and_references_are_rejected():
    with pytest.raises(ValueError, match="segment_size must be positive"):
        _arena.Arena(segment_size=0)
    with pytest.raises(ValueError, match="at least"):
        _arena.Arena(segment_size=1 << 16, limit=100)
    arena = _arena.Arena(segment_size=1 << 16)
    with pytest.raises(ValueError, match="nbytes must not be negative"):
        arena.alloc(-1)
    with pytest.raises(ValueError, match=f"a block reference is {_arena.REF_SIZE} bytes"):
        _arena.open_block(b"short")
    with pytest.raises(TypeError):
        _arena.Block()
    block = arena.alloc(100)
    ref = block.share()
    del block
    _arena.open_block(ref)  # adopted, then dropped at once: the block is free
    with pytest.raises(ValueError, match="no references left"):
        _arena.open_block(ref)
    arena.close()
    assert arena.closed
    with pytest.raises(ValueError, match="the arena is closed"):
        arena.alloc(1)


REF_FIELDS = ("arena_id", "offset", "length", "segment_id", "pid", "fd", "generation")


def altered(ref, **changes):
    """The block reference `ref` with some of its fields changed."""
    fields = dict(zip(REF_FIELDS, struct.unpack("QQQIiiI", ref)))
    fields.update(changes)
    return struct.pack("QQQIiiI", *fields.values())


def test_a_stale_reference_is_refused():
    arena = _arena.Arena(segment_size=1 << 16)
    block = arena.alloc(1000)
    ref = block.share()
    offset = block.offset
    del block
    _arena.open_block(ref)  # adopted and dropped: the block is free
    reused = arena.alloc(1000)
    assert reused.offset == offset
    with pytest.raises(ValueError, match="no references left"):
        _arena.open_block(ref)
    assert reused.refs == 1
    del reused
    assert_empty(arena)


def test_a_reference_to_a_free_block_is_refused():
    arena = _arena.Arena(segment_size=1 << 16)
    block = arena.alloc(4096)
    np.frombuffer(block, np.uint64)[:] = 1
    del block
    block = arena.alloc(1024)  # the rest of the old block, ones and all, is a free block again
    ref = block.share()
    rest = block.offset + 1024 + 128
    for generation in (0, struct.unpack("QQQIiiI", ref)[-1]):
        with pytest.raises(ValueError, match="no references left"):
            _arena.open_block(altered(ref, offset=rest, length=100, generation=generation))
    _arena.open_block(ref)
    del block
    assert_empty(arena)


def test_a_garbled_reference_is_refused():
    arena = _arena.Arena(segment_size=1 << 16)
    block = arena.alloc(100)  # room for 128 bytes
    ref = block.share()
    for changes in (
        dict(length=2**64 - 1),
        dict(length=2**64 - 100),
        dict(length=2**63),
        dict(length=60000),
        dict(length=129),
        dict(offset=block.offset + 64),
        dict(offset=1 << 40),
        dict(offset=2**64 - 128),
    ):
        with pytest.raises(ValueError, match="the block reference is invalid"):
            _arena.open_block(altered(ref, **changes))
    assert _arena.open_block(ref).refs == 2
    del block
    assert_empty(arena)


@pytest.mark.skipif(sys.platform != "linux", reason="reaches the segment through /proc")
def test_a_reference_naming_no_segment_says_which_path_it_tried():
    arena = _arena.Arena(segment_size=1 << 16)
    block = arena.alloc(10)
    ref = block.share()
    with open(os.devnull, "rb") as other:
        with pytest.raises(ValueError, match=rf"/proc/{os.getpid()}/fd/{other.fileno()} is not a mizu shared segment"):
            _arena.open_block(altered(ref, arena_id=arena.id ^ 1, fd=other.fileno()))
    _arena.open_block(ref)
    del block
    assert_empty(arena)


def test_a_request_no_block_can_hold_is_refused():
    arena = _arena.Arena(segment_size=1 << 16, limit=2**64 - 1)
    for n in (2**64 - 1, 2**64 - 128, 2**63):
        with pytest.raises(MemoryError, match=f"cannot allocate {n} bytes: no block can hold more than"):
            arena.alloc(n)
    assert_empty(arena)


def test_threads_share_an_arena():
    arena = _arena.Arena(segment_size=1 << 18)
    errors = []

    def work(seed):
        held = []
        for i in range(3000):
            block = arena.alloc((seed * 31 + i * 977) % 20000)
            arena_fill(block, seed * 10000 + i)
            held.append((seed * 10000 + i, block))
            if len(held) > 10:
                tag, old = held.pop(i * 7 % len(held))
                if not arena_intact(old, tag):
                    errors.append(tag)

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert_empty(arena)


def test_closing_while_another_thread_allocates():
    """close() waits for no alloc in flight, and the alloc must not use the arena it freed."""
    child = multiprocessing.get_context("fork").Process(target=core_children.arena_close_race, args=(20,))
    child.start()
    child.join(60)
    if child.exitcode is None:
        child.kill()
        child.join()
    assert child.exitcode == 0


@pytest.mark.skipif(sys.platform != "linux", reason="counts memfd mappings in /proc/self/maps")
def test_segments_the_arena_retires_are_unmapped():
    arena = _arena.Arena(segment_size=1 << 16, limit=1 << 18)
    before = mapped_segments()
    for _ in range(5):
        blocks = []
        with pytest.raises(MemoryError):
            while True:
                blocks.append(arena.alloc(10000))
        del blocks
        big = arena.alloc(200000)  # retires the four empty segments
        del big
        assert arena.stats()["capacity"] == 0
        assert mapped_segments() < before  # every segment, the first one too, is gone
    assert_empty(arena)



@pytest.mark.skipif(sys.platform != "linux", reason="counts memfd mappings in /proc/self/maps")
def test_a_freed_large_block_leaves_its_segment_for_the_next():
    arena = _arena.Arena(segment_size=1 << 20, limit=64 << 20)
    first = arena.alloc(10 << 20)
    segment_id, fd = first.segment_id, os.dup(first.fd)
    del first
    s = arena.stats()
    assert s["spares"] == 1, s
    assert mappings_of(fd) == 1
    for i in range(50):
        block = arena.alloc((10 << 20) - i * 4096)  # fits the spare, however its size wanders
        assert block.segment_id == segment_id
        np.frombuffer(block, np.uint8)[:] = i
        del block
        assert arena.stats() == s
        assert mappings_of(fd) == 1   # the spare, not mapped again
    os.close(fd)
    small = arena.alloc(2 << 20)  # the spare is more than twice its need: a segment of its own
    assert small.segment_id != segment_id
    del small
    assert arena.stats()["spares"] == 2
    assert_empty(arena)


def test_spares_give_way_under_the_limit_and_exhaustion_is_still_clear():
    arena = _arena.Arena(segment_size=1 << 20, limit=8 << 20)
    held = arena.alloc(10)
    del held
    kept = arena.alloc(10)  # keeps the first segment in use
    spare = arena.alloc(3 << 19)
    del spare
    assert arena.stats()["spares"] == 1
    big = arena.alloc(6 << 20)  # fits under the limit only once the spare is gone
    s = arena.stats()
    assert (s["spares"], s["segments"]) == (0, 2) and s["capacity"] <= s["limit"], s
    del big  # more than a quarter of the limit: not kept
    assert arena.stats()["spares"] == 0
    spare = arena.alloc(3 << 19)
    del spare
    with pytest.raises(MemoryError, match=r"cannot allocate 7340032 bytes: \d+ bytes are left .*MIZU_ARENA_LIMIT"):
        arena.alloc(7 << 20)
    s = arena.stats()
    assert (s["spares"], s["segments"]) == (0, 1), s
    del kept
    assert_empty(arena)

def test_pickled_block_crosses_every_start_method(start_method):
    ctx = multiprocessing.get_context(start_method)
    arena = _arena.Arena(segment_size=1 << 20)
    block = arena.alloc(300000)
    arena_fill(block, 5)
    conn, there = ctx.Pipe()
    child = ctx.Process(target=core_children.arena_check_sent_block, args=(there, 5))
    child.start()
    conn.send(block)
    assert conn.poll(60)
    intact, refs = conn.recv()
    child.join(30)
    assert intact and child.exitcode == 0
    assert refs == 2
    assert block.refs == 1
    del block
    assert_empty(arena)


def test_pickling_through_a_pipe_passes_the_descriptor():
    arena = _arena.Arena(segment_size=1 << 16)
    block = arena.alloc(1000)
    arena_fill(block, 9)
    copy = pickle.loads(pickle.dumps(block))
    assert address(copy) == address(block) and block.refs == 2
    peer = Peer("spawn")
    assert peer.ask("take", block, 9)
    assert block.refs == 3
    del block, copy
    peer.ask("drop", 9)
    assert peer.stop() == 0
    assert_empty(arena)


def test_a_received_block_outlives_its_owner():
    peer = Peer()
    block = _arena.open_block(peer.ask("alloc", 50000, 3))
    peer.ask("close")
    assert peer.stop() == 0
    assert arena_intact(block, 3)
    arena_fill(block, 4)
    assert arena_intact(block, 4)


def test_the_owner_closing_leaves_the_receivers_block_valid():
    arena = _arena.Arena(segment_size=1 << 16)
    peer = Peer()
    block = arena.alloc(40000)
    arena_fill(block, 8)
    assert peer.ask("open", block.share(), 8)
    del block
    arena.close()
    del arena
    assert peer.ask("check", 8)
    peer.ask("drop", 8)
    assert peer.stop() == 0


def report_of_forked_child(target, arg):
    """What target(arg, report) sends on report, run in a forked child."""
    ctx = multiprocessing.get_context("fork")
    report, there = ctx.Pipe(duplex=False)
    child = ctx.Process(target=target, args=(arg, there))
    child.start()
    assert report.poll(60)
    message = report.recv()
    child.join(30)
    return message


def test_a_block_inherited_through_fork_exports_no_buffer():
    """A Process argument under fork is the parent's object, not a pickled copy: it holds no reference."""
    arena = _arena.Arena(segment_size=1 << 16)
    block = arena.alloc(1000)
    message = report_of_forked_child(core_children.arena_view_in_fork, block)
    assert message and "inherited through fork" in message and "open_block" in message
    assert block.refs == 1
    del block
    assert_empty(arena)


def test_a_forked_child_cannot_allocate_from_its_parents_arena():
    arena = _arena.Arena(segment_size=1 << 16)
    message = report_of_forked_child(core_children.arena_alloc_in_fork, arena)
    assert message and "forked child must create an arena of its own" in message
    assert_empty(arena)
