"""The benchmark scripts run end to end (they report; nothing here looks at their numbers)."""

import os
import re
import subprocess
import sys

from helpers import BENCHMARKS


def test_paired_runs_two_interpreters_in_alternation():
    out = subprocess.run([sys.executable, os.path.join(BENCHMARKS, "mizu-paired.py"), sys.executable,
                          sys.executable, "--row", "map", "--workers", "2", "--pairs", "4", "--tasks", "200"],
                         capture_output=True, text=True, timeout=300, check=True).stdout
    assert re.fullmatch(r"map, 4 pairs of 200 tasks: A [\d.]+ us, B [\d.]+ us per task \(medians\); "
                        r"B/A [\d.]+ \(quartiles [\d.]+-[\d.]+\)\n", out), out


def test_busy_runs_count_the_runs_mizu_was_ahead():
    out = subprocess.run([sys.executable, os.path.join(BENCHMARKS, "mizu-busy-bench.py"), "--quick", "--repeats", "2"],
                         capture_output=True, text=True, timeout=300, check=True).stdout
    assert re.search(r"^mizu ahead of ThreadPool in [012] of 2 runs\nmizu ahead of ProcessPool in [012] of 2 runs\n\Z",
                     out, re.M), out


def test_control_bench_reports_mizu_beside_pebble_in_each_row():
    out = subprocess.run([sys.executable, os.path.join(BENCHMARKS, "control-bench.py"), "--quick"],
                         capture_output=True, text=True, timeout=300, check=True).stdout
    assert re.search(r"^uptime: .*load average", out, re.M), out
    rows = re.findall(r"^  (\w+) +-?[\d.]+", out, re.M)
    assert rows == ["mizu", "pebble", "mizu", "pebble", "stdlib", "mizu", "pebble"], out


def test_streams_bench_reports_each_map_beside_the_fastest_call():
    out = subprocess.run([sys.executable, os.path.join(BENCHMARKS, "streams-bench.py"), "--quick"],
                         capture_output=True, text=True, timeout=300, check=True).stdout
    assert re.search(r"^uptime: .*load average", out, re.M), out
    rows = re.findall(r"^  (\w+ ?\w+) +[\d.]+ +[\d.]+ +[\d.]+ ", out, re.M)
    assert rows == ["mizu unordered", "mizu ordered", "imap_unordered"], out
    costs = re.findall(r"^  ([\w ]+, chunksize \d+) +[\d.]+ +[\d.]+$", out, re.M)
    assert costs == ["mizu ordered, chunksize 1", "mizu unordered, chunksize 1", "mizu unordered, chunksize 16",
                     "imap_unordered, chunksize 1", "imap_unordered, chunksize 16"], out
