"""The --json files of the benchmark scripts: what ran, where and how, then the script's rows."""

import json
import shlex
import os
import platform
import time


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
