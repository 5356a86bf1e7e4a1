"""Entry points of the child processes the tests start.

They live in a module of their own, importable by name, so that children
started with spawn or forkserver can unpickle them.
"""

import dataclasses
import os
import signal
import time


def push(ring, payload):
    ring.push(payload, timeout=60)


def hold(seg, ready):
    ready.set()
    signal.pause()


def serve(conn):
    """Attach to rings and run push/pop commands sent over conn."""
    ring = None
    while True:
        cmd, arg = conn.recv()
        if cmd == "attach":
            ring = arg
            conn.send(None)
        elif cmd == "push":
            try:
                conn.send(ring.try_push(arg))
            except ValueError as exc:
                conn.send(exc)
        elif cmd == "pop":
            conn.send(ring.try_pop())
        elif cmd == "claim":
            conn.send(ring.claim(arg))
        else:
            conn.close()
            return


def echo(inbox, outbox, rounds, spin_ns, slice_ns, report):
    """Send every message back; then report this side's wait counters."""
    for ring in (inbox, outbox):
        ring.spin_ns = spin_ns
        ring.slice_ns = slice_ns
    for _ in range(rounds):
        outbox.push(inbox.pop(timeout=120), timeout=120)
    report.push(repr((inbox.wait_stats(), outbox.wait_stats())).encode(), timeout=120)


def idle_pop(ring, seconds, report):
    """Block on an empty ring for `seconds`; report the CPU seconds that cost."""
    start = time.process_time()
    try:
        ring.pop(timeout=seconds)
    except TimeoutError:
        pass
    report.push(repr(time.process_time() - start).encode(), timeout=60)


def produce(ring, producer, count, max_message):
    for seq in range(count):
        ring.push(numbered(producer, seq, max_message), timeout=120)


def consume(ring, report, spin_ns=None, slice_ns=None):
    """Pop until the ring is closed; report (producer, seq) of every message, checking its bytes."""
    if spin_ns is not None:
        ring.spin_ns = spin_ns
    if slice_ns is not None:
        ring.slice_ns = slice_ns
    seen = []
    bad = 0
    while True:
        try:
            data = ring.pop(timeout=120)
        except EOFError:
            break
        producer, seq = int.from_bytes(data[:4], "little"), int.from_bytes(data[4:12], "little")
        if data != numbered(producer, seq, len(data), exact=True):
            bad += 1
        seen.append((producer, seq))
    report.put((seen, bad, ring.wait_stats()))


def numbered(producer, seq, max_message, exact=False):
    """Message seq of producer: its length and bytes both follow from the pair."""
    n = max_message if exact else 12 + (seq * 7919 + producer) % (max_message - 11)
    head = producer.to_bytes(4, "little") + seq.to_bytes(8, "little")
    return head + bytes((seq + producer + i) % 256 for i in range(12, n))


def sleep_forever():
    while True:
        time.sleep(60)


def pid():
    return os.getpid()


def nap_then_pid(seconds):
    time.sleep(seconds)
    return os.getpid()


def kill_self_at(x, fatal=7):
    """x, a moment later; at x == fatal, this process dies by SIGKILL instead."""
    if x == fatal:
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(0.01)
    return x


def nested_sum(n):
    """The sum of double(j) for j < 10 n, computed by a joblib loop of this process on the mizu backend."""
    from joblib import Parallel, delayed

    return sum(Parallel(backend="mizu", n_jobs=2)(delayed(double)(j) for j in range(10 * n)))


_left_running = []


def sum_in_a_pool_left_running(n):
    """sum(range(n)) by a mizu pool of this process, which is left running for the process's end to deal with."""
    import mizu

    pool = mizu.ProcessPoolExecutor(2)
    _left_running.append(pool)
    return sum(pool.map(abs, range(n)))


def fill_then_first(array, value):
    """Write value over array, then return its first item."""
    array[:] = value
    return int(array[0])


def block_of(array):
    """The address of the arena block array lies in, or None if it is this process's own memory."""
    import mizu

    found = mizu.arena_block(array)
    return None if found is None else found[0].address


def environ(name):
    """This process's environment variable name, or None."""
    return os.environ.get(name)


def joblib_loop_pids(backend):
    """Where a joblib loop of this process runs its calls, how many jobs it has, and what it warned of."""
    import warnings

    import mizu  # noqa: F401  (registers the backend)
    from joblib import Parallel, delayed

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        parallel = Parallel(backend=backend, n_jobs=2)
        pids = set(parallel(delayed(os.getpid)() for _ in range(4)))
        n_jobs = parallel._effective_n_jobs()
    return {"pid": os.getpid(), "pids": pids, "n_jobs": n_jobs, "warning": " ".join(str(w.message) for w in caught)}


def pid_and_parent(*_):
    """(this process's pid, its parent's): where a task ran."""
    return os.getpid(), os.getppid()


# -- tasks for the Executor tests -------------------------------------------------------------


def double(x):
    return 2 * x


def add(a, b=0, *, c=0):
    return a + b + c


def raise_runtime(arg):
    raise RuntimeError(arg)


def exit_with(code):
    raise SystemExit(code)


def die(code=3):
    os._exit(code)


def nap(seconds):
    time.sleep(seconds)
    return seconds


def echo_value(value):
    return value


def loaded(module):
    """Whether this process has imported module."""
    import sys

    return module in sys.modules


def unpicklable_result():
    return lambda: None


_initialized = []


def remember(value):
    _initialized.append(value)


def initialized():
    return list(_initialized)


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


# -- faults in workers -----------------------------------------------------------------------------


def announce(path):
    """Write this process's pid to path at once: a test that sees the file knows who runs the task."""
    part = f"{path}.{os.getpid()}"
    with open(part, "w") as f:
        f.write(str(os.getpid()))
    os.replace(part, path)


def announce_then_nap(path, seconds):
    announce(path)
    time.sleep(seconds)
    return seconds


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


def apply(fn, *args):
    return fn(*args)


def fail_at(x, bad=7):
    """x, unless x is bad: then it raises ValueError."""
    if x == bad:
        raise ValueError(f"{x} is bad")
    return x


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


# -- arena peers --------------------------------------------------------------------------------


def arena_pattern(tag, n):
    """The bytes block `tag` of n bytes holds: another block written over it, or shifted, differs."""
    import numpy as np

    period = ((np.arange(251) * 7 + tag * 131) % 251).astype(np.uint8)
    return np.resize(period, n)


def in_arena(array):
    """Whether array's memory lies in an arena block (shared memory), not in this process's own."""
    from mizu import arena_block

    return arena_block(array) is not None


def arena_fill(block, tag):
    import numpy as np

    np.frombuffer(block, np.uint8)[:] = arena_pattern(tag, len(block))


def arena_intact(block, tag):
    import numpy as np

    return bool(np.array_equal(np.frombuffer(block, np.uint8), arena_pattern(tag, len(block))))


def arena_peer(conn, segment_size):
    """Hold blocks of other processes and allocate from an arena of its own, on command.

    No block stays in a local variable, so a dropped one is released at once.
    """
    from mizu import _arena

    arena = _arena.Arena(segment_size=segment_size)
    held = {}
    while True:
        cmd, *args = conn.recv()
        if cmd == "open":
            held[args[1]] = _arena.open_block(args[0])
            conn.send(arena_intact(held[args[1]], args[1]))
        elif cmd == "take":
            held[args[1]] = args[0]
            conn.send(arena_intact(held[args[1]], args[1]))
        elif cmd == "check":
            conn.send(arena_intact(held[args[0]], args[0]))
        elif cmd == "drop":
            del held[args[0]]
            conn.send(None)
        elif cmd == "alloc":
            conn.send(arena_shared(arena, *args))
        elif cmd == "stats":
            conn.send(arena.stats())
        elif cmd == "close":
            arena.close()
            conn.send(None)
        else:
            conn.close()
            return
        del args


def arena_shared(arena, n, tag):
    """A reference to a new block of n bytes holding its pattern; this process keeps none."""
    block = arena.alloc(n)
    arena_fill(block, tag)
    return block.share()


def arena_check_sent_block(conn, tag):
    """Receive a block through conn, answer whether it holds its pattern and its reference count; then drop it."""
    block = conn.recv()
    conn.send((arena_intact(block, tag), block.refs))


def arena_view_in_fork(block, report):
    """Report the error viewing a block inherited through fork raises, or None."""
    try:
        memoryview(block)
    except BufferError as exc:
        report.send(str(exc))
    else:
        report.send(None)


def arena_alloc_in_fork(arena, report):
    try:
        arena.alloc(10)
    except RuntimeError as exc:
        report.send(str(exc))
    else:
        report.send(None)


# -- arrays in shared memory ----------------------------------------------------------------------


def fill_slice(arr, start, stop, value):
    """Write value into arr[start:stop] of an array inherited through fork."""
    arr[start:stop] = value


def fill(arr, value):
    """Write value into every element of arr."""
    arr[...] = value


def arrays_in_child(parent_arena_id, report):
    """Report whether a new mizu array here lives in an arena of this process's own."""
    import mizu

    arr = mizu.zeros(1000)
    arr += 1
    block = mizu.arena_block(arr)[0]
    arena = mizu.default_arena()
    report.send((arena.id != parent_arena_id, block.arena_id == arena.id, float(arr.sum())))


def describe(value):
    """What a worker received: type, and for arrays dtype, shape, order and writability."""
    import numpy as np

    if isinstance(value, np.ndarray):
        return ("ndarray", value.dtype.str, value.shape, value.flags.f_contiguous and not value.flags.c_contiguous,
                value.flags.writeable)
    return (type(value).__name__,)


def arange(n, dtype="float64"):
    import numpy as np

    return np.arange(n, dtype=dtype)


@dataclasses.dataclass
class Holder:
    """An array inside a dataclass, as tasks receive them."""

    name: str
    data: object


def arena_close_race(trials):
    """Close arenas while another thread is inside alloc, mapping a segment with the GIL released."""
    import threading
    import time

    from mizu import _arena

    for _ in range(trials):
        arena = _arena.Arena(segment_size=1 << 16, limit=1 << 30)
        started = threading.Event()

        def work():
            started.set()
            try:
                while True:
                    arena.alloc(8 << 20)
            except ValueError:
                pass

        thread = threading.Thread(target=work)
        thread.start()
        started.wait()
        time.sleep(0.002)
        arena.close()
        thread.join()


class Dummy:
    """An object a test can hold a weak reference to."""

    def __init__(self, value):
        self.value = value


SHARED = None   # set by a test before a fork pool starts, so its workers inherit it


def shared_slice(n):
    """A view of the array the worker inherited through fork."""
    return SHARED[:n]


def shared_value(*_):
    """SHARED as this worker has it: the test's value under fork, None in a worker that spawn or forkserver
    started."""
    return SHARED


# -- clients of the fault tests: run by `python -c`, they report on stdout --------------------------


def wait_for_file(path, seconds=120):
    """Sleep until path exists (a gate the test opens); return this worker's pid."""
    deadline = time.monotonic() + seconds
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear within {seconds} s")
        time.sleep(0.01)
    return os.getpid()


def die_once_file(path, code=3):
    """Exit with code once path exists (a gate the test opens)."""
    wait_for_file(path)
    os._exit(code)


def mark_and_sleep(directory, data, seconds):
    """Leave a file named by this worker's pid in directory, so the test sees the task running; then sleep."""
    open(os.path.join(directory, str(os.getpid())), "w").close()
    time.sleep(seconds)
    return len(data)


def record(path, value, seconds=0.0):
    """After seconds, append value as a line of path."""
    time.sleep(seconds)
    with open(path, "a") as file:
        file.write(f"{value}\n")
    return value


def _executor(kind, method=None):
    import concurrent.futures
    import multiprocessing

    import mizu

    cls = mizu.ProcessPoolExecutor if kind == "mizu" else concurrent.futures.ProcessPoolExecutor
    return cls(2, mp_context=multiprocessing.get_context(method))


def _report(**fields):
    import json

    print(json.dumps(fields), flush=True)


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
    _report(workers=sorted(ex._processes))
    while True:
        signal.pause()


def client_mapping_sleeps(workers, tasks, seconds):
    """A map of sleeps in a with block, as a user writes it; report the workers, then "mapping".

    A KeyboardInterrupt that ends the map prints "interrupted" and goes on
    to the with block's exit.
    """
    import mizu

    with mizu.ProcessPoolExecutor(workers) as ex:
        ex.submit(double, 0).result()   # every worker is up (fork starts them all at once)
        _report(workers=sorted(ex._processes))
        print("mapping", flush=True)
        try:
            for _ in ex.map(time.sleep, [seconds] * tasks):
                pass
        except KeyboardInterrupt:
            print("interrupted", flush=True)
            raise


def announce_then_wait_for_file(path):
    """Create path.<pid> (this worker runs a task), then wait_for_file(path)."""
    with open(f"{path}.{os.getpid()}", "w"):
        pass
    return wait_for_file(path)


def client_interrupted(kind, where, gate):
    """Block in result(), map or shutdown(wait=True) on tasks that wait for gate, until Ctrl-C; then exit normally.

    Each task announces its worker (announce_then_wait_for_file).
    """
    _block_until_interrupted(_executor(kind), announce_then_wait_for_file, where, gate)


def _block_until_interrupted(ex, fn, where, gate, report=None):
    """client_interrupted's body for the pool ex and the task fn(gate); report(ex) first, if given."""
    futures = [ex.submit(fn, gate) for _ in range(4)]
    if report is not None:
        report(ex)
    print("waiting", flush=True)
    try:
        if where == "result":
            futures[-1].result()
        elif where == "map":
            for _ in ex.map(fn, [gate] * 4):
                pass
        else:
            ex.shutdown(wait=True)
        print("finished", flush=True)
    except KeyboardInterrupt:
        print("interrupted", flush=True)


def client_forks(kind, how, gate):
    """Fork (os.fork or a multiprocessing fork child) while the pool is busy; report what parent and child saw."""
    import json
    import multiprocessing

    ex = _executor(kind)
    blocked = [ex.submit(wait_for_file, gate) for _ in range(3)]
    quick = [ex.submit(double, i) for i in range(300)]
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
    _report(child=json.loads(seen), child_exit=exit_code, quick=values == [2 * i for i in range(300)],
            blocked=all(isinstance(p, int) for p in pids))


def _forked_child(kind, ex, blocked, writer):
    import json

    seen = {}
    if kind == "mizu":
        seen["submit"] = _outcome(lambda: ex.submit(double, 1).result(timeout=30))
        seen["result"] = _outcome(lambda: blocked[0].result(timeout=30))
        seen["map"] = _outcome(lambda: list(ex.map(double, range(3), timeout=30)))
        seen["processes"] = _outcome(lambda: len(ex._processes))
        seen["shutdown"] = _outcome(ex.shutdown)
    # Not with the parent's forkserver (the default from 3.14): a forked
    # child cannot use it (multiprocessing's ensure_running raises
    # ChildProcessError there), whichever pool asks.
    import multiprocessing

    method = "spawn" if multiprocessing.get_start_method() == "forkserver" else None
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
    _report(**seen)


def client_short_of_processes(limit, workers, uid):
    """As user uid (unless None), with RLIMIT_NPROC at limit: a fork pool of `workers` given a 0.2 s sleep for each.

    Reports the first task's outcome, the outcomes of the others, a later
    submit's, the warnings, and the workers still alive once it is shut down.
    """
    import concurrent.futures
    import json  # noqa: F401 (for _report)
    import multiprocessing
    import resource
    import warnings

    import mizu

    fork = multiprocessing.get_context("fork")
    # Everything a task needs is imported before the user changes: the
    # interpreter's files may be the current user's alone.
    with mizu.ProcessPoolExecutor(1, mp_context=fork) as ex:
        ex.submit(nap, 0).result(timeout=60)
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
    _report(**seen)


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
    _report(**seen)


# -- clients of R pools ----------------------------------------------------------------------

R_MARK_AND_SLEEP = ("function(directory, data) { file.create(file.path(directory, Sys.getpid())); Sys.sleep(600); "
                    "length(data) }")
R_WAIT_FOR_FILE = "function(path) { while (!file.exists(path)) Sys.sleep(0.01); Sys.getpid() }"


def _r_workers(ex):
    return sorted(w.process.pid for w in ex._pool.workers)


def client_with_busy_r_pool(directory):
    """Keep both R workers of a pool busy and four tasks queued, each with a shared array; wait to be killed."""
    import mizu

    ex = mizu.RExecutor(2)
    data = mizu.zeros(1 << 20)
    for _ in range(6):
        ex.submit(R_MARK_AND_SLEEP, directory, data)
    while len(os.listdir(directory)) < 2:
        time.sleep(0.01)
    _report(workers=_r_workers(ex))
    while True:
        signal.pause()


def client_interrupted_r(where, gate):
    """Block in result(), map or shutdown(wait=True) on R tasks that wait for gate, until Ctrl-C; exit normally."""
    import mizu

    _block_until_interrupted(mizu.RExecutor(2), R_WAIT_FOR_FILE, where, gate,
                             lambda ex: _report(workers=_r_workers(ex)))


def client_leaving_an_r_pool(gate):
    """Submit R tasks and leave without shutdown: the exit waits for them, as the stdlib's does."""
    import mizu

    ex = mizu.RExecutor(2)
    futures = [ex.submit("function(x) x * 2L", i) for i in range(10)]
    slow = ex.submit(R_WAIT_FOR_FILE, gate)
    _report(workers=_r_workers(ex), values=[f.result() for f in futures])
    slow.add_done_callback(lambda f: print("slow done", flush=True))


def new_array(kind, n):
    """A new array of about n float64s that a task makes, of one of the kinds numpy users return."""
    import numpy as np

    base = np.arange(n, dtype=np.float64)
    made = {
        "negated": lambda: -base,
        "empty filled": lambda: np.full(n, 2.5),
        "zeros": lambda: np.zeros((n // 100, 100)),
        "ufunc": lambda: np.sqrt(base),
        "slice of a new one": lambda: (base * 2)[10:-10],
        "Fortran": lambda: np.asfortranarray((base + 1).reshape(100, -1)),
        "int32": lambda: base.astype(np.int32),
        "in a dict": lambda: {"a": base + 1, "b": [base - 1, "x"], "c": (base * 3)[::2]},
    }[kind]()
    del base
    return made


_kept = {}


def make_and_keep(n, value):
    """A new array that this process also keeps, and returns."""
    import numpy as np

    _kept["array"] = np.full(n, value)
    return _kept["array"]


def make_and_keep_a_view(n, value):
    """A new array returned while this process keeps a view of it."""
    import numpy as np

    made = np.full(n, value)
    _kept["view"] = made[5:]
    return made


def kept_first(name, value=None):
    """The first item of the kept array or view, after writing value to all of it if given."""
    if value is not None:
        _kept[name][:] = value
    return float(_kept[name][0])


def arena_stats():
    """The stats() of the arena that this process's large numpy arrays come from."""
    from mizu._arena import array_arena

    return array_arena().stats()


def handler_of_new_array(n):
    """The name of numpy's data handler of an array of n bytes made here."""
    import numpy as np

    try:
        from numpy._core.multiarray import get_handler_name
    except ImportError:   # numpy 1
        from numpy.core.multiarray import get_handler_name
    return get_handler_name(np.empty(n, dtype=np.uint8))


def sum_of_new(n):
    """The sum of a new array of n ones."""
    import numpy as np

    return float(np.ones(n).sum())


def fork_and_churn(n):
    """The exit status of a forked child that resizes, writes, frees and makes arrays like those inherited, and
    the sum of the one it wrote to, here (n float64s of 2.0)."""
    import numpy as np

    inherited = [np.full(n, 1.0), np.full(n, 2.0)]
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            inherited[0].resize(2 * n, refcheck=False)
            inherited[1][:] = 9.0
            inherited.pop()
            made = np.full(n, 3.0)
            status = 0 if inherited[0][:n].sum() == n and made.sum() == 3 * n else 2
        finally:
            os._exit(status)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), float(inherited[1].sum())
