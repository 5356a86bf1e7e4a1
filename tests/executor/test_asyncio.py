"""asyncio: Executor.asubmit and Executor.amap, under asyncio's own event loop and under uvloop.

The stdlib's pool awaited through ``loop.run_in_executor`` is the oracle
for what asubmit gives (results, exceptions), and its map for what amap
yields. Cancellation is checked in the workers: each task that may be
cancelled appends a line to a file in tmp_path as it starts, so a case
counts how many times each ran. Times are asserted only as bounds on a
hang.
"""

import asyncio
import concurrent.futures as cf
import functools
import itertools
import multiprocessing
import os
import threading
import time
import weakref

import pytest

import children
import executor_children
import mizu
from helpers import tallies, workers_up

pytestmark = pytest.mark.timeout(120)

WAIT = 60   # seconds a single wait may take before the case counts as hung

@pytest.fixture
def stdlib_pool():
    with cf.ProcessPoolExecutor(2) as pool:
        yield pool


def _gate_file(tmp_path):
    return str(tmp_path / "gate")


async def _blocked(pool, tmp_path):
    """A task that holds the pool's one worker until the gate file appears; once it runs, the awaitable of its pid."""
    started = str(tmp_path / "started")
    running = pool.asubmit(executor_children.announce_then_wait, started, _gate_file(tmp_path))
    while not os.path.exists(started):
        await asyncio.sleep(0.005)
    return running


def _open_gate(tmp_path):
    open(_gate_file(tmp_path), "w").close()


CALLS = [
    (children.double, (21,), {}),
    (children.add, (1, 2), {"c": 3}),
    (children.echo_value, ({"a": [1, 2.5, None], "b": ("x", b"y")},), {}),
    (children.pid, (), {}),
]


def test_asubmit_gives_what_run_in_executor_gives(run_loop, mizu_pool, stdlib_pool):
    async def outcomes(pool, through_loop):
        loop = asyncio.get_running_loop()
        calls = [(functools.partial(fn, *args, **kwargs), fn, args, kwargs) for fn, args, kwargs in CALLS]
        found = await asyncio.gather(*(loop.run_in_executor(pool, call) if through_loop else
                                       pool.asubmit(fn, *args, **kwargs) for call, fn, args, kwargs in calls))
        return [type(value).__name__ if fn is children.pid else value for (fn, _, _), value in zip(CALLS, found)]

    assert run_loop(outcomes(mizu_pool, False)) == asyncio.run(outcomes(stdlib_pool, True))


@pytest.mark.parametrize("fn, arg, error", [(children.fail_at, 7, ValueError),
                                             (executor_children.raise_timeout, "late", TimeoutError)],
                         ids=["ValueError", "TimeoutError"])
def test_an_exception_arrives_with_the_worker_s_traceback_as_result_gives_it(run_loop, mizu_pool, stdlib_pool, fn,
                                                                            arg, error):
    async def failure(pool, through_loop):
        loop = asyncio.get_running_loop()
        awaitable = loop.run_in_executor(pool, fn, arg) if through_loop else pool.asubmit(fn, arg)
        with pytest.raises(error) as raised:
            await awaitable
        return raised.value

    ours, theirs = run_loop(failure(mizu_pool, False)), asyncio.run(failure(stdlib_pool, True))
    assert (type(ours), ours.args) == (type(theirs), theirs.args)
    assert fn.__name__ in ours.__cause__.tb
    if error is not TimeoutError:
        # From 3.11 the stdlib's run_in_executor rebuilds a TimeoutError (concurrent.futures' is the builtin then),
        # which drops the worker's traceback; asubmit keeps it, as result() does.
        assert type(ours.__cause__) is type(theirs.__cause__)
    by_result = mizu_pool.submit(fn, arg).exception(WAIT)
    assert ours.__cause__.tb == by_result.__cause__.tb


def test_a_result_settled_after_its_loop_closed_is_dropped_quietly(mizu_pool, caplog):
    async def leave_it_running():
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(mizu_pool.asubmit(time.sleep, 0.3), 0.05)

    asyncio.run(leave_it_running())
    # The sleep's result is collected here, in the thread whose loop has closed.
    assert mizu_pool.submit(abs, -1).result(timeout=WAIT) == 1
    time.sleep(0.4)
    assert mizu_pool.submit(abs, -2).result(timeout=WAIT) == 2
    assert not [record for record in caplog.records if record.levelname == "ERROR"]


def test_many_tasks_are_each_delivered_once(run_loop, mizu_pool):
    async def main():
        return await asyncio.gather(*(mizu_pool.asubmit(children.double, i) for i in range(20_000)))

    assert run_loop(main()) == [2 * i for i in range(20_000)]


def test_cancelling_the_awaiting_task_cancels_a_pending_call(run_loop, tmp_path):
    tally = str(tmp_path / "tally")

    async def main(pool):
        running = await _blocked(pool, tmp_path)
        # Enough before it that the worker's ring cannot hold it too.
        others = [pool.asubmit(executor_children.tally_then_nap, tally, i, 0) for i in range(4)]
        waiting = asyncio.ensure_future(pool.asubmit(executor_children.tally_then_nap, tally, "cancelled", 0))
        await asyncio.sleep(0.05)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        _open_gate(tmp_path)
        return await running, await asyncio.gather(*others)

    with mizu.ProcessPoolExecutor(1) as pool:
        pid, values = run_loop(main(pool))
    assert values == [0, 1, 2, 3] and pid > 0
    assert tallies(tally) == {str(i): 1 for i in range(4)}


def test_cancelling_the_awaiting_task_lets_a_running_call_end(run_loop, tmp_path):
    async def main(pool):
        running = asyncio.ensure_future(await _blocked(pool, tmp_path))
        await asyncio.sleep(0)
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running
        _open_gate(tmp_path)
        return await pool.asubmit(children.double, 4)

    with mizu.ProcessPoolExecutor(1) as pool:
        assert run_loop(main(pool)) == 8


def test_asyncio_wait_for_times_out_and_cancels_the_call(run_loop, tmp_path):
    tally = str(tmp_path / "tally")

    async def main(pool):
        running = await _blocked(pool, tmp_path)
        late = [pool.asubmit(executor_children.tally_then_nap, tally, i, 0) for i in range(4)]
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(late[-1], 0.05)
        _open_gate(tmp_path)
        await running
        return await asyncio.gather(*late[:-1])

    with mizu.ProcessPoolExecutor(1) as pool:
        assert run_loop(main(pool)) == [0, 1, 2]
    assert tallies(tally) == {"0": 1, "1": 1, "2": 1}


def test_shutdown_while_awaiting_cancels_what_has_not_started(run_loop, tmp_path):
    tally = str(tmp_path / "tally")

    async def main(pool):
        running = await _blocked(pool, tmp_path)
        waiting = [pool.asubmit(executor_children.tally_then_nap, tally, i, 0) for i in range(8)]
        pool.shutdown(wait=False, cancel_futures=True)
        with pytest.raises(RuntimeError, match="after shutdown"):
            pool.asubmit(children.double, 1)
        _open_gate(tmp_path)
        outcomes = await asyncio.gather(running, *waiting, return_exceptions=True)
        return outcomes[0], outcomes[1:]

    pool = mizu.ProcessPoolExecutor(1)
    pid, outcomes = run_loop(main(pool))
    pool.shutdown()
    assert pid > 0
    ran = [value for value in outcomes if not isinstance(value, asyncio.CancelledError)]
    assert len(ran) < len(outcomes)
    assert ran == list(range(len(ran)))   # those already sent to the worker, in order
    assert tallies(tally) == {str(i): 1 for i in ran}


@pytest.mark.parametrize("ordered", [True, False])
def test_shutdown_while_amap_runs_cancels_it_as_it_cancels_an_awaited_asubmit(run_loop, tmp_path, ordered):
    async def main(pool):
        running = await _blocked(pool, tmp_path)
        values = pool.amap(children.double, range(100), ordered=ordered)
        pool.shutdown(wait=False, cancel_futures=True)
        _open_gate(tmp_path)
        await running
        with pytest.raises(asyncio.CancelledError):
            async for _ in values:
                pass

    pool = mizu.ProcessPoolExecutor(1)
    run_loop(main(pool))
    pool.shutdown()


def test_two_loops_in_two_threads_share_one_pool(run_loop, mizu_pool):
    found = {}

    def loop_thread(offset):
        async def main():
            return await asyncio.gather(*(mizu_pool.asubmit(children.add, i, offset) for i in range(2_000)))

        found[offset] = run_loop(main())

    threads = [threading.Thread(target=loop_thread, args=(offset,)) for offset in (0, 10_000)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT)
    assert found == {offset: [i + offset for i in range(2_000)] for offset in (0, 10_000)}


def test_asubmit_and_amap_need_a_running_loop(mizu_pool):
    with pytest.raises(RuntimeError, match="coroutine running in an asyncio event loop"):
        mizu_pool.asubmit(children.double, 1)
    with pytest.raises(RuntimeError, match="coroutine running in an asyncio event loop"):
        mizu_pool.amap(children.double, range(3))


def test_a_view_s_task_timeout_applies_to_asubmit_and_amap(run_loop):
    async def main(pool):
        view = pool.options(task_timeout=0.5)
        with pytest.raises(TimeoutError):
            await view.asubmit(children.nap, 30)
        with pytest.raises(TimeoutError):
            async for _ in view.amap(children.nap, [30]):
                pass
        return [x async for x in view.amap(children.double, range(5))]

    with mizu.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("forkserver")) as pool:
        assert run_loop(main(pool)) == [0, 2, 4, 6, 8]


def test_stop_takes_what_asubmit_returned_and_ends_the_running_call(run_loop, tmp_path):
    async def main(pool):
        path = str(tmp_path / "started")
        running = pool.asubmit(children.announce_then_nap, path, 60)
        while not os.path.exists(path):
            await asyncio.sleep(0.01)
        assert pool.stop(running) is True
        with pytest.raises(asyncio.CancelledError):
            await running
        assert pool.stop(running) is False
        return await pool.asubmit(children.double, 4)

    with mizu.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("forkserver")) as pool:
        assert run_loop(main(pool)) == 8


# -- amap --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("chunksize", [1, 7])
@pytest.mark.parametrize("buffersize", [None, 3])
def test_amap_in_order_yields_what_map_yields(run_loop, mizu_pool, stdlib_pool, chunksize, buffersize):
    async def main():
        return [x async for x in mizu_pool.amap(children.add, range(50), range(100, 150), chunksize=chunksize,
                                                  buffersize=buffersize)]

    assert run_loop(main()) == list(stdlib_pool.map(children.add, range(50), range(100, 150), chunksize=chunksize))


ODD_VALUES = [None, (), (1, 2), ValueError("a value, not raised"), StopIteration(3), StopAsyncIteration(), [4], ""]


@pytest.mark.parametrize("chunksize", [1, 3])
def test_amap_yields_tuples_and_exceptions_as_values_as_map_does(run_loop, mizu_pool, stdlib_pool, chunksize):
    def shown(values):
        return [(type(v).__name__, v.args) if isinstance(v, BaseException) else v for v in values]

    async def main():
        return [x async for x in mizu_pool.amap(children.echo_value, ODD_VALUES, chunksize=chunksize)]

    assert shown(run_loop(main())) == shown(stdlib_pool.map(children.echo_value, ODD_VALUES, chunksize=chunksize))


def test_amap_steps_as_an_async_iterator_does(run_loop, mizu_pool):
    async def main():
        values = mizu_pool.amap(children.fail_at, [1, 2, 3, 4, 7, 5], chunksize=4)   # [1, 2, 3, 4] in a task
        assert aiter(values) is values
        found = [await anext(values)]
        step = anext(values)   # its value already there
        found.append(await step)
        with pytest.raises(RuntimeError, match="already awaited"):
            await step
        later, last = anext(values), anext(values)   # two steps taken at once
        with pytest.raises(StopIteration) as stopped:   # stepped by hand, as a generator-based driver does
            next(later.__await__())
        found += [stopped.value.value, await last]
        with pytest.raises(ValueError):
            await anext(values)
        with pytest.raises(StopAsyncIteration):   # the call's exception ended it, as it ends map's iterator
            await anext(values)
        await values.aclose()
        await values.aclose()
        return found

    assert run_loop(main()) == [1, 2, 3, 4]


@pytest.mark.parametrize("ordered", [True, False])
def test_amap_keeps_no_value_the_caller_has_let_go_of(run_loop, mizu_pool, ordered):
    async def main():
        refs = []
        async for value in mizu_pool.amap(executor_children.Dummy, range(100), ordered=ordered):
            refs.append(weakref.ref(value))
            del value
            assert all(ref() is None for ref in refs[:-1])   # the last may be held until the next step
        return refs

    assert all(ref() is None for ref in run_loop(main()))


@pytest.mark.parametrize("chunksize", [1, 7])
@pytest.mark.parametrize("buffersize", [None, 3])
def test_amap_unordered_yields_each_value_once(run_loop, mizu_pool, chunksize, buffersize):
    async def main():
        return [x async for x in mizu_pool.amap(children.double, range(500), ordered=False, chunksize=chunksize,
                                                  buffersize=buffersize)]

    assert sorted(run_loop(main())) == [2 * i for i in range(500)]


def test_amap_unordered_yields_a_fast_call_before_a_slow_one_before_it(run_loop, tmp_path):
    gate = str(tmp_path / "gate")

    async def main(pool):
        found = []
        async for value in pool.amap(executor_children.apply, [children.wait_for_file, children.echo_value],
                                     [gate, "fast"], ordered=False):
            found.append(value)
            open(gate, "w").close()   # the slow call ends only once a value has come
        return found

    # Both workers up before the map, so that the fast call has one of its
    # own: what is checked is the order of delivery, not how soon the pool
    # starts a worker.
    with mizu.ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("fork")) as pool:
        workers_up(pool, str(tmp_path), 2)
        fast, slow = run_loop(main(pool))
    assert fast == "fast" and isinstance(slow, int)


def test_amap_raises_a_call_s_exception_where_map_does(run_loop, mizu_pool, stdlib_pool):
    async def main():
        seen = []
        with pytest.raises(ValueError) as raised:
            async for x in mizu_pool.amap(children.fail_at, range(20), chunksize=3):
                seen.append(x)
        return seen, raised.value

    seen, error = run_loop(main())
    theirs = []
    with pytest.raises(ValueError) as raised:
        for x in stdlib_pool.map(children.fail_at, range(20), chunksize=3):
            theirs.append(x)
    assert seen == theirs and error.args == raised.value.args and "fail_at" in error.__cause__.tb


def test_amap_times_out(run_loop, mizu_pool):
    async def main():
        with pytest.raises(cf.TimeoutError):
            async for _ in mizu_pool.amap(children.nap, [5.0], timeout=0.1):
                pass

    run_loop(main())


@pytest.mark.parametrize("ordered", [True, False])
def test_amap_keeps_at_most_buffersize_tasks_ahead(run_loop, tmp_path, ordered):
    tally = str(tmp_path / "tally")

    async def main(pool):
        found = []
        values = pool.amap(executor_children.tally_then_nap, itertools.repeat(tally), itertools.count(),
                           itertools.repeat(0.01), ordered=ordered, buffersize=3)
        async for value in values:
            found.append(value)
            if len(found) == 10:
                await values.aclose()
        return found

    with mizu.ProcessPoolExecutor(2) as pool:
        found = run_loop(main(pool))
    assert len(found) == 10 and len(set(found)) == 10
    started = tallies(tally)
    assert set(found) <= {int(value) for value in started} and len(started) <= 10 + 3
    assert all(count == 1 for count in started.values())


@pytest.mark.parametrize("how", ["aclose", "break"])
def test_amap_closed_early_cancels_the_calls_not_yet_started(run_loop, tmp_path, how):
    tally = str(tmp_path / "tally")

    async def main(pool):
        # The first call returns at once, the others take 0.2 s each: the few that start after it (those the
        # worker has taken, and the one it runs) leave room for a close that comes most of a second late.
        values = pool.amap(executor_children.tally_then_nap, [tally] * 50, range(50), [0] + [0.2] * 49)
        async for first in values:
            break
        if how == "aclose":
            await values.aclose()
        else:
            del values
            await asyncio.sleep(0.1)   # the loop closes a dropped async generator in a task of its own
        return first

    with mizu.ProcessPoolExecutor(1) as pool:
        assert run_loop(main(pool)) == 0
    assert len(tallies(tally)) < 10


@pytest.mark.parametrize("kwargs, error, match", [
    ({"chunksize": 0}, ValueError, "chunksize must be >= 1"),
    ({"buffersize": 0}, ValueError, "buffersize must be None or > 0"),
    ({"buffersize": 1.5}, TypeError, "buffersize must be an integer or None"),
])
def test_amap_refuses_bad_arguments_as_map_does_before_submitting(run_loop, kwargs, error, match, tmp_path):
    tally = str(tmp_path / "tally")

    async def main(pool):
        with pytest.raises(error, match=match):
            pool.amap(executor_children.tally_then_nap, [tally], [0], [0], **kwargs)

    with mizu.ProcessPoolExecutor(1) as pool:
        run_loop(main(pool))
    assert not tallies(tally)
