"""The shared segment: creation, attachment from other processes, bad input, full tmpfs."""

import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import tempfile

import pytest

import core_children
from helpers import require
from mizu import _core


def test_children_attach_under_every_start_method(start_method, waiter):
    method = start_method
    seg = _core.Segment(1 << 16, waiter=waiter)
    ring = _core.SpscRing(seg, 8, 64)
    child = multiprocessing.get_context(method).Process(target=core_children.push,
                                                        args=(ring, b"from " + method.encode()))
    child.start()
    # No PeerWatch of the child: a forkserver's child, not this process's, may have pushed and exited, and
    # its pid gone, before one could be made.
    assert ring.pop(timeout=60) == b"from " + method.encode()
    child.join(30)
    assert child.exitcode == 0


def test_attach_by_descriptor_shares_memory():
    seg = _core.Segment(1 << 16)
    ring = _core.MpmcRing(seg, 4, 32)
    peer = _core.Segment.attach(seg.fd)
    assert peer.fd != seg.fd and peer.size == seg.size and peer.waiter == seg.waiter
    _core.MpmcRing.attach(peer, ring.offset).push(b"shared")
    assert ring.pop(timeout=1) == b"shared"
    assert peer.free == seg.free


def test_alloc_hands_out_disjoint_aligned_ranges_until_full():
    seg = _core.Segment(8192)
    offsets = []
    while True:
        try:
            offsets.append(seg.alloc(100))
        except MemoryError as exc:
            assert "create the segment larger" in str(exc)
            break
    assert all(o % 128 == 0 for o in offsets)
    assert all(b - a >= 128 for a, b in zip(offsets, offsets[1:]))
    assert offsets[-1] + 128 <= seg.size


@pytest.mark.parametrize("size", [0, -1, 10])
def test_too_small_sizes_are_rejected(size):
    with pytest.raises(ValueError, match="segment size"):
        _core.Segment(size)


def test_size_past_the_machine_is_a_memory_error():
    with pytest.raises(MemoryError, match="exceeds this machine's memory"):
        _core.Segment(1 << 60)


def test_unknown_waiter_is_rejected():
    with pytest.raises(ValueError, match="waiter must be one of"):
        _core.Segment(4096, waiter="spin")


def test_attaching_to_something_else_is_a_clear_error(tmp_path):
    path = tmp_path / "plain"
    path.write_bytes(b"\0" * 8192)
    with open(path, "rb") as f:
        with pytest.raises(ValueError, match="not a mizu shared segment"):
            _core.Segment.attach(f.fileno())
    r, w = os.pipe()
    try:
        with pytest.raises(ValueError, match="not a mizu shared segment"):
            _core.Segment.attach(r)
    finally:
        os.close(r)
        os.close(w)
    closed = os.open(os.devnull, os.O_RDONLY)
    os.close(closed)
    with pytest.raises(OSError):
        _core.Segment.attach(closed)


def test_ring_attach_checks_what_is_at_the_offset():
    seg = _core.Segment(1 << 16)
    ring = _core.SpscRing(seg, 4, 16)
    with pytest.raises(ValueError, match="single-producer"):
        _core.MpmcRing.attach(seg, ring.offset)
    with pytest.raises(ValueError, match="no mizu ring"):
        _core.SpscRing.attach(seg, seg.alloc(1 << 14))
    with pytest.raises(ValueError, match="outside the segment"):
        _core.SpscRing.attach(seg, seg.size)


linux_only = pytest.mark.skipif(sys.platform != "linux", reason="mounts a tmpfs / reads /proc: Linux only")


@pytest.fixture
def small_tmpfs():
    require(os.geteuid() == 0 and shutil.which("mount") is not None,
            "this test mounts a 1 MiB tmpfs: it runs as root, with mount")
    where = tempfile.mkdtemp(prefix="mizu-tmpfs-")
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", where], check=True)
    try:
        yield where
    finally:
        subprocess.run(["umount", where], check=True)
        os.rmdir(where)


@linux_only
def test_full_tmpfs_fails_at_creation_with_a_clear_error(small_tmpfs):
    with pytest.raises(MemoryError, match=f"in {small_tmpfs}.*larger tmpfs"):
        _core.Segment(4 << 20, dir=small_tmpfs)
    seg = _core.Segment(512 << 10, dir=small_tmpfs)
    ring = _core.SpscRing(seg, 64, 1000)
    ring.push(b"x" * 1000)
    assert ring.pop() == b"x" * 1000
    assert os.listdir(small_tmpfs) == []
    with pytest.raises(MemoryError):
        _core.Segment(768 << 10, dir=small_tmpfs)
    del ring, seg
    _core.Segment(768 << 10, dir=small_tmpfs)


@linux_only
def test_killed_holder_leaves_nothing_behind():
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Event()
    seg = _core.Segment(1 << 20)
    child = ctx.Process(target=core_children.hold, args=(seg, ready))
    child.start()
    assert ready.wait(60)
    child_fds = os.listdir(f"/proc/{child.pid}/fd")
    assert any("memfd:mizu" in os.readlink(f"/proc/{child.pid}/fd/{fd}") for fd in child_fds if os.path.exists(f"/proc/{child.pid}/fd/{fd}"))
    os.kill(child.pid, signal.SIGKILL)
    child.join(10)
    assert child.exitcode == -signal.SIGKILL


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no affinity mask on this platform")
def test_usable_cpus_counts_the_affinity_mask(tmp_path):
    assert _core.usable_cpus() == len(os.sched_getaffinity(0))
    one = min(os.sched_getaffinity(0))
    code = f"import os; os.sched_setaffinity(0, {{{one}}}); from mizu import _core; print(_core.usable_cpus())"
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                         check=True).stdout
    assert out == "1\n"
