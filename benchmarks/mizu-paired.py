"""Two installs of mizu measured in alternation, for a change too small to see through the VM's drift.

Each interpreter keeps one pool alive in a child process (mizu-stdlib-bench.py
in its serving mode, so the rows are that script's); the driver asks them in
turn (A then B, then B then A, ...) for one short measurement of the row, so
that each pair of numbers is taken within milliseconds. It prints the
medians and the median of the per-pair ratios B/A, with its quartiles.

With --r the pools are of R workers (mizu.RExecutor), and the one row is
rt, a trivial R function's round trip; each install builds its R package
into an R library of its own (MIZU_R_LIBRARY), since both may be the same
version.

Usage: python benchmarks/mizu-paired.py PYTHON_A PYTHON_B
           [--row rt|pipelined|map|wait|as_completed|callbacks|asyncio]
           [--tasks N] [--pairs N] [--workers N] [--r]
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile

BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mizu-stdlib-bench.py")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("python_a")
    parser.add_argument("python_b")
    parser.add_argument("--row", choices=["amap", "as_completed", "asubmit", "asyncio", "callbacks", "map", "pipelined",
                                          "rt", "wait"], default="rt")
    parser.add_argument("--tasks", type=int, default=3000, help="tasks per measurement (default 3000)")
    parser.add_argument("--pairs", type=int, default=100, help="pairs of measurements (default 100)")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--r", action="store_true", help="pools of R workers (the rt row only)")
    args = parser.parse_args(argv)
    if args.r and args.row != "rt":
        parser.error("--r measures the rt row only")
    serve = ["--serve", str(args.workers)] + (["--serve-r"] if args.r else [])
    libraries = tempfile.TemporaryDirectory(prefix="mizu-paired-")

    def environ(name):
        return dict(os.environ, MIZU_R_LIBRARY=os.path.join(libraries.name, name)) if args.r else None

    children = {name: subprocess.Popen([python, BENCH, *serve], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                       text=True, env=environ(name))
                for name, python in (("A", args.python_a), ("B", args.python_b))}

    def measure(name):
        child = children[name]
        child.stdin.write(f"{args.row} {args.tasks}\n")
        child.stdin.flush()
        return float(child.stdout.readline())

    try:
        for name in children:
            measure(name)
        samples = {"A": [], "B": []}
        for i in range(args.pairs):
            for name in ("AB" if i % 2 == 0 else "BA"):
                samples[name].append(measure(name))
    finally:
        for child in children.values():
            child.stdin.close()
            child.wait()
        libraries.cleanup()
    ratios = [b / a for a, b in zip(samples["A"], samples["B"])]
    low, _, high = statistics.quantiles(ratios, n=4)
    print(f"{args.row}, {args.pairs} pairs of {args.tasks} tasks: A {statistics.median(samples['A']) * 1e6:.3f} us, "
          f"B {statistics.median(samples['B']) * 1e6:.3f} us per task (medians); B/A {statistics.median(ratios):.3f} "
          f"(quartiles {low:.3f}-{high:.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
