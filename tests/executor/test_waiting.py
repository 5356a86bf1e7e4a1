"""Every way of waiting for futures, run for mizu and for the stdlib's pool as the oracle.

concurrent.futures.wait and as_completed are the stdlib's own functions in
both cases; what differs is the futures they work on.
"""

import asyncio
import concurrent.futures as cf
import gc
import logging
import threading
import time
import tracemalloc

import pytest

import children
import executor_children
import mizu


@pytest.fixture
def one(executor_type):
    """A one-worker pool: its tasks finish in the order they are submitted."""
    with executor_type(1) as ex:
        yield ex


def test_wait_all_completed_mixes_done_pending_and_other_executors_futures(one):
    early = [one.submit(children.double, i) for i in range(20)]
    cf.wait(early, timeout=60)
    with cf.ThreadPoolExecutor(1) as threads:
        late = [one.submit(children.nap, 0.05), threads.submit(time.sleep, 0.05), one.submit(children.double, 7)]
        done, not_done = cf.wait(early + late + early[:3], timeout=60)
    assert done == set(early + late) and not not_done
    assert [f.result() for f in early] == [2 * i for i in range(20)] and late[2].result() == 14


def test_wait_times_out_with_the_pending_futures_not_done(one, tmp_path):
    gate = str(tmp_path / "gate")
    slow = one.submit(children.wait_for_file, gate)   # done only once the gate opens, after the timeout
    quick = one.submit(children.double, 1)
    done, not_done = cf.wait([slow, quick], timeout=0.1)
    assert not done and not_done == {slow, quick}
    open(gate, "w").close()
    done, not_done = cf.wait([slow, quick], timeout=60)
    assert done == {slow, quick} and not not_done and quick.result() == 2


def test_wait_first_completed_returns_once_one_is_done(one, tmp_path):
    gate = str(tmp_path / "gate")   # opened once the waits are over: the second is not done before
    futures = [one.submit(children.nap, 0.05)] + [one.submit(children.wait_for_file, gate)]
    done, not_done = cf.wait(futures, timeout=60, return_when=cf.FIRST_COMPLETED)
    assert done == {futures[0]} and not_done == {futures[1]}
    done, not_done = cf.wait(futures, timeout=60, return_when=cf.FIRST_COMPLETED)
    assert futures[0] in done
    open(gate, "w").close()
    assert futures[1].result(timeout=60) > 0


def test_wait_first_exception_returns_at_the_first_failure(one, tmp_path):
    gate = str(tmp_path / "gate")   # opened once the waits are over: the third is not done before
    futures = [one.submit(children.double, 1), one.submit(executor_children.raise_runtime, "x"),
               one.submit(children.wait_for_file, gate)]
    done, not_done = cf.wait(futures, timeout=60, return_when=cf.FIRST_EXCEPTION)
    assert done == set(futures[:2]) and not_done == {futures[2]}
    assert isinstance(futures[1].exception(), RuntimeError)
    done, not_done = cf.wait(futures[:1], timeout=60, return_when=cf.FIRST_EXCEPTION)
    assert done == {futures[0]}
    open(gate, "w").close()
    assert futures[2].result(timeout=60) > 0


def test_as_completed_yields_each_future_once_as_it_ends(one, tmp_path):
    gate, go = str(tmp_path / "gate"), threading.Event()
    with cf.ThreadPoolExecutor(1) as threads:
        # `other` ends once as_completed waits (it has yielded one), and the pool's last task only after that: the
        # gate opens in a callback of `other`, which runs once its waiters have been told.
        other = threads.submit(go.wait, 60)
        other.add_done_callback(lambda f: open(gate, "w").close())
        futures = [one.submit(children.double, i) for i in range(30)] + [one.submit(children.wait_for_file, gate),
                                                                         other]
        seen = []
        for future in cf.as_completed(futures + futures[:5], timeout=60):
            seen.append(future)
            go.set()
    assert len(seen) == len(futures) and set(seen) == set(futures)
    assert seen.index(futures[30]) > seen.index(other)


def test_as_completed_times_out_naming_the_unfinished(one, tmp_path):
    gate = str(tmp_path / "gate")
    futures = [one.submit(children.double, 1), one.submit(children.wait_for_file, gate)]
    # The first is done before the wait begins, however long the worker takes to start.
    cf.wait(futures[:1], timeout=60)
    yielded = []
    with pytest.raises(cf.TimeoutError, match=r"1 \(of 2\) futures unfinished"):
        for f in cf.as_completed(futures, timeout=0.5):
            yielded.append(f)
    assert yielded == [futures[0]]
    open(gate, "w").close()
    assert futures[1].result(timeout=60) > 0


def test_callbacks_run_in_order_once_each_before_and_after_the_end(one):
    calls = []
    ran = threading.Event()
    future = one.submit(children.nap, 0.1)
    future.add_done_callback(lambda f: calls.append(("first", f.result())))
    future.add_done_callback(lambda f: (calls.append(("second", f.result())), ran.set()))
    assert ran.wait(60)
    future.add_done_callback(lambda f: calls.append(("after", threading.current_thread())))
    assert calls == [("first", 0.1), ("second", 0.1), ("after", threading.current_thread())]


def test_a_callback_that_waits_for_another_future_with_a_timeout_times_out(executor_type, tmp_path):
    gate = str(tmp_path / "gate")
    seen = []
    ran = threading.Event()

    def poll(f, other):
        for timeout in (0, 0.05):
            try:
                seen.append(other.result(timeout=timeout))
            except cf.TimeoutError as exc:   # the builtin from Python 3.11
                seen.append(type(exc))
        ran.set()

    with executor_type(2) as ex:
        blocked = ex.submit(children.wait_for_file, gate)
        ex.submit(children.double, 1).add_done_callback(lambda f: poll(f, blocked))
        assert ran.wait(60)
        open(gate, "w").close()
        assert blocked.result(timeout=60) > 0
    assert seen == [cf.TimeoutError, cf.TimeoutError]


def test_a_timeout_that_is_not_a_number_is_refused_as_the_stdlib_refuses_it(one, tmp_path):
    gate = str(tmp_path / "gate")
    future = one.submit(children.wait_for_file, gate)
    for wait in (future.result, future.exception):
        with pytest.raises(TypeError):
            wait(timeout="1")
    assert not future.done()
    open(gate, "w").close()
    assert future.result(timeout=60) > 0
    assert future.exception(timeout="1") is None   # a done future is not waited for, in either pool


def test_a_callback_that_raises_is_logged_and_the_others_still_run(one, caplog):
    ran = threading.Event()

    def broken(f):
        raise ValueError("in a callback")

    with caplog.at_level(logging.ERROR, logger="concurrent.futures"):
        future = one.submit(children.nap, 0.05)
        future.add_done_callback(broken)
        future.add_done_callback(lambda f: ran.set())
        assert ran.wait(60)
        future.add_done_callback(broken)
    assert [r.getMessage() for r in caplog.records] == [f"exception calling callback for {future!r}"] * 2
    assert all(r.exc_info[0] is ValueError for r in caplog.records)


def test_a_cancelled_future_is_done_for_every_waiter(one):
    blocker = one.submit(children.nap, 0.3)
    queued = [one.submit(children.double, i) for i in range(200)]
    cancelled = [f for f in reversed(queued) if f.cancel()]
    assert cancelled
    seen = []
    cancelled[0].add_done_callback(seen.append)
    done, not_done = cf.wait(queued + [blocker], timeout=60)
    assert not not_done and seen == [cancelled[0]]
    assert set(cf.as_completed(queued, timeout=60)) == set(queued)
    assert all(f.cancelled() for f in cancelled)
    assert [f.result() for f in queued if not f.cancelled()] == [2 * i for i, f in enumerate(queued)
                                                                 if not f.cancelled()]


def test_result_times_out_then_returns_once_done(one):
    future = one.submit(children.nap, 0.3)
    with pytest.raises(cf.TimeoutError):
        future.result(timeout=0.01)
    with pytest.raises(cf.TimeoutError):
        future.exception(timeout=0)
    assert future.result(timeout=60) == 0.3


def test_many_threads_wait_on_the_same_futures_each_way(one):
    futures = [one.submit(children.nap, 0.002) for _ in range(100)]
    results = {}

    def by(name, how):
        results[name] = how()

    ways = {
        "result": lambda: [f.result(timeout=60) for f in futures],
        "wait": lambda: cf.wait(futures, timeout=60).not_done,
        "first": lambda: len(cf.wait(futures, timeout=60, return_when=cf.FIRST_COMPLETED).done) > 0,
        "as_completed": lambda: len(list(cf.as_completed(futures, timeout=60))),
        "exception": lambda: [f.exception(timeout=60) for f in reversed(futures)],
    }
    threads = [threading.Thread(target=by, args=(name, how)) for name, how in ways.items() for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert results == {"result": [0.002] * 100, "wait": set(), "first": True, "as_completed": 100,
                       "exception": [None] * 100}


def test_asyncio_waits_on_wrapped_futures_and_run_in_executor(one):
    async def main():
        loop = asyncio.get_running_loop()
        gathered = await asyncio.gather(*(loop.run_in_executor(one, children.double, i) for i in range(300)))
        wrapped = await asyncio.wait_for(asyncio.wrap_future(one.submit(children.nap, 0.05)), 60)
        with pytest.raises(RuntimeError):
            await asyncio.wrap_future(one.submit(executor_children.raise_runtime, "boom"))
        return gathered, wrapped

    assert asyncio.run(main()) == ([2 * i for i in range(300)], 0.05)


def test_waiting_on_finished_futures_costs_no_memory_per_future():
    """wait() and as_completed() over futures that are done allocate no Condition or list for each."""
    with mizu.ProcessPoolExecutor(1) as ex:
        futures = [ex.submit(children.double, i) for i in range(50_000)]
        for f in futures:   # done, without having been waited on otherwise
            f.result(timeout=60)
        gc.collect()
        tracemalloc.start()
        try:
            cf.wait(futures, timeout=60)
            for _ in cf.as_completed(futures, timeout=60):
                pass
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    # The stdlib's own sets and sorted list of the futures take ~150 bytes
    # each; a Condition and its lists would be over 1,000.
    assert peak / len(futures) < 400


def test_a_future_of_the_pools_class_made_by_hand_waits_as_the_stdlibs_does(one):
    # Code written for concurrent.futures may make futures of the class a
    # pool's submit returns, and set them itself: they belong to no pool.
    made, seen = type(one.submit(children.double, 1))(), []
    made.add_done_callback(lambda f: seen.append(f.result()))
    threading.Timer(0.1, made.set_result, (5,)).start()
    assert cf.wait([made], timeout=60).done == {made}
    assert made.result(timeout=60) == 5 and seen == [5]
