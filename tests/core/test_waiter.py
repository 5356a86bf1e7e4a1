"""The waiter: no lost wake-up, peer death ends a wait, an idle waiter costs no CPU, Ctrl-C works."""

import ast
import multiprocessing
import os
import signal
import threading

import pytest

import children
import core_children
import mizu
from mizu import _core

FORK = multiprocessing.get_context("fork")
SLEEP_ONLY = dict(spin_ns=0, slice_ns=120 * 10**9)


def start(target, *args):
    proc = FORK.Process(target=target, args=args)
    proc.start()
    return proc


def test_ping_pong_through_the_sleep_path_loses_no_wakeup(waiter):
    """Every wait sleeps, and slices are so long that a lost wake-up would stall the test."""
    seg = _core.Segment(1 << 16, waiter=waiter)
    there, back = _core.SpscRing(seg, 2, 16), _core.SpscRing(seg, 2, 16)
    report = _core.SpscRing(seg, 2, 1024)
    rounds = 3000
    peer = start(core_children.echo, there, back, rounds, SLEEP_ONLY["spin_ns"], SLEEP_ONLY["slice_ns"], report)
    watch = _core.PeerWatch(peer.pid)
    for ring in (there, back):
        ring.spin_ns, ring.slice_ns = SLEEP_ONLY["spin_ns"], SLEEP_ONLY["slice_ns"]
    for i in range(rounds):
        there.push(i.to_bytes(8, "little"))
        assert back.pop(timeout=120, peer=watch) == i.to_bytes(8, "little")
    far = ast.literal_eval(report.pop(timeout=60, peer=watch).decode())
    peer.join(30)
    stats = [there.wait_stats(), back.wait_stats(), *far]
    assert sum(s["pop"]["sleeps"] for s in stats) >= rounds
    assert all(s[side]["late_wakeups"] == 0 for s in stats for side in ("pop", "push"))


def test_many_sleeping_consumers_are_each_woken(waiter):
    seg = _core.Segment(1 << 20, waiter=waiter)
    ring = _core.MpmcRing(seg, 4, 64)
    results = FORK.Queue()
    consumers = [start(core_children.consume, ring, results, *SLEEP_ONLY.values()) for _ in range(3)]
    ring.spin_ns, ring.slice_ns = SLEEP_ONLY["spin_ns"], SLEEP_ONLY["slice_ns"]
    count = 2000
    for seq in range(count):
        ring.push(core_children.numbered(0, seq, 64), timeout=120)
    ring.close()
    reports = [results.get(timeout=120) for _ in consumers]
    for proc in consumers:
        proc.join(30)
    seen = sorted(item for got, _, _ in reports for item in got)
    assert seen == [(0, seq) for seq in range(count)]
    assert all(bad == 0 for _, bad, _ in reports)
    assert all(stats["pop"]["late_wakeups"] == 0 for _, _, stats in reports)


def kill_soon(pid, delay=0.3):
    timer = threading.Timer(delay, os.kill, (pid, signal.SIGKILL))
    timer.start()
    return timer


@pytest.mark.parametrize("side", ["pop", "push"])
def test_blocked_call_returns_when_its_peer_is_killed(waiter, side):
    seg = _core.Segment(1 << 16, waiter=waiter)
    ring = _core.SpscRing(seg, 2, 16)
    if side == "push":
        ring.push(b"1")
        ring.push(b"2")
    peer = start(core_children.sleep_forever)
    watch = _core.PeerWatch(peer.pid)
    kill_soon(peer.pid).join()
    with pytest.raises(mizu.PeerDiedError) as info:
        if side == "pop":
            ring.pop(timeout=60, peer=watch)
        else:
            ring.push(b"3", timeout=60, peer=watch)
    assert info.value.pid == peer.pid and str(peer.pid) in str(info.value)
    peer.join(10)
    assert peer.exitcode == -signal.SIGKILL


def test_peer_death_while_blocked_ends_the_wait():
    ring = _core.SpscRing(_core.Segment(1 << 16), 2, 16)
    peer = start(core_children.sleep_forever)
    kill_soon(peer.pid, 0.5)
    with pytest.raises(mizu.PeerDiedError):
        ring.pop(timeout=60, peer=_core.PeerWatch(peer.pid))
    peer.join(10)


def test_messages_sent_before_death_are_still_delivered():
    seg = _core.Segment(1 << 16)
    ring = _core.SpscRing(seg, 4, 16)
    peer = start(core_children.push, ring, b"last words")
    peer.join(30)
    assert ring.pop(timeout=5, peer=_core.PeerWatch(os.getpid())) == b"last words"


def test_mizu_waiter_sets_the_backend_of_a_pools_rings(waiter, start_method, monkeypatch):
    """MIZU_WAITER names the wait backend of the segments made without waiter=, a pool's among them; its
    workers, however started, wait on the segment's backend, and the pool computes what the stdlib's does."""
    import concurrent.futures as cf

    monkeypatch.setenv("MIZU_WAITER", waiter)
    assert _core.Segment(1 << 16).waiter == waiter
    context = multiprocessing.get_context(start_method)
    results = {}
    for kind in (mizu.ProcessPoolExecutor, cf.ProcessPoolExecutor):
        with kind(2, mp_context=context) as ex:
            results[kind] = (list(ex.map(children.double, range(300), chunksize=7)),
                             [ex.submit(children.add, i, b=1, c=2).result(timeout=60) for i in range(50)])
            if kind is mizu.ProcessPoolExecutor:
                assert ex._pool.segment.waiter == waiter
    assert results[mizu.ProcessPoolExecutor] == results[cf.ProcessPoolExecutor]


def test_an_unknown_mizu_waiter_is_a_value_error_naming_it(monkeypatch):
    monkeypatch.setenv("MIZU_WAITER", "spinning")
    with pytest.raises(ValueError, match=r"^MIZU_WAITER must be one of \['native', 'portable'\], got 'spinning'$"):
        mizu.ProcessPoolExecutor(2)
    with pytest.raises(ValueError, match=r"^waiter must be one of \['native', 'portable'\], got 'spinning'$"):
        _core.Segment(1 << 16, waiter="spinning")


def test_idle_waiter_uses_almost_no_cpu(waiter):
    seg = _core.Segment(1 << 16, waiter=waiter)
    idle, report = _core.SpscRing(seg, 2, 16), _core.SpscRing(seg, 2, 64)
    seconds = 2.0
    peer = start(core_children.idle_pop, idle, seconds, report)
    cpu = float(report.pop(timeout=60, peer=_core.PeerWatch(peer.pid)))
    peer.join(10)
    assert cpu < 0.05 * seconds


def test_ctrl_c_interrupts_a_blocked_pop():
    ring = _core.SpscRing(_core.Segment(1 << 16), 2, 16)
    # Python's own handler even where the tests run with SIGINT ignored
    # (started in a shell's background); the timer starts inside the block,
    # so that however early it fires its KeyboardInterrupt lands there.
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT)).start()
            ring.pop(timeout=60)
    finally:
        signal.signal(signal.SIGINT, before)
    ring.push(b"still works")
    assert ring.pop(timeout=1) == b"still works"


def test_peer_watch():
    peer = start(core_children.sleep_forever)
    watch = _core.PeerWatch(peer.pid)
    assert watch.pid == peer.pid and watch.alive()
    assert not watch.wait(0.05)
    peer.kill()
    assert watch.wait(30)
    assert not watch.alive()
    peer.join(10)
    with pytest.raises(ProcessLookupError):
        _core.PeerWatch(peer.pid)
    with pytest.raises(ProcessLookupError):
        _core.PeerWatch(0)
