"""How fast pymizu's pool and the stdlib's notice a dead process, side by side.

Two measurements, for mizu and concurrent.futures.ProcessPoolExecutor in turn:

- Worker death: a pool of 2 workers, one busy in a long task, the other in
  another, 6 more tasks pending. The busy worker gets SIGKILL; the time runs
  until every one of the 8 futures is done with BrokenProcessPool. The
  client waits in one of three ways: calling exception() on each future
  (the caller collects results itself), concurrent.futures.wait() (the
  pool's manager thread collects) or nobody waiting (done() polled every
  0.5 ms).
- Client death: a client process with 2 workers, idle or busy in long
  tasks, prints its workers' pids and gets SIGKILL; the time runs until
  every worker has exited (their pidfds become readable). Workers still
  running after --patience seconds are reported so and killed.

Medians over --repeats runs. Linux only (pidfd_open, a child subreaper to
collect the orphaned workers).

Usage: python benchmarks/mizu-faults-bench.py [--repeats N] [--patience SECONDS] [--quick]
"""

import argparse
import concurrent.futures as cf
import ctypes
import multiprocessing
import os
import platform
import select
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures.process import BrokenProcessPool

import mizu

KINDS = {"mizu": mizu.ProcessPoolExecutor, "ProcessPool": cf.ProcessPoolExecutor}
STYLES = ("exception() on each", "wait()", "nobody waiting")


def trivial(x):
    return x


def announce_then_sleep(path, seconds):
    with open(path + ".part", "w") as f:
        f.write(str(os.getpid()))
    os.replace(path + ".part", path)
    time.sleep(seconds)


def _pid_in(path):
    while not os.path.exists(path):
        time.sleep(0.001)
    with open(path) as f:
        return int(f.read())


def pid_after(seconds):
    time.sleep(seconds)
    return os.getpid()


def worker_death(make, style, settle, tmp):
    """Seconds from SIGKILL of a busy worker until all 8 futures are done; and how many got BrokenProcessPool.

    The kill comes settle seconds after the busy task started.
    """
    with make(2) as ex:
        list(ex.map(trivial, range(8)))
        marker = os.path.join(tmp, f"busy-{time.monotonic_ns()}")
        futures = [ex.submit(announce_then_sleep, marker, 60), ex.submit(time.sleep, 60)]
        futures += [ex.submit(trivial, i) for i in range(6)]
        pid = _pid_in(marker)
        time.sleep(settle)
        start = time.perf_counter()
        os.kill(pid, signal.SIGKILL)
        if style == STYLES[0]:
            for future in futures:
                future.exception()
        elif style == STYLES[1]:
            cf.wait(futures)
        else:
            while not all(future.done() for future in futures):
                time.sleep(0.0005)
        elapsed = time.perf_counter() - start
    return elapsed, sum(isinstance(future.exception(), BrokenProcessPool) for future in futures)


def client(kind, method, state):
    """The client process of a client-death run: start 2 workers, print their pids, wait to be killed."""
    ex = KINDS[kind](2, mp_context=multiprocessing.get_context(method))
    # Both workers have run a task: they are started and waiting for the next.
    seen = set()
    while len(seen) < 2:
        seen.update(future.result() for future in [ex.submit(pid_after, 0.2) for _ in range(2)])
    if state == "busy":
        for _ in range(2):
            ex.submit(time.sleep, 3600)
    time.sleep(0.2)
    print(" ".join(map(str, ex._processes)), flush=True)
    time.sleep(3600)


def client_death(kind, method, state, patience):
    """Seconds from SIGKILL of the client until its workers have all exited, or None after patience seconds."""
    proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--client", kind, method, state],
                            stdout=subprocess.PIPE, text=True)
    pids = [int(pid) for pid in proc.stdout.readline().split()]
    fds = [os.pidfd_open(pid) for pid in pids]
    try:
        start = time.perf_counter()
        proc.kill()
        proc.wait()
        waiting, elapsed = set(fds), None
        deadline = start + patience
        while waiting and time.perf_counter() < deadline:
            ready, _, _ = select.select(list(waiting), [], [], max(0.0, deadline - time.perf_counter()))
            waiting -= set(ready)
        if not waiting:
            elapsed = time.perf_counter() - start
        for fd in waiting:
            signal.pidfd_send_signal(fd, signal.SIGKILL)
    finally:
        for fd in fds:
            os.close(fd)
        proc.stdout.close()
    for pid in pids:
        os.waitpid(pid, 0)    # orphans of the client, so children of this process now
    _reap_orphans()
    return elapsed


def _become_subreaper():
    """Orphaned workers of a killed client become this process's children, to be reaped here."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(36, 1, 0, 0, 0) != 0:    # PR_SET_CHILD_SUBREAPER
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


def _reap_orphans():
    """Reap other orphans of killed clients that have exited (a client's resource tracker)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _ms(seconds):
    return "never" if seconds is None else f"{seconds * 1e3:.1f}"


def _median(samples):
    """The median of an odd number of samples, where None (never) ranks last."""
    return sorted(samples, key=lambda s: (s is None, s or 0.0))[len(samples) // 2]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20, help="runs of each worker-death row (default 20)")
    parser.add_argument("--patience", type=float, default=5.0,
                        help="seconds to wait for the workers of a killed client (default 5)")
    parser.add_argument("--quick", action="store_true", help="3 runs of each row, for a smoke test")
    parser.add_argument("--client", nargs=3, metavar=("KIND", "METHOD", "STATE"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.client:
        client(*args.client)
        return 0
    repeats = 3 if args.quick else args.repeats
    _become_subreaper()
    print(f"fault detection, {time.strftime('%Y-%m-%d')}, Python {platform.python_version()}, "
          f"{platform.machine()}, {os.cpu_count()} CPUs, default start method "
          f"{multiprocessing.get_start_method()}, median of {repeats} runs (min, max)")
    print("SIGKILL of a busy worker until all 8 futures are done (ms), the kill 50 ms or 300 ms after the "
          "busy task started:")
    with tempfile.TemporaryDirectory() as tmp:
        for style in STYLES:
            for settle in (0.05, 0.3):
                cells = []
                for kind, make in KINDS.items():
                    runs = [worker_death(make, style, settle, tmp) for _ in range(repeats)]
                    times = [elapsed for elapsed, _ in runs]
                    broken = min(count for _, count in runs)
                    cells.append(f"{kind} {_ms(statistics.median(times)):>6} ({_ms(min(times))}, {_ms(max(times))})"
                                 + ("" if broken == 8 else f", only {broken} of 8 BrokenProcessPool"))
                row = f"{style}, {settle * 1e3:.0f} ms"
                print(f"  {row:<30}" + "   ".join(f"{cell:<34}" for cell in cells))
    client_repeats = max(3, repeats // 4) | 1
    print(f"SIGKILL of the client until both its workers have exited (ms, median of {client_repeats}; "
          f"never = still running after {args.patience:g} s):")
    for method in ("fork", "spawn"):
        for state in ("idle", "busy"):
            cells = []
            for kind in KINDS:
                times = [client_death(kind, method, state, args.patience) for _ in range(client_repeats)]
                cells.append(f"{kind} {_ms(_median(times)):>7}")
            print(f"  {method + ', ' + state + ' workers':<30}" + "   ".join(f"{cell:<34}" for cell in cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
