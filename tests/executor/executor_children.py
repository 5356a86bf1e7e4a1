"""The child programs of the Executor's tests: tasks, faults in workers, and the client programs of the fault
tests."""

import os
import signal
import threading
import time

from children import (announce, announce_then_nap, block_until_interrupted, double, end_tasks_given_an_array, nap,
                      report, wait_for_file)


_left_running = []


def sum_in_a_pool_left_running(n):
    """sum(range(n)) by a mizu pool of this process, which is left running for the process's end to deal with."""
    import mizu

    pool = mizu.ProcessPoolExecutor(2)
    _left_running.append(pool)
    return sum(pool.map(abs, range(n)))


def raise_timeout(message):
    raise TimeoutError(message)


def raise_runtime(arg):
    raise RuntimeError(arg)


def exit_with(code):
    raise SystemExit(code)


def loaded(module):
    """Whether this process has imported module."""
    import sys

    return module in sys.modules


def unpicklable_result():
    return lambda: None


def fail_to_initialize(how="plain"):
    if how == "group":
        raise ExceptionGroup("two setups failed", [ValueError("no config"), KeyError("no key")])
    if how == "frames":
        raise ValueError('bad config:\n  File "site.cfg", line 3\nunexpected key')
    raise ValueError("initializer failed on purpose")


def parent_maps(fragment):
    """Whether this process's parent maps a file whose path contains fragment (Linux)."""
    with open(f"/proc/{os.getppid()}/maps") as maps:
        return any(fragment in line for line in maps)


def first_starts_others_wait(folder):
    """An initializer: the first worker returns at once, every other waits until folder/gate exists."""
    try:
        os.close(os.open(os.path.join(folder, "first"), os.O_CREAT | os.O_EXCL))
        return
    except FileExistsError:
        pass
    deadline = time.monotonic() + 120
    while not os.path.exists(os.path.join(folder, "gate")) and time.monotonic() < deadline:
        time.sleep(0.01)


class NotPicklable:
    def __reduce__(self):
        raise TypeError("NotPicklable refuses to be pickled")


class SetsEventWhenCollected:
    """Sets a manager Event when garbage-collected, wherever that happens."""

    def __init__(self, event):
        self.event = event

    def __del__(self):
        self.event.set()


class Dummy:
    """An object a test can hold a weak reference to."""

    def __init__(self, value):
        self.value = value


def record(path, value, seconds=0.0):
    """After seconds, append value as a line of path."""
    time.sleep(seconds)
    with open(path, "a") as file:
        file.write(f"{value}\n")
    return value


# -- faults in workers -------------------------------------------------------------------------------------------


def announce_then_bytes(path, nbytes):
    announce(path)
    return b"r" * nbytes


def announce_then_wait(path, gate, seconds=120):
    """Announce to path, then wait for the gate file; return this worker's pid."""
    announce(path)
    return wait_for_file(gate, seconds)


class SlowToPickle:
    """Pickling it lets other threads run for a while, as a large argument's does; `pickling` is set as it begins."""

    pickling = None   # a threading.Event a test sets here

    def __reduce__(self):
        if SlowToPickle.pickling is not None:
            SlowToPickle.pickling.set()
        time.sleep(0.3)
        return (SlowToPickle, ())


def wait_in_initializer_once_armed(armed, path, gate):
    """An initializer: once the file armed exists, announce to path, then wait for the gate file."""
    if os.path.exists(armed):
        announce(path)
        wait_for_file(gate)


def announce_then_die(path, seconds):
    announce(path)
    time.sleep(seconds)
    os._exit(3)


def _crash_quietly():
    # A worker forked from pytest inherits its faulthandler, which would
    # print a "Fatal Python error" dump for a crash the test means to cause.
    import faulthandler

    faulthandler.disable()


def segfault(how):
    _crash_quietly()
    if how == "null pointer":
        import ctypes

        ctypes.string_at(0)
    else:
        os.kill(os.getpid(), signal.SIGSEGV)


def die_at(x, fatal=7):
    """x, unless x is fatal: then the worker exits with code 3."""
    if x == fatal:
        os._exit(3)
    return x


def nap_then_die_at(x, fatal=7, seconds=0.005):
    """x after a nap of seconds, unless x is fatal: then the worker exits with code 3 at once."""
    die_at(x, fatal)
    time.sleep(seconds)
    return x


def die_once_file(path, code=3):
    """Exit with code once path exists (a gate the test opens)."""
    wait_for_file(path)
    os._exit(code)


def apply(fn, *args):
    return fn(*args)


def raise_keyboard_interrupt():
    raise KeyboardInterrupt


def half_readable_array(nbytes):
    """A uint8 array of nbytes whose second half cannot be read: copying it segfaults halfway through."""
    import ctypes
    import mmap

    import numpy as np

    _crash_quietly()
    arr = np.frombuffer(mmap.mmap(-1, nbytes), np.uint8)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    if libc.mprotect(arr.ctypes.data + nbytes // 2, nbytes // 2, 0) != 0:   # PROT_NONE
        raise OSError(ctypes.get_errno(), "mprotect")
    return arr


def refuse_unpickling(what):
    raise ValueError(f"{what} refuses to be unpickled")


class ErrorAtUnpickle:
    """Pickles, but raises where it is unpickled."""

    def __reduce__(self):
        return refuse_unpickling, (type(self).__name__,)


class ExitAtUnpickle:
    """Pickles, but raises SystemExit where it is unpickled."""

    def __reduce__(self):
        return exit_with, (1,)


_interrupted = set()


def interrupt_first_unpickling(key, value):
    """value, except the first time key is unpickled in this process's main thread: then KeyboardInterrupt, as a
    Ctrl-C then (only the main thread takes signals)."""
    if key not in _interrupted and threading.current_thread() is threading.main_thread():
        _interrupted.add(key)
        raise KeyboardInterrupt
    return value


class InterruptedAtUnpickle:
    """A value whose first unpickling in a process is interrupted by Ctrl-C."""

    def __init__(self, key, value):
        self.key, self.value = key, value

    def __reduce__(self):
        return interrupt_first_unpickling, (self.key, self.value)


class MarksWhenPickled:
    """Creates the file at path when it is pickled (a worker sends it back), and cannot be unpickled."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        open(self.path, "w").close()
        return refuse_unpickling, (type(self).__name__,)


def instance(cls, *args):
    return cls(*args)


class NeedsTwo(Exception):
    """An exception whose constructor pickle cannot call again: args holds only the first argument."""

    def __init__(self, first, second):
        super().__init__(first)
        self.second = second


class KeywordOnly(Exception):
    """An exception whose constructor takes a required keyword-only argument."""

    def __init__(self, *, code):
        super().__init__(f"code {code}")
        self.code = code


def raise_unpicklable():
    raise RuntimeError(lambda: None)


def raise_needs_two():
    raise NeedsTwo("first", "second")


def raise_keyword_only():
    raise KeywordOnly(code=3)


def ignore_sigterm_then_nap(path, seconds):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    return announce_then_nap(path, seconds)


# -- control of running work: deadlines, stopped tasks, workers replaced ----------------------------------------


def tally_then_nap(path, value, seconds):
    """Append value and this worker's pid as a line of path, then sleep: the lines count each start of the task."""
    with open(path, "a") as file:
        file.write(f"{value} {os.getpid()}\n")
    time.sleep(seconds)
    return value


def announce_then_sleep_in_c(path, seconds):
    """Announce, then sleep in libc's sleep(): no Python code runs until it returns."""
    import ctypes

    announce(path)
    ctypes.CDLL(None).sleep(seconds)
    return seconds


def announce_then_end(path, how):
    """Announce, wait for the file path + ".end", then end this worker: os._exit(3) ("exit"), a null pointer read
    ("segfault"), or wait for the test's SIGKILL ("killed")."""
    announce(path)
    wait_for_file(path + ".end")
    if how == "exit":
        os._exit(3)
    if how == "segfault":
        segfault("null pointer")
    time.sleep(120)


def answer_then_exit_soon(path, gate, value):
    """Announce, wait for the file gate, then return value; this worker exits 0.05 s later, running no task."""
    announce(path)
    wait_for_file(gate)
    threading.Timer(0.05, os._exit, (3,)).start()
    return value


_hoard = []


def hoard(nbytes):
    """Keep nbytes of written memory in a module global, so this worker stays that much larger; return its pid."""
    _hoard.append(b"\x01" * nbytes)
    return os.getpid()


def hoard_array(nbytes):
    """As hoard, in a numpy array, whose data a worker takes from its arena."""
    import numpy as np

    _hoard.append(np.ones(nbytes, dtype=np.uint8))
    return os.getpid()


def hoard_value(value):
    """Keep value in a module global; return this worker's pid."""
    _hoard.append(value)
    return os.getpid()


def ones(nbytes):
    """A new numpy array of nbytes ones."""
    import numpy as np

    return np.ones(nbytes, dtype=np.uint8)


# -- clients of the fault tests: run by `python -c`, they report on stdout ---------------------------------------


def mark_and_sleep(directory, data, seconds):
    """Leave a file named by this worker's pid in directory, so the test sees the task running; then sleep."""
    open(os.path.join(directory, str(os.getpid())), "w").close()
    time.sleep(seconds)
    return len(data)


def _executor(kind, method=None):
    import concurrent.futures
    import multiprocessing

    import mizu

    if kind == "mizu-replacing":
        # A pool that replaces dead workers (and so has an exit bell's thread), on forkserver unless told.
        return mizu.ProcessPoolExecutor(2, mp_context=multiprocessing.get_context(method or "forkserver"),
                                        worker_death="replace")
    cls = mizu.ProcessPoolExecutor if kind == "mizu" else concurrent.futures.ProcessPoolExecutor
    return cls(2, mp_context=multiprocessing.get_context(method))


def _outcome(call):
    """["ok", value] or [exception type, message]."""
    try:
        return ["ok", call()]
    except BaseException as exc:
        return [type(exc).__name__, str(exc)]


def client_with_busy_pool(method, directory):
    """Keep both workers of a mizu pool busy and four tasks queued, each with a shared array; wait to be killed."""
    import mizu

    ex = _executor("mizu", method)
    data = mizu.zeros(1 << 20)
    for _ in range(6):
        ex.submit(mark_and_sleep, directory, data, 600)
    while len(os.listdir(directory)) < 2:
        time.sleep(0.01)
    report(workers=sorted(ex._processes))
    while True:
        signal.pause()


def client_with_a_spare():
    """Have a pool that replaces dead workers lose one, so that it keeps a spare; report its processes; wait to be
    killed."""
    import multiprocessing

    ex = _executor("mizu-replacing")
    ex.submit(os._exit, 3).exception()
    workers = sorted(ex._processes)
    while True:
        spares = [p.pid for p in multiprocessing.active_children() if p.pid not in workers]
        if spares:
            break
        time.sleep(0.01)
    report(workers=workers, spares=spares)
    while True:
        signal.pause()


def _after_a_nap(seconds):
    time.sleep(seconds)


class SlowToUnpickle:
    """An argument whose unpickling takes `seconds`: a worker that receives it starts that much later."""

    def __init__(self, seconds):
        self.seconds = seconds

    def __reduce__(self):
        return _after_a_nap, (self.seconds,)


def client_killed_as_its_worker_starts(seconds):
    """Start a spawn worker that takes `seconds` to unpickle its initializer's argument; report it, then die by
    SIGKILL before it has."""
    import multiprocessing

    import mizu

    ex = mizu.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"), initializer=_after_a_nap,
                                  initargs=(SlowToUnpickle(seconds),))
    ex.submit(double, 1)
    while not (started := multiprocessing.active_children()):   # listed once its arguments are written
        time.sleep(0.01)
    report(workers=[p.pid for p in started])
    os.kill(os.getpid(), signal.SIGKILL)


def client_mapping_sleeps(workers, tasks, seconds):
    """A map of sleeps in a with block, as a user writes it; report the workers, then "mapping".

    A KeyboardInterrupt that ends the map prints "interrupted" and goes on
    to the with block's exit.
    """
    import mizu

    with mizu.ProcessPoolExecutor(workers) as ex:
        ex.submit(double, 0).result()   # every worker is up (fork starts them all at once)
        report(workers=sorted(ex._processes))
        print("mapping", flush=True)
        try:
            for _ in ex.map(time.sleep, [seconds] * tasks):
                pass
        except KeyboardInterrupt:
            print("interrupted", flush=True)
            raise


def announce_then_wait_for_file(gate):
    """Create gate.<pid> (this worker runs a task), then wait_for_file(gate)."""
    with open(f"{gate}.{os.getpid()}", "w"):
        pass
    return wait_for_file(gate)


def client_interrupted(kind, where, gate):
    """Block in result(), map or shutdown(wait=True) on tasks that wait for gate, until Ctrl-C; then exit normally.

    Each task announces its worker (announce_then_wait_for_file).
    """
    block_until_interrupted(_executor(kind), announce_then_wait_for_file, where, gate)


def client_forks(kind, how, gate):
    """Fork (os.fork or a multiprocessing fork child) while the pool is busy; report what parent and child saw."""
    import json
    import multiprocessing

    ex = _executor(kind)
    blocked = [ex.submit(wait_for_file, gate) for _ in range(3)]
    quick = [ex.submit(double, i) for i in range(300)]
    # A future cancelled while it waits is among those the child lets go of.
    cancelled = quick.pop().cancel()
    reader, writer = os.pipe()
    if how == "os.fork":
        pid = os.fork()
        if pid == 0:
            os.close(reader)
            _forked_child(kind, ex, blocked, writer)
            if kind == "stdlib":
                # Its copy of the parent's pool can deadlock its exit: the
                # pool's weakref callback takes a lock a parent thread held
                # at the fork (seen on 3.10).
                os._exit(0)
            # multiprocessing's exit handler would join the parent's children
            # (its workers, with fork), which fails in any os.fork child.
            multiprocessing.process._children.clear()
            raise SystemExit(0)   # a normal exit: atexit handlers run
        os.close(writer)
        with os.fdopen(reader) as pipe:
            seen = pipe.read()
        exit_code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    else:
        child = multiprocessing.get_context("fork").Process(target=_forked_child, args=(kind, ex, blocked, writer))
        child.start()
        os.close(writer)
        with os.fdopen(reader) as pipe:
            seen = pipe.read()
        child.join()
        exit_code = child.exitcode
    open(gate, "w").close()
    values = [f.result(timeout=60) for f in quick]
    pids = [f.result(timeout=60) for f in blocked]
    ex.shutdown()
    report(child=json.loads(seen), child_exit=exit_code, quick=values == [2 * i for i in range(299)],
           blocked=all(isinstance(p, int) for p in pids), cancelled=cancelled)


def _forked_child(kind, ex, blocked, writer):
    import json

    seen = {}
    if kind != "stdlib":
        seen["submit"] = _outcome(lambda: ex.submit(double, 1).result(timeout=30))
        seen["result"] = _outcome(lambda: blocked[0].result(timeout=30))
        seen["map"] = _outcome(lambda: list(ex.map(double, range(3), timeout=30)))
        seen["processes"] = _outcome(lambda: len(ex._processes))
        seen["shutdown"] = _outcome(ex.shutdown)
    # Not with the parent's forkserver (the default from 3.14): a forked
    # child cannot use it (multiprocessing's ensure_running raises
    # ChildProcessError there), whichever pool asks.
    import multiprocessing

    method = "spawn" if kind == "mizu-replacing" or multiprocessing.get_start_method() == "forkserver" else None
    with _executor(kind, method) as own:
        seen["own pool"] = list(own.map(double, range(10)))
    os.write(writer, json.dumps(seen).encode())
    os.close(writer)


_kept = None


def client_exits_with_work_pending(kind, how, path):
    """Leave work pending at exit: an executor collected, kept in a global, or fed by daemon threads."""
    import itertools
    import threading

    global _kept
    if how == "collected":
        ex = _executor(kind)
        for i in range(8):
            ex.submit(record, path, i, 0.1)
        del ex
    elif how == "global":
        _kept = _executor(kind)
        for i in range(8):
            _kept.submit(record, path, i, 0.1)
    else:
        ex = _executor(kind)

        def submit_until_refused(thread):
            # Thread 0 leaves its futures; thread 1 waits on each, collecting results.
            for i in itertools.count():
                value = f"{thread}-{i}"
                try:
                    future = ex.submit(record, path, value)
                except RuntimeError:
                    return
                record(path + ".submitted", value)
                if thread:
                    future.result()
                time.sleep(0.002)

        for thread in range(2):
            threading.Thread(target=submit_until_refused, args=(thread,), daemon=True).start()
        time.sleep(0.5)
    print("leaving", flush=True)


def shared_empty(nbytes):
    """A new uninitialized array of nbytes in this worker's arena."""
    import mizu

    return mizu.empty(nbytes, dtype="uint8")


def client_short_of_arena():
    """Ask for more than MIZU_ARENA_LIMIT: for an array, a task's argument, a task's result."""
    import numpy as np

    import mizu

    seen = {"array": _outcome(lambda: mizu.zeros(64 << 20, dtype="uint8").nbytes)}
    with _executor("mizu") as ex:
        seen["argument"] = _outcome(lambda: ex.submit(len, np.ones(64 << 20, dtype="uint8")).result(timeout=60))
        seen["result"] = _outcome(lambda: len(ex.submit(shared_empty, 64 << 20).result(timeout=60)))
        seen["after"] = _outcome(lambda: ex.submit(double, 21).result(timeout=60))
    report(**seen)


def announce_then_nap_beside(path, x, seconds):
    """announce_then_nap, holding an array given as argument."""
    return announce_then_nap(path, seconds) + x[:1].sum()


def client_ending_tasks_given_an_array(how, directory, rounds):
    """end_tasks_given_an_array in a pool that replaces the workers it ends."""
    import multiprocessing

    import numpy as np

    import mizu

    ex = mizu.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("forkserver"), worker_death="replace")
    end_tasks_given_an_array(ex, announce_then_nap_beside, np.sum, how, directory, rounds, 0.1)


def client_short_of_processes(limit, workers, uid):
    """As user uid (unless None), with RLIMIT_NPROC at limit: a fork pool of `workers` given a 0.2 s sleep for each.

    Reports the first task's outcome, the outcomes of the others, a later
    submit's, the warnings, and the workers still alive once it is shut down.
    """
    import concurrent.futures
    import json  # noqa: F401 (for report)
    import multiprocessing
    import resource
    import traceback
    import warnings

    import mizu

    fork = multiprocessing.get_context("fork")
    # Everything a task needs is imported before the user changes: the
    # interpreter's files may be the current user's alone. So is what a
    # worker that cannot start its thread needs to send its traceback
    # (linecache imports tokenize to read a source line).
    with mizu.ProcessPoolExecutor(1, mp_context=fork) as ex:
        ex.submit(nap, 0).result(timeout=60)
    try:
        raise OSError("a traceback formatted once")
    except OSError as exc:
        traceback.format_exception(exc)
    # Its threads are joined, but the system may count one a moment longer,
    # and fork() warns (3.12+) of the threads the system counts.
    deadline = time.monotonic() + 10
    while len(os.listdir("/proc/self/task")) > 1 and time.monotonic() < deadline:
        time.sleep(0.001)
    if uid is not None:
        os.setgid(uid)
        os.setuid(uid)
    resource.setrlimit(resource.RLIMIT_NPROC, (limit, limit))
    seen = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ex = mizu.ProcessPoolExecutor(workers, mp_context=fork)
        seen["first"] = _outcome(lambda: ex.submit(nap, 0.2).result(timeout=120))
        futures = [ex.submit(nap, 0.2) for _ in range(workers - 1)] if seen["first"][0] == "ok" else []
        concurrent.futures.wait(futures, timeout=120)
        seen["results"] = sorted({_outcome(lambda: f.result(timeout=0))[0] for f in futures})
        seen["later"] = _outcome(lambda: ex.submit(nap, 0).result(timeout=60))
        ex.shutdown()
    seen["warnings"] = [f"{w.category.__name__}: {w.message}" for w in caught]
    seen["alive"] = [p.pid for p in multiprocessing.active_children()]
    report(**seen)


def client_in_memory_cgroup(procs):
    """Join the memory cgroup whose cgroup.procs file is procs; then ask for more shared memory than it allows."""
    with open(procs, "w") as file:
        file.write(str(os.getpid()))
    import mizu

    seen = {"array": _outcome(lambda: mizu.zeros(512 << 20, dtype="uint8").nbytes)}
    with _executor("mizu") as ex:
        seen["small"] = _outcome(lambda: list(ex.map(double, range(100))) == [2 * i for i in range(100)])
        seen["result"] = _outcome(lambda: len(ex.submit(shared_empty, 512 << 20).result(timeout=60)))
        seen["after"] = _outcome(lambda: ex.submit(double, 21).result(timeout=60))
    report(**seen)


class ExitsWhenUnpickled:
    """Unpickling it ends the process that does, with exit code 3: a worker that dies reading its task."""

    def __reduce__(self):
        return os._exit, (3,)


def draws(x, scale=1):
    """x, then draws from the task's random streams: Python's random, and mizu.rng() twice (one Generator)."""
    import random

    import mizu

    return x, scale * random.random(), mizu.rng().random(), int(mizu.rng().integers(1 << 30))


def random_state_digest():
    """A digest of this worker's random module's state."""
    import hashlib
    import random

    return hashlib.sha256(repr(random.getstate()).encode()).hexdigest()


def rng_outside_a_seeded_task():
    """What mizu.rng() raises in a task without a seed: its type's name and message."""
    import mizu

    try:
        mizu.rng()
    except Exception as exc:
        return type(exc).__name__, str(exc)
    return None
