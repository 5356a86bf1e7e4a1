"""Dask's local schedulers on a mizu pool: dask.compute(scheduler=pool) and dask.config.set(pool=pool).

Dask's own synchronous scheduler, on the same graph, is the oracle.
"""

import multiprocessing
import re

import numpy as np
import pytest

import children
import mizu
from helpers import require

try:
    import dask
    import dask.array as da
    import dask.bag as db
    import dask.dataframe as dd
    import pandas as pd
    from dask.diagnostics import ProgressBar
except ImportError as exc:
    require(False, f"Dask is not installed ({exc}): pip install dask pyarrow", module=True)


@pytest.fixture(params=["fork", "forkserver", "spawn"])
def by_value_pool(request):
    """Two workers pickling by value, as Dask graphs hold the user's lambdas."""
    with mizu.ProcessPoolExecutor(2, mp_context=multiprocessing.get_context(request.param), by_value=True) as ex:
        yield ex


def test_an_array_reduction_gives_the_synchronous_schedulers_result(by_value_pool):
    x = da.random.default_rng(1).standard_normal((800, 600), chunks=(200, 200))
    graph = ((x + 1) ** 2).mean(axis=0) - x.T.dot(x).trace()
    assert np.allclose(graph.compute(scheduler=by_value_pool), graph.compute(scheduler="sync"))


def test_a_dataframe_groupby_gives_the_synchronous_schedulers_result(by_value_pool):
    frame = pd.DataFrame({"key": np.arange(10_000) % 13, "value": np.linspace(0, 1, 10_000)})
    ddf = dd.from_pandas(frame, npartitions=6)
    graph = ddf.assign(doubled=ddf.value * 2).groupby("key").doubled.agg(["sum", "max"])
    pd.testing.assert_frame_equal(graph.compute(scheduler=by_value_pool), graph.compute(scheduler="sync"))


def test_a_bag_of_lambdas_gives_the_synchronous_schedulers_result(by_value_pool):
    bag = db.from_sequence(range(1000), npartitions=8).map(lambda v: v * 3).filter(lambda v: v % 2 == 0)
    assert bag.frequencies().compute(scheduler=by_value_pool) == bag.frequencies().compute(scheduler="sync")
    assert bag.sum().compute(scheduler=by_value_pool) == sum(v * 3 for v in range(1000) if v * 3 % 2 == 0)


def test_a_delayed_graph_with_an_error_raises_it(by_value_pool):
    parts = [dask.delayed(children.double)(i) for i in range(200)]
    total = dask.delayed(sum)(parts)
    assert total.compute(scheduler=by_value_pool) == total.compute(scheduler="sync") == 2 * sum(range(200))
    failing = dask.delayed(children.fail_at)(7)
    with pytest.raises(ValueError, match="7 is bad"):
        dask.compute(dask.delayed(sum)([failing, 1]), scheduler=by_value_pool)


def test_the_pool_as_dasks_pool_for_the_threaded_and_process_schedulers(by_value_pool):
    bag = db.from_sequence(range(100), npartitions=4).map(lambda v: v + 1)
    x = da.arange(10_000, chunks=1000)
    with dask.config.set(pool=by_value_pool):
        assert x.sum().compute(scheduler="threads") == x.sum().compute(scheduler="sync")
        assert bag.sum().compute(scheduler="processes") == sum(range(1, 101))


def test_dasks_progress_bar_reaches_the_end(by_value_pool, capsys):
    x = da.ones((1000, 1000), chunks=(250, 250))
    with ProgressBar(dt=0.01):
        assert (x * 2).sum().compute(scheduler=by_value_pool) == 2_000_000
    assert re.search(r"100% Completed", capsys.readouterr().out)


def test_chunks_cross_through_shared_memory_not_inside_a_pickle(by_value_pool):
    """A chunk one task makes reaches the next in an arena block: the worker sees shared memory, not a copy."""
    chunk = dask.delayed(children.arena_pattern)(3, 1 << 18)
    seen = dask.delayed(children.in_arena)(chunk)
    assert seen.compute(scheduler=by_value_pool) is True
