"""pymizu's own rows: the shared-memory core and the Executor measured against their floor.

Every row is a round trip between two processes, each on its own CPU (where
the machine has two): a message goes out on one ring and comes back on
another; the Executor rows are a whole submit(f, i).result() with one
worker, and the time per task of 3,000 submits whose futures' results are
then read in turn (pipelined). The floor is the same exchange written
directly in C++ on two shared cache lines, busy-polling. Rows are measured
in turn, several times over, and reported as medians, so that load on a
shared machine hits every row alike; ratios to the floor are what carry
over between machines.

Usage: python benchmarks/mizu-bench.py [--repeats N] [--quick]
"""

import argparse
import multiprocessing
import os
import platform
import statistics
import sys
import time

from mizu import _core, _harness


def _echo(rings, rounds, spin_ns, cpu):
    if cpu is not None:
        _harness.pin_process(cpu)
    inbox, outbox = rings
    inbox.spin_ns = outbox.spin_ns = spin_ns
    for _ in range(rounds):
        outbox.push(inbox.pop())


def python_pingpong(rounds, spin_ns, waiter=None, msg=b"12345678"):
    """Nanoseconds per round trip through the Python bindings."""
    seg = _core.Segment(1 << 16, waiter=waiter)
    there = _core.SpscRing(seg, 64, 64)
    back = _core.SpscRing(seg, 64, 64)
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    pinned = len(cpus) >= 2
    ctx = multiprocessing.get_context("fork")
    child = ctx.Process(target=_echo, args=((there, back), rounds, spin_ns, cpus[1] if pinned else None))
    child.start()
    try:
        if pinned:
            _harness.pin_process(cpus[0])
        there.spin_ns = back.spin_ns = spin_ns
        peer = _core.PeerWatch(child.pid)
        push, pop = there.push, back.pop
        push(msg)
        pop(60, peer=peer)
        start = time.perf_counter_ns()
        for _ in range(rounds - 1):
            push(msg)
            pop(60, peer=peer)
        elapsed = time.perf_counter_ns() - start
    finally:
        if pinned:
            os.sched_setaffinity(0, cpus)
        child.join(60)
    return elapsed / (rounds - 1)


def _identity(x):
    return x


def executor_round_trip(rounds):
    """Nanoseconds per submit(f, i).result() of a trivial function, one worker."""
    import mizu

    with mizu.ProcessPoolExecutor(1) as pool:
        submit = pool.submit
        submit(_identity, 0).result()
        start = time.perf_counter_ns()
        for i in range(rounds):
            submit(_identity, i).result()
        return (time.perf_counter_ns() - start) / rounds


def executor_pipelined(rounds, batch=3000):
    """Nanoseconds per task of `batch` submits of a trivial function followed by each future's result(), one worker."""
    import mizu

    with mizu.ProcessPoolExecutor(1) as pool:
        submit = pool.submit
        submit(_identity, 0).result()
        batches = max(1, rounds // batch)
        start = time.perf_counter_ns()
        for _ in range(batches):
            for future in [submit(_identity, i) for i in range(batch)]:
                future.result()
        return (time.perf_counter_ns() - start) / (batches * batch)


def rows(quick):
    spin_rounds = 20_000 if quick else 200_000
    sleep_rounds = 500 if quick else 3_000
    return [
        ("floor: C++, two cache lines, busy-polling", lambda: _harness.pingpong_floor(spin_rounds)),
        ("reference: C++, one cache line (hardware round trip)",
         lambda: _harness.pingpong_floor(spin_rounds, one_line=True)),
        ("C++ core: SpscRing pair, spinning", lambda: _harness.pingpong_ring(spin_rounds)),
        ("Python bindings: SpscRing pair, spinning", lambda: python_pingpong(spin_rounds // 4, 50_000)),
        ("C++ core: sleep path, futex", lambda: _harness.pingpong_ring(sleep_rounds, spin_ns=0, waiter="native")),
        ("C++ core: sleep path, portable waiter",
         lambda: _harness.pingpong_ring(sleep_rounds, spin_ns=0, waiter="portable")),
        ("Python bindings: sleep path, futex", lambda: python_pingpong(sleep_rounds, 0, "native")),
        ("Executor: submit(f, i).result(), 1 worker", lambda: executor_round_trip(spin_rounds // 10)),
        ("Executor: 3,000 submits, then result(), per task", lambda: executor_pipelined(spin_rounds // 4)),
    ]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=9, help="runs of each row (default 9)")
    parser.add_argument("--quick", action="store_true", help="fewer rounds per run, for a smoke test")
    args = parser.parse_args(argv)

    table = rows(args.quick)
    samples = {name: [] for name, _ in table}
    for _ in range(args.repeats):
        for name, run in table:
            samples[name].append(run())
    medians = {name: statistics.median(values) for name, values in samples.items()}
    floor = medians[table[0][0]]

    print(f"pymizu core round trips, {time.strftime('%Y-%m-%d')}, Python {platform.python_version()}, "
          f"{platform.machine()}, {os.cpu_count()} CPUs, median of {args.repeats} runs")
    print(f"{'row':<55} {'median':>11} {'vs floor':>9}")
    for name, _ in table:
        ns = medians[name]
        print(f"{name:<55} {ns / 1000:>8.3f} us {ns / floor:>8.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
