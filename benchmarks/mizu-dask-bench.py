"""Dask's local schedulers on a mizu pool, beside Dask's own "threads", "processes" and "synchronous".

Three graphs, each computed with every scheduler in turn, several times:
10,000 small dask.delayed tasks (about 200 µs of pure Python each) summed, a dask.array
reduction over 1 GB of chunks in which each task takes chunks that other
tasks made (so they cross between processes), and a dask.bag map and
filter of lambdas over 2,000,000 items (pure Python). mizu's pool has as
many workers as Dask's "processes" (the CPUs) and pickles by value (Dask's
graphs hold lambdas); it is passed as ``scheduler=pool``. Every result is checked
against the synchronous scheduler's. Medians are printed, with mizu's
speed-up over each.

Then Dask's distributed workers: a LocalCluster on loopback of one worker
with a thread per CPU, its tasks run in those threads (Dask's default) or in
a mizu pool of as many processes (mizu.dask.WorkerPool), beside a cluster of
one single-threaded worker per CPU (Dask's answer to the GIL), on 10,000
tasks of ~200 us and on 400 tasks of ~10 ms, both pure Python, submitted
with client.map and gathered.

While it runs, it names on stderr each graph and scheduler; --json also
writes the tables, with every sample, to a file.

Usage: python benchmarks/mizu-dask-bench.py [--repeats N] [--quick] [--json PATH [--note TEXT]]
"""

import logging
import os
import platform
import statistics
import sys
import time

import dask
import dask.array as da
import dask.bag as db

import mizu
import record


def small(i):
    """About 200 µs of pure Python: what holds the GIL, as a task of a real graph would."""
    return sum(range(i % 7, 20_000))


def medium(i):
    """About 10 ms of pure Python."""
    return sum(range(i % 7, 1_000_000))


def delayed_graph(n):
    """n small dask.delayed calls and their sum."""
    return dask.delayed(sum)([dask.delayed(small)(i) for i in range(n)])


def array_graph(nbytes):
    """A reduction over float64 chunks of 128 MB (nbytes in all): each task adds a chunk to another task's chunk."""
    rows = nbytes // (8 * 4096)
    x = da.random.default_rng(0).random((rows, 4096), chunks=(min(rows, 4096), 4096))
    return (x + x[::-1]).mean()


def bag_graph(n):
    """A map and a filter of lambdas over n items, and a count of what is left."""
    return db.from_sequence(range(n), npartitions=16).map(lambda v: (v * 7) % 11).filter(lambda v: v > 3).count()


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    parser = record.parser(__doc__.splitlines()[0], 3, "runs of each graph and scheduler (default 3)",
                           "smaller graphs, for a smoke test")
    args = parser.parse_args(argv)
    scale = 10 if args.quick else 1
    graphs = [
        ("10,000 dask.delayed tasks of ~200 us, summed", lambda: delayed_graph(10_000 // scale)),
        ("dask.array: x + x[::-1] over 1 GB of chunks, mean", lambda: array_graph((1 << 30) // scale)),
        ("dask.bag: map and filter of lambdas, 2,000,000 items", lambda: bag_graph(2_000_000 // scale)),
    ]
    workers = os.cpu_count() or 1
    names = ["mizu", "threads", "processes", "synchronous"]
    samples = {(title, name): [] for title, _ in graphs for name in names}
    with mizu.ProcessPoolExecutor(workers, by_value=True) as pool:
        schedulers = {"mizu": pool, "threads": "threads", "processes": "processes", "synchronous": "sync"}
        for title, make in graphs:
            expected = make().compute(scheduler="sync")
            for name in names:
                record.progress(f"{name}: {title}")
                for _ in range(args.repeats):
                    graph = make()
                    start = time.perf_counter()
                    # A pool brings its own number of workers (its _max_workers).
                    extra = {} if name == "mizu" else {"num_workers": workers}
                    got = graph.compute(scheduler=schedulers[name], **extra)
                    samples[(title, name)].append(time.perf_counter() - start)
                    if abs(got - expected) > 1e-9 * max(1.0, abs(expected)):
                        raise RuntimeError(f"{name} computed {got} for {title}, not {expected}")
    print(f"Dask's local schedulers, {time.strftime('%Y-%m-%d')}, Python {platform.python_version()}, "
          f"dask {dask.__version__}, {platform.machine()}, {os.cpu_count()} CPUs, {workers} workers, "
          f"median of {args.repeats} runs (s)")
    print(f"{'graph':<54}" + "".join(f"{n:>13}" for n in names) + "".join(f"{'x vs ' + n:>17}" for n in names[1:]))
    for title, _ in graphs:
        med = {n: statistics.median(samples[(title, n)]) for n in names}
        print(f"{title:<54}" + "".join(f"{med[n]:>13.3f}" for n in names)
              + "".join(f"{med[n] / med['mizu']:>16.2f}x" for n in names[1:]))
    cluster_rows = clusters(scale, args.repeats, workers)
    if args.json:
        record.write(args.json, "mizu-dask-bench", argv, args, schedulers=names, workers=workers, rows=[
            {"row": title, "unit": "s", "median": {n: statistics.median(samples[(title, n)]) for n in names},
             "samples": {n: samples[(title, n)] for n in names}}
            for title, _ in graphs], cluster_rows=cluster_rows)
    return 0


def clusters(scale, repeats, workers):
    """Time client.map over LocalClusters of mizu workers and of Dask's own; print the table, return its rows."""
    from distributed import Client, LocalCluster

    import mizu.dask

    loads = [(f"{10_000 // scale:,} tasks of ~200 us", small, 10_000 // scale),
             (f"{400 // scale:,} tasks of ~10 ms", medium, 400 // scale)]
    kinds = [(f"mizu 1x{workers}", dict(n_workers=1, threads_per_worker=workers), True),
             (f"threads 1x{workers}", dict(n_workers=1, threads_per_worker=workers), False),
             (f"processes {workers}x1", dict(n_workers=workers, threads_per_worker=1), False)]
    samples = {(title, kind): [] for title, _, _ in loads for kind, _, _ in kinds}
    for kind, shape, plugin in kinds:
        # Quiet below CRITICAL: a worker whose heartbeat meets the scheduler
        # already closed logs an error as the cluster closes (dask/distributed
        # issue 7105); a task's error still reaches gather.
        with LocalCluster(host="127.0.0.1", dashboard_address=":0", silence_logs=logging.CRITICAL,
                          **shape) as cluster, Client(cluster) as client:
            if plugin:
                client.register_plugin(mizu.dask.WorkerPool())
            client.gather(client.map(small, range(100), pure=False))
            for title, task, n in loads:
                record.progress(f"LocalCluster {kind}: {title}")
                expected = sum(task(i) for i in range(7))
                for _ in range(repeats):
                    start = time.perf_counter()
                    got = client.gather(client.map(task, range(n), pure=False))
                    samples[(title, kind)].append(time.perf_counter() - start)
                    if sum(got[:7]) != expected:
                        raise RuntimeError(f"{kind} computed {got[:7]} for {title}")
    names = [kind for kind, _, _ in kinds]
    print(f"\nDask's distributed workers, a LocalCluster on loopback (workers x threads), median of {repeats} runs (s)")
    print(f"{'client.map, gathered':<30}" + "".join(f"{n:>15}" for n in names)
          + "".join(f"{'x vs ' + n:>22}" for n in names[1:]))
    rows = []
    for title, _, _ in loads:
        med = {n: statistics.median(samples[(title, n)]) for n in names}
        print(f"{title:<30}" + "".join(f"{med[n]:>15.3f}" for n in names)
              + "".join(f"{med[n] / med[names[0]]:>21.2f}x" for n in names[1:]))
        rows.append({"row": title, "unit": "s", "median": med, "samples": {n: samples[(title, n)] for n in names}})
    return rows


if __name__ == "__main__":
    sys.exit(main())
