"""Faults on the client's side: the client killed, interrupted, forking, short of memory, crowded or exiting.

A client that must die, be interrupted or exit runs as a subprocess (``python
-c``, its code in executor_children.py) in a session of its own, so that every
process it starts is found by its process group, and whatever is left of the
group at the end of a test is killed. Every wait is bounded: a hang fails the test.
Where the stdlib behaves, the same case runs against it as the oracle.
"""

import json
import os
import re
import signal
import sys
import threading
import time

import pytest

import children
import executor_children
import mizu
from helpers import (exit_all, memfd_holders, memfds_of, process_group, require, shm_entries, wait_group_ends,
                     wait_until_blocked)

linux_only = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc: Linux only")

WAIT = 60   # seconds a single wait may take before the case counts as hung


# -- the client killed -------------------------------------------------------------------------------


@linux_only
def test_killed_client_leaves_no_worker_and_no_shared_memory(client, tmp_path, start_method):
    """SIGKILL of a client with tasks running and queued: its workers exit at once and take the memory along.

    mizu only: the stdlib's workers outlive a killed client, waiting on
    their call queue for ever.
    """
    before = shm_entries()
    marks = tmp_path / "running"
    marks.mkdir()
    c = client(executor_children.client_with_busy_pool, start_method, str(marks))
    workers = json.loads(c.line(60))["workers"]
    group = process_group(c.pid)
    assert len(workers) == 2 and set(workers) <= set(group)
    memfds = set().union(*(memfds_of(pid) for pid in workers))
    assert len(memfds) >= 2, "each worker maps the pool's segment and the arena segment of the array"
    os.kill(c.pid, signal.SIGKILL)
    assert c.wait(60)[0] == -signal.SIGKILL
    assert exit_all(workers, 5) < 5, "the workers outlived their client"
    exit_all(group, 30)
    assert memfd_holders(memfds) == set()
    assert shm_entries() - before == set()


@linux_only
def test_a_killed_client_leaves_no_spare(client):
    """A pool that replaced a worker keeps a spare process, waiting to be its next worker: it ends with the client."""
    c = client(executor_children.client_with_a_spare)
    report = json.loads(c.line(60))
    assert report["workers"] and len(report["spares"]) == 1
    os.kill(c.pid, signal.SIGKILL)
    assert c.wait(60)[0] == -signal.SIGKILL
    assert exit_all(report["workers"] + report["spares"], 5) < 5, "a process outlived its client"


@linux_only
def test_a_worker_whose_client_died_as_it_started_exits_quietly(client):
    """A worker that finds its client gone by the time it starts has no one to serve: it exits without a
    traceback on the terminal it shares with the client."""
    c = client(executor_children.client_killed_as_its_worker_starts, 1.0)
    workers = json.loads(c.line(60))["workers"]
    code, stderr = c.wait(WAIT)   # its stderr once the worker, which shares it, has exited too
    assert code == -signal.SIGKILL
    assert exit_all(workers, WAIT) < WAIT
    assert "Traceback" not in stderr, stderr


# -- Ctrl-C ---------------------------------------------------------------------------------------


def _interrupt(client, tmp_path, kind, where, group):
    """Ctrl-C a client blocked in `where`; the KeyboardInterrupt must come before its tasks could end.

    The tasks wait for a gate file that is created only after the interrupt
    has been seen, so an interrupt that waited for them would never come.
    Then the client's normal exit waits for its pending work, as the stdlib's
    does, and ends with nothing on stderr and no process left.
    """
    gate = tmp_path / "gate"
    c = client(executor_children.client_interrupted, kind, where, str(gate))
    assert c.line(WAIT) == "waiting"
    # Both workers run a task (a signal to the group reaches them there, not
    # while they start), and the client waits.
    deadline = time.monotonic() + WAIT
    while len(list(tmp_path.glob("gate.*"))) < 2:
        assert time.monotonic() < deadline, "the pool's two workers never both ran a task"
        time.sleep(0.01)
    wait_until_blocked(c.pid, WAIT)
    if group:
        os.killpg(c.pid, signal.SIGINT)
    else:
        os.kill(c.pid, signal.SIGINT)
    assert c.line(30) == "interrupted"
    gate.touch()
    code, err = c.wait(60)
    assert (code, err) == (0, "")
    wait_group_ends(c.pid, 30)


@linux_only
@pytest.mark.parametrize("group", [False, True], ids=["client", "process group"])
@pytest.mark.parametrize("where", ["result", "map"])
def test_ctrl_c_interrupts_a_wait_and_the_exit_is_clean(client, tmp_path, executor_type, where, group):
    """SIGINT to the client alone, or to its process group as a terminal's Ctrl-C sends it (workers too)."""
    _interrupt(client, tmp_path, "mizu" if executor_type is mizu.ProcessPoolExecutor else "stdlib", where, group)


@linux_only
def test_a_second_ctrl_c_ends_the_wait_for_running_tasks(client):
    """The first Ctrl-C ends the map; leaving the with block then waits for the running tasks, and a second one
    ends that wait: the workers are terminated and the client exits long before its tasks could end.

    mizu only: the stdlib's client waits for every task, whatever it is sent.
    """
    before = shm_entries()
    c = client(executor_children.client_mapping_sleeps, 4, 8, 10 * WAIT)
    workers = json.loads(c.line(WAIT))["workers"]
    assert c.line(WAIT) == "mapping"
    wait_until_blocked(c.pid, WAIT)     # in the map's wait
    os.kill(c.pid, signal.SIGINT)
    assert c.line(WAIT) == "interrupted"
    wait_until_blocked(c.pid, WAIT)     # in shutdown's wait for the running tasks
    assert c.proc.poll() is None, "the first Ctrl-C does not stop the pool's running tasks"
    os.kill(c.pid, signal.SIGINT)
    # The tasks take ten times as long as this wait: ending within it is ending at once.
    code, err = c.wait(WAIT)
    assert code == -signal.SIGINT and "KeyboardInterrupt" in err
    assert "Fatal" not in err and "FATAL" not in err
    exit_all(workers, 5)
    wait_group_ends(c.pid, 5)
    assert shm_entries() - before == set()


def _signals(seed):
    """Up to ten (delay, signal) pairs; seed None: four SIGINTs a second apart."""
    import random

    if seed is None:
        return [(1.0, signal.SIGINT)] * 4
    rng = random.Random(seed)
    return [(rng.uniform(0, 1.0), signal.SIGTERM if rng.random() < 0.15 else signal.SIGINT)
            for _ in range(rng.randint(1, 10))]


@linux_only
@pytest.mark.parametrize("seed", [None, *range(6)], ids=lambda seed: "4 a second apart" if seed is None else seed)
def test_no_sequence_of_signals_crashes_the_client(client, seed):
    """Up to ten SIGINTs and SIGTERMs at random moments of a map and of the shutdown after it.

    The client ends by the signal: SIGTERM's default action, or SIGINT's
    KeyboardInterrupt, which leaves the interpreter by SIGINT; never by a
    crash nor another exception. Nothing of it is left running or in
    /dev/shm.
    """
    before = shm_entries()
    c = client(executor_children.client_mapping_sleeps, 4, 8, 3)
    workers = json.loads(c.line(60))["workers"]
    assert c.line(60) == "mapping"
    sent = []
    for delay, sig in _signals(seed):
        time.sleep(delay)
        if c.proc.poll() is not None:
            break
        os.kill(c.pid, sig)
        sent.append(sig)
    code, err = c.wait(30)
    # The map takes 6 s, and the first signal comes within 1 s of it: the
    # client cannot have ended before it. A SIGTERM after a SIGINT may reach
    # a client already ending by that SIGINT.
    if signal.SIGTERM not in sent:
        assert code == -signal.SIGINT, err
    elif sent[0] == signal.SIGTERM:
        assert code == -signal.SIGTERM, err
    else:
        assert code in (-signal.SIGINT, -signal.SIGTERM), err
    if code == -signal.SIGINT:
        assert err.rstrip().endswith("KeyboardInterrupt"), err
    assert "Fatal" not in err and "FATAL" not in err, err
    exit_all(workers, 5)
    wait_group_ends(c.pid, 5)
    assert shm_entries() - before == set()


@linux_only
@pytest.mark.parametrize("group", [False, True], ids=["client", "process group"])
def test_ctrl_c_interrupts_shutdown_and_the_exit_is_clean(client, tmp_path, group):
    """mizu only: the stdlib's interpreter hangs at exit after Ctrl-C in shutdown(wait=True).

    Its exit handler joins the manager thread, which the interrupted shutdown
    left waiting; the process never ends and its workers wait forever.
    """
    _interrupt(client, tmp_path, "mizu", "shutdown", group)


# -- the client forks -------------------------------------------------------------------------------


@linux_only
@pytest.mark.parametrize("how", ["os.fork", "multiprocessing"])
def test_a_forked_child_leaves_a_busy_pool_alone(client, tmp_path, executor_type, how):
    """A child forked while the pool is busy (a future queued there cancelled) exits normally and can make a
    pool of its own; the parent's pool still delivers every result.

    In the child, mizu refuses the parent's pool: submit and map raise
    BrokenProcessPool naming the parent, the parent's futures fail at once
    instead of waiting, and shutdown returns. (The stdlib's child is not made
    to use the parent's pool: its futures never complete there.)
    """
    _forks_and_leaves_the_pool_alone(client, tmp_path, "mizu" if executor_type is mizu.ProcessPoolExecutor else "stdlib",
                                     how)


@linux_only
@pytest.mark.parametrize("how", ["os.fork", "multiprocessing"])
def test_a_forked_child_leaves_a_pool_that_replaces_dead_workers_alone(client, tmp_path, how):
    """The same with a pool that replaces dead workers, whose thread watching them is the parent's only."""
    _forks_and_leaves_the_pool_alone(client, tmp_path, "mizu-replacing", how)


def _forks_and_leaves_the_pool_alone(client, tmp_path, kind, how):
    c = client(executor_children.client_forks, kind, how, str(tmp_path / "gate"))
    seen = json.loads(c.line(60))
    assert c.wait(60) == (0, "")
    wait_group_ends(c.pid, 30)
    assert seen["child_exit"] == 0 and seen["cancelled"]
    assert seen["quick"] and seen["blocked"], "the parent lost results"
    child = seen["child"]
    assert child.pop("own pool") == [2 * i for i in range(10)]
    if kind != "stdlib":
        refusal = f"This pool belongs to process {c.pid}; a process forked from it cannot use it"
        for what in ("submit", "result", "map"):
            assert child[what][0] == "BrokenProcessPool" and child[what][1].startswith(refusal), child
        assert child["processes"] == ["ok", 0]
        assert child["shutdown"] == ["ok", None]


# -- short of shared memory ---------------------------------------------------------------------------


@linux_only
def test_segments_are_reserved_in_full_before_use():
    """Every page of a new segment is allocated before it is used, so no later write can fault with SIGBUS."""
    from mizu import _core

    seg = _core.Segment(8 << 20)
    assert os.fstat(seg.fd).st_blocks * 512 >= seg.size
    data = mizu.zeros(16 << 20, dtype="uint8")
    block = mizu.arena_block(data)[0]
    st = os.fstat(block.fd)
    assert st.st_blocks * 512 >= st.st_size >= data.nbytes


def test_arena_limit_gives_clear_memory_errors(client):
    """Past MIZU_ARENA_LIMIT, an array, a task's argument and a task's result each fail with a MemoryError that
    says what to do, and the pool goes on."""
    c = client(executor_children.client_short_of_arena, env={"MIZU_ARENA_LIMIT": "16M"})
    seen = json.loads(c.line(60))
    assert c.wait(60) == (0, "")
    for what in ("array", "argument", "result"):
        assert seen[what][0] == "MemoryError" and "MIZU_ARENA_LIMIT" in seen[what][1], seen
    assert seen["after"] == ["ok", 42]


def _enables_memory(cgroup):
    with open(os.path.join(cgroup, "cgroup.subtree_control")) as file:
        return "memory" in file.read().split()


@pytest.fixture
def memory_cgroup():
    """The cgroup.procs file of a new memory cgroup limited to 256 MiB, under this process's own (cgroup v2:
    under its nearest ancestor that enables the memory controller below it, as a service's cgroup, which holds
    processes, cannot)."""
    if sys.platform != "linux":
        pytest.skip("memory cgroups are Linux's")
    require(os.geteuid() == 0, "this test makes a memory cgroup: it runs as root")
    with open("/proc/self/cgroup") as file:
        lines = [line.rstrip("\n").split(":", 2) for line in file]
    v1 = [path for _, controllers, path in lines if "memory" in controllers.split(",")]
    if v1:
        parent, limit_file = "/sys/fs/cgroup/memory" + v1[0], "memory.limit_in_bytes"
    else:
        limit_file = "memory.max"
        parent = "/sys/fs/cgroup" + next(path for hid, _, path in lines if hid == "0").rstrip("/")
        while not _enables_memory(parent) and parent != "/sys/fs/cgroup":
            parent = os.path.dirname(parent)
        require(_enables_memory(parent), "the memory controller is not enabled below this process's cgroup nor any "
                                         "of its ancestors")
    where = os.path.join(parent, f"mizu-test-{os.getpid()}")
    os.mkdir(where)
    try:
        with open(os.path.join(where, limit_file), "w") as file:
            file.write(str(256 << 20))
        yield os.path.join(where, "cgroup.procs")
    finally:
        deadline = time.monotonic() + 30
        while True:
            try:
                os.rmdir(where)
                break
            except OSError:
                assert time.monotonic() < deadline, f"{where} still has processes"
                time.sleep(0.05)


def test_memory_cgroup_limit_gives_a_clear_error_not_a_kill(client, memory_cgroup):
    """Shared memory past the limit of the client's memory cgroup fails with MemoryError naming the cgroup.

    Without the check the kernel would reserve the pages, reach the limit and
    kill a process of the cgroup (the client, or a worker), with no word.
    """
    c = client(executor_children.client_in_memory_cgroup, memory_cgroup)
    seen = json.loads(c.line(60))
    assert c.wait(60) == (0, "")
    for what in ("array", "result"):
        assert seen[what][0] == "MemoryError" and "memory cgroup" in seen[what][1] and "limit" in seen[what][1], seen
    assert seen["small"] == ["ok", True]
    assert seen["after"] == ["ok", 42]


# -- short of processes ---------------------------------------------------------------------------------


@pytest.fixture
def fresh_uid():
    """A user id that no process has, for a child whose RLIMIT_NPROC then counts its own processes only."""
    if sys.platform != "linux":
        pytest.skip("RLIMIT_NPROC counts a user's processes and threads on Linux")
    # root ignores RLIMIT_NPROC, and any other user has processes of its own that would count.
    require(os.geteuid() == 0, "this test runs a client as a user of its own: it runs as root")
    return 0x70000000 + os.getpid()


@pytest.mark.parametrize("limit, outcome", [(12, "goes on"), (1, "raises")])
def test_a_pool_short_of_processes_says_so(client, fresh_uid, limit, outcome):
    """A fork pool of 16 workers whose user may have `limit` processes and threads: with some workers up it goes
    on with them and warns once; with none, the first submit raises an OSError that says what to do, later ones
    BrokenProcessPool. Either way nothing hangs and no worker is left."""
    c = client(executor_children.client_short_of_processes, limit, 16, fresh_uid)
    seen = json.loads(c.line(180))
    assert c.wait(60)[0] == 0
    assert seen["alive"] == []
    if outcome == "goes on":
        assert seen["first"] == ["ok", 0.2] and seen["results"] == ["ok"] and seen["later"] == ["ok", 0], seen
        assert len(seen["warnings"]) == 1, seen
        warning = seen["warnings"][0]
        assert warning.startswith("RuntimeWarning: mizu's pool goes on with ") and "of the 16 workers" in warning
        assert "ulimit -u" in warning and "fewer workers" in warning
    else:
        assert seen["first"][0] == "BlockingIOError", seen
        assert "No worker of the pool could start" in seen["first"][1] and "ulimit -u" in seen["first"][1]
        assert seen["later"][0] == "BrokenProcessPool" and "ulimit -u" in seen["later"][1], seen
        assert seen["warnings"] == []


# -- many threads, one pool ---------------------------------------------------------------------------


def test_eight_threads_submit_and_map_into_one_pool(executor_type):
    """Eight threads at once, by submit, map, chunked map and as_completed: each gets every result of its own
    exactly once, in map order."""
    import concurrent.futures as cf

    def work(t):
        base, n = t * 1_000_000, 300 if t % 4 in (0, 3) else 1000
        if t % 4 == 0:
            return [ex.submit(children.add, base, i).result(timeout=120) for i in range(n)]
        if t % 4 == 3:
            futures = [ex.submit(children.add, base, i) for i in range(n)]
            finished = list(cf.as_completed(futures, timeout=120))
            assert len(finished) == len(set(finished)) == n
            return [f.result() for f in futures]
        return list(ex.map(children.add, [base] * n, range(n), chunksize=1 if t % 4 == 1 else 7, timeout=120))

    results, errors = {}, []
    start = threading.Barrier(8)

    def run(t):
        try:
            start.wait(60)
            results[t] = work(t)
        except BaseException as exc:
            errors.append(exc)

    with executor_type(2) as ex:
        threads = [threading.Thread(target=run, args=(t,)) for t in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(180)
        assert not any(thread.is_alive() for thread in threads), "a thread is stuck"
    assert errors == []
    for t in range(8):
        assert results[t] == [t * 1_000_000 + i for i in range(len(results[t]))]
        assert len(results[t]) == (300 if t % 4 in (0, 3) else 1000)


# -- the interpreter exits with work pending ------------------------------------------------------------


@pytest.mark.parametrize("how", ["collected", "global", "daemon threads"])
def test_exit_with_work_pending_finishes_it(client, tmp_path, executor_type, how):
    """No shutdown and no with block: the executor collected, kept in a global, or fed by daemon threads that go
    on submitting (one of them waiting on each result) until the exit refuses them. As with the stdlib, every task
    submitted runs once before the interpreter exits, promptly, with nothing on stderr and no process left."""
    kind = "mizu" if executor_type is mizu.ProcessPoolExecutor else "stdlib"
    done = tmp_path / "done"
    c = client(executor_children.client_exits_with_work_pending, kind, how, str(done))
    assert c.line(60) == "leaving"
    code, err = c.wait(60)
    if kind == "stdlib":
        # The stdlib's pool, fed by daemon threads as the interpreter exits,
        # may leave a semaphore to its resource tracker, which warns (seen on
        # 3.14): the oracle's own leak, which mizu's side must not have.
        err = re.sub(r"^\S*resource_tracker\.py:\d+: UserWarning: resource_tracker: .*\n(?:[ \t].*\n)*", "", err,
                     flags=re.M)
    assert (code, err) == (0, "")
    wait_group_ends(c.pid, 30)
    values = done.read_text().split()
    assert len(values) == len(set(values)), "a task ran twice"
    if how == "daemon threads":
        submitted = (tmp_path / "done.submitted").read_text().split()
        assert submitted and set(submitted) <= set(values)
    else:
        assert sorted(map(int, values)) == list(range(8))
