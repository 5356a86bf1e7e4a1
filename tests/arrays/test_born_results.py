"""Arrays that tasks make, returned: born in the worker's arena, they come back without a copy.

Each behaviour is checked against the stdlib's pool, whose results are
always copies: a result the worker also keeps must stay independent of the
caller's, as a copy would be.
"""

import contextvars
import multiprocessing
import pickle
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import arrays_children
import mizu
from helpers import mapped_segments
from mizu import _arena, _array_data

N = 200_000   # float64s: 1.6 MB, well above the arena's threshold

KINDS = ["negated", "empty filled", "zeros", "ufunc", "slice of a new one", "small slice of a new one", "Fortran", "int32",
         "in a dict"]


def _arrays_of(value):
    if isinstance(value, np.ndarray):
        return [value]
    if isinstance(value, dict):
        return [a for v in value.values() for a in _arrays_of(v)]
    if isinstance(value, (list, tuple)):
        return [a for v in value for a in _arrays_of(v)]
    return []


def _same(got, want):
    assert type(got) is type(want)
    if isinstance(want, np.ndarray):
        assert got.dtype == want.dtype and got.shape == want.shape
        assert got.flags.c_contiguous == want.flags.c_contiguous
        assert got.flags.f_contiguous == want.flags.f_contiguous
        np.testing.assert_array_equal(got, want)
    elif isinstance(want, dict):
        assert got.keys() == want.keys()
        for key in want:
            _same(got[key], want[key])
    elif isinstance(want, (list, tuple)):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            _same(g, w)
    else:
        assert got == want


@pytest.mark.parametrize("kind", KINDS)
def test_new_arrays_come_back_as_with_the_stdlib(pool, kind):
    made = arrays_children.new_array(kind, N)
    want = pickle.loads(pickle.dumps(made))   # a copy's layout, as the stdlib gives
    pool.submit(arrays_children.new_array, kind, 1000).result(timeout=60)   # numpy imported in a worker
    got = pool.submit(arrays_children.new_array, kind, N).result(timeout=60)
    _same(got, want)
    for array, original in zip(_arrays_of(got), _arrays_of(made)):
        assert array.flags.writeable
        array[...] = 0
        # numpy pickles a strided array as a copy of its items, in band.
        if isinstance(pool, mizu.ProcessPoolExecutor) and (original.flags.c_contiguous or original.flags.f_contiguous):
            found = mizu.arena_block(array)
            assert found is not None and found[0].arena_id != mizu.default_arena().id


@pytest.mark.parametrize("keep", ["array", "view"])
def test_a_result_the_worker_keeps_stays_apart_from_the_callers(executor_type, start_method, keep):
    make = arrays_children.make_and_keep if keep == "array" else arrays_children.make_and_keep_a_view
    with executor_type(1, mp_context=multiprocessing.get_context(start_method)) as ex:
        got = ex.submit(make, N, 1.0).result(timeout=60)
        got[:] = 9.0
        assert ex.submit(arrays_children.kept_first, keep).result(timeout=60) == 1.0
        assert ex.submit(arrays_children.kept_first, keep, 4.0).result(timeout=60) == 4.0
        assert (got == 9.0).all()


def test_results_go_back_to_the_workers_arena_when_dropped(start_method):
    with mizu.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context(start_method)) as ex:
        ex.submit(arrays_children.new_array, "negated", 1000).result(timeout=60)
        before = ex.submit(arrays_children.arena_stats).result(timeout=60)["blocks"]
        for _ in range(300):
            assert ex.submit(arrays_children.new_array, "negated", N).result(timeout=60)[1] == -1.0
        assert ex.submit(arrays_children.arena_stats).result(timeout=60)["blocks"] == before
        held = [ex.submit(arrays_children.new_array, "ufunc", N).result(timeout=60) for _ in range(5)]
        assert ex.submit(arrays_children.arena_stats).result(timeout=60)["blocks"] == before + 5
        del held
        assert ex.submit(arrays_children.arena_stats).result(timeout=60)["blocks"] == before


def test_a_workers_idle_arena_memory_goes_back_to_the_system():
    with mizu.ProcessPoolExecutor(1) as ex:
        ex.submit(arrays_children.new_array, "negated", 10).result(timeout=60)
        first = ex.submit(arrays_children.arena_stats).result(timeout=60)["capacity"]
        back = ex.submit(arrays_children.new_array, "negated", 10_000_000).result(timeout=60)
        assert ex.submit(arrays_children.arena_stats).result(timeout=60)["capacity"] > first
        del back
        deadline = time.monotonic() + 30
        while ex.submit(arrays_children.arena_stats).result(timeout=60)["capacity"] > first:
            assert time.monotonic() < deadline, "the worker kept an idle segment for 30 s"
            time.sleep(0.2)


def test_a_pool_shut_down_leaves_no_mapping_of_its_workers_segments():
    """The segments its results came from, ordinary and large (a segment of one block), are unmapped here.

    While the pool runs, the last few stay mapped once their results are
    dropped, for the results that come from them next; once its workers are
    gone, none can come again.
    """
    with mizu.ProcessPoolExecutor(1) as warm:   # what a first pool opens once per process
        warm.submit(arrays_children.new_array, "negated", 10).result(timeout=60)
    before = mapped_segments()
    with mizu.ProcessPoolExecutor(1) as ex:
        for n in (N, 5_000_000, 7_500_000):   # 1.6, 40 and 60 MB
            back = ex.submit(arrays_children.new_array, "negated", n).result(timeout=60)
            assert back[1] == -1.0
            del back
    assert mapped_segments() <= before


def test_a_small_slice_of_a_large_new_array_comes_back_without_the_rest():
    """As the stdlib's copy would: the client holds the slice's bytes, not the 160 MB array it was cut from."""
    with mizu.ProcessPoolExecutor(1) as ex:
        ex.submit(arrays_children.new_array, "negated", 10).result(timeout=60)
        got = ex.submit(arrays_children.new_array, "small slice of a new one", 100 * N).result(timeout=60)
        np.testing.assert_array_equal(got, np.arange(N, dtype=np.float64) * 2)
        block, offset, nbytes = mizu.arena_block(got)
        assert nbytes == got.nbytes and block.nbytes < 2 * got.nbytes


def test_a_pool_shut_down_gives_back_the_segments_of_the_arrays_it_copied_for_its_workers():
    """Plain arrays cross in segments of this process's arena; once they are dropped, none stays mapped."""
    with mizu.ProcessPoolExecutor(1) as warm:   # what a first pool opens once per process
        warm.submit(arrays_children.describe, np.ones(N)).result(timeout=60)
    before = mapped_segments()
    with mizu.ProcessPoolExecutor(1) as ex:
        for n in (5_000_000, 12_500_000):   # 40 and 100 MB: each a segment of its own
            assert ex.submit(arrays_children.describe, np.ones(n)).result(timeout=60)[0] == "ndarray"
    assert mapped_segments() <= before


def test_only_workers_take_array_data_from_the_arena():
    with mizu.ProcessPoolExecutor(1) as ex:
        ex.submit(arrays_children.new_array, "negated", 10).result(timeout=60)
        assert ex.submit(arrays_children.handler_of_new_array, 1 << 20).result(timeout=60) == "mizu_arena"
    assert arrays_children.handler_of_new_array(1 << 20) != "mizu_arena"


def test_a_child_forked_in_a_task_has_copies_of_the_arrays_it_inherited(executor_type):
    with executor_type(1, mp_context=multiprocessing.get_context("spawn")) as ex:
        ex.submit(arrays_children.new_array, "negated", 10).result(timeout=60)
        assert ex.submit(arrays_children.fork_and_churn, N).result(timeout=60) == (0, 2.0 * N)


def test_a_worker_whose_arena_cannot_be_made_still_runs_tasks(monkeypatch):
    monkeypatch.setenv("MIZU_ARENA_LIMIT", "plenty")
    with mizu.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as ex:
        assert ex.submit(arrays_children.new_array, "negated", 10).result(timeout=60)[1] == -1.0
        assert ex.submit(arrays_children.sum_of_new, 1_000_000).result(timeout=60) == 1_000_000.0


def test_arrays_past_the_workers_arena_limit_come_from_numpy(monkeypatch):
    monkeypatch.setenv("MIZU_ARENA_LIMIT", "48M")
    with mizu.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as ex:
        ex.submit(arrays_children.new_array, "negated", 10).result(timeout=60)
        assert ex.submit(arrays_children.sum_of_new, 10_000_000).result(timeout=60) == 10_000_000.0
        assert ex.submit(arrays_children.new_array, "negated", 1_000_000).result(timeout=60)[-1] == -999_999.0
        with pytest.raises(MemoryError, match="MIZU_ARENA_LIMIT"):
            ex.submit(arrays_children.new_array, "negated", 10_000_000).result(timeout=60)
        assert ex.submit(arrays_children.sum_of_new, 100).result(timeout=60) == 100.0


# The allocator itself, in this process: installed in a context of its own
# so that the rest of the tests' arrays keep numpy's allocator.
_context = contextvars.copy_context()
_context.run(_array_data.install_array_handler)

_sizes = st.one_of(st.integers(0, 4096),
                   st.integers(_array_data.ARRAY_THRESHOLD - 64, _array_data.ARRAY_THRESHOLD + 64),
                   st.integers(1, 3 << 20))
_ops = st.lists(st.tuples(st.sampled_from(["empty", "zeros", "resize", "drop", "pickle"]), _sizes,
                          st.integers(0, 255)), max_size=30)


def _check_allocations(ops):
    live = []   # (array, the byte every item holds)
    for op, size, fill in ops:
        if op in ("empty", "zeros"):
            a = np.empty(size, np.uint8) if op == "empty" else np.zeros(size, np.uint8)
            if op == "zeros":
                assert not a.any()
            a[:] = fill
            live.append((a, fill))
            found = _array_data.born_block(memoryview(a)) if a.size else None
            assert (found is not None) == (size >= _array_data.ARRAY_THRESHOLD)
        elif live and op == "resize":
            a, old = live.pop(fill % len(live))
            kept = min(a.size, size)
            a.resize(size, refcheck=False)
            assert (a[:kept] == old).all()
            a[:] = fill
            live.append((a, fill))
        elif live and op == "drop":
            live.pop(fill % len(live))
        elif live and op == "pickle":
            a, old = live[fill % len(live)]
            buffers = []
            back = pickle.loads(pickle.dumps(a, 5, buffer_callback=buffers.append), buffers=buffers)
            assert (back == old).all()
    for a, fill in live:
        assert (a == fill).all()


@settings(max_examples=150, deadline=None)
@given(_ops)
def test_array_data_in_the_arena_behaves_as_numpys_own(ops):
    blocks = _arena.default_arena().stats()["blocks"]
    _context.run(_check_allocations, ops)
    assert _arena.default_arena().stats()["blocks"] == blocks


def test_a_born_array_is_no_arena_array_to_share():
    a = _context.run(np.ones, N)
    assert _array_data.born_block(memoryview(a)) is not None
    assert mizu.arena_block(a) is None
