"""A soak of mizu's ProcessPoolExecutor: does memory stay flat over millions of tasks?

Runs, in one pool, ten million small tasks (most through map, in calls of
ten thousand, the rest through submit and result in bursts) and then a thousand round trips of 10 MB numpy
arrays (plain arrays, copied into the arena, alternating with mizu.empty
arrays, which cross by reference). Every interval of each phase it reports
the resident memory of the client and of every worker (RSS, and Pss_Anon
from /proc/PID/smaps_rollup) and the shared memory in use: the memfd
segments the processes hold or map, the machine's Shmem from /proc/meminfo
and what /dev/shm holds (those two are machine-wide, so other work moves
them too). At the end it compares each phase's last interval with its first
one after warm-up and says whether each figure stayed within the tolerance.

Report-only: it asserts nothing and exits 0. Linux only (it reads /proc).

Usage: python benchmarks/mizu-soak.py [--tasks N] [--arrays N] [--workers N]
       [--intervals N] [--submit-share F] [--map-call N] [--array-mb N]
       [--warmup N] [--tolerance-mb N]
"""

import argparse
import multiprocessing
import os
import sys
import time

import numpy as np

import mizu

MB = 1 << 20


def identity(x):
    return x


# Memory.

def _smaps_rollup(pid):
    """RSS and Pss_Anon of a process, in bytes."""
    fields = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            name, _, rest = line.partition(":")
            parts = rest.split()
            if len(parts) == 2 and parts[1] == "kB":
                fields[name] = int(parts[0]) * 1024
    return fields.get("Rss", 0), fields.get("Pss_Anon", 0)


def _memfd_segments(pids):
    """{inode: bytes} of the memfd segments any of the processes holds open or maps."""
    sizes = {}
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                path = f"/proc/{pid}/fd/{fd}"
                try:
                    if os.readlink(path).startswith("/memfd:"):
                        st = os.stat(path)
                        sizes[st.st_ino] = st.st_size
                except OSError:
                    pass   # closed meanwhile
            with open(f"/proc/{pid}/maps") as f:
                mapped = {}
                for line in f:
                    parts = line.split(maxsplit=5)
                    if len(parts) == 6 and parts[5].startswith("/memfd:"):
                        start, end = (int(x, 16) for x in parts[0].split("-"))
                        mapped[int(parts[4])] = mapped.get(int(parts[4]), 0) + end - start
                for inode, size in mapped.items():
                    sizes.setdefault(inode, size)
        except FileNotFoundError:
            pass   # the process has exited
    return sizes


def _meminfo_shmem():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("Shmem:"):
                return int(line.split()[1]) * 1024
    return 0


def _dev_shm_used():
    try:
        st = os.statvfs("/dev/shm")
    except OSError:
        return 0
    return (st.f_blocks - st.f_bfree) * st.f_frsize


def sample(executor):
    """One reading of every figure the soak follows, in bytes."""
    client = os.getpid()
    workers = sorted(executor._processes)
    rss, anon = _smaps_rollup(client)
    worker_rss = worker_anon = 0
    per_worker = []
    for pid in workers:
        try:
            w_rss, w_anon = _smaps_rollup(pid)
        except FileNotFoundError:
            continue
        worker_rss += w_rss
        worker_anon += w_anon
        per_worker.append((pid, w_rss, w_anon))
    segments = _memfd_segments([client, *workers])
    return {
        "client RSS": rss,
        "client Pss_Anon": anon,
        "workers RSS": worker_rss,
        "workers Pss_Anon": worker_anon,
        "memfd segments": sum(segments.values()),
        "memfd count": len(segments),
        "Shmem (machine)": _meminfo_shmem(),
        "/dev/shm (machine)": _dev_shm_used(),
        "per worker": per_worker,
    }


COLUMNS = ["client RSS", "client Pss_Anon", "workers RSS", "workers Pss_Anon", "memfd segments", "memfd count",
           "Shmem (machine)", "/dev/shm (machine)"]


def _header():
    print(f"{'phase':<8} {'done':>10} {'s':>7} " + " ".join(f"{c:>19}" for c in COLUMNS))


def _row(phase, done, elapsed, s):
    cells = [f"{s[c]:>19}" if c == "memfd count" else f"{s[c] / MB:>16.1f} MB" for c in COLUMNS]
    print(f"{phase:<8} {done:>10} {elapsed:>7.1f} " + " ".join(cells), flush=True)


# Phases. Each runs its work in `intervals` equal parts and samples after each.

def _parts(total, intervals):
    base, extra = divmod(total, intervals)
    return [base + (i < extra) for i in range(intervals)]


def run_map(executor, count, intervals, report, call):
    # Calls of `call` items each: map takes all of its items when called (as
    # the stdlib's does before 3.14's buffersize), so one huge call would
    # hold its whole working set, and its high-water mark would hide a leak.
    done = 0
    for n in _parts(count, intervals):
        end = done + n
        while done < end:
            k = min(call, end - done)
            got = sum(executor.map(identity, range(done, done + k)))
            if got != (2 * done + k - 1) * k // 2:
                raise RuntimeError(f"map over {done}..{done + k - 1} returned a sum of {got}")
            done += k
        report(done)


def run_submit(executor, count, intervals, report, burst=256):
    done = 0
    for n in _parts(count, intervals):
        end = done + n
        while done < end:
            k = min(burst, end - done)
            futures = [executor.submit(identity, i) for i in range(done, done + k)]
            for i, future in enumerate(futures, done):
                if future.result() != i:
                    raise RuntimeError(f"task {i} returned {future.result()!r}")
            done += k
        report(done)


def run_arrays(executor, count, intervals, report, nbytes):
    done = 0
    items = nbytes // 8
    for n in _parts(count, intervals):
        for i in range(done, done + n):
            # Plain arrays are copied into the client's arena on the way out;
            # mizu.empty arrays cross by reference. Both come back by reference.
            array = np.full(items, i, np.int64) if i % 2 == 0 else mizu.empty(items, np.int64)
            if i % 2:
                array.fill(i)
            back = executor.submit(identity, array).result()
            if back.shape != (items,) or back[0] != i or back[-1] != i:
                raise RuntimeError(f"array round trip {i} came back wrong")
            del array, back
        done += n
        report(done)


def verdict(samples, warmup, tolerance):
    """Per figure: the last interval against the first after warm-up."""
    lines = []
    flat = True
    for phase, rows in samples.items():
        if len(rows) <= warmup:
            lines.append(f"{phase}: too few intervals to judge")
            continue
        first, last = rows[warmup], rows[-1]
        for c in COLUMNS:
            growth = last[c] - first[c]
            if c == "memfd count":
                ok = growth <= 0
                text = f"{first[c]} -> {last[c]}"
            else:
                ok = growth <= max(tolerance, 0.05 * first[c])
                text = f"{first[c] / MB:.1f} -> {last[c] / MB:.1f} MB ({growth / MB:+.1f} MB)"
            machine = "machine" in c
            if not ok and not machine:
                flat = False
            mark = "flat" if ok else ("GREW (machine-wide, other work counts)" if machine else "GREW")
            lines.append(f"{phase:<7} {c:<19} {text:<40} {mark}")
    return flat, lines


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=10_000_000, help="small tasks in all (default 10,000,000)")
    parser.add_argument("--submit-share", type=float, default=0.1,
                        help="share of the tasks that go through submit/result, the rest through map (default 0.1)")
    parser.add_argument("--map-call", type=int, default=10_000, help="items per map call (default 10,000)")
    parser.add_argument("--arrays", type=int, default=1000, help="array round trips (default 1000)")
    parser.add_argument("--array-mb", type=int, default=10, help="size of each array in MB (default 10)")
    parser.add_argument("--workers", type=int, default=4, help="worker processes (default 4)")
    parser.add_argument("--intervals", type=int, default=10, help="reports per phase (default 10)")
    parser.add_argument("--warmup", type=int, default=1,
                        help="intervals of each phase left out of the verdict (default 1)")
    parser.add_argument("--tolerance-mb", type=float, default=4.0,
                        help="growth allowed per figure, or 5%% if more (default 4 MB)")
    args = parser.parse_args()
    if not sys.platform.startswith("linux"):
        sys.exit("the soak reads /proc: Linux only")

    submits = int(args.tasks * args.submit_share)
    maps = args.tasks - submits
    print(f"mizu soak: {maps:,} map tasks, {submits:,} submit/result tasks, {args.arrays:,} round trips of "
          f"{args.array_mb} MB arrays; {args.workers} workers, start method "
          f"{multiprocessing.get_start_method()}, Python {sys.version.split()[0]}, numpy {np.__version__}")
    samples = {}
    start = time.perf_counter()
    with mizu.ProcessPoolExecutor(args.workers) as executor:
        # Start every worker and take a baseline.
        list(executor.map(identity, range(args.workers * 4)))
        _header()
        base = sample(executor)
        _row("start", 0, 0.0, base)

        def reporter(phase):
            rows = samples.setdefault(phase, [])

            def report(done):
                s = sample(executor)
                rows.append(s)
                _row(phase, done, time.perf_counter() - start, s)
            return report

        phases = [
            ("map", maps, lambda report: run_map(executor, maps, args.intervals, report, args.map_call)),
            ("submit", submits, lambda report: run_submit(executor, submits, args.intervals, report)),
            ("arrays", args.arrays,
             lambda report: run_arrays(executor, args.arrays, args.intervals, report, args.array_mb * MB)),
        ]
        for phase, count, run in phases:
            if count:
                t0 = time.perf_counter()
                run(reporter(phase))
                seconds = time.perf_counter() - t0
                print(f"{phase}: {count:,} in {seconds:.1f} s ({seconds / count * 1e6:.2f} us each)", flush=True)
        last = sample(executor)
        print("per worker at the end (pid, RSS MB, Pss_Anon MB): " + ", ".join(
            f"({pid}, {r / MB:.1f}, {a / MB:.1f})" for pid, r, a in last["per worker"]))
        arena = mizu.default_arena().stats()
        print(f"client's arena at the end: {arena['blocks']} blocks in use ({arena['in_use']} bytes), "
              f"{arena['segments']} segments ({arena['spares']} spare), {arena['capacity'] / MB:.1f} MB")
    flat, lines = verdict(samples, args.warmup, args.tolerance_mb * MB)
    if arena["blocks"]:
        flat = False
        lines.append(f"arena   {arena['blocks']} blocks still in use after every array was dropped: LEAK")
    print(f"\nLast interval against interval {args.warmup + 1} of each phase "
          f"(tolerance {args.tolerance_mb:g} MB or 5%):")
    for line in lines:
        print("  " + line)
    print("memory stayed flat" if flat else "memory GREW in the pool's own processes or segments")
    print(f"total {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
