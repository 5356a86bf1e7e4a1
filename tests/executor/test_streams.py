"""Streaming maps: map's buffersize on every Python, and map(ordered=False), which yields results as calls complete.

A bound on the calls ahead is counted in the workers: each call leaves a file
as it starts. Completion order is made unambiguous by gates, files the test
creates to let a waiting call return. The stdlib's pool is the oracle for the
ordered map's buffersize (from Python 3.14, whose map takes it), and
multiprocessing.Pool.imap_unordered for what an unordered map yields.
"""

import concurrent.futures as cf
import gc
import io
import itertools
import multiprocessing
import re
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import children
import mizu
from helpers import workers_up
from streams_children import SETTLE, calls_started, check_bound, gated, open_gate, started

@pytest.mark.stdlib_oracle_from((3, 14))   # map's buffersize
@pytest.mark.parametrize("chunksize", [1, 3])
def test_buffersize_bounds_the_calls_started_in_the_workers_on_every_python(executor_type, tmp_path, chunksize):
    with executor_type(2) as ex:
        check_bound(ex, started, tmp_path, True, chunksize)


@pytest.mark.parametrize("chunksize", [1, 3])
def test_an_unordered_map_refills_its_buffer_as_each_result_is_taken(mizu_pool, tmp_path, chunksize):
    check_bound(mizu_pool, started, tmp_path, False, chunksize)


def test_a_view_of_the_pool_maps_in_completion_order_within_its_buffer(tmp_path):
    with mizu.ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("forkserver")) as ex:
        view = ex.options(task_timeout=60)
        check_bound(view, started, tmp_path, False, 2)
        assert sorted(view.map(children.double, range(50), ordered=False, buffersize=3, chunksize=4)) == [
            2 * i for i in range(50)]


@pytest.mark.parametrize("buffersize", [None, 4])
@pytest.mark.parametrize("chunksize", [1, 2])
def test_an_unordered_map_yields_results_in_the_order_their_calls_complete(tmp_path, chunksize, buffersize):
    # One worker per task (chunk): each call waits for its gate, opened in an order unlike the calls'.
    order = [3, 1, 2, 0]
    bar = io.StringIO()
    with mizu.ProcessPoolExecutor(4) as ex:
        results = ex.map(gated, itertools.repeat(str(tmp_path)), range(4 * chunksize), chunksize=chunksize,
                         buffersize=buffersize, ordered=False, timeout=120,
                         progress={"file": bar, "delay": 0, "total": 4 * chunksize})
        seen = []
        for task in order:
            calls = range(task * chunksize, (task + 1) * chunksize)
            for value in calls:
                open_gate(tmp_path, value)
            seen.extend(next(results) for _ in calls)
        assert next(results, "end") == "end"
    assert seen == [value for task in order for value in range(task * chunksize, (task + 1) * chunksize)]
    assert re.findall(r"(\d+)/(\d+)", bar.getvalue())[-1] == (str(4 * chunksize),) * 2


def test_a_slow_call_holds_back_no_other_result(mizu_pool, tmp_path):
    """Every other call's result arrives while the first call waits for its gate; then the first's."""
    results = mizu_pool.map(gated, itertools.repeat(str(tmp_path)), range(40), ordered=False, timeout=120)
    for value in range(1, 40):
        open_gate(tmp_path, value)
    assert sorted(itertools.islice(results, 39)) == list(range(1, 40))
    open_gate(tmp_path, 0)
    assert list(results) == [0]


def test_an_unordered_map_gives_every_result_once_as_imap_unordered():
    with mizu.ProcessPoolExecutor(2) as ex, multiprocessing.get_context().Pool(2) as oracle:
        @settings(max_examples=40)
        @given(items=st.lists(st.integers(-1000, 1000), max_size=60), chunksize=st.integers(1, 8),
               buffersize=st.none() | st.integers(1, 5), progress=st.booleans())
        def check(items, chunksize, buffersize, progress):
            got = list(ex.map(children.double, items, chunksize=chunksize, buffersize=buffersize, ordered=False,
                              progress={"file": io.StringIO(), "delay": 0} if progress else False))
            assert sorted(got) == sorted(oracle.imap_unordered(children.double, items, chunksize))

        check()
        # Several iterables, the shortest ending the calls, as in map.
        assert sorted(ex.map(children.add, range(30), range(0, 60, 2), ordered=False, chunksize=4)) == [
            3 * i for i in range(30)]


@pytest.mark.parametrize("chunksize", [1, 3])
def test_a_call_that_raised_ends_an_unordered_map_at_its_turn_in_completion_order(mizu_pool, tmp_path, chunksize):
    # Call 0 waits for its gate, 4 fails at once, the others return at once:
    # 4's error comes before 0's result, after the results of the calls
    # completed before it, and ends the iteration. With chunks, a failure
    # stands for its whole chunk, as in map.
    for value in (1, 2, 3, 5):
        open_gate(tmp_path, value)
    results = mizu_pool.map(gated, itertools.repeat(str(tmp_path)), range(6), [False] * 4 + [True, False],
                            chunksize=chunksize, ordered=False, timeout=120)
    seen = []
    with pytest.raises(ValueError, match="^4$"):
        seen.extend(results)
    assert next(results, "end") == "end"
    assert 0 not in seen and 4 not in seen and len(set(seen)) == len(seen)
    if chunksize == 3:
        assert 3 not in seen and 5 not in seen
    open_gate(tmp_path, 0)


def test_an_unordered_map_times_out_from_the_call_to_map(mizu_pool, tmp_path):
    # Both workers up first: the call to return need not wait for a start, which a loaded machine may take the
    # map's whole second over.
    workers_up(mizu_pool, str(tmp_path), 2)
    open_gate(tmp_path, 1)
    begun = time.monotonic()
    results = mizu_pool.map(gated, itertools.repeat(str(tmp_path)), range(2), ordered=False, timeout=1.0)
    assert next(results) == 1
    with pytest.raises(cf.TimeoutError):
        next(results)
    assert time.monotonic() - begun >= 1.0
    assert next(results, "end") == "end"
    open_gate(tmp_path, 0)
    # A timeout longer than a lock can wait at once is waited for in parts.
    for progress in (False, {"file": io.StringIO(), "delay": 0}):
        assert sorted(mizu_pool.map(children.double, range(5), ordered=False, timeout=1e12, progress=progress)) == [
            0, 2, 4, 6, 8]


def _stop(results, how):
    if how == "close":
        results.close()
    elif how == "break":
        for _ in results:
            break
    # and in every case the iterator is dropped: closing it, if not closed already.


@pytest.mark.parametrize("how", ["close", "break", "collected"])
@pytest.mark.parametrize("chunksize", [1, 2])
def test_a_consumer_that_stops_early_leaves_nothing_running_or_queued(tmp_path, how, chunksize):
    n, seconds = 60, 0.5
    with mizu.ProcessPoolExecutor(2) as ex:
        results = ex.map(started, itertools.repeat(str(tmp_path)), range(n), itertools.repeat(seconds),
                         chunksize=chunksize, ordered=False, progress={"file": io.StringIO(), "delay": 0})
        assert next(results) in range(n)
        _stop(results, how)
        del results
        gc.collect()
        ex.shutdown(wait=True)
        after_shutdown = calls_started(tmp_path)
        # At most what ran or was queued in the two workers when it stopped: the rest was cancelled.
        assert after_shutdown <= 8 * chunksize
        time.sleep(SETTLE)
        assert calls_started(tmp_path) == after_shutdown


def test_ordered_is_checked_and_needs_the_pools_own_submit(mizu_pool):
    for bad in (None, 0, "no"):
        with pytest.raises(TypeError, match="ordered must be True"):
            mizu_pool.map(children.double, range(3), ordered=bad)

    class Counting(mizu.ProcessPoolExecutor):
        def submit(self, fn, /, *args, **kwargs):
            return super().submit(fn, *args, **kwargs)

    with Counting(1) as ex:
        assert list(ex.map(children.double, range(5))) == [0, 2, 4, 6, 8]
        with pytest.raises(TypeError, match="ordered=False cannot be combined with a submit"):
            ex.map(children.double, range(3), ordered=False)
