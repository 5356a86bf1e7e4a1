"""asyncio with R workers: RExecutor.asubmit and RExecutor.amap, under asyncio's own event loop and under uvloop.

The Python pool's cases (tests/executor/test_asyncio.py) with R functions:
the values that submit and map give are the oracle; a cancelled call is
counted in the workers, each call appending a line to a file in tmp_path
as it starts.
"""

import asyncio
import os

import numpy as np
import pytest

import mizu
from helpers import tallies
from r_children import R_TALLY_THEN_NAP, R_WAIT_FOR_FILE

pytestmark = pytest.mark.timeout(120)

@pytest.fixture(scope="module")
def r(r_library):
    with mizu.RExecutor(2) as ex:
        yield ex


def test_asubmit_gives_what_submit_gives(run_loop, r):
    calls = [("function(x) x * 2", (21.5,), {}), ("function(a, b) paste(a, b)", ("x",), {"b": "y"}),
             ("sum", (np.arange(10.0),), {})]

    async def main():
        return await asyncio.gather(*(r.asubmit(fn, *args, **kwargs) for fn, args, kwargs in calls))

    assert run_loop(main()) == [r.submit(fn, *args, **kwargs).result() for fn, args, kwargs in calls]


def test_an_r_error_arrives_as_result_gives_it(run_loop, r):
    async def main():
        with pytest.raises(mizu.RError) as raised:
            await r.asubmit("function() stop('no luck')")
        return raised.value

    error = run_loop(main())
    expected = r.submit("function() stop('no luck')").exception()
    assert str(error) == str(expected)


def test_a_function_that_is_not_r_source_is_a_typeerror(run_loop, r):
    async def main():
        with pytest.raises(TypeError, match="R functions"):
            r.asubmit(len, [1])
        with pytest.raises(TypeError, match="R functions"):
            r.amap(len, [[1]])

    run_loop(main())


def test_cancelling_the_awaiting_task_cancels_a_pending_call(run_loop, r_library, tmp_path):
    tally, gate = str(tmp_path / "tally"), str(tmp_path / "gate")

    async def main(pool):
        running = pool.asubmit(R_WAIT_FOR_FILE, gate)
        others = [pool.asubmit(R_TALLY_THEN_NAP, tally, i, 0) for i in range(4)]
        waiting = asyncio.ensure_future(pool.asubmit(R_TALLY_THEN_NAP, tally, 99, 0))
        await asyncio.sleep(0.05)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        open(gate, "w").close()
        await running
        return await asyncio.gather(*others)

    with mizu.RExecutor(1) as pool:
        assert run_loop(main(pool)) == [0, 1, 2, 3]
    assert tallies(tally) == {str(i): 1 for i in range(4)}


@pytest.mark.parametrize("ordered", [True, False])
@pytest.mark.parametrize("chunksize", [1, 4])
def test_amap_yields_what_map_yields(run_loop, r, ordered, chunksize):
    async def main():
        return [x async for x in r.amap("function(a, b) a * b", range(30), range(30, 60), ordered=ordered,
                                        chunksize=chunksize, buffersize=5)]

    expected = list(r.map("function(a, b) a * b", range(30), range(30, 60)))
    found = run_loop(main())
    assert (found if ordered else sorted(found)) == expected


def test_amap_closed_early_cancels_the_calls_not_yet_started(run_loop, r_library, tmp_path):
    tally = str(tmp_path / "tally")

    async def main(pool):
        # As the Python pool's test: a close that comes most of a second late still finds few calls started.
        values = pool.amap(R_TALLY_THEN_NAP, [tally] * 40, range(40), [0] + [0.2] * 39)
        async for first in values:
            await values.aclose()
        return first

    with mizu.RExecutor(1) as pool:
        assert run_loop(main(pool)) == 0
    assert os.path.exists(tally) and len(tallies(tally)) < 10
