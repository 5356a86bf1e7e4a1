"""pymizu's ProcessPoolExecutor side by side with the stdlib pools.

The rows of DESIGN's table, measured for mizu, concurrent.futures'
ProcessPoolExecutor and ThreadPoolExecutor (and InterpreterPoolExecutor
where the Python has it), in turn, several times over; medians and mizu's
speed-up over each are printed. Pool start-up is outside every timed region.
Then the pool's life against ProcessPoolExecutor (create and shut down,
a worker's memory), and coarse work, each run a program of its own in a
fresh interpreter: 64 workers given 64 tasks of sleep(0.3) under each
start method (first result, all, with shutdown), tasks of uneven lengths
on 2 workers (all, and a shutdown that cancels after a timeout), and two real programs
with mizu's pool swapped in for the stdlib's, `compileall -j 4` over a copy
of the stdlib's Lib/ and black (``pip install black``, the [bench] extra)
over some of its packages, each checked to leave the same files as with
the stdlib's pool. The progress bar's rows need tqdm (also in [bench]):
mizu's map draws its own bar, the others' maps are wrapped in tqdm. While
it runs, it names on stderr each row and pool as it measures them; --json
also writes the table, with every sample, to a file.

Usage: python benchmarks/mizu-stdlib-bench.py [--repeats N] [--quick] [--json PATH [--note TEXT]]
"""

import argparse
import concurrent.futures as cf
import contextlib
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time

import mizu
import record


def trivial(x):
    return x


def five_microseconds(x):
    end = time.perf_counter() + 5e-6
    while time.perf_counter() < end:
        pass
    return x


def round_trip(pool, n):
    """Seconds per submit(f).result()."""
    start = time.perf_counter()
    for i in range(n):
        pool.submit(trivial, i).result()
    return (time.perf_counter() - start) / n


@contextlib.contextmanager
def busy_cpus():
    """A busy process per CPU (`while True: pass`) while the block runs."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 1)]
    try:
        time.sleep(0.2)
        yield
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


def loaded_round_trip(pool, n):
    """round_trip while a busy process per CPU keeps every CPU busy."""
    with busy_cpus():
        return round_trip(pool, n)


def pipelined(pool, n, fn=trivial):
    """Seconds per task: submit n calls of fn, then wait for all."""
    start = time.perf_counter()
    futures = [pool.submit(fn, i) for i in range(n)]
    for f in futures:
        f.result()
    return (time.perf_counter() - start) / n


def pipelined_wait(pool, n):
    """pipelined, collected with concurrent.futures.wait(futures)."""
    start = time.perf_counter()
    futures = [pool.submit(trivial, i) for i in range(n)]
    cf.wait(futures)
    return (time.perf_counter() - start) / n


def pipelined_as_completed(pool, n):
    """pipelined, collected with as_completed(futures)."""
    start = time.perf_counter()
    futures = [pool.submit(trivial, i) for i in range(n)]
    for _ in cf.as_completed(futures):
        pass
    return (time.perf_counter() - start) / n


def pipelined_callbacks(pool, n):
    """pipelined, each future with a done-callback; ends when the last has run."""
    import threading

    last = threading.Event()
    left = [n]

    def count(_):
        left[0] -= 1
        if not left[0]:
            last.set()

    start = time.perf_counter()
    for i in range(n):
        pool.submit(trivial, i).add_done_callback(count)
    last.wait()
    return (time.perf_counter() - start) / n


def asyncio_gather(pool, n):
    """Seconds per task of asyncio.gather over n loop.run_in_executor(pool, ...) calls."""
    import asyncio

    async def run():
        loop = asyncio.get_running_loop()
        start = time.perf_counter()
        await asyncio.gather(*[loop.run_in_executor(pool, trivial, i) for i in range(n)])
        return (time.perf_counter() - start) / n

    return asyncio.run(run())


def asyncio_asubmit(pool, n):
    """asyncio_gather with mizu's pool.asubmit(...) in place of run_in_executor (the others, without it, keep it)."""
    import asyncio

    if not hasattr(pool, "asubmit"):
        return asyncio_gather(pool, n)

    async def run():
        start = time.perf_counter()
        await asyncio.gather(*[pool.asubmit(trivial, i) for i in range(n)])
        return (time.perf_counter() - start) / n

    return asyncio.run(run())


def amap_overhead(pool, n):
    """Seconds per element of `async for` over mizu's pool.amap(trivial, range(n)) with default arguments (the
    others, without it: their map iterated in the coroutine)."""
    import asyncio

    async def run():
        start = time.perf_counter()
        if hasattr(pool, "amap"):
            async for _ in pool.amap(trivial, range(n)):
                pass
        else:
            for _ in pool.map(trivial, range(n)):
                pass
        return (time.perf_counter() - start) / n

    return asyncio.run(run())


def amap_cost(n, pairs):
    """[ratio]: in one pool of 4 workers, amap_overhead's time over map_overhead's, the two run back to back."""
    with mizu.ProcessPoolExecutor(4) as pool:
        list(pool.map(trivial, range(n)))
        return back_to_back(pairs, [("amap", lambda: amap_overhead(pool, n))], lambda: map_overhead(pool, n))["amap"]


def map_overhead(pool, n):
    """Seconds per element of map(trivial, range(n)) with default arguments."""
    start = time.perf_counter()
    for _ in pool.map(trivial, range(n)):
        pass
    return (time.perf_counter() - start) / n


def map_with_bar(pool, n, delay=None):
    """map_overhead with a progress bar drawn to /dev/null: mizu's own (progress=), tqdm around the map for the others.

    mizu's bar appears after its default delay (0.1 s; the map may end
    sooner), or with delay=0 from the start, as tqdm's does.
    """
    from tqdm import tqdm

    with open(os.devnull, "w") as sink:
        start = time.perf_counter()
        if isinstance(pool, mizu.ProcessPoolExecutor):
            options = {"file": sink} if delay is None else {"file": sink, "delay": delay}
            results = pool.map(trivial, range(n), progress=options)
        else:
            results = tqdm(pool.map(trivial, range(n)), total=n, file=sink)
        for _ in results:
            pass
        return (time.perf_counter() - start) / n


def map_with_bar_drawn(pool, n):
    """map_with_bar, mizu's bar drawn from the start."""
    return map_with_bar(pool, n, delay=0)


def back_to_back(pairs, variants, base):
    """{key: [ratio]}: for each (key, measure) of variants, measure() over base(), the two run back to back.

    The order alternates from pair to pair, so that neither always runs
    second.
    """
    ratios = {key: [] for key, _ in variants}
    for i in range(pairs):
        for key, measure in variants:
            if i % 2:
                plain, varied = base(), measure()
            else:
                varied, plain = measure(), base()
            ratios[key].append(varied / plain)
    return ratios


def bar_cost(n, pairs):
    """{run: [ratio]}: in one pool of 4 workers, each bar row's time over map_overhead's, the two run back to back.

    The rows themselves each run in a pool of their own, whose placement
    on the CPUs alone moves the map-overhead row by several percent.
    """
    with mizu.ProcessPoolExecutor(4) as pool:
        list(pool.map(trivial, range(n)))
        return back_to_back(pairs, [(run, lambda run=run: run(pool, n)) for run in (map_with_bar, map_with_bar_drawn)],
                            lambda: map_overhead(pool, n))


def by_value_cost(n, pairs):
    """{label: [ratio]}: the pipelined row in a pool with by_value=True over one without, the two run back to back.

    Of trivial (which cloudpickle, too, pickles by reference) and of a
    lambda (by value); each is sent to the worker once.
    """
    fns = {"trivial": trivial, "a lambda": lambda x: x}
    with mizu.ProcessPoolExecutor(1) as plain, mizu.ProcessPoolExecutor(1, by_value=True) as by_value:
        for pool in (plain, by_value):
            pipelined(pool, n)
        return back_to_back(pairs, [(label, lambda fn=fn: pipelined(by_value, n, fn)) for label, fn in fns.items()],
                            lambda: pipelined(plain, n))


def map_work(pool, n):
    """Seconds for map of n ~5 us tasks with default arguments."""
    start = time.perf_counter()
    for _ in pool.map(five_microseconds, range(n)):
        pass
    return time.perf_counter() - start


def cpu_seconds(pids):
    """CPU time used so far by these processes (Linux /proc)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / tick
    return total


def idle_share(make, seconds):
    """Share of one core that a 4-worker pool uses while idle, once it has run some work."""
    import multiprocessing

    with make(4) as pool:
        list(pool.map(trivial, range(100)))
        time.sleep(0.2)
        pids = [os.getpid()] + [p.pid for p in multiprocessing.active_children()]
        before, start = cpu_seconds(pids), time.monotonic()
        time.sleep(seconds)
        return (cpu_seconds(pids) - before) / (time.monotonic() - start)


def create_and_shut_down(make, method, workers):
    """Seconds to make a pool with this start method, get one result from each worker and shut it down."""
    import multiprocessing

    start = time.perf_counter()
    with make(workers, multiprocessing.get_context(method)) as pool:
        list(pool.map(trivial, range(workers)))
    return time.perf_counter() - start


def pss_per_worker(make, method, workers):
    """Proportional set size, in MB, of each idle worker of a pool that ran a trivial task in each (Linux)."""
    import multiprocessing

    with make(workers, multiprocessing.get_context(method)) as pool:
        list(pool.map(time.sleep, [0.05] * workers, chunksize=1))
        time.sleep(0.5)
        total = 0
        children = multiprocessing.active_children()
        for child in children:
            with open(f"/proc/{child.pid}/smaps_rollup") as smaps:
                for line in smaps:
                    if line.startswith("Pss:"):
                        total += int(line.split()[1]) * 1024
        return total / max(1, len(children)) / 1e6


# Coarse work, each measurement a program of its own run by a fresh
# interpreter, as a user runs one: what its pool's workers import, and
# (forkserver) the server they are forked from, are the program's alone.
STARTUP = """
import concurrent.futures as cf, multiprocessing, sys, time
if sys.argv[1] == "mizu":
    from mizu import ProcessPoolExecutor
else:
    from concurrent.futures import ProcessPoolExecutor

def nap(_):
    time.sleep(0.3)

if __name__ == "__main__":
    workers = int(sys.argv[3])
    start = time.perf_counter()
    pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context(sys.argv[2]))
    futures = [pool.submit(nap, i) for i in range(workers)]
    next(cf.as_completed(futures))
    first = time.perf_counter() - start
    cf.wait(futures)
    every = time.perf_counter() - start
    pool.shutdown()
    print(first, every, time.perf_counter() - start)
"""

# Tasks of uneven lengths on 2 workers, submitted at once, as coarse work
# often comes (files of different sizes, fits of different cost): seconds
# until every result is in, and until shutdown(cancel_futures=True) returns
# when it follows a wait for the first result that timed out.
UNEVEN = """
import concurrent.futures as cf, sys, time
if sys.argv[1] == "mizu":
    from mizu import ProcessPoolExecutor
else:
    from concurrent.futures import ProcessPoolExecutor

def nap(seconds):
    time.sleep(seconds)

if __name__ == "__main__":
    shape = [float(s) for s in sys.argv[2].split(",")]
    times = []
    for cancel in (False, True):
        pool = ProcessPoolExecutor(2)
        list(pool.map(nap, [0.05, 0.05]))   # both workers up
        start = time.perf_counter()
        futures = [pool.submit(nap, s) for s in shape]
        if cancel:
            cf.wait(futures, timeout=shape[0] / 6)
            pool.shutdown(cancel_futures=True)
        else:
            cf.wait(futures)
            pool.shutdown()
        times.append(time.perf_counter() - start)
    print(*times)
"""

# A program that uses concurrent.futures.ProcessPoolExecutor, run with mizu's
# swapped in (sys.argv[1] == "mizu") or as it is.
SWAPPED = """
import concurrent.futures, runpy, sys
if sys.argv[1] == "mizu":
    import mizu
    concurrent.futures.ProcessPoolExecutor = mizu.ProcessPoolExecutor
sys.argv = sys.argv[2:]
runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
"""


def run_program(args, folder, env=None):
    """Seconds a fresh interpreter takes to run with args in folder, and its stdout; it must succeed."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, cwd=folder)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{args} failed: {done.stderr[-2000:]}")
    return seconds, done.stdout


def startup_rows(method, workers, folder):
    """(label, titles, measure): the 64-sleeps program's first result, all results, and with shutdown."""
    script = os.path.join(folder, "sleeps.py")
    with open(script, "w") as f:
        f.write(STARTUP)
    stem = f"{workers} workers, {workers} tasks of sleep(0.3), {method}"
    titles = [f"{stem}: first result", f"{stem}: all", f"{stem}: with shutdown"]

    def measure(kind):
        _, out = run_program([script, kind, method, str(workers)], folder)
        return [float(x) for x in out.split()]

    return stem, titles, measure


def uneven_rows(scale, folder):
    """(label, titles, measure) of each shape of uneven tasks: all results, and a shutdown that cancels."""
    script = os.path.join(folder, "uneven.py")
    with open(script, "w") as f:
        f.write(UNEVEN)
    rows = []
    for shape, text in (([3, 1, 1, 1], "{}, {}, {}, {} s"), ([2] + [0.2] * 10, "{} s, then ten of {} s")):
        shape = [seconds * scale for seconds in shape]
        stem = "2 workers, tasks of " + text.format(*(f"{seconds:g}" for seconds in shape))
        titles = [f"{stem}: all", f"{stem}: cancelling shutdown after a timeout"]

        def measure(kind, shape=shape):
            _, out = run_program([script, kind, ",".join(map(str, shape))], folder)
            return [float(x) for x in out.split()]

        rows.append((stem, titles, measure))
    return rows


def tree_digest(root):
    """A digest of every file's path and bytes under root."""
    import hashlib

    digest = hashlib.sha256()
    for folder, dirs, files in sorted(os.walk(root)):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(folder, name)
            digest.update(os.path.relpath(path, root).encode())
            with open(path, "rb") as f:
                digest.update(f.read())
    return digest.hexdigest()


def program_rows(quick, folder):
    """[(title, [title], measure)] for compileall and black run with each pool; measure(kind) -> [seconds].

    Each run works on a fresh copy of its tree, and the trees the two pools
    leave behind must be the same.
    """
    import shutil
    import sysconfig

    lib = sysconfig.get_paths()["stdlib"]
    ignore = shutil.ignore_patterns("__pycache__", "site-packages", "test", "tests", "idlelib", "*.pyc")
    outputs = {}

    def fresh(name, sources):
        tree = os.path.join(folder, name)
        shutil.rmtree(tree, ignore_errors=True)
        os.makedirs(tree)
        for source in sources:
            shutil.copytree(os.path.join(lib, source) if source else lib,
                            os.path.join(tree, source or "Lib"), ignore=ignore)
        return tree

    def checked(title, kind, tree, seconds):
        digest = tree_digest(tree)
        if outputs.setdefault(title, digest) != digest:
            raise RuntimeError(f"{title}: {kind}'s pool left a different tree behind")
        return seconds

    compile_sources = ["email", "json", "asyncio"] if quick else [""]
    black_sources = ["json"] if quick else ["asyncio", "email", "concurrent", "json"]
    compile_title = f"compileall -j 4 -f over {'a part of ' if quick else 'a copy of '}Lib/"
    tree = fresh("black-count", black_sources)
    files = sum(name.endswith(".py") for _, _, names in os.walk(tree) for name in names)
    black_title = f"black --workers 4 over {files} files of Lib/"

    def compileall(kind):
        tree = fresh("compileall", compile_sources)
        seconds, _ = run_program(["-c", SWAPPED, kind, "compileall", "-q", "-f", "-j", "4", tree], folder)
        return [checked(compile_title, kind, tree, seconds)]

    def black(kind):
        tree = fresh("black", black_sources)
        env = dict(os.environ, BLACK_CACHE_DIR=os.path.join(folder, f"black-cache-{kind}"))
        shutil.rmtree(env["BLACK_CACHE_DIR"], ignore_errors=True)
        seconds, _ = run_program(["-c", SWAPPED, kind, "black", "-q", "--workers", "4", tree], folder, env)
        return [checked(black_title, kind, tree, seconds)]

    rows = [(compile_title, [compile_title], compileall)]
    try:
        import black as _  # noqa: F401
    except ImportError:
        record.progress("black is not installed (pip install black): its row is left out")
    else:
        rows.append((black_title, [black_title], black))
    return rows


def pools():
    kinds = [("mizu", lambda w: mizu.ProcessPoolExecutor(w)),
             ("ProcessPool", lambda w: cf.ProcessPoolExecutor(w)),
             ("ThreadPool", lambda w: cf.ThreadPoolExecutor(w))]
    if hasattr(cf, "InterpreterPoolExecutor"):
        kinds.append(("InterpreterPool", lambda w: cf.InterpreterPoolExecutor(w)))
    return kinds


PAIRED_ROWS = {"rt": round_trip, "pipelined": pipelined, "map": map_overhead, "wait": pipelined_wait,
               "as_completed": pipelined_as_completed, "callbacks": pipelined_callbacks, "asyncio": asyncio_gather,
               "asubmit": asyncio_asubmit, "amap": amap_overhead}
R_TRIVIAL = "function(x) x"


def r_round_trip(pool, n):
    """Seconds per submit(f).result() of a trivial R function on an R pool."""
    start = time.perf_counter()
    for i in range(n):
        pool.submit(R_TRIVIAL, i).result()
    return (time.perf_counter() - start) / n


def serve(workers, r=False):
    """For benchmarks/mizu-paired.py: one mizu pool (of R workers if r); each line 'row n' on stdin is answered
    with seconds per task."""
    make, fn, rows = ((mizu.RExecutor, R_TRIVIAL, {"rt": r_round_trip}) if r else
                      (mizu.ProcessPoolExecutor, trivial, PAIRED_ROWS))
    with make(workers) as pool:
        list(pool.map(fn, range(4 * workers)))
        for line in sys.stdin:
            row, n = line.split()
            print(repr(rows[row](pool, int(n))), flush=True)
    return 0


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    parser = record.parser(__doc__.splitlines()[0], 5, "runs of each row and pool (default 5)",
                           "fewer tasks, for a smoke test")
    parser.add_argument("--rows", metavar="REGEX", help="measure only the rows whose title this matches")
    parser.add_argument("--serve", type=int, metavar="WORKERS", help=argparse.SUPPRESS)
    parser.add_argument("--serve-r", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        return serve(args.serve, args.serve_r)
    scale = 10 if args.quick else 1
    rows = [
        ("trivial round trip, 1 worker", "us/task", 1, round_trip, 20_000 // scale, 1e6),
        ("pipelined throughput, 1 worker", "us/task", 1, pipelined, 50_000 // scale, 1e6),
        ("pipelined, collected by wait(fs), 1 worker", "us/task", 1, pipelined_wait, 50_000 // scale, 1e6),
        ("pipelined, by as_completed(fs), 1 worker", "us/task", 1, pipelined_as_completed, 50_000 // scale, 1e6),
        ("pipelined, a done-callback on each, 1 worker", "us/task", 1, pipelined_callbacks, 50_000 // scale, 1e6),
        ("asyncio.gather of run_in_executor, 1 worker", "us/task", 1, asyncio_gather, 20_000 // scale, 1e6),
        ("asyncio.gather of asubmit (others: run_in_executor), 1 worker", "us/task", 1, asyncio_asubmit,
         20_000 // scale, 1e6),
        ("map overhead, trivial fn, 4 workers", "us/elt", 4, map_overhead, 50_000 // scale, 1e6),
        ("map overhead, with a progress bar, 4 workers", "us/elt", 4, map_with_bar, 50_000 // scale, 1e6),
        ("map overhead, a bar from the start, 4 workers", "us/elt", 4, map_with_bar_drawn, 50_000 // scale, 1e6),
        ("async for over amap (others: map), 4 workers", "us/elt", 4, amap_overhead, 50_000 // scale, 1e6),
        ("map of 2,000 ~5 us tasks, 4 workers", "ms", 4, map_work, 2_000, 1e3),
        ("round trip, 1 worker, a busy process per CPU", "us/task", 1, loaded_round_trip, 5_000 // scale, 1e6),
    ]
    wanted = re.compile(args.rows).search if args.rows else (lambda title: True)
    rows = [row for row in rows if wanted(row[0])]
    try:
        import tqdm as _  # noqa: F401
    except ImportError:
        record.progress("tqdm is not installed (pip install tqdm): the progress bar's row is left out")
        rows = [row for row in rows if row[3] not in (map_with_bar, map_with_bar_drawn)]
    kinds = pools()
    samples = {(row[0], name): [] for row in rows for name, _ in kinds}
    for name, make in kinds:
        for title, _, workers, run, n, _ in rows:
            record.progress(f"{name}: {title}")
            with make(workers) as pool:
                for _ in range(max(1, workers)):
                    list(pool.map(trivial, range(workers * 4)))
                slow = name == "ProcessPool" or name == "InterpreterPool"
                count = n if not slow or run is map_work else max(200, n // 20)
                for _ in range(args.repeats):
                    samples[(title, name)].append(run(pool, count))
    costs = {}
    if any(row[3] is map_with_bar for row in rows):
        record.progress("mizu: the progress bar's cost, back to back with the plain map")
        costs = bar_cost(50_000 // scale, 8 * args.repeats)
    amap_ratios = []
    if any(row[3] is amap_overhead for row in rows):
        record.progress("mizu: amap, back to back with map")
        amap_ratios = amap_cost(50_000 // scale, 4 * args.repeats)
    by_value = {}
    if any(row[3] is pipelined for row in rows):
        record.progress("mizu: pipelined with by_value=True, back to back with it off")
        by_value = by_value_cost(20_000 // scale, 4 * args.repeats)
    process_pools = [("mizu", mizu.ProcessPoolExecutor), ("ProcessPool", cf.ProcessPoolExecutor)]
    lifecycle = []
    for method in ("fork", "forkserver", "spawn"):
        lifecycle.append((f"create, a task per worker, shut down: 4 workers, {method}", "ms", 1e3,
                          lambda make, m=method: create_and_shut_down(make, m, 4)))
    if os.path.exists("/proc/self/smaps_rollup"):
        for method in ("fork", "spawn"):
            lifecycle.append((f"memory of an idle worker (Pss), 16 workers, {method}", "MB", 1,
                              lambda make, m=method: pss_per_worker(make, m, 16)))
    lifecycle = [row for row in lifecycle if wanted(row[0])]
    life = {(title, name): [] for title, *_ in lifecycle for name, _ in process_pools}
    for title, _, _, measure in lifecycle:
        for repeat in range(args.repeats):
            # In alternation, so that both meet the machine in the same state.
            for name, cls in process_pools:
                if not repeat:
                    record.progress(f"{name}: {title}")
                life[(title, name)].append(measure(lambda w, ctx, cls=cls: cls(w, mp_context=ctx)))
    coarse = {}
    with tempfile.TemporaryDirectory() as folder:
        programs = [startup_rows(method, 16 if args.quick else 64, folder) for method in ("fork", "forkserver", "spawn")]
        uneven = uneven_rows(0.25 if args.quick else 1, folder)
        for label, titles, measure in programs + uneven + program_rows(args.quick, folder):
            if not wanted(label):
                continue
            for repeat in range(args.repeats):
                for name, kind in (("mizu", "mizu"), ("ProcessPool", "stdlib")):
                    if not repeat:
                        record.progress(f"{name}: {label}")
                    for title, seconds in zip(titles, measure(kind)):
                        coarse.setdefault((title, name), []).append(seconds)
    coarse_titles = list(dict.fromkeys(title for title, _ in coarse))
    ideal = 2_000 * 5e-6 / min(4, os.cpu_count() or 1)
    idle = {}
    seconds = 2 if args.quick else 10
    if os.path.exists("/proc/self/stat") and wanted("idle pool"):
        for name, make in kinds[:2]:
            record.progress(f"{name}: idle pool, 4 workers, {seconds} s")
            idle[name] = idle_share(make, seconds)

    print(f"pymizu vs the stdlib pools, {time.strftime('%Y-%m-%d')}, Python {platform.python_version()}, "
          f"{platform.machine()}, {os.cpu_count()} CPUs, median of {args.repeats} runs")
    names = [name for name, _ in kinds]
    # Each ratio column two spaces wider than its header, "x vs InterpreterPool" included.
    width = {n: max(20, len("x vs " + n) + 2) for n in names[1:]}
    first = max([58] + [len(f"{title} ({unit})") + 2 for title, unit, *_ in rows])
    print(f"{'row':<{first}}" + "".join(f"{n:>16}" for n in names)
          + "".join(f"{'x vs ' + n:>{width[n]}}" for n in names[1:]))
    for title, unit, _, _, _, scale in rows:
        med = {n: statistics.median(samples[(title, n)]) for n in names}
        cells = "".join(f"{med[n] * scale:>16.3f}" for n in names)
        ratios = "".join(f"{med[n] / med['mizu']:>{width[n] - 1}.1f}x" for n in names[1:])
        print(f"{title + ' (' + unit + ')':<{first}}{cells}{ratios}")
    print(f"ideal for the 2,000-task map (total work / cores): {ideal * 1e3:.3f} ms")
    for label, found in by_value.items():
        low, _, high = statistics.quantiles(found, n=4)
        print(f"mizu's pipelined row with by_value=True, calling {label}: {statistics.median(found):.3f}x "
              f"by_value off, back to back (quartiles {low:.3f}-{high:.3f}, {len(found)} pairs)")
    for run, found in costs.items():
        low, _, high = statistics.quantiles(found, n=4)
        how = "progress=" if run is map_with_bar else "a bar from the start (delay 0)"
        print(f"mizu's map with {how}: {statistics.median(found):.3f}x the map without, back to back in one pool "
              f"(quartiles {low:.3f}-{high:.3f}, {len(found)} pairs)")
    if amap_ratios:
        low, _, high = statistics.quantiles(amap_ratios, n=4)
        print(f"mizu's amap: {statistics.median(amap_ratios):.3f}x its map per call, back to back in one pool "
              f"(quartiles {low:.3f}-{high:.3f}, {len(amap_ratios)} pairs)")
    print()
    print(f"{'pool life':<62}{'mizu':>12}{'ProcessPool':>14}{'mizu / ProcessPool':>20}")
    for title, unit, scale, _ in lifecycle:
        ours, theirs = (statistics.median(life[(title, n)]) for n, _ in process_pools)
        print(f"{title + ' (' + unit + ')':<62}{ours * scale:>12.2f}{theirs * scale:>14.2f}{ours / theirs:>19.2f}x")
    print()
    wide = max([62] + [len(title) + 2 for title in coarse_titles])
    print(f"{'coarse work, each run a program of its own (s)':<{wide}}{'mizu':>12}{'ProcessPool':>14}"
          f"{'mizu / ProcessPool':>20}")
    for title in coarse_titles:
        ours, theirs = (statistics.median(coarse[(title, n)]) for n, _ in process_pools)
        print(f"{title:<{wide}}{ours:>12.2f}{theirs:>14.2f}{ours / theirs:>19.2f}x")
    for name, share in idle.items():
        print(f"idle pool, 4 workers, {seconds} s after its work: {name} uses {100 * share:.2f}% of a core")
    if args.json:
        record.write(args.json, "mizu-stdlib-bench", argv, args, pools=names, rows=[
            {"row": title, "unit": unit, "workers": workers,
             "median": {n: statistics.median(samples[(title, n)]) * scale for n in names},
             "samples": {n: [t * scale for t in samples[(title, n)]] for n in names}}
            for title, unit, workers, _, _, scale in rows
        ], ideal_ms=ideal * 1e3, idle_core_share=idle,
            bar_cost={("default" if run is map_with_bar else "drawn from the start"): statistics.median(found)
                      for run, found in costs.items()},
            by_value_cost={label: statistics.median(found) for label, found in by_value.items()},
            amap_cost=statistics.median(amap_ratios) if amap_ratios else None, lifecycle=[
            {"row": title, "unit": unit,
             "median": {n: statistics.median(life[(title, n)]) * scale for n, _ in process_pools},
             "samples": {n: [t * scale for t in life[(title, n)]] for n, _ in process_pools}}
            for title, unit, scale, _ in lifecycle
        ], coarse=[
            {"row": title, "unit": "s",
             "median": {n: statistics.median(coarse[(title, n)]) for n, _ in process_pools},
             "samples": {n: coarse[(title, n)] for n, _ in process_pools}}
            for title in coarse_titles
        ])
    return 0


if __name__ == "__main__":
    sys.exit(main())
