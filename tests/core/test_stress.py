"""Many producers and consumers in separate processes: every message arrives once, intact."""

import multiprocessing
import os
import subprocess
import sys

import pytest

import core_children
from helpers import BENCHMARKS
from mizu import _core, _harness

FORK = multiprocessing.get_context("fork")


@pytest.mark.parametrize("waiter, producers, per_producer", [("native", 4, 1_000_000), ("portable", 3, 200_000)])
def test_core_moves_millions_of_messages_exactly_once(waiter, producers, per_producer):
    result = _harness.stress(producers, 3, per_producer, capacity=256, max_message=120, waiter=waiter)
    assert result == {"received": producers * per_producer, "duplicates": 0, "corrupt": 0, "missing": 0,
                      "failed_children": 0}


def test_python_processes_share_one_mpmc_ring(waiter):
    seg = _core.Segment(1 << 20, waiter=waiter)
    ring = _core.MpmcRing(seg, 64, 200)
    results = FORK.Queue()
    producers, per_producer = 3, 20_000
    workers = [FORK.Process(target=core_children.produce, args=(ring, p, per_producer, 200)) for p in range(producers)]
    consumers = [FORK.Process(target=core_children.consume, args=(ring, results)) for _ in range(3)]
    for proc in workers + consumers:
        proc.start()
    for proc in workers:
        proc.join(300)
        assert proc.exitcode == 0
    ring.close()
    reports = [results.get(timeout=300) for _ in consumers]
    for proc in consumers:
        proc.join(60)
    assert all(bad == 0 for _, bad, _ in reports)
    everything = sorted(item for seen, _, _ in reports for item in seen)
    assert everything == [(p, s) for p in range(producers) for s in range(per_producer)]
    for seen, _, _ in reports:
        for p in range(producers):
            mine = [s for q, s in seen if q == p]
            assert mine == sorted(mine), "one consumer saw a producer's messages out of order"


def test_spsc_stream_across_processes_keeps_order():
    seg = _core.Segment(1 << 20)
    ring = _core.SpscRing(seg, 128, 300)
    count = 100_000
    producer = FORK.Process(target=core_children.produce, args=(ring, 7, count, 300))
    producer.start()
    watch = _core.PeerWatch(producer.pid)
    for seq in range(count):
        assert ring.pop(timeout=120, peer=watch) == core_children.numbered(7, seq, 300)
    producer.join(60)
    assert ring.try_pop() is None


SOAK = os.path.join(BENCHMARKS, "mizu-soak.py")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the soak reads /proc")
def test_a_short_soak_runs_to_its_verdict():
    """A tiny run keeps benchmarks/mizu-soak.py working; the full soak is run by hand."""
    run = subprocess.run([sys.executable, SOAK, "--tasks", "3000", "--arrays", "6", "--array-mb", "2",
                          "--intervals", "2", "--workers", "2"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "arrays: 6 in" in run.stdout and "arrays  memfd segments" in run.stdout
