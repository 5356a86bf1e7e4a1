"""Control of running work: pymizu's pool side by side with pebble's ProcessPool.

Three measurements, each for mizu and pebble in turn (pip install pebble,
the [test] extra):

- How late a deadline fires: 100 tasks on 2 workers, each sleeping 10 s
  past a 0.1 s deadline. A task writes the time it started; a done callback
  takes the time its future failed. Lateness = failure - (start + deadline).
- A replacement worker's first task: a pool of 1 worker whose dead workers
  are replaced; a task writes the time and calls os._exit, the next one,
  queued behind it, returns the time it started. The deaths come back to
  back, then 0.25 s apart: once it has replaced a worker, mizu's pool keeps
  a spare process, which needs a process start's time to be ready. Against
  them, the time a fresh concurrent.futures.ProcessPoolExecutor(1) of the
  same start method takes from its construction to its first result: what
  starting one worker costs the stdlib.
- With --r, the replacement row for an R pool (mizu.RExecutor, which
  pebble has no counterpart of): an R call writes R's clock and quits, the
  next one, queued behind it, returns R's clock as it starts; against it, a
  fresh RExecutor(1) from its construction to its first result.
- The round trip of a trivial task, submit(f).result(), with and without a
  deadline (60 s, never reached), in alternating batches on one pool: where
  the scheduler puts a pool's worker (on the client's CPU or not) can move a
  pool's round trip tenfold, so both rows share one worker.

Every time is CLOCK_MONOTONIC, which all processes of the machine share.
Report only: each case is checked to do what it measures (every task
timed out, every worker died), never its numbers. The machine's load (uptime) comes first,
as it moves every number here.

While it runs, it names on stderr each row and pool as it measures them;
--json also writes every sample to a file.

Usage: python benchmarks/control-bench.py [--repeats N] [--method METHOD] [--r] [--quick] [--json PATH [--note TEXT]]
"""

import concurrent.futures as cf
import multiprocessing
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

import pebble

import mizu
import record

APART = 0.25   # seconds between deaths in the second replacement row
DEADLINE = 0.1


def trivial(x):
    return x


def _note_time(path):
    with open(path, "w") as file:
        file.write(repr(time.monotonic()))


def note_start_then_sleep(path, seconds):
    """Write the time this task started to path, then sleep."""
    _note_time(path)
    time.sleep(seconds)


def note_time_then_exit(path):
    """Write the time to path, then end this worker."""
    _note_time(path)
    os._exit(3)


def started_at():
    return time.monotonic()


def _read_time(path):
    with open(path) as file:
        return float(file.read())


class Mizu:
    """mizu's pool, its dead workers replaced; a deadline per call through options()."""

    name = "mizu"

    def __init__(self, workers, context):
        self.ex = mizu.ProcessPoolExecutor(workers, mp_context=context, worker_death="replace")
        self.views = {None: self.ex}

    def submit(self, fn, *args, timeout=None):
        view = self.views.get(timeout)
        if view is None:
            view = self.views[timeout] = self.ex.options(task_timeout=timeout)
        return view.submit(fn, *args)

    def close(self):
        self.ex.shutdown(wait=True, cancel_futures=True)


class Pebble:
    """pebble's ProcessPool: schedule(timeout=...); a dead worker is replaced."""

    name = "pebble"

    def __init__(self, workers, context):
        self.pool = pebble.ProcessPool(max_workers=workers, context=context)

    def submit(self, fn, *args, timeout=None):
        return self.pool.schedule(fn, args=args, timeout=timeout)

    def close(self):
        self.pool.stop()
        self.pool.join()


KINDS = (Mizu, Pebble)


def deadline_lateness(kind, context, tasks, tmp):
    """Seconds each of `tasks` overrunning tasks failed after its deadline."""
    pool = kind(2, context)
    try:
        pool.submit(trivial, 0).result()
        failed = {}
        futures = []
        for i in range(tasks):
            future = pool.submit(note_start_then_sleep, os.path.join(tmp, f"{kind.name}-{i}"), 10, timeout=DEADLINE)
            future.add_done_callback(lambda f, i=i: failed.setdefault(i, time.monotonic()))
            futures.append(future)
        cf.wait(futures)
        # pebble's is concurrent.futures', which before Python 3.11 is not the builtin.
        assert all(isinstance(f.exception(), (TimeoutError, cf.TimeoutError)) for f in futures), \
            "a task did not time out"
        return [failed[i] - (_read_time(os.path.join(tmp, f"{kind.name}-{i}")) + DEADLINE) for i in range(tasks)]
    finally:
        pool.close()


def replacement_first_task(kind, context, repeats, tmp, apart):
    """Seconds from a worker's os._exit to the start of the next task, on its replacement; deaths `apart` s apart."""
    pool = kind(1, context)
    try:
        pool.submit(trivial, 0).result()
        samples = []
        for i in range(repeats):
            time.sleep(apart)
            path = os.path.join(tmp, f"{kind.name}-death-{apart}-{i}")
            dying = pool.submit(note_time_then_exit, path)
            after = pool.submit(started_at)
            start = after.result()
            assert dying.exception() is not None, "the worker did not die"
            samples.append(start - _read_time(path))
        return samples
    finally:
        pool.close()


# R's clock, in seconds, written to a file before the call quits; and as the next call starts.
R_NOTE_TIME_THEN_QUIT = 'function(path) { cat(format(as.numeric(Sys.time()), digits = 17), file = path); quit(status = 3) }'
R_STARTED_AT = "function() as.numeric(Sys.time())"


def r_replacement_first_call(repeats, tmp, apart):
    """Seconds from an R worker's quit() to the start of the next call, on its replacement; deaths `apart` s apart."""
    pool = mizu.RExecutor(1, worker_death="replace")
    try:
        pool.submit(R_STARTED_AT).result()
        samples = []
        for i in range(repeats):
            time.sleep(apart)
            path = os.path.join(tmp, f"r-death-{apart}-{i}")
            dying = pool.submit(R_NOTE_TIME_THEN_QUIT, path)
            start = pool.submit(R_STARTED_AT).result()
            assert dying.exception() is not None, "the R worker did not die"
            samples.append(start - _read_time(path))
        return samples
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def r_first_result(repeats):
    """Seconds from constructing mizu.RExecutor(1) to its first result."""
    samples = []
    for _ in range(repeats):
        start = time.monotonic()
        with mizu.RExecutor(1) as pool:
            pool.submit(R_STARTED_AT).result()
            samples.append(time.monotonic() - start)
    return samples


def stdlib_first_result(context, repeats):
    """Seconds from constructing concurrent.futures.ProcessPoolExecutor(1) to its first result."""
    samples = []
    for _ in range(repeats):
        start = time.monotonic()
        with cf.ProcessPoolExecutor(1, mp_context=context) as ex:
            ex.submit(trivial, 0).result()
            samples.append(time.monotonic() - start)
    return samples


def round_trips(kind, context, batches, n):
    """Seconds per submit(trivial).result() in each batch, without and with a deadline, batches alternating."""
    pool = kind(1, context)
    try:
        samples = {None: [], 60: []}
        for timeout in samples:
            for i in range(200):
                pool.submit(trivial, i, timeout=timeout).result()
        for _ in range(batches):
            for timeout in samples:
                start = time.perf_counter()
                for i in range(n):
                    pool.submit(trivial, i, timeout=timeout).result()
                samples[timeout].append((time.perf_counter() - start) / n)
        return samples[None], samples[60]
    finally:
        pool.close()


def _ms(seconds):
    return f"{seconds * 1e3:.1f}"


def _print_replacements(rows, name, row_names):
    """One line for pool `name`: median (min, max) of each of its rows among row_names."""
    line = "".join(f"{_ms(statistics.median(samples)):>8} ({_ms(min(samples))}, {_ms(max(samples))})"
                   for row in row_names if (samples := rows.get((row, name))) is not None)
    print(f"  {name:<8}{line}")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    parser = record.parser(__doc__.splitlines()[0], 20, "deaths, and stdlib pools started (default 20)",
                           "fewer tasks and runs, for a smoke test")
    # A pool with a control that replaces workers refuses fork, and takes forkserver in place of a default fork.
    default = "forkserver" if multiprocessing.get_start_method() == "fork" else multiprocessing.get_start_method()
    parser.add_argument("--r", action="store_true", help="also the replacement row for an R pool")
    parser.add_argument("--method", default=default, choices=[m for m in multiprocessing.get_all_start_methods()
                                                              if m != "fork"],
                        help=f"the start method of every pool (default {default})")
    args = parser.parse_args(argv)
    context = multiprocessing.get_context(args.method)
    repeats, tasks, batches, n = (3, 10, 3, 200) if args.quick else (args.repeats, 100, 7, 2000)
    uptime = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    print(f"control of running work, {time.strftime('%Y-%m-%d')}, Python {platform.python_version()}, "
          f"{platform.machine()}, {os.cpu_count()} CPUs, start method {args.method}, pebble {pebble.__version__}")
    print(f"uptime: {uptime}")
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        print(f"{tasks} tasks past a {DEADLINE * 1e3:.0f} ms deadline on 2 workers: the failure's lateness (ms), "
              f"median (worst)")
        for kind in KINDS:
            record.progress(f"deadline lateness: {kind.name}")
            late = rows[("lateness", kind.name)] = deadline_lateness(kind, context, tasks, tmp)
            print(f"  {kind.name:<8}{_ms(statistics.median(late)):>8} ({_ms(max(late))})")
        print(f"a worker's os._exit to the next task's start on its replacement (ms), median of {repeats} (min, max), "
              f"deaths back to back and {APART} s apart; stdlib: a fresh ProcessPoolExecutor(1) from its construction "
              f"to its first result")
        for kind in KINDS:
            for row, apart in (("replacement", 0.0), ("replacement, deaths apart", APART)):
                record.progress(f"{row}: {kind.name}")
                rows[(row, kind.name)] = replacement_first_task(kind, context, repeats, tmp, apart)
        record.progress("first result of a fresh ProcessPoolExecutor(1)")
        rows[("replacement", "stdlib")] = stdlib_first_result(context, repeats)
        for name in (*(kind.name for kind in KINDS), "stdlib"):
            _print_replacements(rows, name, ("replacement", "replacement, deaths apart"))
        if args.r:
            print(f"an R worker's quit() to the next call's start on its replacement (ms), median of {repeats} (min, "
                  f"max), deaths back to back and {APART} s apart; a fresh RExecutor(1) from its construction to its "
                  f"first result")
            for row, apart in (("R replacement", 0.0), ("R replacement, deaths apart", APART)):
                record.progress(row)
                rows[(row, "mizu")] = r_replacement_first_call(repeats, tmp, apart)
            record.progress("first result of a fresh RExecutor(1)")
            rows[("R replacement", "fresh")] = r_first_result(repeats)
            for name in ("mizu", "fresh"):
                _print_replacements(rows, name, ("R replacement", "R replacement, deaths apart"))
    print(f"round trip of a trivial task (us, median of {batches} batches of {n}): without a deadline, with one, "
          f"with/without")
    for kind in KINDS:
        record.progress(f"round trip with and without a deadline: {kind.name}")
        rows[("round trip", kind.name)], rows[("round trip with task_timeout", kind.name)] = round_trips(
            kind, context, batches, n)
        without, with_timeout = (statistics.median(rows[(row, kind.name)])
                                 for row in ("round trip", "round trip with task_timeout"))
        print(f"  {kind.name:<8}{without * 1e6:>8.1f}{with_timeout * 1e6:>8.1f}{with_timeout / without:>8.2f}")
    if args.json:
        record.write(args.json, "control-bench", argv, args, uptime=uptime, method=args.method, unit="ms", rows=[
            {"row": row, "pool": pool, "samples": [t * 1e3 for t in samples]} for (row, pool), samples in rows.items()])
    return 0


if __name__ == "__main__":
    sys.exit(main())
