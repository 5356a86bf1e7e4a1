"""Streaming maps: how soon an unordered map over tasks of uneven length yields its first result.

Four calls on four warm workers (every worker started and idle), the first
the slowest: they sleep 0.8, 0.4, 0.2 and 0.05 s (in --quick, a tenth of
that). The time from the call to map to its first result, for pymizu's
map(ordered=False), its ordered map and multiprocessing.Pool.imap_unordered
side by side, each run in turn in every repeat; the fastest call's own
sleep is the floor that an unordered map can reach. Then the cost per call
of a map over 20,000 trivial calls on 2 workers (2,000 in --quick), ordered
and unordered, with chunksize 1 and 16, beside imap_unordered's. Ratios are
of medians.

Report only; every map is checked to yield what it should. The machine's
load (uptime) comes first, as it moves every number here.

Usage: python benchmarks/streams-bench.py [--repeats N] [--quick] [--json PATH [--note TEXT]]
"""

import multiprocessing
import os
import platform
import statistics
import subprocess
import sys
import time

import mizu
import record

SECONDS = (0.8, 0.4, 0.2, 0.05)
WORKERS = len(SECONDS)


def sleep_for(seconds):
    time.sleep(seconds)
    return seconds


def trivial(x):
    return x


def first_result(iterate, seconds):
    """Seconds from the call iterate(seconds) to its iterator's first result; the iterator is then drained."""
    start = time.perf_counter()
    results = iterate(seconds)
    first = next(results)
    elapsed = time.perf_counter() - start
    rest = list(results)
    assert sorted([first, *rest]) == sorted(seconds), (first, rest)
    return elapsed, first


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    parser = record.parser(__doc__.splitlines()[0], 15, "runs of each map (default 15)", "shorter calls, 2 runs")
    args = parser.parse_args(argv)
    repeats, scale = (2, 0.1) if args.quick else (args.repeats, 1.0)
    seconds = [s * scale for s in SECONDS]
    fastest = min(seconds)
    uptime = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    print(f"streaming maps, {time.strftime('%Y-%m-%d')}, Python {platform.python_version()}, {platform.machine()}, "
          f"{os.cpu_count()} CPUs, start method {multiprocessing.get_start_method()}")
    print(f"uptime: {uptime}")
    with mizu.ProcessPoolExecutor(WORKERS) as ex, multiprocessing.Pool(WORKERS) as pool:
        record.progress("warming the pools")
        list(ex.map(sleep_for, [0.05] * WORKERS))
        list(pool.imap_unordered(sleep_for, [0.05] * WORKERS))
        maps = {
            "mizu unordered": lambda s: ex.map(sleep_for, s, ordered=False),
            "mizu ordered": lambda s: ex.map(sleep_for, s),
            "imap_unordered": lambda s: pool.imap_unordered(sleep_for, s),
        }
        rows = {name: [] for name in maps}
        firsts = {name: [] for name in maps}
        for run in range(repeats):
            record.progress(f"run {run + 1} of {repeats}")
            for name, iterate in maps.items():
                elapsed, first = first_result(iterate, seconds)
                rows[name].append(elapsed)
                firsts[name].append(first)
    medians = {name: statistics.median(samples) for name, samples in rows.items()}
    print(f"calls sleeping {', '.join(f'{s * 1e3:g}' for s in seconds)} ms on {WORKERS} warm workers: time to the "
          f"first result (ms), median of {repeats}; / the fastest call's {fastest * 1e3:g} ms; / mizu unordered's")
    for name, median in medians.items():
        print(f"  {name:<16}{median * 1e3:>9.1f}{median / fastest:>8.2f}{median / medians['mizu unordered']:>8.2f}"
              f"   first result: the {min(firsts[name]) * 1e3:g}-{max(firsts[name]) * 1e3:g} ms call")
    calls = 2_000 if args.quick else 20_000
    costs = {}
    with mizu.ProcessPoolExecutor(2) as ex, multiprocessing.Pool(2) as pool:
        list(ex.map(trivial, range(calls)))
        maps = {
            "mizu ordered, chunksize 1": lambda: ex.map(trivial, range(calls)),
            "mizu unordered, chunksize 1": lambda: ex.map(trivial, range(calls), ordered=False),
            "mizu unordered, chunksize 16": lambda: ex.map(trivial, range(calls), ordered=False, chunksize=16),
            "imap_unordered, chunksize 1": lambda: pool.imap_unordered(trivial, range(calls)),
            "imap_unordered, chunksize 16": lambda: pool.imap_unordered(trivial, range(calls), 16),
        }
        costs = {name: [] for name in maps}
        for run in range(repeats):
            record.progress(f"cost per call, run {run + 1} of {repeats}")
            for name, iterate in maps.items():
                start = time.perf_counter()
                assert sorted(iterate()) == list(range(calls))
                costs[name].append((time.perf_counter() - start) / calls)
    print(f"{calls} trivial calls on 2 workers: cost per call (us), median of {repeats}; / mizu ordered's")
    ordered_cost = statistics.median(costs["mizu ordered, chunksize 1"])
    for name, samples in costs.items():
        print(f"  {name:<30}{statistics.median(samples) * 1e6:>8.2f}{statistics.median(samples) / ordered_cost:>8.1f}")
    if args.json:
        record.write(args.json, "streams-bench", argv, args, uptime=uptime, unit="ms", rows=[
            {"row": "time to the first result", "pool": name, "samples": [t * 1e3 for t in samples]}
            for name, samples in rows.items()] + [
            {"row": "cost per call", "pool": name, "samples": [t * 1e3 for t in samples]}
            for name, samples in costs.items()])
    return 0


if __name__ == "__main__":
    sys.exit(main())
