"""Faults on the worker side, run against mizu and the stdlib's ProcessPoolExecutor as the oracle.

Workers die (SIGKILL while idle, in a task, in the middle of a large result
or argument; a segfault; os._exit), tasks raise what could pass for the end
of their worker (SystemExit, KeyboardInterrupt), values fail to pickle or to
unpickle on either side, initializers raise, and workers retire under load.
Each case checks what a user sees: which futures get which exception, whether
the pool stays usable, that shutdown returns, and (the autouse fixture) that
no process and no /dev/shm entry is left. Every wait is bounded, so a hang
fails. For mizu the cases also read the BrokenProcessPool messages, which
name the dead worker, how it ended and the task it was running.
"""

import concurrent.futures as cf
import itertools
import multiprocessing
import os
import pickle
import signal
import struct
import threading
import time
from concurrent.futures.process import BrokenProcessPool, _RemoteTraceback

import pytest

import children
import executor_children
import mizu
from helpers import announced_pid, returns_within, wait_until_blocked

pytestmark = pytest.mark.timeout(100)

WAIT = 60           # seconds a single wait may take before the case counts as hung
BIG = 50 << 20      # bytes of a large result or argument

# The stdlib's texts, which mizu's messages start with.
BROKEN_FUTURE = "A process in the process pool was terminated abruptly while the future was running or pending."
BROKEN_POOL = "A child process terminated abruptly, the process pool is not usable anymore"


@pytest.fixture(params=["fork", "spawn"])
def context(request):
    """The fork and spawn contexts: a worker that inherits the client, and one that starts afresh."""
    if request.param not in multiprocessing.get_all_start_methods():
        pytest.skip(f"no {request.param} start method here")
    return multiprocessing.get_context(request.param)


@pytest.fixture
def make():
    """make(kind, *args, **kwargs): a pool that is ended, without waiting for its tasks, when the case ends."""
    made = []

    def make_pool(kind, *args, **kwargs):
        made.append(kind(*args, **kwargs))
        return made[-1]

    yield make_pool
    for ex in made:
        processes = list((ex._processes or {}).values())
        ex.shutdown(wait=False, cancel_futures=True)
        for process in processes:
            if process.is_alive():
                process.kill()


def _is_mizu(ex):
    return isinstance(ex, mizu.ProcessPoolExecutor)


def _submit_until_broken(ex, n, fn, *args):
    """Futures of up to n calls fn(*args): fewer if the pool breaks first, as it may while they are submitted."""
    futures = []
    for _ in range(n):
        try:
            futures.append(ex.submit(fn, *args))
        except BrokenProcessPool:
            break
        except (OSError, ValueError):
            # The stdlib's own race under spawn: its submit starts a worker,
            # passing it the pipes that its manager thread, breaking the
            # pool, has just closed ("handle is closed", "bad value(s) in
            # fds_to_keep").
            if _is_mizu(ex):
                raise
            break
    return futures


def _broken_errors(ex, futures):
    """Each future's BrokenProcessPool, after checking that submit refuses and that shutdown does not hang."""
    errors = []
    for future in futures:
        with pytest.raises(BrokenProcessPool) as info:
            future.result(timeout=WAIT)
        errors.append(info.value)
    with pytest.raises(BrokenProcessPool) as info:
        ex.submit(children.double, 1)
    refusal = info.value
    returns_within(lambda: ex.shutdown(wait=True), WAIT)
    return errors, refusal


def _assert_names(errors, refusal, *details, traceback=None):
    """mizu's messages: the stdlib's text first, then the details.

    The cause of each error shows the details too, or else a traceback whose
    last line starts with traceback.
    """
    for error in errors:
        text = str(error)
        assert text.startswith(BROKEN_FUTURE), text
        assert type(error.__cause__) is _RemoteTraceback
        cause = error.__cause__.tb
        for detail in details:
            assert detail in text, (detail, text)
            assert traceback is not None or detail in cause, (detail, cause)
        if traceback is not None:
            assert "Traceback (most recent call last)" in cause, cause
            assert cause.rstrip("'\n").splitlines()[-1].startswith(traceback), cause
    text = str(refusal)
    assert text.startswith(BROKEN_POOL), text
    for detail in details:
        assert detail in text, (detail, text)


# -- a worker killed --------------------------------------------------------------------------------


def test_sigkill_of_an_idle_worker_breaks_the_pool(make, executor_type, context):
    ex = make(executor_type, 2, mp_context=context)
    assert ex.submit(children.double, 1).result(timeout=WAIT) == 2
    victim = next(iter(ex._processes))
    os.kill(victim, signal.SIGKILL)
    # Until the pool notices, a task may still go to the live worker and
    # succeed; then submit refuses.
    futures = []
    deadline = time.monotonic() + WAIT
    while True:
        try:
            futures.append(ex.submit(children.double, 21))
        except BrokenProcessPool as exc:
            refusal = exc
            break
        except OSError as exc:
            # The stdlib's own race under spawn: its submit starts a worker
            # and pickles the call queue that its manager thread, breaking
            # the pool, has just closed ("handle is closed").
            if _is_mizu(ex):
                raise
            refusal = exc
            break
        assert time.monotonic() < deadline, "the pool never noticed the dead worker"
        time.sleep(0.005)
    for future in futures:
        try:
            assert future.result(timeout=WAIT) == 42
        except BrokenProcessPool:
            pass
    returns_within(lambda: ex.shutdown(wait=True), WAIT)
    if _is_mizu(ex):
        _assert_names([], refusal, f"Process {victim} (mizu-worker-", "terminated abruptly with exit code -9 (SIGKILL)")


def test_sigkill_mid_task_fails_every_pending_future(make, executor_type, context, tmp_path):
    ex = make(executor_type, 2, mp_context=context)
    marker = str(tmp_path / "running")
    running = ex.submit(children.announce_then_nap, marker, WAIT)
    beside = ex.submit(children.nap, WAIT)
    queued = [ex.submit(children.double, i) for i in range(6)]
    called_back = []
    queued[-1].add_done_callback(lambda f: called_back.append(type(f.exception())))
    victim = announced_pid(marker)
    os.kill(victim, signal.SIGKILL)
    futures = [running, beside, *queued]
    done, not_done = cf.wait(futures, timeout=WAIT)
    assert not not_done
    errors, refusal = _broken_errors(ex, futures)
    assert called_back == [BrokenProcessPool]
    if _is_mizu(ex):
        # Each future has an error of its own, so raising one does not grow
        # another's traceback (the stdlib gives them all one: python/cpython#101267).
        assert len({id(error) for error in errors}) == len(errors)
        _assert_names(errors, refusal, f"Process {victim} (mizu-worker-", "terminated abruptly with exit code -9 (SIGKILL) while "
                      "running children.announce_then_nap('")


def test_sigkill_while_a_large_result_fills_the_ring(make, context, tmp_path):
    """A worker killed halfway through pushing the frames of a 50 MB result.

    mizu only: the stdlib's result thread reads the dead worker's
    half-written message from a pipe that the client itself keeps open, and
    waits forever for the rest. To hold the worker halfway, a done-callback
    of an earlier task blocks the thread that collects results until the
    worker is killed: the ring fills and the worker sleeps in its push.
    """
    ex = make(mizu.ProcessPoolExecutor, 1, mp_context=context)
    entered, release = threading.Event(), threading.Event()
    first = ex.submit(children.nap, 0.2)
    first.add_done_callback(lambda f: (entered.set(), release.wait(WAIT)))
    marker = str(tmp_path / "writing")
    big = ex.submit(executor_children.announce_then_bytes, marker, BIG)
    try:
        assert entered.wait(WAIT)
        queued = [ex.submit(children.double, i) for i in range(3)]
        victim = announced_pid(marker)
        wait_until_blocked(victim)
        os.kill(victim, signal.SIGKILL)
    finally:
        release.set()
    assert first.result(timeout=WAIT) == 0.2
    errors, refusal = _broken_errors(ex, [big, *queued])
    _assert_names(errors, refusal, f"Process {victim} (mizu-worker-0) terminated abruptly with exit code -9 (SIGKILL) while "
                  "running executor_children.announce_then_bytes('")


def test_segfault_while_a_large_array_result_is_copied_out(make, executor_type, context):
    """The worker copies a 64 MB array result (to the arena, or into the pickle) and crashes halfway."""
    ex = make(executor_type, 2, mp_context=context)
    doomed = ex.submit(executor_children.half_readable_array, 64 << 20)
    errors, refusal = _broken_errors(ex, [doomed])
    if _is_mizu(ex):
        _assert_names(errors, refusal, "terminated abruptly with exit code -11 (SIGSEGV) while running "
                      "executor_children.half_readable_array(67108864).")


@pytest.mark.stdlib_oracle_from((3, 11, 5))   # before, its feeder thread stays stuck writing (gh-94777)
def test_sigkill_while_a_large_argument_is_written(make, executor_type, context, tmp_path):
    """A 50 MB argument waits to be written to a worker that is busy, and the worker is killed."""
    ex = make(executor_type, 1, mp_context=context)
    marker = str(tmp_path / "busy")
    busy = ex.submit(children.announce_then_nap, marker, WAIT)
    victim = announced_pid(marker)
    big = ex.submit(children.echo_value, b"a" * BIG)
    queued = [ex.submit(children.double, i) for i in range(3)]
    time.sleep(0.2)    # the client (or the stdlib's feeder thread) is now stuck writing the argument
    os.kill(victim, signal.SIGKILL)
    errors, refusal = _broken_errors(ex, [busy, big, *queued])
    if _is_mizu(ex):
        _assert_names(errors, refusal, f"Process {victim} (mizu-worker-0) terminated abruptly with exit code -9 (SIGKILL) while "
                      "running children.announce_then_nap('")
        # The 50 MB argument appears in the message of no future, shortened or not.
        assert all(len(str(error)) < 1000 for error in errors)


def test_a_worker_dies_while_results_stream_in(make, executor_type, context, tmp_path):
    """One worker dies while the other sends a result every few milliseconds, and the client waits on the first."""
    ex = make(executor_type, 2, mp_context=context)
    dying = ex.submit(executor_children.announce_then_die, str(tmp_path / "dying"), 0.2)
    stream = _submit_until_broken(ex, 500, children.nap, 0.002)
    with pytest.raises(BrokenProcessPool):
        dying.result(timeout=WAIT)
    for future in stream:
        error = future.exception(timeout=WAIT)
        assert (error is None and future.result() == 0.002) or type(error) is BrokenProcessPool, error
    _broken_errors(ex, [])


def test_a_stuck_worker_that_ignores_sigterm_does_not_hold_a_broken_pool(make, context, tmp_path):
    """When the pool breaks, a worker that ignores SIGTERM is killed after a grace period.

    mizu only: the stdlib's pool sends SIGTERM and then waits for the
    worker, so its shutdown and the worker last as long as the task.
    """
    ex = make(mizu.ProcessPoolExecutor, 2, mp_context=context)
    # Both workers run first, so that each task below has one to itself.
    assert [f.result(timeout=WAIT) for f in [ex.submit(children.nap, 0.2) for _ in range(2)]] == [0.2, 0.2]
    assert len(ex._processes) == 2
    stubborn = ex.submit(executor_children.ignore_sigterm_then_nap, str(tmp_path / "stubborn"), 3 * WAIT)
    doomed = ex.submit(children.announce_then_nap, str(tmp_path / "doomed"), WAIT)
    stubborn_pid = announced_pid(str(tmp_path / "stubborn"))
    os.kill(announced_pid(str(tmp_path / "doomed")), signal.SIGKILL)
    _broken_errors(ex, [stubborn, doomed])
    with pytest.raises(ProcessLookupError):
        os.kill(stubborn_pid, 0)


# -- a task that ends its worker, or seems to ------------------------------------------------------


@pytest.mark.parametrize("fn, arg, how", [
    (executor_children.segfault, "null pointer", "terminated abruptly with exit code -11 (SIGSEGV)"),
    (executor_children.segfault, "SIGSEGV", "terminated abruptly with exit code -11 (SIGSEGV)"),
    (children.die, 3, "terminated abruptly with exit code 3"),
])
def test_a_task_that_kills_its_worker_breaks_the_pool(make, executor_type, context, fn, arg, how):
    ex = make(executor_type, 2, mp_context=context)
    fatal = ex.submit(fn, arg)
    queued = _submit_until_broken(ex, 4, children.nap, 0.5)
    errors, refusal = _broken_errors(ex, [fatal])
    for future in queued:
        # Those another worker finished before the pool broke keep their result.
        assert isinstance(future.exception(timeout=WAIT), (BrokenProcessPool, type(None)))
    if _is_mizu(ex):
        _assert_names(errors, refusal, f"{how} while running {fn.__module__}.{fn.__name__}({arg!r}).")


@pytest.mark.parametrize("fn, args, error", [
    (executor_children.exit_with, (5,), SystemExit),
    (executor_children.raise_keyboard_interrupt, (), KeyboardInterrupt),
])
def test_system_exit_and_keyboard_interrupt_go_to_the_future(make, executor_type, context, fn, args, error):
    with make(executor_type, 2, mp_context=context) as ex:
        future = ex.submit(fn, *args)
        with pytest.raises(error):
            future.result(timeout=WAIT)
        assert type(future.exception()) is error
        assert list(ex.map(children.double, range(20))) == [2 * i for i in range(20)]


def test_a_map_whose_task_kills_its_worker_raises_broken_process_pool(make, executor_type, context):
    ex = make(executor_type, 2, mp_context=context)
    yielded = []
    with pytest.raises(BrokenProcessPool) as info:
        for value in ex.map(executor_children.die_at, range(20), timeout=WAIT):
            yielded.append(value)
    assert yielded == list(range(len(yielded))) and len(yielded) <= 7
    errors, refusal = _broken_errors(ex, [])
    if _is_mizu(ex):
        _assert_names([info.value], refusal, "terminated abruptly with exit code 3 while running a map batch of ",
                      "executor_children.die_at(")


def test_an_unordered_stream_whose_task_kills_its_worker_breaks_the_pool_while_results_keep_coming(make, context):
    """An unordered map over an endless iterable, whose other worker answers every few milliseconds after the death.

    mizu only: the stdlib's map has no ordered=False. It waits on one result
    after another, each wait short: the looks for a death must not start
    afresh with each.
    """
    ex = make(mizu.ProcessPoolExecutor, 2, mp_context=context)
    yielded = 0
    with pytest.raises(BrokenProcessPool) as info:
        for _ in ex.map(executor_children.nap_then_die_at, itertools.count(), buffersize=4, ordered=False):
            yielded += 1
            # About 10 s of the other worker's naps.
            assert yielded < 2000, "the stream went on without the dead worker's call"
    assert "terminated abruptly with exit code 3" in str(info.value)
    _broken_errors(ex, [])


# -- values that fail to pickle or unpickle ------------------------------------------------------


def test_an_argument_that_fails_to_unpickle_in_the_worker_breaks_the_pool(make, executor_type, context):
    ex = make(executor_type, 2, mp_context=context)
    doomed = ex.submit(children.echo_value, executor_children.ErrorAtUnpickle())
    errors, refusal = _broken_errors(ex, [doomed])
    if _is_mizu(ex):
        _assert_names(errors, refusal, "terminated abruptly with exit code 1 while running children.echo_value(<executor_children.ErrorAtUnpickle",
                      "unpickling the task raised ValueError: ErrorAtUnpickle refuses to be unpickled.",
                      traceback="ValueError: ErrorAtUnpickle refuses to be unpickled")


TASK = struct.Struct("<BBHIQQ")      # doc/dev/messages.rst: kind, flags, reserved, task id, fn id
RESULT = struct.Struct("<BBHIQd")    # kind, status, sender, reserved, task id, seconds


@pytest.mark.parametrize("message, line", [
    (b"T" + bytes(10), "ValueError: message at byte 0: a task of 11 bytes, shorter than its header (24 bytes)"),
    (TASK.pack(0x54, 0, 0, 0, 0, 1) + b"W\x01N", "ValueError: message at byte 8: a task with id 0"),
    (TASK.pack(0x54, 0, 0, 0, 9, 1) + b"W\x01N", "ValueError: a call's arguments must be a tuple, not NoneType"),
    (TASK.pack(0x54, 0, 0, 0, 9, 1) + b"junk",
     "ValueError: message at byte 24: a body that is neither a wire message nor a pickle"),
])
def test_a_malformed_task_ends_its_worker_and_breaks_the_pool(make, message, line):
    """A task message (mizu only) cut short, with a bad header, or whose header no argument tuple follows."""
    ex = make(mizu.ProcessPoolExecutor, 1)
    assert ex.submit(children.double, 2).result(timeout=WAIT) == 4
    ex._pool.roster[0].ring.push(message, timeout=WAIT)
    errors, refusal = _broken_errors(ex, _submit_until_broken(ex, 3, children.double, 3))
    _assert_names(errors, refusal, "terminated abruptly with exit code 1", f"unpickling the task raised {line}", traceback=line)


@pytest.mark.parametrize("message, error, line", [
    (b"R" + bytes(10), "ValueError('message at byte 0: a result of 11 bytes, shorter than its header (24 bytes)')",
     "ValueError: message at byte 0: a result of 11 bytes"),
    (RESULT.pack(0x52, 0, 0, 0, 9, 0.0) + b"junk",
     "ValueError('message at byte 24: a body that is neither a wire message nor a pickle')",
     "ValueError: message at byte 24: a body"),
    (RESULT.pack(0x52, 0, 7, 0, 9, 0.0) + b"W\x01N",
     "ValueError('a message from worker 7 of 1 that is not a result')", "ValueError: a message from worker 7 of 1"),
])
def test_a_malformed_result_breaks_the_pool(make, message, error, line):
    """A result message (mizu only) cut short, whose header no value follows, or from no worker."""
    ex = make(mizu.ProcessPoolExecutor, 1)
    assert ex.submit(children.double, 2).result(timeout=WAIT) == 4
    ex._pool.results.push(message, timeout=WAIT)
    errors, refusal = _broken_errors(ex, _submit_until_broken(ex, 3, children.nap, 0.2))
    _assert_names(errors, refusal, f"A result could not be unpickled: {error}", traceback=line)


@pytest.mark.parametrize("cls, error, line", [
    (executor_children.ErrorAtUnpickle, "ValueError('ErrorAtUnpickle refuses to be unpickled')",
     "ValueError: ErrorAtUnpickle refuses to be unpickled"),
    (executor_children.ExitAtUnpickle, "SystemExit(1)", "SystemExit: 1"),
])
def test_a_result_that_fails_to_unpickle_in_the_client_breaks_the_pool(make, executor_type, context, cls, error,
                                                                        line):
    """Unpickling the result raises, even SystemExit: the pool breaks, and result() raises BrokenProcessPool."""
    ex = make(executor_type, 2, mp_context=context)
    doomed = ex.submit(executor_children.instance, cls)
    errors, refusal = _broken_errors(ex, [doomed])
    assert line in errors[0].__cause__.tb
    if _is_mizu(ex):
        _assert_names(errors, refusal, f"A result could not be unpickled: {error}.", traceback=line)


def test_an_exception_that_cannot_be_pickled_becomes_the_pickling_error(make, executor_type, context):
    with make(executor_type, 2, mp_context=context) as ex:
        error = ex.submit(executor_children.raise_unpicklable).exception(timeout=WAIT)
        assert isinstance(error, (AttributeError, TypeError, pickle.PicklingError)), error
        assert "local object" in str(error), error
        assert type(error.__cause__) is _RemoteTraceback
        assert ex.submit(children.double, 21).result(timeout=WAIT) == 42


@pytest.mark.parametrize("fn, name", [(executor_children.raise_needs_two, "NeedsTwo"),
                                      (executor_children.raise_keyword_only, "KeywordOnly")])
def test_an_exception_that_cannot_be_rebuilt_breaks_the_pool(make, executor_type, context, fn, name):
    """The task raises an exception whose constructor pickle cannot call again.

    The worker sends it; rebuilding it in the client fails, as the stdlib's
    does, and the pool breaks with the TypeError in the cause.
    """
    ex = make(executor_type, 2, mp_context=context)
    doomed = ex.submit(fn)
    errors, refusal = _broken_errors(ex, [doomed])
    assert "TypeError" in errors[0].__cause__.tb
    if _is_mizu(ex):
        _assert_names(errors, refusal, "A result could not be unpickled: TypeError(",
                      traceback=f"TypeError: {name}.__init__() ")


# -- initializers and retiring workers -----------------------------------------------------------


def test_an_initializer_that_raises_breaks_the_pool(make, executor_type, start_method):
    ex = make(executor_type, 2, mp_context=multiprocessing.get_context(start_method),
                       initializer=executor_children.fail_to_initialize)
    futures = _submit_until_broken(ex, 4, children.double, 1)
    errors, refusal = _broken_errors(ex, futures)
    if _is_mizu(ex):
        _assert_names(errors, refusal, "(mizu-worker-", "stopped before its first task: its initializer raised "
                      "ValueError: initializer failed on purpose.", traceback="ValueError: initializer failed on purpose")


@pytest.mark.python_from((3, 11))
@pytest.mark.parametrize("how, error", [
    ("group", "ExceptionGroup: two setups failed (2 sub-exceptions)."),
    ("frames", 'ValueError: bad config:\n  File "site.cfg", line 3\nunexpected key'),
])
def test_an_initializer_s_whole_error_is_named_whatever_its_text(make, how, error):
    """An exception group's own line, not its members' tree; a message holding lines that look like a frame's, whole."""
    ex = make(mizu.ProcessPoolExecutor, 1, initializer=executor_children.fail_to_initialize, initargs=(how,))
    errors, refusal = _broken_errors(ex, [ex.submit(children.double, 1)])
    detail = f"stopped before its first task: its initializer raised {error}"
    assert all(detail in str(e) and "Traceback (most recent call last)" in e.__cause__.tb for e in errors), errors
    assert detail in str(refusal), refusal


def test_workers_retire_under_load_and_every_task_runs_once(make, tmp_path):
    """2 workers that each retire after 3 tasks, 150 tasks submitted at once and a map of 60 beside them.

    mizu only: the stdlib's pool hangs once workers retire under load
    (python/cpython#115634, fixed in 3.13.15 and 3.14.7).
    """
    log = str(tmp_path / "ran")
    with make(mizu.ProcessPoolExecutor, 2, max_tasks_per_child=3) as ex:
        futures = [ex.submit(executor_children.record, log, i) for i in range(150)]
        mapped = list(ex.map(executor_children.record, [log] * 60, range(1000, 1060), timeout=WAIT * 2))
        results = [future.result(timeout=WAIT) for future in futures]
    assert results == list(range(150))
    assert mapped == list(range(1000, 1060))
    with open(log) as f:
        assert sorted(map(int, f.read().split())) == list(range(150)) + list(range(1000, 1060))


def test_a_worker_retiring_after_shutdown_does_not_break_the_pool(make):
    """shutdown(wait=False) with work outstanding; the last worker retires after it.

    mizu only: the stdlib's result thread fails there with a TypeError (at
    least up to 3.13.0) and the work left is stranded (python/cpython#119592).
    """
    ex = make(mizu.ProcessPoolExecutor, 1, max_tasks_per_child=1)
    futures = [ex.submit(children.nap, 0.05) for _ in range(3)]
    ex.shutdown(wait=False)
    assert [future.result(timeout=WAIT) for future in futures] == [0.05] * 3
    ex._executor_manager_thread.join(WAIT)
    assert not ex._executor_manager_thread.is_alive()
    assert not ex._broken
    with pytest.raises(RuntimeError, match="cannot schedule new futures after shutdown"):
        ex.submit(children.double, 1)
