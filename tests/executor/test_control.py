"""Control of running work: a deadline per task, stopping a task, replacing a worker that died or grew too large.

pebble's ProcessPool is the oracle where it has the behaviour: a task past
its deadline, a pending and a running task stopped, a worker that dies
mid-task. Each such case runs the same scenario on both pools and checks
what the caller sees: which futures succeed with what, which fail with
TimeoutError, CancelledError or the pool's worker-death error, and how many
times each task started (each task appends a line to a file in tmp_path as
it starts). What pebble lacks (the pool's size kept, a worker's memory
limit, the stdlib's BrokenProcessPool by default, argument checks) is
checked against the issue's statement. Times are asserted only as bounds
on a hang: a task that will not stop has GRACE seconds beyond its deadline.
"""

import concurrent.futures as cf
import multiprocessing
import os
import signal
import sys
import threading
import time
from concurrent.futures.process import BrokenProcessPool

import pebble
import pytest

import children
import executor_children
import mizu
from helpers import (announced_pid, assert_ended_tasks_give_their_array_back, assert_stops, exit_all, require,
                     resident_memory, returns_within, settle_one_in_ten_overrunning, stop_once_answered, tallies,
                     tally_pid, wait_replaced, wait_until, workers_up)

pytestmark = pytest.mark.timeout(120)

WAIT = 60       # seconds a single wait may take before the case counts as hung
GRACE = 10      # seconds past its deadline by which a task that will not stop must have ended
# The controls that replace workers refuse a fork context: each case uses forkserver, for pebble too.
FORKSERVER = multiprocessing.get_context("forkserver")


class MizuPool:
    """mizu's pool with dead workers replaced, driven as the oracle is: a deadline per call through options()."""

    def __init__(self, workers, context):
        self.ex = mizu.ProcessPoolExecutor(workers, mp_context=context, worker_death="replace")
        self.died = mizu.WorkerDied
        self.timed_out = TimeoutError

    def submit(self, fn, *args, timeout=None):
        target = self.ex if timeout is None else self.ex.options(task_timeout=timeout)
        return target.submit(fn, *args)

    def stop(self, future):
        return self.ex.stop(future)

    @staticmethod
    def ending(error):
        """How the worker ended: ("exit", code) or ("signal", number)."""
        return ("signal", error.signal) if error.signal is not None else ("exit", error.exitcode)

    def close(self):
        """End the pool without waiting for its tasks: a case that failed may leave some running."""
        processes = list((self.ex._processes or {}).values())
        self.ex.shutdown(wait=False, cancel_futures=True)
        for process in processes:
            if process.is_alive():
                process.kill()


class PebblePool:
    """pebble's ProcessPool, the oracle: schedule(timeout=...), and a future's cancel() stops a running task."""

    def __init__(self, workers, context):
        self.pool = pebble.ProcessPool(max_workers=workers, context=context)
        self.died = pebble.ProcessExpired
        # concurrent.futures' own: before Python 3.11, not the builtin that mizu raises.
        self.timed_out = cf.TimeoutError

    def submit(self, fn, *args, timeout=None):
        return self.pool.schedule(fn, args=args, timeout=timeout)

    def stop(self, future):
        return future.cancel()

    @staticmethod
    def ending(error):
        return ("signal", -error.exitcode) if error.exitcode < 0 else ("exit", error.exitcode)

    def close(self):
        self.pool.stop()
        self.pool.join(WAIT)


@pytest.fixture(params=["mizu", "pebble"])
def oracle(request):
    """make(workers, context=forkserver): mizu's pool, then pebble's as the oracle; each ended when the case ends."""
    made = []

    def make(workers, context=FORKSERVER):
        made.append((MizuPool if request.param == "mizu" else PebblePool)(workers, context))
        return made[-1]

    yield make
    for pool in made:
        pool.close()


def _others(pool, tally, timeout=None):
    """A task beside the one under test and six queued behind it, each appending to tally as it starts."""
    beside = pool.submit(executor_children.tally_then_nap, tally, "beside", 1.0)
    return beside, [pool.submit(executor_children.tally_then_nap, tally, i, 0, timeout=timeout) for i in range(6)]


def _assert_the_others_ran_once(pool, tally, others, victim, **started):
    """The others (_others) succeed, each started once, as the task under test started `started`; its worker,
    victim, has exited; the pool takes new work, and mizu's is back to its size without the victim."""
    beside, queued = others
    assert beside.result(timeout=WAIT) == "beside"
    assert [f.result(timeout=WAIT) for f in queued] == list(range(6))
    exit_all([victim], WAIT)
    assert tallies(tally) == {**started, "beside": 1, **{str(i): 1 for i in range(6)}}
    assert pool.submit(children.double, 21).result(timeout=WAIT) == 42
    if isinstance(pool, MizuPool):
        _full(pool.ex, victim)


def _settles(future, within):
    """The future's exception once it is done; fails if it is not done within `within` seconds."""
    cf.wait([future], timeout=within)
    assert future.done(), f"the task was still running {within} s later"
    return future.exception()


def _full(ex, victim=None):
    """The pids of the pool's workers once it has max_workers again, victim not among them."""
    return wait_replaced(lambda: ex._processes, ex._max_workers, victim)


# -- a deadline per task ----------------------------------------------------------------------------------------


def test_a_task_past_its_deadline_fails_with_timeout_error_and_the_rest_run_once(oracle, tmp_path):
    pool = oracle(2)
    tally = str(tmp_path / "tally")
    late = pool.submit(executor_children.tally_then_nap, tally, "late", WAIT, timeout=0.5)
    others = _others(pool, tally, timeout=WAIT)
    victim = tally_pid(tally, "late")
    assert isinstance(late.exception(timeout=WAIT), pool.timed_out)
    _assert_the_others_ran_once(pool, tally, others, victim, late=1)


def test_the_deadline_counts_from_the_start_of_the_task_not_its_submission(oracle):
    pool = oracle(1)
    futures = [pool.submit(children.nap, 0.5, timeout=1.5) for _ in range(4)]
    assert [f.result(timeout=WAIT) for f in futures] == [0.5] * 4


def test_a_task_queued_behind_one_with_a_later_deadline_ends_by_its_own(oracle):
    pool = oracle(1)
    first = pool.submit(children.nap, 1.0, timeout=WAIT)
    late = pool.submit(children.nap, WAIT, timeout=0.5)
    assert first.result(timeout=WAIT) == 1.0
    assert isinstance(_settles(late, 0.5 + GRACE), pool.timed_out)


@pytest.mark.parametrize("task", ["sleep in C", "SIGTERM ignored"])
def test_a_task_that_does_not_stop_at_sigterm_still_ends_by_its_deadline(oracle, tmp_path, task):
    pool = oracle(1)
    marker = str(tmp_path / "running")
    fn = {"sleep in C": executor_children.announce_then_sleep_in_c,
          "SIGTERM ignored": executor_children.ignore_sigterm_then_nap}[task]
    stuck = pool.submit(fn, marker, 120, timeout=0.5)
    victim = announced_pid(marker)
    assert isinstance(_settles(stuck, 0.5 + GRACE), pool.timed_out)
    exit_all([victim], GRACE)
    assert pool.submit(children.pid).result(timeout=WAIT) != victim


def test_a_thousand_short_tasks_one_in_ten_overrunning_each_settle_once(tmp_path):
    tally = str(tmp_path / "tally")
    ex = mizu.ProcessPoolExecutor(2, mp_context=FORKSERVER, task_timeout=0.2)
    try:
        pids = settle_one_in_ten_overrunning(
            ex, lambda view, i, seconds: view.submit(executor_children.tally_then_nap, tally, i, seconds), 1000,
            tally, 120)
        _full(ex)
        assert ex.submit(children.double, 21).result(timeout=WAIT) == 42
    finally:
        returns_within(lambda: ex.shutdown(wait=True), WAIT)
    exit_all(pids, 10)


# -- stopping a task --------------------------------------------------------------------------------------------


def test_stopping_a_pending_task_cancels_it_and_ends_no_worker(oracle, tmp_path):
    pool = oracle(1)
    tally = str(tmp_path / "tally")
    gate = tmp_path / "gate"
    busy = pool.submit(executor_children.tally_then_nap, tally, "busy", 0)
    busy.result(timeout=WAIT)
    gated = pool.submit(children.wait_for_file, str(gate))
    pending = pool.submit(executor_children.tally_then_nap, tally, "pending", 0)
    assert_stops(pool.stop, pending)
    gate.touch()
    worker = gated.result(timeout=WAIT)
    assert pool.submit(executor_children.tally_then_nap, tally, "after", 0).result(timeout=WAIT) == "after"
    assert tallies(tally) == {"busy": 1, "after": 1}
    assert tally_pid(tally, "after") == worker == tally_pid(tally, "busy")


def test_stopping_a_running_task_cancels_it_ends_its_worker_and_the_rest_run_once(oracle, tmp_path):
    pool = oracle(2)
    tally = str(tmp_path / "tally")
    running = pool.submit(executor_children.tally_then_nap, tally, "running", WAIT)
    others = _others(pool, tally)
    victim = tally_pid(tally, "running")
    assert_stops(pool.stop, running)
    _assert_the_others_ran_once(pool, tally, others, victim, running=1)


def test_stopping_a_done_future_returns_false_and_keeps_its_result(oracle):
    pool = oracle(1)
    done = pool.submit(children.double, 21)
    assert done.result(timeout=WAIT) == 42
    assert pool.stop(done) is False
    assert not done.cancelled()
    assert done.result(timeout=0) == 42


@pytest.mark.parametrize("method, task_timeout", [("forkserver", None), ("forkserver", WAIT), ("fork", None)])
def test_stopping_a_task_answered_but_not_yet_collected_returns_false_and_keeps_its_result(tmp_path, method,
                                                                                           task_timeout):
    """The worker has sent the task's result, which nobody has collected yet (the thread that collects runs the
    done-callback that stops it): the task has ended, with or without a deadline, so nothing is stopped; nor does a
    fork pool, which cannot stop a running task, refuse."""
    tally, gate = str(tmp_path / "tally"), str(tmp_path / "gate")
    context = multiprocessing.get_context(method)
    with mizu.ProcessPoolExecutor(1, mp_context=context, task_timeout=task_timeout) as ex:
        worker = ex.submit(children.pid).result(timeout=WAIT)
        gated = ex.submit(children.wait_for_file, gate)
        answered = ex.submit(executor_children.tally_then_nap, tally, "answered", 0)
        assert stop_once_answered(ex, gated, gate, answered, WAIT) is False
        assert answered.result(timeout=WAIT) == "answered"
        assert ex.submit(children.pid).result(timeout=WAIT) == worker
    assert tallies(tally) == {"answered": 1}


@pytest.mark.parametrize("kind", ["mizu", "stdlib"])
def test_cancel_keeps_the_stdlib_meaning_beside_a_deadline(tmp_path, kind):
    marker, gate = str(tmp_path / "running"), tmp_path / "gate"
    ex = mizu.ProcessPoolExecutor(1, task_timeout=WAIT) if kind == "mizu" else cf.ProcessPoolExecutor(1)
    with ex:
        # Held at the gate, however late this thread looks: the queued tasks wait behind it.
        running = ex.submit(executor_children.announce_then_wait, marker, str(gate))
        queued = [ex.submit(children.double, i) for i in range(8)]
        worker = announced_pid(marker)
        assert running.cancel() is False
        assert queued[-1].cancel() is True
        gate.touch()
        assert running.result(timeout=WAIT) == worker
        assert [f.result(timeout=WAIT) for f in queued[:-1]] == [2 * i for i in range(7)]
        assert queued[-1].cancelled()


# -- a worker that dies mid-task --------------------------------------------------------------------------------


ENDINGS = {"exit": ("exit", 3), "killed": ("signal", signal.SIGKILL), "segfault": ("signal", signal.SIGSEGV)}


@pytest.mark.parametrize("method", ["forkserver", "spawn"])
@pytest.mark.parametrize("how", list(ENDINGS))
def test_a_worker_that_dies_mid_task_fails_only_its_task(oracle, tmp_path, how, method):
    pool = oracle(2, multiprocessing.get_context(method))
    marker = str(tmp_path / "running")
    tally = str(tmp_path / "tally")
    dying = pool.submit(executor_children.announce_then_end, marker, how)
    others = _others(pool, tally)
    victim = announced_pid(marker)
    # The worker ends only once the pool counts the task as running: pebble's pool, told of a death before the
    # worker's note that it took the task, fails the task with "All workers expired" instead.
    wait_until(dying.running, WAIT, "the task's running state")
    open(marker + ".end", "w").close()
    if how == "killed":
        os.kill(victim, signal.SIGKILL)
    error = dying.exception(timeout=WAIT)
    assert isinstance(error, pool.died), repr(error)
    assert error.pid == victim
    assert pool.ending(error) == ENDINGS[how]
    _assert_the_others_ran_once(pool, tally, others, victim)
    if isinstance(pool, MizuPool):
        assert isinstance(error, BrokenProcessPool)
        assert error.exitcode is None or isinstance(error.exitcode, int)
        assert "announce_then_end" in error.task, error.task


def test_a_worker_that_answers_and_dies_while_another_is_replaced_keeps_its_result(tmp_path, monkeypatch):
    """The pool replaces a dead worker while another answers a task and then dies: that task keeps its result,
    the next look at the workers replaces the second, and the pool goes on."""
    with mizu.ProcessPoolExecutor(2, mp_context=FORKSERVER, worker_death="replace") as ex:
        workers_up(ex, str(tmp_path), 2)
        marker, gate, hold = str(tmp_path / "answering"), str(tmp_path / "answer"), str(tmp_path / "hold")
        # The first worker holds a task, so the second gets the one that answers; the first then gets the one
        # that dies, and is looked at first.
        held = ex.submit(children.wait_for_file, hold)
        answering = ex.submit(executor_children.answer_then_exit_soon, marker, gate, "kept")
        second = announced_pid(marker)
        open(hold, "w").close()
        assert held.result(timeout=WAIT) != second
        launch = ex._pool.launcher.launch

        def launch_once_the_second_died(*args):
            # After the pool looked for dead workers: the second answers and dies before the first is replaced.
            if not os.path.exists(gate):
                open(gate, "w").close()
                exit_all([second], WAIT)
            return launch(*args)

        monkeypatch.setattr(ex._pool.launcher, "launch", launch_once_the_second_died)
        dying = ex.submit(os._exit, 3)   # to the idle worker
        assert isinstance(dying.exception(timeout=WAIT), mizu.WorkerDied)
        assert answering.result(timeout=WAIT) == "kept"
        wait_replaced(lambda: ex._processes, 2, second, WAIT)
        assert ex.submit(children.double, 21).result(timeout=WAIT) == 42


@pytest.mark.parametrize("worker_death", [None, "break"])
def test_by_default_a_worker_that_dies_breaks_the_pool_as_the_stdlibs_does(worker_death):
    ex = mizu.ProcessPoolExecutor(2, **({} if worker_death is None else {"worker_death": worker_death}))
    try:
        futures = [ex.submit(executor_children.die_at, 7), ex.submit(children.nap, WAIT)]
        futures += [ex.submit(children.double, i) for i in range(4)]
        for future in futures:
            assert isinstance(future.exception(timeout=WAIT), BrokenProcessPool)
        with pytest.raises(BrokenProcessPool):
            ex.submit(children.double, 1)
    finally:
        returns_within(lambda: ex.shutdown(wait=True), WAIT)


@pytest.mark.parametrize("action", ["deadline", "stop"])
def test_a_deadline_or_a_stop_does_not_break_a_pool_that_breaks_on_death(tmp_path, action):
    marker = str(tmp_path / "running")
    with mizu.ProcessPoolExecutor(2, mp_context=FORKSERVER, task_timeout=0.5 if action == "deadline" else None) as ex:
        ended = ex.submit(children.announce_then_nap, marker, WAIT)
        victim = announced_pid(marker)
        if action == "stop":
            assert ex.stop(ended) is True
        else:
            assert isinstance(ended.exception(timeout=WAIT), TimeoutError)
        assert ex.submit(children.double, 21).result(timeout=WAIT) == 42
        _full(ex, victim)


def _spares(ex):
    """The pids of the client's processes that are not the pool's workers: its spare, once it keeps one."""
    workers = set(ex._processes)
    return [process.pid for process in multiprocessing.active_children() if process.pid not in workers]


def _spare(ex):
    """The pid of the one spare the pool keeps, once it has started; fails after WAIT seconds."""
    deadline = time.monotonic() + WAIT
    while not (spares := _spares(ex)):
        assert time.monotonic() < deadline, "the pool started no spare"
        time.sleep(0.01)
    assert len(spares) == 1, spares
    return spares[0]


def _dies(ex):
    assert isinstance(ex.submit(os._exit, 3).exception(timeout=WAIT), mizu.WorkerDied)


def test_a_pool_that_replaced_a_worker_keeps_a_spare_which_initializes_once_it_takes_a_place(tmp_path):
    log = str(tmp_path / "initialized")
    with mizu.ProcessPoolExecutor(1, mp_context=FORKSERVER, worker_death="replace",
                                  initializer=executor_children.tally_then_nap, initargs=(log, "init", 0)) as ex:
        first = ex.submit(os.getpid).result(timeout=WAIT)
        assert _spares(ex) == []
        _dies(ex)
        second = ex.submit(os.getpid).result(timeout=WAIT)
        spare = _spare(ex)
        assert spare not in (first, second)
        _dies(ex)
        assert ex.submit(os.getpid).result(timeout=WAIT) == spare
        with open(log) as file:
            assert [int(line.split()[1]) for line in file] == [first, second, spare]
        assert _spare(ex) not in (first, second, spare)
    assert multiprocessing.active_children() == []


def test_a_spare_that_died_waiting_is_passed_over(tmp_path):
    with mizu.ProcessPoolExecutor(2, mp_context=FORKSERVER, worker_death="replace") as ex:
        ex.submit(os.getpid).result(timeout=WAIT)
        _dies(ex)
        spare = _spare(ex)
        os.kill(spare, signal.SIGKILL)
        exit_all([spare], WAIT)
        _dies(ex)
        assert sorted(ex.map(children.double, range(8), timeout=WAIT)) == list(range(0, 16, 2))
        assert spare not in _full(ex)
    assert multiprocessing.active_children() == []


def test_a_task_a_successor_took_before_it_was_up_runs_elsewhere_while_its_initializer_waits(tmp_path):
    """A successor takes a task before it is up when no worker that is up has room; once one idles, it runs the
    task, as a worker of the stdlib's takes whatever waits in the shared call queue, rather than the task waiting
    for the initializer."""
    armed, path, gate = (str(tmp_path / name) for name in ("armed", "initializing", "gate"))
    with mizu.ProcessPoolExecutor(2, mp_context=FORKSERVER, worker_death="replace",
                                  initializer=executor_children.wait_in_initializer_once_armed,
                                  initargs=(armed, path, gate)) as ex:
        workers_up(ex, str(tmp_path), 2)
        open(armed, "w").close()
        _dies(ex)
        waiting = announced_pid(path)
        futures = [ex.submit(children.nap_then_pid, 0.01) for _ in range(20)]
        try:
            assert waiting not in {f.result(timeout=WAIT) for f in futures}
        finally:
            open(gate, "w").close()


def _socket_of(pid):
    """A copy, in this process, of the socket of process pid (a spare waits for its place on its only one), by
    pidfd_getfd; skips where the kernel has none."""
    import ctypes
    sockets = [int(name) for name in os.listdir(f"/proc/{pid}/fd")
               if os.readlink(f"/proc/{pid}/fd/{name}").startswith("socket:")]
    assert len(sockets) == 1, sockets
    libc = ctypes.CDLL(None, use_errno=True)
    pidfd = os.pidfd_open(pid)
    try:
        fd = libc.syscall(438, pidfd, sockets[0], 0)   # pidfd_getfd
    finally:
        os.close(pidfd)
    require(fd >= 0, f"pidfd_getfd failed: {os.strerror(ctypes.get_errno())}")
    return fd


@pytest.mark.skipif(sys.platform != "linux", reason="pidfd_getfd: Linux only")
def test_a_spare_killed_as_it_is_handed_its_place_is_passed_over_and_the_pool_goes_on(tmp_path):
    """A spare killed so recently that its socket is still open (here, a copy of it that this test closes a
    moment later) has taken no place: the pool starts another worker rather than breaking."""
    spawn = multiprocessing.get_context("spawn")   # the spare is this process's child, whose socket it may copy
    with mizu.ProcessPoolExecutor(2, mp_context=spawn, worker_death="replace") as ex:
        workers_up(ex, str(tmp_path), 2)
        _dies(ex)
        spare = _spare(ex)
        _waits_for_its_place(spare)
        held = _socket_of(spare)
        os.kill(spare, signal.SIGKILL)
        exit_all([spare], WAIT)
        closer = threading.Timer(0.2, os.close, (held,))
        closer.start()
        try:
            _dies(ex)
            assert sorted(ex.map(children.double, range(8), timeout=WAIT)) == list(range(0, 16, 2))
        finally:
            closer.join()
        assert spare not in _full(ex)
    assert multiprocessing.active_children() == []


def _waits_for_its_place(pid):
    """Return once the spare pid waits for its index (its main thread sleeps in poll); fails after WAIT seconds."""
    deadline = time.monotonic() + WAIT
    while True:
        with open(f"/proc/{pid}/wchan") as file:
            if "poll" in file.read():
                return
        assert time.monotonic() < deadline, f"the spare {pid} never waited for its place"
        time.sleep(0.005)


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc: Linux only")
def test_a_spare_that_got_ctrl_c_while_waiting_still_takes_the_next_place():
    with mizu.ProcessPoolExecutor(1, mp_context=FORKSERVER, worker_death="replace") as ex:
        ex.submit(os.getpid).result(timeout=WAIT)
        _dies(ex)
        spare = _spare(ex)
        _waits_for_its_place(spare)
        os.kill(spare, signal.SIGINT)
        _dies(ex)
        assert ex.submit(os.getpid).result(timeout=WAIT) == spare
    assert multiprocessing.active_children() == []


@pytest.mark.parametrize("end", ["shutdown", *(pytest.param(name, marks=pytest.mark.python_from((3, 14)))
                                               for name in ("terminate_workers", "kill_workers"))])
def test_a_pool_ended_as_it_replaces_a_worker_leaves_no_process(end):
    ex = mizu.ProcessPoolExecutor(2, mp_context=FORKSERVER, worker_death="replace")
    ex.submit(os.getpid).result(timeout=WAIT)
    dying = ex.submit(os._exit, 3)
    if end == "shutdown":
        assert isinstance(dying.exception(timeout=WAIT), mizu.WorkerDied)
    getattr(ex, end)()
    ex.shutdown()
    assert multiprocessing.active_children() == []


# -- a worker's memory ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("limit", [100 << 20, None], ids=["limit", "no limit"])
def test_a_worker_above_max_worker_memory_after_a_task_is_replaced_before_its_next(limit):
    with mizu.ProcessPoolExecutor(1, mp_context=FORKSERVER) as probe:
        # The limit is above what a worker takes before its first task.
        baseline = resident_memory(probe.submit(children.pid).result(timeout=WAIT))
    with mizu.ProcessPoolExecutor(1, mp_context=FORKSERVER, max_worker_memory=limit and baseline + limit) as ex:
        first = ex.submit(children.pid).result(timeout=WAIT)
        assert ex.submit(children.double, 21).result(timeout=WAIT) == 42
        assert ex.submit(executor_children.hoard, 200 << 20).result(timeout=WAIT) == first
        after = ex.submit(children.pid).result(timeout=WAIT)
        if limit is None:
            assert after == first
        else:
            assert after != first
            exit_all([first], WAIT)
            assert ex.submit(children.pid).result(timeout=WAIT) == after
            assert len(ex._processes) == 1


@pytest.mark.parametrize("kept", ["arrays it made", "arrays it was given", "views of one array it was given",
                                  "arrays it returned"])
def test_the_shared_memory_arrays_a_worker_holds_count_against_max_worker_memory(kept):
    """They lie in the pool's shared memory, which resident memory leaves out; an array held through many views
    counts once, and those the client now holds do not count."""
    import numpy as np

    with mizu.ProcessPoolExecutor(1, mp_context=FORKSERVER) as probe:
        baseline = resident_memory(probe.submit(executor_children.hoard_array, 1).result(timeout=WAIT))
    with mizu.ProcessPoolExecutor(1, mp_context=FORKSERVER, max_worker_memory=baseline + (100 << 20)) as ex:
        # Once a task has imported numpy, the worker's large arrays lie in its arena.
        first = ex.submit(executor_children.hoard_array, 1).result(timeout=WAIT)
        if kept == "arrays it made":
            assert ex.submit(executor_children.hoard_array, 200 << 20).result(timeout=WAIT) == first
        elif kept == "arrays it was given":
            given = np.ones(200 << 20, dtype=np.uint8)
            assert ex.submit(executor_children.hoard_value, given).result(timeout=WAIT) == first
        elif kept == "views of one array it was given":
            shared = mizu.full(40 << 20, 1, dtype=np.uint8)
            views = [shared[k:k + 1] for k in range(10)]
            assert ex.submit(executor_children.hoard_value, views).result(timeout=WAIT) == first
        else:
            returned = [ex.submit(executor_children.ones, 40 << 20).result(timeout=WAIT) for _ in range(5)]
            assert all(mizu.arena_block(a) is not None for a in returned), "results in shared memory"
        after = ex.submit(children.pid).result(timeout=WAIT)
        assert (after == first) == kept.startswith(("views", "arrays it returned"))


@pytest.mark.parametrize("how", ["deadline", "stop"])
def test_the_array_a_task_ended_while_it_runs_held_goes_back_to_the_client(client, tmp_path, how):
    assert_ended_tasks_give_their_array_back(client, executor_children.client_ending_tasks_given_an_array, how,
                                             tmp_path, 12)


def test_a_done_callback_stops_the_task_queued_behind_its_own_on_a_worker_retiring_for_its_memory(tmp_path):
    """The task behind one that a worker answers, then retires for its memory, was sent to that worker ahead:
    stopped from the first one's done-callback, it is cancelled, never runs, and the pool goes on."""
    tally = str(tmp_path / "tally")
    with mizu.ProcessPoolExecutor(1, mp_context=FORKSERVER) as probe:
        baseline = resident_memory(probe.submit(children.pid).result(timeout=WAIT))
    with mizu.ProcessPoolExecutor(1, mp_context=FORKSERVER, task_timeout=WAIT,
                                  max_worker_memory=baseline + (100 << 20)) as ex:
        first = ex.submit(children.pid).result(timeout=WAIT)
        big = ex.submit(executor_children.hoard, 200 << 20)
        queued = ex.submit(executor_children.tally_then_nap, tally, "queued", 0)
        stopped = []
        big.add_done_callback(lambda _: stopped.append(ex.stop(queued)))
        assert big.result(timeout=WAIT) == first
        wait_until(lambda: stopped, WAIT, "the done-callback")
        assert stopped == [True] and queued.cancelled()
        assert ex.submit(children.double, 21).result(timeout=WAIT) == 42
    assert not os.path.exists(tally)


# -- options and arguments --------------------------------------------------------------------------------------


def test_options_gives_a_view_whose_submit_and_map_use_its_deadline():
    with mizu.ProcessPoolExecutor(2, mp_context=FORKSERVER) as ex:
        view = ex.options(task_timeout=0.5)
        assert isinstance(view.submit(children.nap, WAIT).exception(timeout=WAIT), TimeoutError)
        assert ex.submit(children.nap, 1.0).result(timeout=WAIT) == 1.0
        results = view.map(children.nap, [0, WAIT])
        assert next(results) == 0
        with pytest.raises(TimeoutError):
            next(results)
        assert view._max_workers == ex._max_workers
        assert list(view.map(children.double, range(5))) == [0, 2, 4, 6, 8]


def test_the_pools_deadline_applies_to_submit_and_map_and_options_overrides_it():
    with mizu.ProcessPoolExecutor(2, task_timeout=0.5) as ex:
        assert isinstance(ex.submit(children.nap, WAIT).exception(timeout=WAIT), TimeoutError)
        with pytest.raises(TimeoutError):
            list(ex.map(children.nap, [WAIT]))
        assert ex.options(task_timeout=WAIT).submit(children.nap, 1.0).result(timeout=WAIT) == 1.0
        assert ex.submit(children.double, 21).result(timeout=WAIT) == 42


BAD_ARGUMENTS = [
    ({"task_timeout": "1"}, TypeError, "task_timeout"),
    ({"task_timeout": [1]}, TypeError, "task_timeout"),
    ({"task_timeout": 0}, ValueError, "task_timeout"),
    ({"task_timeout": -1.5}, ValueError, "task_timeout"),
    ({"worker_death": "ignore"}, ValueError, "worker_death"),
    ({"worker_death": None}, ValueError, "worker_death"),
    ({"max_worker_memory": 0}, ValueError, "max_worker_memory"),
    ({"max_worker_memory": -1}, ValueError, "max_worker_memory"),
    ({"max_worker_memory": "100MB"}, (TypeError, ValueError), "max_worker_memory"),
]


@pytest.mark.parametrize("kwargs, error, name", BAD_ARGUMENTS, ids=[repr(a[0]) for a in BAD_ARGUMENTS])
def test_bad_arguments_are_refused_naming_the_argument(kwargs, error, name):
    with pytest.raises(error, match=name) as info:
        mizu.ProcessPoolExecutor(2, **kwargs)
    assert "unexpected keyword" not in str(info.value)


@pytest.mark.parametrize("controls", [{"task_timeout": 1e12}, {"task_timeout": 10 ** 400}, {"max_worker_memory": 2 ** 70},
                                      {"max_tasks_per_child": 2 ** 63}], ids=lambda controls: repr(controls))
def test_a_limit_no_pool_comes_near_is_no_limit(controls):
    """As math.inf is for task_timeout; the stdlib's pool takes any max_tasks_per_child."""
    with mizu.ProcessPoolExecutor(1, mp_context=FORKSERVER, **controls) as ex:
        first = ex.submit(children.pid).result(timeout=WAIT)
        assert ex.options(task_timeout=10 ** 15).submit(children.double, 21).result(timeout=WAIT) == 42
        assert ex.submit(children.pid).result(timeout=WAIT) == first


@pytest.mark.parametrize("control", [{"task_timeout": 1}, {"worker_death": "replace"}, {"max_worker_memory": 1 << 30}],
                         ids=lambda control: next(iter(control)))
def test_a_control_that_replaces_workers_refuses_a_fork_context(control):
    with pytest.raises(ValueError, match=f"{next(iter(control))}.*'fork'"):
        mizu.ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("fork"), **control)


def test_a_fork_pool_refuses_the_controls_that_would_replace_a_worker_while_it_runs(tmp_path):
    marker = str(tmp_path / "running")
    with mizu.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork")) as ex:
        with pytest.raises(ValueError, match="task_timeout.*'fork'"):
            ex.options(task_timeout=1)
        running = ex.submit(children.announce_then_nap, marker, 0.5)
        pending = ex.submit(children.double, 1)
        announced_pid(marker)
        assert ex.stop(pending) is True and pending.cancelled()
        with pytest.raises(ValueError, match="fork"):
            ex.stop(running)
        assert running.result(timeout=WAIT) == 0.5


def test_a_task_whose_arguments_kill_the_worker_reading_them_fails_and_is_not_sent_again():
    with mizu.ProcessPoolExecutor(2, mp_context=FORKSERVER, worker_death="replace") as ex:
        doomed = ex.submit(children.double, executor_children.ExitsWhenUnpickled())
        error = doomed.exception(timeout=WAIT)
        assert isinstance(error, mizu.WorkerDied) and error.exitcode == 3
        assert [f.result(timeout=WAIT) for f in [ex.submit(children.double, i) for i in range(4)]] == [0, 2, 4, 6]
        assert len(_full(ex)) == 2


@pytest.mark.parametrize("value, error", [("1", TypeError), (0, ValueError), (-0.1, ValueError)])
def test_options_refuses_a_bad_deadline(value, error):
    with mizu.ProcessPoolExecutor(1) as ex:
        with pytest.raises(error, match="task_timeout"):
            ex.options(task_timeout=value)
        assert ex.submit(children.double, 21).result(timeout=WAIT) == 42
