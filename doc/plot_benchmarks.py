"""Draw the benchmark plots of the docs and the README from the benchmarks' --json output.

Reads benchmarks/results/stdlib.json (benchmarks/mizu-stdlib-bench.py) and
benchmarks/results/arrays.json (benchmarks/mizu-arrays-bench.py) and writes
doc/_static/bench-stdlib.svg, mizu's speed-up over each peer for every row,
and doc/_static/bench-arrays.svg, the array round trip against the array's
size. After a new run of either script with --json, redraw both with:

    python doc/plot_benchmarks.py
"""

import argparse
import json
import sys
import textwrap
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)

ROOT = Path(__file__).resolve().parent.parent

# Text stays text, and ids and metadata are fixed, so a redraw of the same
# numbers gives the same file.
plt.rcParams.update({"svg.fonttype": "none", "svg.hashsalt": "pymizu", "font.size": 9})
SVG_METADATA = {"Date": None, "Creator": None}


def subtitle(metadata):
    run = (f"{metadata['date']}, Python {metadata['python']}, {metadata['machine']}, {metadata['cpus']} CPUs, "
           f"median of {metadata['repeats']} runs")
    return f"{run}\n{textwrap.fill(metadata['note'], 100)}" if metadata["note"] else run


def speedups(record, out):
    """Horizontal bars: per row, the median time of each peer over mizu's."""
    peers = [p for p in record["pools"] if p != "mizu"]
    rows = record["rows"]
    height = 0.8 / len(peers)
    fig, ax = plt.subplots(figsize=(7.5, 0.6 + 0.75 * len(rows)), layout="constrained")
    for i, peer in enumerate(peers):
        ratios = [row["median"][peer] / row["median"]["mizu"] for row in rows]
        ys = [r + (i - (len(peers) - 1) / 2) * height for r in range(len(rows))]
        bars = ax.barh(ys, ratios, height=height, label=f"vs {peer}")
        ax.bar_label(bars, labels=[f"{x:,.0f}x" if x >= 10 else f"{x:.1f}x" for x in ratios], padding=2)
    ax.set_yticks(range(len(rows)), [row["row"] for row in rows])
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlim(1, ax.get_xlim()[1] * 3)
    ax.set_xlabel("mizu's speed-up (the peer's median time / mizu's), log scale")
    fig.suptitle(f"mizu.ProcessPoolExecutor vs the stdlib pools\n{subtitle(record['metadata'])}", fontsize=9)
    ax.legend(loc="lower right")
    fig.savefig(out, metadata=SVG_METADATA)
    plt.close(fig)


def array_round_trips(record, out):
    """Lines on log-log axes: per pool, the round trip of an array against its size."""
    rows = record["rows"]
    sizes = [row["bytes"] / 2**20 for row in rows]
    fig, ax = plt.subplots(figsize=(7.5, 4), layout="constrained")
    for pool in record["pools"]:
        ax.plot(sizes, [row["median"][pool] for row in rows], marker="o", label=pool)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(sizes, [row["size"] for row in rows])
    ax.minorticks_off()
    ax.set_xlabel("float64 array, argument and result of the same size")
    ax.set_ylabel(f"round trip to one worker ({record['unit']}), log scale")
    fig.suptitle(f"numpy arrays to a worker and back\n{subtitle(record['metadata'])}", fontsize=9)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend()
    fig.savefig(out, metadata=SVG_METADATA)
    plt.close(fig)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=ROOT / "benchmarks" / "results",
                        help="folder of the --json files (default benchmarks/results)")
    parser.add_argument("--out", type=Path, default=ROOT / "doc" / "_static",
                        help="folder for the SVG files (default doc/_static)")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for name, draw in (("stdlib", speedups), ("arrays", array_round_trips)):
        record = json.loads((args.results / f"{name}.json").read_text())
        out = args.out / f"bench-{name}.svg"
        draw(record, out)
        print(f"{out}: drawn from {args.results / f'{name}.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
