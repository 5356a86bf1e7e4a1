"""What the tests share beside conftest.py's fixtures: paths, child interpreters' environment, leftovers to look for.

Like the child programs (children.py here, each layer's <layer>_children.py
in its folder), it is imported by name from IMPORT_PATH.
"""

import collections
import concurrent.futures
import copyreg
import os
import queue
import select
import subprocess
import sys
import threading
import time

import pytest

TESTS = os.path.dirname(os.path.abspath(__file__))
BENCHMARKS = os.path.join(os.path.dirname(TESTS), "benchmarks")

# The folders from which every process of the tests imports the tests' own
# modules by name (helpers, rsession, the child programs): this one and each
# layer's, so a module's name is unique across them. pytest, in import mode
# importlib, puts none of them on sys.path: conftest.py puts them first. A
# worker started by fork inherits that sys.path, one started by spawn or
# forkserver is given it by multiprocessing as it starts, and a child
# interpreter has them on PYTHONPATH (child_environ). A task's function
# pickles by reference, as module.name, and is found again there.
IMPORT_PATH = [TESTS, *sorted(entry.path for entry in os.scandir(TESTS)
                              if entry.is_dir() and entry.name != "__pycache__")]


def child_environ(env=None):
    """os.environ with env, and IMPORT_PATH first on PYTHONPATH: a child interpreter imports the child programs by
    name."""
    environ = dict(os.environ, **(env or {}))
    environ["PYTHONPATH"] = os.pathsep.join(filter(None, [*IMPORT_PATH, environ.get("PYTHONPATH")]))
    return environ


def require(ready, missing, module=False):
    """Skip the calling test (module: the calling module) when what it needs is missing (`missing` says what);
    under .ci/run fail instead.

    .ci/run sets MIZU_TESTS_NEED_ALL=1: CI has everything (R, root), and a
    test skipped there would pass for one that never ran.
    """
    if ready:
        return
    if os.environ.get("MIZU_TESTS_NEED_ALL") == "1":
        pytest.fail(f"{missing}, and .ci/run needs every test to run")
    pytest.skip(missing, allow_module_level=module)


def without_tblib_reducers():
    """Take tblib's reducers out of copyreg's table.

    distributed registers them for every exception class as it is imported,
    and again for an exception's classes whenever a task fails: exceptions
    then pickle otherwise in this process and in the workers it forks, and a
    test of how they pickle would test tblib.
    """
    for cls, reducer in list(copyreg.dispatch_table.items()):
        if getattr(getattr(reducer, "func", reducer), "__module__", "").startswith("tblib"):
            del copyreg.dispatch_table[cls]


def shm_entries():
    """/dev/shm's entries, but multiprocessing's and loky's semaphores: mizu makes none, and any other Python
    process on the machine may create and remove them at any time."""
    try:
        return {name for name in os.listdir("/dev/shm") if not name.startswith(("sem.mp-", "sem.loky-"))}
    except FileNotFoundError:
        return set()


def mapped_segments():
    """How many mappings of mizu's memfd segments this process has (Linux)."""
    with open("/proc/self/maps") as maps:
        return sum("memfd:mizu" in line for line in maps)


def mappings_of(fd):
    """How many mappings of the file behind descriptor fd this process has (Linux): those of one segment, whatever
    other threads map or unmap meanwhile."""
    st = os.fstat(fd)
    device, inode = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}", st.st_ino
    with open("/proc/self/maps") as maps:
        return sum(fields[3] == device and int(fields[4]) == inode
                   for fields in (line.split(maxsplit=5) for line in maps) if len(fields) >= 5)


# The first statement of a child interpreter that tests send SIGINT: it
# turns SIGINT into KeyboardInterrupt as Python does in a terminal, also
# where the tests run with SIGINT ignored (started in a shell's background,
# as `nohup pytest &` does), which a child inherits.
CTRL_C = "import signal; signal.signal(signal.SIGINT, signal.default_int_handler)"


class Client:
    """A client subprocess that runs program(*args), in a session of its own: its stdout lines as they come, its
    stderr at the end.

    program is a function of a module on IMPORT_PATH, args values whose
    repr() is Python that makes them again. `workers`: pids of processes it
    started outside its process group, for the `client` fixture to kill with
    the group.
    """

    def __init__(self, program, args, cwd, env=None, preexec_fn=None):
        module = program.__module__
        call = f"{CTRL_C}; import {module}; {module}.{program.__qualname__}{tuple(args)!r}"
        self.proc = subprocess.Popen([sys.executable, "-c", call], cwd=cwd, env=child_environ(env),
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                                     preexec_fn=preexec_fn)
        self.pid = self.proc.pid
        self.workers = []
        self.lines = queue.Queue()
        self.err = []
        self.readers = [threading.Thread(target=self._read, args=(self.proc.stdout, self.lines.put), daemon=True),
                        threading.Thread(target=self._read, args=(self.proc.stderr, self.err.append), daemon=True)]
        for reader in self.readers:
            reader.start()

    @staticmethod
    def _read(stream, put):
        for line in stream:
            put(line)
        put(None)

    def line(self, timeout=60):
        """The next line of stdout; fails after timeout seconds."""
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            pytest.fail(f"the client printed nothing for {timeout} s; stderr so far: {''.join(self.err)}")
        assert line is not None, f"the client ended early; stderr: {self.wait(60)[1]}"
        return line.strip()

    def wait(self, timeout):
        """(exit code, stderr) once the client exits; fails after timeout seconds."""
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the client did not exit within {timeout} s; stderr so far: {''.join(self.err)}")
        for reader in self.readers:
            reader.join(60)
        return code, "".join(line for line in self.err if line is not None)


def process_state(pid):
    """(state, ppid, process group) of a process, or None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as file:
            fields = file.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return fields[0], int(fields[1]), int(fields[2])


def wait_until_blocked(pid, timeout=60, settle=0.05):
    """Return once the main thread of pid sleeps in a blocking call (state S), and still sleeps settle seconds later;
    fails after timeout.

    On its way to a blocking call a thread may sleep a moment too (for the
    GIL, or a lock that another thread holds briefly): by the second look it
    has gone on, to the call or running towards it.
    """
    stat = f"/proc/{pid}/task/{pid}/stat"

    def sleeps():
        with open(stat) as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "S"

    deadline = time.monotonic() + timeout
    while True:
        if sleeps():
            time.sleep(settle)
            if sleeps():
                return
        assert time.monotonic() < deadline, f"process {pid} never blocked"
        time.sleep(0.002)


def wait_until(condition, timeout, what, interval=0.002):
    """Return once condition() is true, asked every interval seconds; fails after timeout seconds, saying what never
    came."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what} never came"
        time.sleep(interval)


def announced_pid(path, timeout=60):
    """The pid a task wrote to path with children.announce, once it has; fails after timeout seconds."""
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        assert time.monotonic() < deadline, "the task never started"
        time.sleep(0.005)
    with open(path) as f:
        return int(f.read())


def workers_up(pool, folder, n):
    """The pids of n workers of pool, once each runs a task at the same time: each task waits at a gate (in folder)
    until all have started, so n workers are up, however long a loaded machine took to start them."""
    import executor_children

    gate = os.path.join(folder, "all-up")
    held = [pool.submit(executor_children.announce_then_wait, os.path.join(folder, f"up-{i}"), gate) for i in range(n)]
    pids = {announced_pid(os.path.join(folder, f"up-{i}")) for i in range(n)}
    open(gate, "w").close()
    assert {future.result(timeout=60) for future in held} == pids and len(pids) == n
    return pids


def insights_all_up(pool, timeout=60):
    """pool.insights() once every worker has come up (has a startup time): one started with the others may come up
    only after they have run every task so far. Fails after timeout seconds."""
    wait_until(lambda: all(worker.startup is not None for worker in pool.insights().workers), timeout,
               "every worker's startup time")
    return pool.insights()


def tallies(path):
    """How many times each task started, by the value it appended to path as the first word of a line (tasks that
    tally their starts write "value pid")."""
    if not os.path.exists(path):
        return collections.Counter()
    with open(path) as file:
        return collections.Counter(line.split()[0] for line in file)


def tally_pid(path, value, timeout=60):
    """The pid of the worker that started the task of value, once it has appended "value pid" to path; fails after
    timeout seconds."""
    deadline = time.monotonic() + timeout
    while True:
        if os.path.exists(path):
            with open(path) as file:
                for line in file:
                    if line.split()[0] == str(value):
                        return int(line.split()[1])
        assert time.monotonic() < deadline, f"task {value} never started"
        time.sleep(0.005)


def returns_within(call, timeout):
    """Run call() in a thread and fail if it has not returned after timeout seconds (a hang, not a speed)."""
    failure = []

    def run():
        try:
            call()
        except BaseException as exc:
            failure.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout)
    assert not thread.is_alive(), f"{call} did not return within {timeout} s"
    if failure:
        raise failure[0]


def wait_replaced(workers, size, victim=None, timeout=60):
    """Wait until workers() (a pool's worker pids) holds size pids, victim not among them: a worker that ended
    has its replacement. Fails after timeout seconds, or at once if the pool holds more than size."""
    deadline = time.monotonic() + timeout
    while True:
        pids = set(workers())
        assert len(pids) <= size, f"the pool has {len(pids)} workers, more than {size}"
        if len(pids) == size and victim not in pids:
            return pids
        assert time.monotonic() < deadline, f"the pool kept workers {sorted(pids)}, not {size} without {victim}"
        time.sleep(0.01)


def assert_stops(stop, future):
    """stop(future) returns True and leaves the future cancelled: its result() raises CancelledError."""
    assert stop(future) is True
    assert future.cancelled()
    with pytest.raises(concurrent.futures.CancelledError):
        future.result(timeout=0)


def stop_once_answered(pool, gated, gate, future, timeout):
    """What pool.stop(future) returns once the task of future has sent its result and nobody has collected it: it
    is stopped from the done-callback of gated, a task queued before it on the same worker that waits for the file
    gate (touched here), since that callback runs in the thread that collects, once the pool's result ring holds
    that result. What stop() raised is raised here. Fails after timeout seconds."""
    stopped = []

    def stop_it(_):
        try:
            wait_until(lambda: len(pool._pool.results), timeout, "the result of the task to stop")
            stopped.append(pool.stop(future))
        except BaseException as exc:
            stopped.append(exc)

    gated.add_done_callback(stop_it)
    open(gate, "w").close()
    gated.result(timeout=timeout)
    wait_until(lambda: stopped, timeout, "the done-callback")
    if isinstance(stopped[0], BaseException):
        raise stopped[0]
    return stopped[0]


def settle_one_in_ten_overrunning(pool, submit, n, tally, timeout):
    """Call submit(view, i, seconds) for i in range(n), every tenth task sleeping 5 s past pool's own short deadline
    (view is pool), the others not at all, under a deadline no stall of a loaded machine reaches (view is
    pool.options(task_timeout=60)); check that those fail with TimeoutError, the others return i, and each task
    started once (each appends "i pid" to tally as it starts). Returns the pids of the workers that ran them; fails if
    they have not all settled after timeout seconds."""
    relaxed = pool.options(task_timeout=60)
    futures = [submit(pool, i, 5) if i % 10 == 0 else submit(relaxed, i, 0) for i in range(n)]
    returns_within(lambda: concurrent.futures.wait(futures), timeout)
    for i, future in enumerate(futures):
        if i % 10 == 0:
            assert isinstance(future.exception(), TimeoutError), (i, future)
        else:
            assert future.result() == i
    assert tallies(tally) == {str(i): 1 for i in range(n)}
    with open(tally) as file:
        pids = {int(line.split()[1]) for line in file}
    assert len(pids) > 2, "overrunning tasks ended no worker"
    return pids


def _live_processes(field, value):
    """The pids of the live processes (a zombie has exited) whose process_state()[field] is value."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = process_state(int(entry))
            if stat is not None and stat[field] == value and stat[0] != "Z":
                found.append(int(entry))
    return found


def process_group(pgid):
    """The live processes of a process group."""
    return _live_processes(2, pgid)


def children_of(pid):
    """The pids of the live processes whose parent is pid (Linux).
    Read from each process's stat: a thread's children file vanishes with the thread, and its children
    move to another thread of the process."""
    return _live_processes(1, pid)


def exit_all(pids, timeout):
    """Seconds until every process in pids has exited; fails after timeout."""
    start = time.monotonic()
    fds = []
    for pid in pids:
        try:
            fds.append(os.pidfd_open(pid))
        except ProcessLookupError:
            pass
    try:
        poller = select.poll()
        for fd in fds:
            poller.register(fd, select.POLLIN)
        left = set(fds)
        while left:
            remaining = timeout - (time.monotonic() - start)
            assert remaining > 0, f"{len(left)} of processes {sorted(pids)} still run after {timeout} s"
            for fd, _ in poller.poll(remaining * 1000):
                poller.unregister(fd)
                left.discard(fd)
        return time.monotonic() - start
    finally:
        for fd in fds:
            os.close(fd)


def wait_group_ends(pgid, timeout):
    deadline = time.monotonic() + timeout
    while process_group(pgid):
        assert time.monotonic() < deadline, f"processes {process_group(pgid)} of the client are still running"
        time.sleep(0.01)


def resident_memory(pid):
    """A process's resident memory in bytes (Linux)."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"/proc/{pid}/status has no VmRSS")


def memfds_of(pid):
    """(device, inode) of every mizu memfd a process has open or mapped."""
    found = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if "memfd:mizu" in os.readlink(f"/proc/{pid}/fd/{fd}"):
                st = os.stat(f"/proc/{pid}/fd/{fd}")
                found.add((f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}", st.st_ino))
        except FileNotFoundError:
            pass
    with open(f"/proc/{pid}/maps") as maps:
        for line in maps:
            fields = line.split(maxsplit=5)
            if len(fields) == 6 and "memfd:mizu" in fields[5]:
                found.add((fields[3], int(fields[4])))
    return found


def memfds_made(pids, make):
    """make()'s value, and the mizu memfds that the processes pids hold after make() but did not before."""
    before = set().union(*map(memfds_of, pids))
    value = make()
    return value, set().union(*map(memfds_of, pids)) - before


def memfd_holders(memfds):
    """The processes, anywhere on the machine, that still hold one of memfds."""
    holders = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if memfds_of(int(entry)) & memfds:
                holders.add(int(entry))
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            pass
    return holders


def assert_ended_tasks_give_their_array_back(client, program, how, tmp_path, rounds):
    """Run `program` (end_tasks_given_an_array) under a 128 MB arena, which would run out by the sixth task ended
    if the array a worker killed mid-task held were never given back."""
    import json

    c = client(program, how, str(tmp_path), rounds, env={"MIZU_ARENA_LIMIT": "128M"})
    seen = json.loads(c.line(180))
    assert c.wait(60) == (0, "")
    expected = "TimeoutError" if how == "deadline" else "CancelledError"
    assert seen == {"outcomes": [expected] * rounds, "after": 3 << 20}
