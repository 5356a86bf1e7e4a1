"""The Executor, run side by side with concurrent.futures.ProcessPoolExecutor as the oracle.

Every test takes `executor_type` and runs once for mizu and once for the
stdlib class: mizu passes where the stdlib passes, with the same results and
exceptions.
"""

import asyncio
import collections
import concurrent.futures as cf
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
import types
from concurrent.futures.process import BrokenProcessPool, _RemoteTraceback

import pytest

import children
import executor_children
import mizu
from helpers import TESTS, child_environ, mapped_segments, memfds_of, wait_until


def test_mizu_is_a_concurrent_futures_process_pool():
    """Code that asks `isinstance(pool, ProcessPoolExecutor)` (must its tasks pickle?) treats mizu's as one."""
    assert issubclass(mizu.ProcessPoolExecutor, cf.ProcessPoolExecutor)
    assert issubclass(mizu.ProcessPoolExecutor, cf.Executor)
    assert mizu.Executor is mizu.ProcessPoolExecutor


def test_futures_print_as_the_stdlib_s(pool):
    future = pool.submit(children.add, 1, 2)
    future.result(timeout=60)
    assert isinstance(future, cf.Future)
    assert repr(future).startswith("<Future at 0x") and repr(future).endswith("state=finished returned int>")


def test_submit_returns_a_future_with_the_result(pool):
    future = pool.submit(children.add, 1, 2, c=4)
    assert isinstance(future, cf.Future)
    assert future.result(timeout=60) == 7
    assert future.done() and not future.running() and not future.cancelled()
    assert future.exception() is None


def test_exception_carries_the_remote_traceback(pool):
    future = pool.submit(executor_children.raise_runtime, 123)
    with pytest.raises(RuntimeError) as info:
        future.result(timeout=60)
    assert info.value.args == (123,)
    assert type(info.value.__cause__) is _RemoteTraceback
    assert "raise RuntimeError(arg)" in info.value.__cause__.tb
    assert isinstance(future.exception(), RuntimeError)
    text = "".join(traceback.format_exception(info.value))
    assert "raise RuntimeError(arg)" in text


def test_system_exit_in_a_task_goes_to_its_future(pool):
    with pytest.raises(SystemExit):
        pool.submit(executor_children.exit_with, 5).result(timeout=60)
    assert pool.submit(children.double, 4).result(timeout=60) == 8


def test_map_keeps_order_across_chunk_sizes(pool):
    for chunksize in (1, 3, 100):
        assert list(pool.map(children.double, range(50), chunksize=chunksize)) == [2 * i for i in range(50)]
    assert list(pool.map(children.add, [1, 2, 3], [10, 20, 30])) == [11, 22, 33]
    assert list(pool.map(children.double, [])) == []


def test_map_passes_each_item_of_one_iterable_as_one_argument(pool):
    items = [(1, 2), (3,), (), [4, 5], None, "ab", {"k": 1}]
    for chunksize in (1, 2, 100):
        assert list(pool.map(children.echo_value, items, chunksize=chunksize)) == items
        assert list(pool.map(children.add, range(5), range(10, 13), chunksize=chunksize)) == [10, 12, 14]
        assert list(pool.map(children.pid, chunksize=chunksize)) == []
    with pytest.raises(TypeError, match="takes 1 positional argument but 2 were given"):
        list(pool.map(children.echo_value, [1, 2], [3, 4]))


@pytest.mark.parametrize("how", ["close", "drop"])
def test_a_map_stopped_early_cancels_the_calls_not_yet_started(executor_type, how, tmp_path):
    log = tmp_path / "ran"
    with executor_type(1) as ex:
        results = ex.map(executor_children.record, [str(log)] * 40, range(40), [0.05] * 40)
        assert next(results) == 0
        if how == "close":
            results.close()
            assert list(results) == []
        else:
            del results
    ran = [int(line) for line in log.read_text().split()]
    assert ran == list(range(len(ran))) and len(ran) < 40


@pytest.mark.parametrize("chunksize", [1, 3])
def test_map_keeps_no_reference_to_what_it_yielded(pool, chunksize):
    import gc
    import weakref

    for obj in pool.map(executor_children.Dummy, range(10), chunksize=chunksize):
        ref = weakref.ref(obj)
        del obj
        gc.collect()
        assert ref() is None


@pytest.mark.parametrize("how", ["attribute", "vars", "callback", "exception", "list result", "dict result"])
def test_a_future_that_only_a_reference_cycle_holds_is_collected(pool, how):
    """However the cycle came about, before or after the future was done."""
    import gc
    import weakref

    if how == "exception":
        future = pool.submit(executor_children.raise_runtime, 1)
    elif how.endswith("result"):
        future = pool.submit(children.echo_value, [1] if how == "list result" else {"a": 1})
    else:
        future = pool.submit(children.double, 21)
    if how == "callback":
        future.add_done_callback(lambda f, holder=[future]: None)
    future.exception(timeout=60)
    if how == "attribute":
        future.me = future
    elif how == "vars":
        vars(future)["me"] = future
    elif how == "exception":
        future.exception().future = future
    elif how == "list result":
        future.result().append(future)
    elif how == "dict result":
        future.result()["me"] = future
    ref = weakref.ref(future)
    del future
    gc.collect()
    assert ref() is None


def test_a_done_future_can_be_copied(pool):
    import copy

    future = pool.submit(children.double, 21)
    assert future.result(timeout=60) == 42
    assert copy.copy(future).result(timeout=60) == 42


def test_map_raises_at_the_failing_element(pool):
    results = pool.map(executor_children.raise_runtime, [1])
    with pytest.raises(RuntimeError):
        next(results)


def test_map_times_out(executor_type):
    with executor_type(1) as ex:
        results = ex.map(children.nap, [1, 1], timeout=0.2)
        with pytest.raises(cf.TimeoutError):
            list(results)


def test_map_rejects_bad_chunksize(pool):
    with pytest.raises(ValueError, match="chunksize must be >= 1."):
        pool.map(children.double, range(3), chunksize=0)


def test_large_arguments_and_results_round_trip(pool):
    blob = os.urandom(3 << 20)
    assert pool.submit(children.echo_value, blob).result(timeout=120) == blob
    many = [os.urandom(5000) for _ in range(40)]
    assert list(pool.map(children.echo_value, many)) == many


def test_values_round_trip_at_every_size_near_a_ring_slot(pool):
    """Arguments and results of 3.9 to 4.2 KB: each fits a ring slot whole, or in two frames, with or without the
    fixed header of the commonest messages; keyword arguments and a value made of several parts take the other
    encodings."""
    for n in range(3900, 4200, 7):
        text = "x" * n
        assert pool.submit(children.echo_value, text).result(timeout=60) == text
        assert pool.submit(children.echo_value, value=text).result(timeout=60) == text
        assert pool.submit(children.echo_value, (n, text, [None])).result(timeout=60) == (n, text, [None])


def test_unpicklable_argument_fails_its_future_only(pool):
    future = pool.submit(children.echo_value, executor_children.NotPicklable())
    with pytest.raises(TypeError, match="refuses to be pickled"):
        future.result(timeout=60)
    assert pool.submit(children.double, 21).result(timeout=60) == 42


def test_unpicklable_result_fails_its_future_only(pool):
    with pytest.raises(Exception) as info:
        pool.submit(executor_children.unpicklable_result).result(timeout=60)
    assert "pickle" in str(info.value).lower() or "Can't" in str(info.value)
    assert pool.submit(children.double, 21).result(timeout=60) == 42


def test_wait_and_as_completed(pool):
    futures = [pool.submit(children.nap, 0.01 * i) for i in range(6)]
    done, not_done = cf.wait(futures, timeout=60)
    assert done == set(futures) and not not_done
    futures = [pool.submit(children.double, i) for i in range(10)]
    assert sorted(f.result() for f in cf.as_completed(futures, timeout=60)) == [2 * i for i in range(10)]


def test_callbacks_run_without_anyone_calling_result(pool):
    seen = []
    done = __import__("threading").Event()
    future = pool.submit(children.double, 5)
    future.add_done_callback(lambda f: (seen.append(f.result()), done.set()))
    assert done.wait(60)
    assert seen == [10]


def test_asyncio_run_in_executor(pool):
    async def main():
        loop = asyncio.get_running_loop()
        return await asyncio.gather(*(loop.run_in_executor(pool, children.double, i) for i in range(5)))

    assert asyncio.run(main()) == [0, 2, 4, 6, 8]


def test_submit_after_shutdown_is_refused(executor_type):
    ex = executor_type(1)
    assert ex.submit(children.double, 1).result(timeout=60) == 2
    ex.shutdown()
    ex.shutdown()
    with pytest.raises(RuntimeError, match="cannot schedule new futures after shutdown"):
        ex.submit(children.double, 1)


def _ends(thread, processes):
    thread.join(60)
    for process in processes:
        process.join(60)
    return not thread.is_alive() and all(p.exitcode is not None for p in processes)


def test_shutdown_without_wait_still_finishes_the_work(executor_type, start_method):
    ex = executor_type(3, mp_context=multiprocessing.get_context(start_method))
    futures = [ex.submit(children.nap, 0.05) for _ in range(6)]
    thread, processes = ex._executor_manager_thread, list(ex._processes.values())
    ex.shutdown(wait=False)
    assert [f.result(timeout=60) for f in futures] == [0.05] * 6
    assert _ends(thread, processes)


def test_a_pool_shut_down_before_its_first_task_holds_nothing(executor_type):
    before = memfds_of(os.getpid())
    pools = [executor_type(2) for _ in range(5)]
    for ex in pools:
        ex.shutdown()
    assert [ex._processes for ex in pools] == [None] * 5
    assert memfds_of(os.getpid()) <= before
    with pytest.raises(RuntimeError, match="after shutdown"):
        pools[0].submit(children.double, 1)


def test_collecting_the_executor_still_finishes_the_work(executor_type, start_method):
    import gc

    ex = executor_type(3, mp_context=multiprocessing.get_context(start_method))
    results = ex.map(abs, range(-5, 5))
    thread, processes = ex._executor_manager_thread, list(ex._processes.values())
    del ex
    gc.collect()
    assert _ends(thread, processes)
    assert list(results) == [5, 4, 3, 2, 1, 0, 1, 2, 3, 4]


def test_shutdown_can_cancel_what_has_not_started(executor_type):
    ex = executor_type(1)
    futures = [ex.submit(children.nap, 0.2) for _ in range(10)]
    ex.shutdown(wait=True, cancel_futures=True)
    cancelled = [f for f in futures if f.cancelled()]
    finished = [f for f in futures if not f.cancelled()]
    assert len(cancelled) >= 5 and finished
    assert all(f.result() == 0.2 for f in finished)


@pytest.mark.parametrize("wait", [True, False])
def test_wait_and_as_completed_count_done_what_shutdown_cancels(wait):
    """The stdlib's pool leaves those futures cancelled but not notified: wait() and as_completed() wait for them
    until their timeout (CPython gh-136655)."""
    ex = mizu.ProcessPoolExecutor(1)
    futures = [ex.submit(children.nap, 0.2) for _ in range(10)]
    ex.shutdown(wait=wait, cancel_futures=True)
    done, not_done = cf.wait(futures, timeout=60)
    assert not_done == set() and any(f.cancelled() for f in futures)
    assert set(cf.as_completed(futures, timeout=60)) == set(futures)
    assert all(f.result() == 0.2 for f in futures if not f.cancelled())


def test_shutdown_ends_workers_whose_tasks_left_a_pool_running(start_method):
    """The stdlib's pool hangs here: a worker's multiprocessing joins the processes of the pool its task left."""
    ex = mizu.ProcessPoolExecutor(2, mp_context=multiprocessing.get_context(start_method))
    assert list(ex.map(executor_children.sum_in_a_pool_left_running, [3, 4])) == [3, 6]
    thread, processes = ex._executor_manager_thread, list(ex._processes.values())
    ex.shutdown(wait=False)
    assert _ends(thread, processes)


def test_constructor_validation(executor_type):
    with pytest.raises(ValueError, match="max_workers must be greater than 0"):
        executor_type(0)
    with pytest.raises(ValueError, match="max_workers must be greater than 0"):
        executor_type(-1)
    with pytest.raises(TypeError, match="initializer must be a callable"):
        executor_type(1, initializer=5)
    if sys.version_info >= (3, 11):
        with pytest.raises(TypeError):
            executor_type(1, max_tasks_per_child="3")
        with pytest.raises(ValueError, match="max_tasks_per_child must be >= 1"):
            executor_type(1, max_tasks_per_child=0)
        with pytest.raises(ValueError, match="incompatible with the 'fork'"):
            executor_type(1, mp_context=multiprocessing.get_context("fork"), max_tasks_per_child=2)


def test_initializer_runs_in_every_worker(executor_type, start_method):
    with executor_type(2, mp_context=multiprocessing.get_context(start_method), initializer=children.remember,
                       initargs=("ready",)) as ex:
        assert ex.submit(children.initialized).result(timeout=60) == ["ready"]


def test_failing_initializer_breaks_the_pool(executor_type):
    ex = executor_type(2, initializer=executor_children.fail_to_initialize)
    with pytest.raises(BrokenProcessPool):
        ex.submit(children.double, 1).result(timeout=60)
    with pytest.raises(BrokenProcessPool):
        ex.submit(children.double, 1)
    ex.shutdown()


def test_worker_death_breaks_the_pool(executor_type, start_method, tmp_path):
    """The worker dies once every task is submitted; the tasks running and pending then wait for a gate that
    never opens, so none can end but by the break."""
    ex = executor_type(2, mp_context=multiprocessing.get_context(start_method))
    fatal = ex.submit(executor_children.die_once_file, str(tmp_path / "die"), 3)
    slow = [ex.submit(children.wait_for_file, str(tmp_path / "never"), 60) for _ in range(3)]
    (tmp_path / "die").touch()
    with pytest.raises(BrokenProcessPool):
        fatal.result(timeout=60)
    for future in slow:
        with pytest.raises(BrokenProcessPool):
            future.result(timeout=60)
    with pytest.raises(BrokenProcessPool):
        ex.submit(children.double, 1)
    ex.shutdown()


@pytest.mark.stdlib_oracle_from((3, 11))   # its max_tasks_per_child is new in 3.11; mizu's works on 3.10 too
def test_max_tasks_per_child_replaces_workers(executor_type):
    with executor_type(1, max_tasks_per_child=2) as ex:
        pids = [ex.submit(os.getpid).result(timeout=60) for _ in range(6)]
    assert len(set(pids)) == 3
    assert pids[0] == pids[1] and pids[2] == pids[3] and pids[4] == pids[5]


@pytest.mark.parametrize("chunksize", [1, 3])
def test_max_tasks_per_child_counts_the_chunks_of_a_map(chunksize):
    """A map's chunk is a task, as the stdlib counts it: a worker runs max_tasks_per_child chunks, however many
    a batch of the pool's would hold. (The stdlib's pool is no oracle here: such a map can hang it, gh-115634.)"""
    with mizu.ProcessPoolExecutor(2, max_tasks_per_child=2) as ex:
        ex.submit(children.double, 1).result(timeout=60)
        pids = list(ex.map(children.pid_after, range(120), chunksize=chunksize, timeout=60))
    per_process = collections.Counter(pids)
    assert max(per_process.values()) <= 2 * chunksize
    assert len(per_process) >= 120 // (2 * chunksize)


@pytest.mark.parametrize("why", ["collected", "forced", "no successor"])
def test_a_retired_last_worker_that_cannot_be_replaced_fails_the_tasks_left(why, tmp_path, monkeypatch):
    """A worker retired at max_tasks_per_child has no successor once its Executor was collected, while
    terminate_workers() or kill_workers() runs, or when its successor fails to start. The last worker gone, the
    tasks left fail with BrokenProcessPool saying why, as the stdlib's do from 3.14 (gh-152967), instead of
    waiting for ever. (CPython's own tests hold the stdlib's pool to the same.)"""
    import gc
    import weakref

    started, gate = str(tmp_path / "started"), str(tmp_path / "gate")
    ex = mizu.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"), max_tasks_per_child=1)
    futures = [ex.submit(executor_children.announce_then_wait, started, gate)] + [ex.submit(children.double, i)
                                                                        for i in range(2)]
    deadline = time.monotonic() + 60
    while not os.path.exists(started):
        assert time.monotonic() < deadline, "the first task did not start"
        time.sleep(0.01)
    with open(started) as f:
        first = int(f.read())
    if why == "collected":
        collected = weakref.ref(ex)
        ex = None
        gc.collect()
        assert collected() is None
        expected = "The ProcessPoolExecutor was garbage collected with work pending"
    elif why == "forced":
        with ex._shutdown_lock:
            ex._force_shutting_down = True
        expected = "while the pool was being forcefully shut down"
    else:
        def refuse(index):
            raise OSError("no more processes")

        _hook_launches(monkeypatch, refuse)
        expected = "A replacement worker process could not be started"
    open(gate, "w").close()
    assert futures[0].result(timeout=60) == first
    for future in futures[1:]:
        with pytest.raises(BrokenProcessPool, match=expected) as info:
            future.result(timeout=60)
        assert f"Process {first} (mizu-worker-0) was its last worker." in str(info.value)
    if why == "no successor":
        assert "OSError: no more processes" in info.value.__cause__.tb
    if ex is not None:
        ex.shutdown()
    while multiprocessing.active_children():
        assert time.monotonic() < deadline, "a worker outlived its pool"
        time.sleep(0.01)


@pytest.mark.python_from((3, 14))   # terminate_workers and kill_workers
@pytest.mark.parametrize("how", ["terminate_workers", "kill_workers"])
def test_terminate_and_kill_workers_end_the_running_tasks_as_the_stdlibs_do(executor_type, how, tmp_path):
    gate = str(tmp_path / "gate")
    ex = executor_type(2)
    running = [ex.submit(executor_children.announce_then_wait, str(tmp_path / f"started{i}"), gate) for i in range(2)]
    waiting = [ex.submit(children.double, i) for i in range(4)]
    deadline = time.monotonic() + 60
    while not all(os.path.exists(tmp_path / f"started{i}") for i in range(2)):
        assert time.monotonic() < deadline, "the tasks did not start"
        time.sleep(0.01)
    processes = list(ex._processes.values())
    getattr(ex, how)()
    for future in running:
        with pytest.raises(BrokenProcessPool):
            future.result(timeout=60)
    for future in waiting:
        assert future.cancelled() or isinstance(future.exception(timeout=60), BrokenProcessPool)
    with pytest.raises((BrokenProcessPool, RuntimeError)):
        ex.submit(children.double, 1)
    signalled = -signal.SIGTERM if how == "terminate_workers" else -signal.SIGKILL
    # The stdlib's forkserver processes report 255 when the forkserver's status message does not come
    # (multiprocessing/popen_forkserver.py): seen now and then on 3.14, so the oracle may say that instead.
    # And its kill_workers() shuts the pool down before it kills: the manager thread may see the first
    # death and terminate the other workers (terminate_broken) before their SIGKILL, so they report SIGTERM.
    allowed = {signalled} if executor_type is mizu.ProcessPoolExecutor else {signalled, 255, -signal.SIGTERM}
    for process in processes:
        process.join(60)
        assert process.exitcode in allowed
    ex.shutdown()


@pytest.mark.stdlib_oracle_from((3, 14))   # map's buffersize
def test_map_buffersize_submits_at_most_that_many_ahead_and_refuses_bad_values(executor_type, tmp_path):
    with executor_type(2) as ex:
        assert list(ex.map(children.double, range(50), buffersize=3)) == [2 * i for i in range(50)]
        assert list(ex.map(children.add, range(20), range(20), buffersize=1, chunksize=3)) == [2 * i for i in range(20)]
        # Calls are drawn from the iterable as results are consumed: a generator that counts what it gave.
        given = []

        def counted():
            for i in range(1000):
                given.append(i)
                yield i

        results = ex.map(children.double, counted(), buffersize=4)
        assert next(results) == 0
        assert len(given) <= 6
        assert list(results) == [2 * i for i in range(1, 1000)]
        for bad, error in ((0, ValueError), (-1, ValueError), (2.5, TypeError), ("3", TypeError)):
            with pytest.raises(error, match="buffersize"):
                ex.map(children.double, range(3), buffersize=bad)


def test_dir_of_mizu_lists_its_public_names_and_what_it_imports_lazily():
    # Submodules imported so far (mizu.dask, by the tests of Dask) are attributes too, as in any package.
    public = {name for name in dir(mizu) if not name.startswith("_")
              and not isinstance(getattr(mizu, name), types.ModuleType)}
    assert public == set(mizu.__all__) - {"__version__"}
    assert all(getattr(mizu, name) is not None for name in mizu.__all__)


def test_many_threads_submit_at_once(executor_type):
    import threading

    with executor_type(2) as ex:
        results = {}

        def run(t):
            results[t] = [ex.submit(children.add, t, i).result(timeout=60) for i in range(200)]

        threads = [threading.Thread(target=run, args=(t,)) for t in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert results == {t: [t + i for i in range(200)] for t in range(6)}


def test_the_pools_lock_lets_one_thread_in_at_a_time_and_wakes_those_waiting():
    import threading
    import time

    from mizu._sync import Lock

    lock, inside, overlaps, done = Lock(), [], [], []

    def run():
        for _ in range(500):
            with lock:
                inside.append(None)
                overlaps.append(len(inside))
                time.sleep(0.00001)   # others try meanwhile, and sleep until it is given
                inside.pop()
        done.append(None)

    threads = [threading.Thread(target=run, daemon=True) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(done) == 4
    assert max(overlaps) == 1


def test_a_callback_may_submit_when_its_task_fails_to_pickle(executor_type):
    with executor_type(1) as ex:
        busy = [ex.submit(children.nap, 0.2) for _ in range(4)]
        followers = []
        doomed = ex.submit(children.echo_value, executor_children.NotPicklable())
        doomed.add_done_callback(lambda f: followers.append(ex.submit(children.double, 21)))
        with pytest.raises(TypeError):
            doomed.result(timeout=60)
        assert [f.result(timeout=60) for f in busy] == [0.2] * 4
        for _ in range(600):
            if followers:
                break
            __import__("time").sleep(0.05)
        assert [f.result(timeout=60) for f in followers] == [42]


def test_shutdown_from_a_callback_does_not_hang(executor_type, caplog):
    ex = executor_type(1)
    future = ex.submit(children.double, 1)
    future.add_done_callback(lambda f: ex.shutdown(wait=True))
    assert future.result(timeout=60) == 2
    ex.shutdown(wait=True)


def test_a_task_arguments_are_released_when_it_ends(executor_type):
    with multiprocessing.Manager() as manager, executor_type(1) as ex:
        event = manager.Event()
        kept = executor_children.SetsEventWhenCollected(event)  # alive here: only the worker's copy can set it
        assert ex.submit(id, kept).result(timeout=60)
        assert event.wait(timeout=30)
        del kept


def _counted_idle(ex):
    """Return once the pool counts the worker of the task settled last as idle.

    mizu counts it before it settles the future; the stdlib's manager
    thread only after (it releases its idle semaphore once the result is
    set), so a submit right after result() may find no worker idle there.
    """
    if not isinstance(ex, mizu.ProcessPoolExecutor):
        wait_until(lambda: ex._idle_worker_semaphore._value, 60, "the stdlib's pool's count of its idle worker")


def test_spawn_and_forkserver_start_workers_only_when_none_is_idle(executor_type, start_method, tmp_path):
    gate = str(tmp_path / "gate")
    with executor_type(4, mp_context=multiprocessing.get_context(start_method)) as ex:
        for x in range(3):
            assert ex.submit(children.double, x).result(timeout=60) == 2 * x
            _counted_idle(ex)
        one_by_one = len(ex._processes)
        # Tasks that find no worker idle, however long the starts take.
        blocked = [ex.submit(children.wait_for_file, gate) for _ in range(6)]
        deadline = time.monotonic() + 60
        while len(ex._processes) < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(ex._processes) == 4
        open(gate, "w").close()
        assert len({f.result(timeout=60) for f in blocked}) <= 4
    assert one_by_one == (4 if start_method == "fork" else 1)


def test_spawn_starts_one_worker_per_cpu_at_a_time(monkeypatch):
    """Tasks that find no idle worker start one each, at most one per CPU at once: the first run while the next start."""
    # A start counts until its worker is up: otherwise for 0.1 s, which a loaded machine may spend in these submits.
    monkeypatch.setattr("mizu._roster._STARTING", 60.0)
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    n = 2 * cpus + 2
    with mizu.ProcessPoolExecutor(n, mp_context=multiprocessing.get_context("spawn")) as ex:
        futures = [ex.submit(children.nap, 0.2) for _ in range(n)]
        # Started and not up yet (no startup time): a worker that came up while this thread was held up takes a
        # task, and the next may start then.
        at_once = len([w for w in ex.insights().workers if w.pid is not None and w.startup is None])
        assert [f.result(timeout=60) for f in futures] == [0.2] * n
        assert 2 <= len(ex._processes) <= n
    assert at_once <= cpus


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs sched_setaffinity to give the pool one CPU")
def test_a_put_off_start_is_not_lost_to_tasks_queued_behind_busy_workers(monkeypatch, tmp_path):
    """On one CPU, the third start waits for the second worker to come up; a task left then is its, as the stdlib's would be."""
    monkeypatch.setattr("mizu._roster._STARTING", 60.0)   # a start counts until its worker is up
    cpus = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(cpus)})   # this thread's mask: the pool's CPU count, and its workers'
    gate = tmp_path / "gate"
    try:
        with mizu.ProcessPoolExecutor(3, mp_context=multiprocessing.get_context("spawn")) as ex:
            assert ex.submit(children.double, 1).result(timeout=60) == 2
            # Tasks that end only once the gate opens: no result cancels the put-off start.
            futures = [ex.submit(children.wait_for_file, str(gate)) for _ in range(4)]
            deadline = time.monotonic() + 60
            while len(ex._processes) < 3 and time.monotonic() < deadline:
                time.sleep(0.05)
            started = len(ex._processes)
            gate.touch()
            assert all(f.result(timeout=60) in ex._processes for f in futures)
        assert started == 3
    finally:
        gate.touch()
        os.sched_setaffinity(0, cpus)


def test_tasks_go_to_the_workers_that_have_started(executor_type, start_method, tmp_path):
    """A worker still in its initializer holds up no task: the one that started runs them all."""
    with executor_type(2, mp_context=multiprocessing.get_context(start_method),
                       initializer=executor_children.first_starts_others_wait, initargs=(str(tmp_path),)) as ex:
        futures = [ex.submit(children.pid) for _ in range(6)]
        try:
            pids = [f.result(timeout=60) for f in futures]
        finally:
            (tmp_path / "gate").touch()
    assert len(set(pids)) == 1


def test_many_workers_starting_at_once_each_take_tasks(executor_type):
    """Workers that say they are up while the pool is still starting others (the manager thread collects)."""
    for _ in range(3):
        with executor_type(24, mp_context=multiprocessing.get_context("forkserver")) as ex:
            futures = [ex.submit(children.nap, 0.05) for _ in range(48)]
            assert [f.result(timeout=60) for f in futures] == [0.05] * 48


def test_shutdown_cancels_no_task_a_starting_worker_has_taken(executor_type, start_method):
    """As the stdlib's call queue holds tasks for workers not yet started, a task each starting worker will run."""
    ex = executor_type(2, mp_context=multiprocessing.get_context(start_method))
    futures = [ex.submit(children.nap, 0.3) for _ in range(12)]
    ex.shutdown(wait=True, cancel_futures=True)
    finished = [f.result() for f in futures if not f.cancelled()]
    assert all(f.cancelled() for f in futures[len(finished):])
    assert 1 <= len(finished) <= 6


def _descriptors():
    return set(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc: Linux only")
def test_a_shut_down_pool_holds_no_descriptor_and_no_memory(executor_type, start_method):
    """Pools kept in a list after shutdown(): each lets go of its descriptors and its segment when it returns."""
    context = multiprocessing.get_context(start_method)
    with executor_type(2, mp_context=context) as warm:   # what a first pool opens once per process
        warm.submit(children.double, 1).result(timeout=60)
    descriptors, segments = _descriptors(), mapped_segments()
    kept = []
    for _ in range(5):
        ex = executor_type(4, mp_context=context)
        assert [f.result(timeout=60) for f in [ex.submit(children.double, i) for i in range(8)]] == list(
            range(0, 16, 2))
        ex.shutdown()
        kept.append(ex)
    assert _descriptors() <= descriptors
    assert mapped_segments() <= segments
    assert all(ex._processes is None for ex in kept)


def test_a_worker_start_failure_names_no_unrelated_error(executor_type, tmp_path):
    """A worker that dies while starting (here: importing a __main__ that raises) is not said to run the task,
    and the error chains to nothing spurious."""
    script = tmp_path / "main_raises.py"
    script.write_text(f"import sys\nsys.path.insert(0, {TESTS!r})\n"
                      "import children\n"
                      "if __name__ != '__main__':\n    raise ImportError('__main__ cannot be imported here')\n")
    code = f"""
import multiprocessing, runpy, sys
sys.argv = [{str(script)!r}]
runpy.run_path({str(script)!r}, run_name="__main__")
import children, concurrent.futures as cf, mizu
cls = mizu.ProcessPoolExecutor if {executor_type is mizu.ProcessPoolExecutor!r} else cf.ProcessPoolExecutor
sys.modules["__main__"].__file__ = {str(script)!r}
with cls(1, mp_context=multiprocessing.get_context("spawn")) as ex:
    try:
        ex.submit(children.double, 1).result(timeout=60)
    except Exception as exc:
        chain, e = [], exc
        while e is not None:
            chain.append(type(e).__name__ + ": " + str(e))
            e = e.__cause__ or e.__context__
        print(repr(chain))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    chain = eval(out.stdout.strip().splitlines()[-1])
    assert chain[0].startswith("BrokenProcessPool: A process in the process pool was terminated abruptly")
    assert not any(link.startswith("IndexError") for link in chain), chain
    assert "while running" not in chain[0], chain[0]


def test_import_mizu_loads_its_modules_on_first_use(tmp_path):
    """`import mizu` imports none of mizu's modules, nor multiprocessing; the first name used brings its own."""
    code = """
import sys
import mizu
before = sorted(m for m in sys.modules if m.startswith(("mizu.", "multiprocessing", "concurrent")))
mizu.ProcessPoolExecutor
print(before, "mizu._executor" in sys.modules, "mizu._arrays" in sys.modules)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=child_environ(),
                         cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["[]", "True", "False"]


def test_numpy_loads_only_where_an_array_is_used(start_method, tmp_path):
    """`import mizu` does not import numpy, nor does a worker whose tasks use no array; one that gets an array does."""
    code = f"""
import multiprocessing, sys
import children, executor_children, mizu
assert "numpy" not in sys.modules, "import mizu imported numpy"
with mizu.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context({start_method!r})) as ex:
    assert list(ex.map(children.double, range(100), chunksize=7)) == list(range(0, 200, 2))
    print(ex.submit(executor_children.loaded, "numpy").result(timeout=60), "numpy" in sys.modules)
    import numpy
    ex.submit(children.echo_value, numpy.arange(3)).result(timeout=60)
    print(ex.submit(executor_children.loaded, "numpy").result(timeout=60))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=child_environ(),
                         cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "False", "True"]


def test_a_spawned_worker_imports_the_stdlib_pool_for_its_first_error(tmp_path):
    """A spawned worker of a program that names no pool at import leaves concurrent.futures.process out until a task raises."""
    code = """
import multiprocessing
import executor_children, mizu
with mizu.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as ex:
    print(ex.submit(executor_children.loaded, "concurrent.futures.process").result(timeout=60))
    try:
        ex.submit(executor_children.raise_runtime, "on purpose").result(timeout=60)
    except RuntimeError as exc:
        print(type(exc.__cause__).__name__, "raise_runtime" in str(exc.__cause__))
    print(ex.submit(executor_children.loaded, "concurrent.futures.process").result(timeout=60))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=child_environ(),
                         cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "_RemoteTraceback", "True", "True"]


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc: Linux only")
def test_forkserver_workers_are_forked_with_mizu_loaded(tmp_path):
    """The forkserver that mizu's workers are forked from imported mizu's worker code before the first of them."""
    code = """
import multiprocessing
import executor_children, mizu
with mizu.ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("forkserver")) as ex:
    print(ex.submit(executor_children.parent_maps, "mizu/_worker.").result(timeout=60),
          ex.submit(executor_children.parent_maps, "mizu/_r/codec.").result(timeout=60))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=child_environ(),
                         cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "False"]


def test_a_forkserver_pool_works_beside_a_folder_that_shadows_mizu(tmp_path):
    """The forkserver imports from the current directory; a mizu folder there (a source tree) is not preloaded."""
    (tmp_path / "mizu").mkdir()
    (tmp_path / "mizu" / "__init__.py").write_text("")
    # A script of another folder: the program imports the installed mizu, the
    # forkserver (started in tmp_path) finds the folder first.
    (tmp_path / "program").mkdir()
    (tmp_path / "program" / "main.py").write_text("""
import multiprocessing
import children, executor_children, mizu
if __name__ == "__main__":
    with mizu.ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("forkserver")) as ex:
        print(list(ex.map(children.double, range(4))),
              ex.submit(executor_children.parent_maps, "mizu/_worker.").result(timeout=60))
""")
    out = subprocess.run([sys.executable, str(tmp_path / "program" / "main.py")], capture_output=True, text=True,
                         timeout=120, env=child_environ(), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["[0,", "2,", "4,", "6]", "False"]


_COMPILEALL = """
import concurrent.futures, runpy, sys
if sys.argv[1] == "mizu":
    import mizu
    concurrent.futures.ProcessPoolExecutor = mizu.ProcessPoolExecutor
sys.argv = ["compileall", "-q", "-j", "4", sys.argv[2]]
runpy.run_module("compileall", run_name="__main__", alter_sys=True)
"""


def _compiled(kind, tree):
    """{path: bytes} of the .pyc files `python -m compileall -j 4 tree` writes with kind's pool."""
    import shutil

    for cache in tree.rglob("__pycache__"):
        shutil.rmtree(cache)
    run = subprocess.run([sys.executable, "-c", _COMPILEALL, kind, str(tree)], capture_output=True, text=True,
                         timeout=300, cwd=tree.parent)
    assert run.returncode == 0, run.stderr
    return {str(p.relative_to(tree)): p.read_bytes() for p in tree.rglob("*.pyc")}


def test_a_task_s_result_does_not_depend_on_the_pool_that_ran_it(tmp_path):
    """compileall with the pool swapped writes the stdlib pool's .pyc files: byte for byte from 3.11.

    marshal marks a string it writes by whether it is interned, and whether
    a single-character string is depends on what the process has imported:
    a worker that loads more than the stdlib's (numpy, say) writes other bytes.
    On 3.10 the compiler also interns the names of each file it compiles,
    so a file's bytes depend on the files its process compiled before (the
    stdlib's own compileall -j 2 and -j 1 differ): there the files load as
    equal code.
    """
    import marshal
    import shutil
    import sysconfig

    lib = sysconfig.get_paths()["stdlib"]
    tree = tmp_path / "lib"
    for package in ("json", "email", "concurrent", "asyncio", "importlib", "xml", "logging", "urllib"):
        shutil.copytree(os.path.join(lib, package), tree / package, ignore=shutil.ignore_patterns("__pycache__"))
    stdlib, ours = _compiled("stdlib", tree), _compiled("mizu", tree)
    assert len(stdlib) > 100 and stdlib.keys() == ours.keys()
    if sys.version_info < (3, 11):
        stdlib, ours = ({name: marshal.loads(pyc[16:]) for name, pyc in files.items()} for files in (stdlib, ours))
    assert [name for name in stdlib if stdlib[name] != ours[name]] == []


def test_a_pool_whose_thread_cannot_start_leaves_no_process(monkeypatch):
    import threading

    def refuse(thread):
        raise RuntimeError("can't create new thread at interpreter shutdown")

    ex = mizu.ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("fork"))
    with monkeypatch.context() as patch:
        patch.setattr(threading.Thread, "start", refuse)
        with pytest.raises(RuntimeError, match="can't create new thread"):
            ex.submit(children.double, 1)
    assert not multiprocessing.active_children()
    with pytest.raises(BrokenProcessPool, match="could not start"):
        ex.submit(children.double, 1)
    ex.shutdown()


def _hook_launches(monkeypatch, before):
    """Call before(index) as each worker of a mizu pool starts, before its process does."""
    from mizu._launchers import MultiprocessingLauncher

    launch = MultiprocessingLauncher.launch

    def hooked(self, index, *rings):
        before(index)
        return launch(self, index, *rings)

    monkeypatch.setattr(MultiprocessingLauncher, "launch", hooked)


def _until(path):
    """A launch hook's gate: wait for the first worker to take its task and create path; whether it did."""
    deadline = time.monotonic() + 60
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    return path.exists()


def test_a_fork_pool_runs_its_first_task_while_it_forks_the_others(monkeypatch, tmp_path):
    ran, seen = tmp_path / "ran", []

    def before(index):
        if index == 15:
            seen.append(_until(ran))

    _hook_launches(monkeypatch, before)
    with mizu.ProcessPoolExecutor(16, mp_context=multiprocessing.get_context("fork")) as ex:
        assert ex.submit(children.announce_then_nap, str(ran), 0).result(timeout=60) == 0
        assert len(ex._processes) == 16
    assert seen == [True]


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc: Linux only")
def test_a_start_cut_short_terminates_the_worker_running_the_first_task(monkeypatch, tmp_path):
    """The last fork fails (no descriptor left) while the first worker runs the first task: the submit raises
    at once, and no process, descriptor or segment is left. (Short of processes, the pool would go on with the
    workers it has: test_a_pool_short_of_processes_says_so.)"""
    import errno

    ran = tmp_path / "ran"

    def before(index):
        if index == 15:
            _until(ran)
            raise OSError(errno.EMFILE, "Too many open files")

    with mizu.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork")) as warm:
        warm.submit(children.double, 1).result(timeout=60)
    descriptors, segments = _descriptors(), mapped_segments()
    _hook_launches(monkeypatch, before)
    ex = mizu.ProcessPoolExecutor(16, mp_context=multiprocessing.get_context("fork"))
    start = time.monotonic()
    with pytest.raises(OSError, match="Too many open files"):
        ex.submit(children.announce_then_nap, str(ran), 120)
    assert time.monotonic() - start < 60
    assert ran.exists()
    assert not multiprocessing.active_children()
    assert _descriptors() <= descriptors
    assert mapped_segments() <= segments
    with pytest.raises(BrokenProcessPool, match="could not start its workers"):
        ex.submit(children.double, 1)
    ex.shutdown()


def test_a_pool_short_of_processes_goes_on_with_the_workers_it_has(monkeypatch, start_method):
    """From its third worker on, starting one fails as a fork does once the system gives no more processes:
    the pool warns once and runs every task on the two it has. (For real: test_a_pool_short_of_processes_says_so.)"""
    import errno

    def before(index):
        if index >= 2:
            raise OSError(errno.EAGAIN, "Resource temporarily unavailable")

    _hook_launches(monkeypatch, before)
    with pytest.warns(RuntimeWarning, match=r"goes on with 2 of the 4 workers asked for: .*ulimit -u") as caught:
        with mizu.ProcessPoolExecutor(4, mp_context=multiprocessing.get_context(start_method)) as ex:
            pids = set(ex.map(children.nap_then_pid, [0.1] * 8, timeout=120))
    assert len(pids) <= 2
    assert len([w for w in caught if issubclass(w.category, RuntimeWarning)]) == 1
    assert not multiprocessing.active_children()


def test_a_result_that_breaks_the_pool_while_it_forks_stops_the_forks(monkeypatch, tmp_path):
    """The first result cannot be unpickled, and comes while the pool forks: no more workers start, and the
    submit's future fails with BrokenProcessPool, as the stdlib's would."""
    sent, launched = tmp_path / "sent", []

    def before(index):
        launched.append(index)
        if index == 1:
            # The first worker's ready notice is in the ring: the pool collects it once this fork is done,
            # and sends that worker the task.
            deadline = time.monotonic() + 60
            while not len(ex._pool.results) and time.monotonic() < deadline:
                time.sleep(0.01)
        elif index > 1:
            _until(sent)

    _hook_launches(monkeypatch, before)
    ex = mizu.ProcessPoolExecutor(16, mp_context=multiprocessing.get_context("fork"))
    future = ex.submit(executor_children.instance, executor_children.MarksWhenPickled, str(sent))
    with pytest.raises(BrokenProcessPool):
        future.result(timeout=60)
    assert sent.exists() and len(launched) < 16
    assert not multiprocessing.active_children()
    with pytest.raises(BrokenProcessPool, match="could not be unpickled"):
        ex.submit(children.double, 1)
    ex.shutdown()


class _SubmitsWhenPickled:
    """Pickling it submits another task to the pool, as a user's __reduce__ may."""

    def __init__(self, ex):
        self.ex, self.inner = ex, []

    def __reduce__(self):
        self.inner.append(self.ex.submit(children.double, 21))
        return int, (5,)


def test_pickling_a_task_may_submit_another(executor_type, start_method):
    """The stdlib pickles in a thread of its own; mizu pickles in the submitting thread, and the first submit's
    pickling may come while the pool starts its workers."""
    with executor_type(4, mp_context=multiprocessing.get_context(start_method)) as ex:
        for _ in range(3):   # the first submit starts the pool, the next find some workers started
            arg = _SubmitsWhenPickled(ex)
            assert ex.submit(children.echo_value, arg).result(timeout=60) == 5
            assert [f.result(timeout=60) for f in arg.inner] == [42]


def test_shutdown_waits_for_a_task_being_pickled(executor_type, monkeypatch):
    pickling = threading.Event()
    monkeypatch.setattr(executor_children.SlowToPickle, "pickling", pickling)
    with executor_type(1) as ex:
        ex.submit(children.double, 1).result()
        submitted = []
        thread = threading.Thread(target=lambda: submitted.append(ex.submit(children.echo_value,
                                                                            executor_children.SlowToPickle())))
        thread.start()
        assert pickling.wait(60)
        ex.shutdown(wait=True)
        thread.join()
    assert isinstance(submitted[0].result(timeout=10), executor_children.SlowToPickle)


class _InterruptsPickling:
    def __reduce__(self):
        raise KeyboardInterrupt


def test_ctrl_c_while_an_argument_pickles_reaches_the_caller():
    """mizu pickles in submit's thread, so Ctrl-C there must reach the caller, not the future alone."""
    with mizu.ProcessPoolExecutor(1) as ex:
        ex.submit(children.double, 1).result()
        with pytest.raises(KeyboardInterrupt):
            ex.submit(children.echo_value, _InterruptsPickling())
        assert ex.submit(children.double, 2).result(timeout=10) == 4


def test_ctrl_c_while_a_result_unpickles_reaches_the_caller_and_the_result_is_kept():
    """mizu unpickles results in the waiting thread; the stdlib's manager thread never sees Ctrl-C there."""
    with mizu.ProcessPoolExecutor(1) as ex:
        for attempt in range(20):   # until this thread, not the pool's manager thread, is the one that collects
            future = ex.submit(executor_children.instance, executor_children.InterruptedAtUnpickle, attempt, 42)
            try:
                future.result(timeout=60)
            except KeyboardInterrupt:
                break
        else:
            pytest.fail("no result was unpickled in the waiting thread")
        assert future.result(timeout=0) == 42
        assert ex.submit(children.double, 2).result(timeout=10) == 4
