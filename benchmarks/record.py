"""What the benchmark scripts share: their common options, their progress on stderr, their --json files.

A --json file holds what ran, where and how, then the script's rows.
"""

import argparse
import json
import shlex
import os
import platform
import sys
import time


def parser(description, repeats, repeats_help, quick_help):
    """An argument parser with the options every script takes: --repeats, --quick, --json and --note."""
    found = argparse.ArgumentParser(description=description)
    found.add_argument("--repeats", type=int, default=repeats, help=repeats_help)
    found.add_argument("--quick", action="store_true", help=quick_help)
    found.add_argument("--json", metavar="PATH", help="also write the rows, medians and samples to PATH")
    found.add_argument("--note", default="", help="a remark on the run, kept in the --json file's metadata")
    return found


def progress(message):
    """Say on stderr what the script measures now: stdout is for its table."""
    print(message, file=sys.stderr, flush=True)


def write(path, script, argv, args, **rows):
    """Write to path the run's metadata (date, machine, the command and its --repeats, --quick, --note) and rows."""
    record = {
        "benchmark": script,
        "metadata": {
            "date": time.strftime("%Y-%m-%d"),
            "python": platform.python_version(),
            "machine": platform.machine(),
            "cpus": os.cpu_count(),
            "repeats": args.repeats,
            "quick": args.quick,
            "command": shlex.join(["python3", f"benchmarks/{script}.py", *argv]),
            "note": args.note,
        },
        **rows,
    }
    with open(path, "w") as f:
        json.dump(record, f, indent=1)
        f.write("\n")
