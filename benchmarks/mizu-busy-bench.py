"""The round trip with a busy process on every CPU, run after run, side by side with the stdlib pools.

DESIGN's target for this row is "ahead of both stdlib pools run after
run", not in the median alone: one bad run in ten is a user's bad day. Each
run starts a busy process per CPU (``while True: pass``), measures
``submit(f).result()`` on a 1-worker mizu pool, ThreadPoolExecutor and
ProcessPoolExecutor in turn (the order rotating from run to run), and stops
the busy processes; the pools start once, before the first run. It prints
each run's times and mizu's ratios, then in how many runs mizu was ahead of
each pool, and the medians. Report-only: it asserts nothing.

Usage: python benchmarks/mizu-busy-bench.py [--repeats RUNS] [--quick] [--json PATH [--note TEXT]]
"""

import concurrent.futures as cf
import importlib.util
import os
import statistics
import sys

import mizu
import record

_spec = importlib.util.spec_from_file_location(
    "mizu_stdlib_bench", os.path.join(os.path.dirname(os.path.abspath(__file__)), "mizu-stdlib-bench.py"))
stdlib_bench = importlib.util.module_from_spec(_spec)
# Its functions pickle by name, for workers that find it where this script put it.
sys.modules[_spec.name] = stdlib_bench
_spec.loader.exec_module(stdlib_bench)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    parser = record.parser(__doc__.splitlines()[0], 10, "runs (default 10)", "fewer tasks, for a smoke test")
    args = parser.parse_args(argv)
    scale = 10 if args.quick else 1
    # The stdlib's process pool takes a few hundred microseconds a task: fewer of them fill the same time.
    kinds = [("mizu", mizu.ProcessPoolExecutor, 5_000 // scale), ("ThreadPool", cf.ThreadPoolExecutor, 5_000 // scale),
             ("ProcessPool", cf.ProcessPoolExecutor, 500 // scale)]
    names = [name for name, _, _ in kinds]
    pools = {name: make(1) for name, make, _ in kinds}
    runs = []
    try:
        for pool in pools.values():
            for _ in range(3):
                list(pool.map(stdlib_bench.trivial, range(4)))
        for run in range(args.repeats):
            record.progress(f"run {run + 1} of {args.repeats}")
            turn = kinds[run % len(kinds):] + kinds[:run % len(kinds)]
            with stdlib_bench.busy_cpus():
                runs.append({name: stdlib_bench.round_trip(pools[name], n) for name, _, n in turn})
    finally:
        for pool in pools.values():
            pool.shutdown()
    print(f"round trip, 1 worker, a busy process per CPU ({os.cpu_count()} CPUs), us/task, run by run")
    print(f"{'run':>4}" + "".join(f"{n:>14}" for n in names) + "".join(f"{'x vs ' + n:>18}" for n in names[1:]))
    for i, times in enumerate(runs, 1):
        print(f"{i:>4}" + "".join(f"{times[n] * 1e6:>14.2f}" for n in names)
              + "".join(f"{times[n] / times['mizu']:>17.1f}x" for n in names[1:]))
    print(f"{'med':>4}" + "".join(f"{statistics.median(r[n] for r in runs) * 1e6:>14.2f}" for n in names)
          + "".join(f"{statistics.median(r[n] / r['mizu'] for r in runs):>17.1f}x" for n in names[1:]))
    for name in names[1:]:
        won = sum(r["mizu"] < r[name] for r in runs)
        print(f"mizu ahead of {name} in {won} of {len(runs)} runs")
    if args.json:
        record.write(args.json, "mizu-busy-bench", argv, args, pools=names,
                     runs=[{n: r[n] * 1e6 for n in names} for r in runs])
    return 0


if __name__ == "__main__":
    sys.exit(main())
