"""numpy arrays through pymizu's pool, side by side with ProcessPoolExecutor and joblib.

Rows: the round trip of a float64 array of 1 MB, 100 MB and 1 GB to one
worker whose task returns it (an argument and an equal-size result; the
task does no work, so the rows time the transport), for mizu with a
`mizu.empty` array, mizu with a plain array,
concurrent.futures.ProcessPoolExecutor and joblib's default loky backend
(which memory-maps large arguments), all in one run; medians and mizu's
speed-up over each. Then the same sizes for a task that returns a new
array, ``-a``, beside the same call made in this process. Then the memory
that passing one 1 GB `mizu.empty` array to 4 workers adds to all the
processes together (private memory plus the machine's shared memory and
page tables, sampled while the workers read it). While it runs, it names on
stderr each pool and size as it measures them; --json also writes the rows,
with every sample, to a file.

--soak N instead runs N tasks that each return ``-a`` of a 1 MB
`mizu.empty` array on two workers, and prints every process's memory
(resident, and its anonymous part) at ten points along the way.

Usage: python benchmarks/mizu-arrays-bench.py [--repeats N] [--quick] [--json PATH [--note TEXT]] [--soak N]
"""

import concurrent.futures as cf
import os
import statistics
import sys
import threading
import time

import numpy as np

import mizu
import record


def echo(a):
    return a


def negate(a):
    return -a


def quarter_sum(a, part):
    n = len(a) // 4
    return float(a[part * n:(part + 1) * n].sum())


class JoblibPool:
    """joblib.Parallel with its default (loky) backend, kept open between calls."""

    def __init__(self, workers):
        import joblib

        self.joblib = joblib
        self.parallel = joblib.Parallel(n_jobs=workers)

    def __enter__(self):
        self.parallel.__enter__()
        return self

    def __exit__(self, *exc):
        self.parallel.__exit__(*exc)

    def round_trip(self, fn, a):
        return self.parallel([self.joblib.delayed(fn)(a)])[0]


class FuturesPool:
    def __init__(self, executor):
        self.executor = executor

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.executor.shutdown()

    def round_trip(self, fn, a):
        return self.executor.submit(fn, a).result()


def kinds():
    """(name, make pool, make argument)."""
    return [
        ("mizu, mizu.empty", lambda: FuturesPool(mizu.ProcessPoolExecutor(1)), mizu.empty),
        ("mizu, plain array", lambda: FuturesPool(mizu.ProcessPoolExecutor(1)), np.empty),
        ("ProcessPool", lambda: FuturesPool(cf.ProcessPoolExecutor(1)), np.empty),
        ("joblib (loky)", lambda: JoblibPool(2), np.empty),
    ]


def size_label(size):
    return f"{size >> 30} GB" if size >= 1 << 30 else f"{size >> 20} MB"


def round_trips(sizes, repeats, fn, here=False):
    """{(pool name, size): seconds of each call of fn on a float64 array of size bytes}.

    here: also time fn called in this process on the first pool's argument,
    alternating with that pool's calls (the machine's memory bandwidth
    drifts), as ("in this process", size).
    """
    samples = {}
    for index, (name, make, allocate) in enumerate(kinds()):
        with make() as pool:
            pool.round_trip(fn, allocate(1000))
            for size in sizes:
                record.progress(f"{name}, {fn.__name__}: {size_label(size)}")
                a = allocate(size // 8)
                a[:] = 1.0
                for _ in range(repeats if size < 1 << 30 else max(3, repeats // 2)):
                    if here and index == 0:
                        start = time.perf_counter()
                        back = fn(a)
                        samples.setdefault(("in this process", size), []).append(time.perf_counter() - start)
                        del back
                    start = time.perf_counter()
                    back = pool.round_trip(fn, a)
                    samples.setdefault((name, size), []).append(time.perf_counter() - start)
                    assert back.shape == a.shape
                    del back
                del a
    return samples


def memory_of(pids):
    """(resident, anonymous) bytes of each process."""
    out = []
    for pid in pids:
        fields = {}
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                name, _, value = line.partition(":")
                if name in ("VmRSS", "RssAnon"):
                    fields[name] = int(value.split()[0]) * 1024
        out.append((fields["VmRSS"], fields["RssAnon"]))
    return out


def soak(tasks):
    """Run tasks calls of negate on a 1 MB mizu.empty array on 2 workers; print memory at ten points."""
    a = mizu.empty((1 << 20) // 8)
    a[:] = 1.0
    with mizu.ProcessPoolExecutor(2) as ex:
        list(ex.map(negate, [a] * 100))
        pids = [os.getpid(), *ex._processes]
        print(f"soak: {tasks} tasks returning -a of a 1 MB mizu.empty array, 2 workers, "
              f"{time.strftime('%Y-%m-%d')}; resident / anonymous MB of the client and each worker")
        step = max(1, tasks // 10)
        done = 0
        start = time.perf_counter()
        while done < tasks:
            n = min(step, tasks - done)
            for back in ex.map(negate, [a] * n, chunksize=64):
                assert back[0] == -1.0
            done += n
            usage = "  ".join(f"{rss / 2**20:7.1f} / {anon / 2**20:6.1f}" for rss, anon in memory_of(pids))
            print(f"{done:>9} tasks {time.perf_counter() - start:8.1f} s   {usage}", flush=True)
    return 0


def private_bytes(pids):
    """Anonymous (private) memory of pids, proportional set sizes, in bytes."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Pss_Anon:"):
                        total += int(line.split()[1]) * 1024
        except FileNotFoundError:
            pass
    return total


def system_bytes(*fields):
    """Fields of /proc/meminfo, in bytes."""
    values = {}
    with open("/proc/meminfo") as f:
        for line in f:
            name, value = line.split(":")
            values[name] = int(value.split()[0]) * 1024
    return sum(values[name] for name in fields)


def memory_for_four_workers(nbytes):
    """Bytes that reading one shared nbytes array in 4 workers adds to the processes' total, at its peak.

    The processes' total is their private memory (each process's anonymous
    pages, shared ones divided among their sharers) plus the machine's
    shared memory and page tables, which count every shared page once
    however many processes map it. Summing per-process sizes of shared
    mappings instead would count pages twice while a worker maps them.
    """
    with mizu.ProcessPoolExecutor(4) as ex:
        # The same tasks on a small shared array first: what the workers'
        # first tasks cost (copy-on-write pages of the forked interpreter,
        # buffers) is theirs, not the large array's.
        small = mizu.empty(4096)
        small[:] = 1.0
        for _ in range(3):
            assert sum(ex.map(quarter_sum, [small] * 4, range(4), chunksize=1)) == 4096
        pids = [os.getpid(), *ex._processes]
        a = mizu.empty(nbytes // 8)
        a[:] = 1.0

        def total():
            return private_bytes(pids) + system_bytes("Shmem", "PageTables")

        baseline = peak = total()
        done = threading.Event()

        def sample():
            nonlocal peak
            while not done.is_set():
                peak = max(peak, total())
                time.sleep(0.005)

        sampler = threading.Thread(target=sample)
        sampler.start()
        try:
            result = sum(ex.map(quarter_sum, [a] * 4, range(4), chunksize=1))
        finally:
            done.set()
            sampler.join()
        assert result == len(a) // 4 * 4
    return peak - baseline


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    parser = record.parser(__doc__.splitlines()[0], 5, "runs of each row (default 5; 1 GB rows half, at least 3)",
                           "1 MB and 10 MB only, for a smoke test")
    parser.add_argument("--soak", type=int, default=0, metavar="N", help="run the soak of N tasks instead")
    args = parser.parse_args(argv)
    if args.soak:
        return soak(args.soak)
    sizes = [1 << 20, 10 << 20] if args.quick else [1 << 20, 100 << 20, 1 << 30]
    samples = round_trips(sizes, args.repeats, echo)
    made = round_trips(sizes, args.repeats, negate, here=True)
    nbytes = sizes[-1]
    record.progress(f"memory: one {nbytes >> 20} MB mizu.empty array read by 4 workers")
    added = memory_for_four_workers(nbytes)
    names = [k[0] for k in kinds()]
    print(f"numpy float64 round trips (argument and result of the same size), {time.strftime('%Y-%m-%d')}, "
          f"{os.cpu_count()} CPUs, medians of {args.repeats} runs (ms); speed-up of 'mizu, mizu.empty' over each")
    print(f"{'size':<8}" + "".join(f"{n:>20}" for n in names) + "".join(f"{'x vs ' + n:>24}" for n in names[1:]))
    for size in sizes:
        med = {n: statistics.median(samples[(n, size)]) for n in names}
        print(f"{size_label(size):<8}" + "".join(f"{med[n] * 1e3:>20.2f}" for n in names)
              + "".join(f"{med[n] / med[names[0]]:>23.1f}x" for n in names[1:]))
    for size in sizes:
        plain = statistics.median(samples[("mizu, plain array", size)])
        stdlib = statistics.median(samples[("ProcessPool", size)])
        print(f"mizu with a plain array vs ProcessPool at {size >> 20} MB: {stdlib / plain:.1f}x")
    print(f"a task returning a new array, -a, {time.strftime('%Y-%m-%d')}: medians of {args.repeats} runs (ms); "
          f"each against 'mizu, mizu.empty'")
    local = ["in this process", *names]
    print(f"{'size':<8}" + "".join(f"{n:>20}" for n in local) + "".join(f"{'x vs ' + n:>24}" for n in local if n != names[0]))
    for size in sizes:
        med = {n: statistics.median(made[(n, size)]) for n in local}
        print(f"{size_label(size):<8}" + "".join(f"{med[n] * 1e3:>20.2f}" for n in local)
              + "".join(f"{med[n] / med[names[0]]:>23.2f}x" for n in local if n != names[0]))
    print(f"passing one {nbytes >> 20} MB mizu.empty array to 4 workers added {added / 2**20:.1f} MB "
          f"to the processes' total at its peak")
    if args.json:
        record.write(args.json, "mizu-arrays-bench", argv, args, pools=names, unit="ms", rows=[
            {"size": size_label(size), "bytes": size,
             "median": {n: statistics.median(samples[(n, size)]) * 1e3 for n in names},
             "samples": {n: [t * 1e3 for t in samples[(n, size)]] for n in names}}
            for size in sizes
        ], new_array_rows=[
            {"size": size_label(size), "bytes": size,
             "median": {n: statistics.median(made[(n, size)]) * 1e3 for n in local},
             "samples": {n: [t * 1e3 for t in made[(n, size)]] for n in local}}
            for size in sizes
        ], shared_array_bytes=nbytes, memory_added_by_four_workers_bytes=added)
    return 0


if __name__ == "__main__":
    sys.exit(main())
