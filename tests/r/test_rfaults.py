"""Faults of an R pool: the Python pool's cases, with R workers.

A worker killed mid-task or idle, one that crashes in compiled code or
calls quit(), a client killed or interrupted: each ends with
BrokenProcessPool naming the R process and how it ended, or with a clean
exit, and with no process and no shared memory left. R workers run in a
session of their own, so clients report their pids for the `client`
fixture to clean up after a failure.
"""

import json
import os
import re
import signal
import subprocess
import sys
import time
from concurrent.futures.process import BrokenProcessPool

import pytest

import mizu
import r_children
from helpers import exit_all, memfd_holders, memfds_of, shm_entries, wait_until, wait_until_blocked

BROKEN = BrokenProcessPool


def _running(directory, count, timeout=60):
    deadline = time.monotonic() + timeout
    while len(os.listdir(directory)) < count:
        assert time.monotonic() < deadline, "the R tasks did not start"
        time.sleep(0.01)


def _workers(pool):
    return [w.process for w in pool._pool.workers]


def _exited(pid):
    """Whether process pid has exited (a zombie its parent has not reaped)."""
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rpartition(")")[2].split()[0] == "Z"


@pytest.mark.parametrize("when", ["mid-task", "idle", "exited, then given arrays"])
def test_a_killed_r_worker_breaks_the_pool_naming_it_and_its_signal(r_library, tmp_path, when):
    before = shm_entries()
    pool = mizu.RExecutor(2)
    pool.submit("function() 1").result()
    procs = _workers(pool)
    victim = procs[0]
    if when == "mid-task":
        futures = [pool.submit(r_children.R_MARK_AND_SLEEP, str(tmp_path), mizu.zeros(1000)) for _ in range(2)]
        _running(tmp_path, 2)
        os.kill(victim.pid, signal.SIGKILL)
        match = rf"Process {victim.pid} \(mizu-R-worker-0\) terminated abruptly with exit code -9 \(SIGKILL\) while running \(function"
    else:
        os.kill(victim.pid, signal.SIGKILL)
        match = rf"Process {victim.pid} \(mizu-R-worker-0\) terminated abruptly with exit code -9 \(SIGKILL\)"
        if when != "idle":
            # The arrays' descriptors then find the worker's socket closed.
            wait_until(lambda: _exited(victim.pid), 10, "the worker's exit")
        args = (mizu.zeros(1000),) if when != "idle" else ()
        # Until the pool notices the death, a task may still be taken; once it has (this thread may be held up
        # that long), submit refuses it, naming the same death.
        try:
            futures = [pool.submit("function(...) { Sys.sleep(2); 1 }", *args)]
        except BROKEN as refused:
            assert re.search(match, str(refused)), refused
            futures = []
    for future in futures:
        with pytest.raises(BROKEN, match=match if future is futures[0] or when != "mid-task" else "terminated abruptly"):
            future.result(timeout=60)
    with pytest.raises(BROKEN):
        pool.submit("function() 1")
    pool.shutdown()
    exit_all([p.pid for p in procs], 10)
    assert shm_entries() == before


def test_quit_in_r_names_its_exit_code(r_library):
    with mizu.RExecutor(1) as pool:
        with pytest.raises(BROKEN, match=r"\(mizu-R-worker-0\) terminated abruptly with exit code 3 while running \(function\(\) "
                                         r"quit\(status = 3\)\)\(\)"):
            pool.submit("function() quit(status = 3)").result(timeout=60)


def test_a_crash_in_compiled_code_names_the_signal(r_library, tmp_path):
    source = tmp_path / "crash.c"
    source.write_text("void crash(void) { *(volatile int *)0 = 1; }\n")
    subprocess.run(["R", "CMD", "SHLIB", str(source)], cwd=tmp_path, check=True, capture_output=True)
    library = tmp_path / "crash.so"
    with mizu.RExecutor(1, setup=f"dyn.load('{library}')") as pool:
        assert pool.submit("function() is.loaded('crash')").result() is True
        with pytest.raises(BROKEN, match=r"terminated abruptly with exit code -11 \(SIGSEGV\) while running \(function\(\) "
                                         r"\.C\('crash'\)\)\(\)"):
            pool.submit("function() .C('crash')").result(timeout=60)


def test_a_killed_client_ends_its_r_workers_within_a_second(client, tmp_path):
    before = shm_entries()
    marks = tmp_path / "running"
    marks.mkdir()
    c = client(r_children.client_with_busy_r_pool, str(marks))
    c.workers = workers = json.loads(c.line(120))["workers"]
    memfds = set().union(*(memfds_of(pid) for pid in workers))
    assert len(memfds) >= 2, "each worker maps the pool's segment and the arena segment of the array"
    os.kill(c.pid, signal.SIGKILL)
    assert c.wait(60)[0] == -signal.SIGKILL
    assert exit_all(workers, 5) < 1, "the R workers outlived their client by a second or more"
    assert memfd_holders(memfds) == set()
    assert shm_entries() - before == set()


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc: Linux only")
@pytest.mark.parametrize("group", [False, True], ids=["client", "process group"])
@pytest.mark.parametrize("where", ["result", "map", "shutdown"])
def test_ctrl_c_interrupts_a_wait_on_r_tasks_and_the_exit_is_clean(client, tmp_path, where, group):
    """SIGINT to the client or to its process group (a terminal's Ctrl-C): the R workers, in a session of their
    own, are not interrupted; the client's exit waits for its tasks, as with Python workers, except that an
    interrupted shutdown(wait=True) ends the workers at once."""
    gate = tmp_path / "gate"
    c = client(r_children.client_interrupted_r, where, str(gate))
    c.workers = workers = json.loads(c.line(120))["workers"]
    assert c.line(60) == "waiting"
    # Both workers run a task, and the client, long past its print, waits: the main thread may also sleep a moment
    # right after the print (for the GIL, or a lock of the pool's), and a Ctrl-C then would come before the call.
    wait_until(lambda: len(list(tmp_path.glob("gate.*"))) >= 2, 60, "a task running in each R worker")
    wait_until_blocked(c.pid, 60)   # inside the blocking call
    if group:
        os.killpg(c.pid, signal.SIGINT)
    else:
        os.kill(c.pid, signal.SIGINT)
    assert c.line(30) == "interrupted"
    if where == "shutdown":
        exit_all(workers, 5)
    else:
        assert all(os.path.exists(f"/proc/{pid}") for pid in workers)
    gate.touch()
    assert c.wait(60) == (0, "")
    exit_all(workers, 10)


def test_leaving_without_shutdown_waits_for_the_r_tasks(client, tmp_path):
    gate = tmp_path / "gate"
    c = client(r_children.client_leaving_an_r_pool, str(gate))
    report = json.loads(c.line(120))
    c.workers = report["workers"]
    assert report["values"] == [2 * i for i in range(10)]
    time.sleep(0.3)
    assert c.proc.poll() is None, "the exit waits for the task still running"
    gate.touch()
    assert c.line(30) == "slow done"
    assert c.wait(60) == (0, "")
    exit_all(c.workers, 10)
