"""Control of running work in an R pool: the Python pool's cases (tests/executor/test_control.py), with R workers.

A deadline per task, stopping a pending or a running task, a worker that
dies mid-task replaced, and a worker above its memory limit replaced. Each
task appends a line to a file in tmp_path as it starts, so a case counts
how many times each ran. Times are asserted only as bounds on a hang.
"""

import concurrent.futures as cf
import os
import signal
import sys
import time
from concurrent.futures.process import BrokenProcessPool

import numpy as np
import pytest

import mizu
import r_children
from helpers import (assert_ended_tasks_give_their_array_back, assert_stops, children_of, exit_all, resident_memory,
                     returns_within, settle_one_in_ten_overrunning, stop_once_answered, tallies, tally_pid,
                     wait_replaced, wait_until)
from r_children import R_HOARD, R_TALLY_THEN_NAP, R_WAIT_FOR_FILE

pytestmark = pytest.mark.timeout(120)

WAIT = 60       # seconds a single wait may take before the case counts as hung
PID = "function() Sys.getpid()"


@pytest.fixture
def make(r_library):
    """make(*args, **kwargs): an RExecutor, ended without waiting for its tasks when the case ends."""
    made = []

    def make_pool(*args, **kwargs):
        made.append(mizu.RExecutor(*args, **kwargs))
        return made[-1]

    yield make_pool
    for pool in made:
        pids = [w.process.pid for w in pool._pool.workers]
        pool.shutdown(wait=False, cancel_futures=True)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        exit_all(pids, WAIT)


def _full(pool, victim=None):
    """The pids of the pool's workers once it has max_workers again, victim not among them."""
    return wait_replaced(lambda: [w.process.pid for w in pool._pool.workers], pool._max_workers, victim)


def _others(pool, tally):
    """A task beside the one under test and six queued behind it, each appending to tally as it starts."""
    beside = pool.submit(R_TALLY_THEN_NAP, tally, "beside", 1.0)
    return beside, [pool.submit(R_TALLY_THEN_NAP, tally, i, 0) for i in range(6)]


def _assert_the_others_ran_once(pool, tally, others, victim, **started):
    """The others (_others) succeed, each started once, as the task under test started `started`; its worker,
    victim, has exited; the pool takes new work with as many workers as before, the victim not among them."""
    beside, queued = others
    assert beside.result(timeout=WAIT) == "beside"
    assert [f.result(timeout=WAIT) for f in queued] == list(range(6))
    exit_all([victim], WAIT)
    assert tallies(tally) == {**started, "beside": 1, **{str(i): 1 for i in range(6)}}
    assert pool.submit("function(x) x * 2L", 21).result(timeout=WAIT) == 42
    _full(pool, victim)


# -- a deadline per task ----------------------------------------------------------------------------------------


def test_an_r_task_past_its_deadline_fails_with_timeout_error_and_the_rest_run_once(make, tmp_path):
    pool = make(2)
    tally = str(tmp_path / "tally")
    late = pool.options(task_timeout=0.5).submit(R_TALLY_THEN_NAP, tally, "late", WAIT)
    others = _others(pool, tally)
    victim = tally_pid(tally, "late")
    assert isinstance(late.exception(timeout=WAIT), TimeoutError)
    _assert_the_others_ran_once(pool, tally, others, victim, late=1)


def test_a_thousand_r_tasks_one_in_ten_overrunning_each_settle_once(make, tmp_path):
    tally = str(tmp_path / "tally")
    pool = make(2, task_timeout=0.2)
    pids = settle_one_in_ten_overrunning(
        pool, lambda view, i, seconds: view.submit(R_TALLY_THEN_NAP, tally, i, seconds), 1000, tally, 5 * WAIT)
    _full(pool)
    assert pool.submit("function(x) x * 2L", 21).result(timeout=WAIT) == 42
    returns_within(lambda: pool.shutdown(wait=True), WAIT)
    exit_all(pids, 10)


def test_the_r_pools_deadline_applies_to_submit_and_map_and_options_overrides_it(make):
    pool = make(2, task_timeout=0.5)
    assert isinstance(pool.submit("function() Sys.sleep(60)").exception(timeout=WAIT), TimeoutError)
    with pytest.raises(TimeoutError):
        list(pool.map("function(s) { Sys.sleep(s); s }", [0, WAIT]))
    slow = "function() { Sys.sleep(1); 1L }"
    assert pool.options(task_timeout=WAIT).submit(slow).result(timeout=WAIT) == 1
    assert list(pool.options(task_timeout=WAIT).map("function(x) { Sys.sleep(1); x }", [1, 2])) == [1, 2]


def test_an_r_task_queued_behind_one_with_a_later_deadline_ends_by_its_own(make):
    pool = make(1)
    first = pool.options(task_timeout=WAIT).submit("function() { Sys.sleep(1); 1L }")
    late = pool.options(task_timeout=0.5).submit("function() { Sys.sleep(60); 2L }")
    assert first.result(timeout=WAIT) == 1
    assert isinstance(late.exception(timeout=0.5 + 10), TimeoutError)


def test_limits_no_r_pool_comes_near_are_no_limit(make):
    pool = make(1, task_timeout=1e12, max_worker_memory=2 ** 70, max_tasks_per_child=2 ** 63)
    first = pool.submit(PID).result(timeout=WAIT)
    assert pool.options(task_timeout=10 ** 15).submit("function(x) x * 2L", 21).result(timeout=WAIT) == 42
    assert pool.submit(PID).result(timeout=WAIT) == first


# -- stopping a task --------------------------------------------------------------------------------------------


def test_stopping_a_pending_r_task_cancels_it_and_ends_no_worker(make, tmp_path):
    pool = make(1)
    tally = str(tmp_path / "tally")
    gate = tmp_path / "gate"
    worker = pool.submit(PID).result(timeout=WAIT)
    gated = pool.submit(R_WAIT_FOR_FILE, str(gate))
    pending = pool.submit(R_TALLY_THEN_NAP, tally, "pending", 0)
    assert_stops(pool.stop, pending)
    gate.touch()
    assert gated.result(timeout=WAIT) == worker
    assert pool.submit(R_TALLY_THEN_NAP, tally, "after", 0).result(timeout=WAIT) == "after"
    assert tallies(tally) == {"after": 1}
    assert tally_pid(tally, "after") == worker


def test_stopping_a_running_r_task_cancels_it_ends_its_worker_and_the_rest_run_once(make, tmp_path):
    pool = make(2)
    tally = str(tmp_path / "tally")
    running = pool.submit(R_TALLY_THEN_NAP, tally, "running", WAIT)
    others = _others(pool, tally)
    victim = tally_pid(tally, "running")
    assert_stops(pool.stop, running)
    _assert_the_others_ran_once(pool, tally, others, victim, running=1)
    done = pool.submit(PID)
    done.result(timeout=WAIT)
    assert pool.stop(done) is False
    assert not done.cancelled()


def test_stopping_an_r_task_answered_but_not_yet_collected_returns_false_and_keeps_its_result(make, tmp_path):
    pool = make(1)
    tally, gate = str(tmp_path / "tally"), str(tmp_path / "gate")
    worker = pool.submit(PID).result(timeout=WAIT)
    gated = pool.submit(R_WAIT_FOR_FILE, gate)
    answered = pool.submit(R_TALLY_THEN_NAP, tally, "answered", 0)
    assert stop_once_answered(pool, gated, gate, answered, WAIT) is False
    assert answered.result(timeout=WAIT) == "answered"
    assert pool.submit(PID).result(timeout=WAIT) == worker
    assert tallies(tally) == {"answered": 1}


# -- a worker that dies mid-task --------------------------------------------------------------------------------


DEATHS = {
    "pskill": ("tools::pskill(Sys.getpid(), tools::SIGKILL); Sys.sleep(60)", None, signal.SIGKILL),
    "quit": ("quit(status = 3)", 3, None),
    "killed": ("Sys.sleep(60)", None, signal.SIGKILL),
}


@pytest.mark.parametrize("how", list(DEATHS))
def test_an_r_worker_that_dies_mid_task_fails_only_its_task(make, tmp_path, how):
    body, exitcode, signum = DEATHS[how]
    pool = make(2, worker_death="replace")
    tally = str(tmp_path / "tally")
    dying = pool.submit(f'function(path) {{ cat(paste0("dying ", Sys.getpid(), "\\n"), file = path, append = TRUE); '
                        f'{body} }}', tally)
    others = _others(pool, tally)
    victim = tally_pid(tally, "dying")
    if how == "killed":
        os.kill(victim, signal.SIGKILL)
    error = dying.exception(timeout=WAIT)
    assert isinstance(error, mizu.WorkerDied), repr(error)
    assert isinstance(error, BrokenProcessPool)
    assert error.pid == victim
    assert error.signal == signum
    if exitcode is not None:
        assert error.exitcode == exitcode
    assert error.task.startswith("(function(path) {") and body.split("; ")[-1] in error.task, error.task
    _assert_the_others_ran_once(pool, tally, others, victim, dying=1)


def _all_up(pool):
    pool.submit("function() 1").result(timeout=WAIT)   # collects what the workers told, their notices that they are up
    return all(worker.up for worker in pool._pool.workers)


def test_tasks_with_arrays_submitted_as_r_workers_die_each_settle(make):
    """Each death's successor takes what its predecessor left, and no task goes to it before it has a process."""
    pool = make(2, worker_death="replace")
    shared = mizu.zeros(1000)
    pool.submit("function(x) sum(x)", shared).result(timeout=WAIT)
    futures = []
    for _ in range(3):
        # Once up: a worker that dies while it starts breaks the pool, as documented.
        wait_until(lambda: _all_up(pool), WAIT, "every worker up")
        os.kill(pool._pool.workers[0].process.pid, signal.SIGKILL)
        until = time.monotonic() + 0.5
        while time.monotonic() < until:
            futures.append(pool.submit("function(x) { Sys.sleep(0.001); sum(x) }", shared))
            time.sleep(0.001)
    done, late = cf.wait(futures, timeout=WAIT)
    assert not late, f"{len(late)} of {len(futures)} tasks never settled"
    errors = [f.exception() for f in futures if f.exception() is not None]
    assert all(isinstance(e, mizu.WorkerDied) for e in errors), errors[:3]
    assert len(errors) <= 3
    assert all(f.result() == 0 for f in futures if f.exception() is None)


def _spare(pool, others):
    """The pid of the one spare the pool keeps beside its workers, once it has started; fails after WAIT seconds.
    others: the client's children that are not the pool's."""
    deadline = time.monotonic() + WAIT
    while True:
        workers = {w.process.pid for w in pool._pool.workers}
        spares = [pid for pid in children_of(os.getpid()) if pid not in workers and pid not in others]
        assert len(spares) <= 1, spares
        if spares:
            return spares[0]
        assert time.monotonic() < deadline, "the pool started no spare"
        time.sleep(0.01)


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc: Linux only")
@pytest.mark.parametrize("how", ["deadline", "stop"])
def test_the_array_an_r_task_ended_while_it_runs_held_goes_back_to_the_client(r_library, client, tmp_path, how):
    assert_ended_tasks_give_their_array_back(client, r_children.client_ending_r_tasks_given_an_array, how,
                                             tmp_path, 8)


def test_an_r_pool_that_replaced_a_worker_keeps_a_spare_which_runs_setup_once_it_takes_a_place(make, tmp_path):
    log = tmp_path / "setup"
    others = set(children_of(os.getpid()))
    pool = make(1, worker_death="replace", setup=f'cat(Sys.getpid(), "\\n", file = "{log}", append = TRUE)')
    first = pool.submit(PID).result(timeout=WAIT)
    assert set(children_of(os.getpid())) - others == {first}
    assert isinstance(pool.submit("function() quit(status = 3)").exception(timeout=WAIT), mizu.WorkerDied)
    second = pool.submit(PID).result(timeout=WAIT)
    spare = _spare(pool, others)
    assert spare not in (first, second)
    assert isinstance(pool.submit("function() quit(status = 3)").exception(timeout=WAIT), mizu.WorkerDied)
    assert pool.submit(PID).result(timeout=WAIT) == spare
    assert [int(line) for line in log.read_text().split()] == [first, second, spare]
    following = _spare(pool, others)
    pool.shutdown()
    exit_all([spare, following], WAIT)


@pytest.mark.parametrize("worker_death", [None, "break"])
def test_by_default_an_r_worker_that_dies_breaks_the_pool(make, worker_death):
    pool = make(2, **({} if worker_death is None else {"worker_death": worker_death}))
    futures = [pool.submit("function() quit(status = 3)"), pool.submit("function() Sys.sleep(60)")]
    futures += [pool.submit("function(x) x", i) for i in range(4)]
    for future in futures:
        assert isinstance(future.exception(timeout=WAIT), BrokenProcessPool)
    with pytest.raises(BrokenProcessPool):
        pool.submit(PID)


@pytest.mark.parametrize("action", ["deadline", "stop"])
def test_a_deadline_or_a_stop_does_not_break_an_r_pool_that_breaks_on_death(make, tmp_path, action):
    pool = make(2, task_timeout=0.5 if action == "deadline" else None)
    tally = str(tmp_path / "tally")
    ended = pool.submit(R_TALLY_THEN_NAP, tally, "ended", WAIT)
    victim = tally_pid(tally, "ended")
    if action == "stop":
        assert pool.stop(ended) is True
    else:
        assert isinstance(ended.exception(timeout=WAIT), TimeoutError)
    assert pool.submit("function(x) x * 2L", 21).result(timeout=WAIT) == 42
    _full(pool, victim)


# -- a worker's memory ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("limit", [100 << 20, None], ids=["limit", "no limit"])
def test_an_r_worker_above_max_worker_memory_after_a_task_is_replaced_before_its_next(make, limit):
    baseline = resident_memory(make(1).submit(PID).result(timeout=WAIT))
    pool = make(1, max_worker_memory=limit and baseline + limit)
    first = pool.submit(PID).result(timeout=WAIT)
    assert pool.submit("function(x) x * 2L", 21).result(timeout=WAIT) == 42
    assert pool.submit(R_HOARD, 200 << 20).result(timeout=WAIT) == first
    after = pool.submit(PID).result(timeout=WAIT)
    if limit is None:
        assert after == first
    else:
        assert after != first
        exit_all([first], WAIT)
        assert pool.submit(PID).result(timeout=WAIT) == after


def test_the_client_s_arrays_an_r_worker_keeps_count_against_max_worker_memory(make):
    """They lie in the client's shared memory, which the worker's resident memory leaves out."""
    baseline = resident_memory(make(1).submit(PID).result(timeout=WAIT))
    pool = make(1, max_worker_memory=baseline + (100 << 20))
    first = pool.submit(PID).result(timeout=WAIT)
    keep = "function(x) { assign('kept', x, envir = globalenv()); Sys.getpid() }"
    assert pool.submit(keep, np.ones(25 << 20)).result(timeout=WAIT) == first
    assert pool.submit(PID).result(timeout=WAIT) != first


def test_the_client_s_arrays_an_r_worker_let_go_of_do_not_count_against_max_worker_memory(make):
    """Views of finished calls count until R collects them, which it does before retiring a worker over its limit."""
    call = "function(x) { s <- sum(x); Sys.getpid() }"
    probe = make(1)
    for _ in range(3):   # R's compiler loaded, the call compiled: as in the pool below
        probe.submit(call, np.ones(10)).result(timeout=WAIT)
    baseline = resident_memory(probe.submit(PID).result(timeout=WAIT))
    pool = make(1, max_worker_memory=baseline + (30 << 20))
    first = pool.submit(PID).result(timeout=WAIT)
    for _ in range(3):
        assert pool.submit(call, np.ones(5 << 20)).result(timeout=WAIT) == first
    assert pool.submit(PID).result(timeout=WAIT) == first


# -- arguments --------------------------------------------------------------------------------------------------


BAD_ARGUMENTS = [
    ({"task_timeout": "1"}, TypeError, "task_timeout"),
    ({"task_timeout": 0}, ValueError, "task_timeout"),
    ({"task_timeout": -1.5}, ValueError, "task_timeout"),
    ({"worker_death": "ignore"}, ValueError, "worker_death"),
    ({"max_worker_memory": 0}, ValueError, "max_worker_memory"),
    ({"max_worker_memory": "100MB"}, (TypeError, ValueError), "max_worker_memory"),
]


@pytest.mark.parametrize("kwargs, error, name", BAD_ARGUMENTS, ids=[repr(a[0]) for a in BAD_ARGUMENTS])
def test_bad_arguments_to_an_r_pool_are_refused_naming_the_argument(r_library, kwargs, error, name):
    with pytest.raises(error, match=name) as info:
        mizu.RExecutor(2, **kwargs)
    assert "unexpected keyword" not in str(info.value)


@pytest.mark.parametrize("value, error", [("1", TypeError), (0, ValueError)])
def test_options_of_an_r_pool_refuses_a_bad_deadline(make, value, error):
    pool = make(1)
    with pytest.raises(error, match="task_timeout"):
        pool.options(task_timeout=value)
    assert pool.submit("function(x) x * 2L", 21).result(timeout=WAIT) == 42
