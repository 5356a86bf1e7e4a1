"""The R pool's streaming maps: buffersize bounds the calls started in the R workers, and ordered=False yields
results as the R calls complete, each once; an R error ends the map at its turn; a consumer that stops early
leaves nothing running."""

import concurrent.futures as cf
import itertools
import time

import pytest

import mizu
from streams_children import SETTLE, calls_started, check_bound

_STARTED = "function(folder, i, seconds = 0) { file.create(file.path(folder, i)); Sys.sleep(seconds); i }"
_GATED = """function(folder, i) {
    gate <- file.path(folder, paste0("go-", i))
    deadline <- Sys.time() + 120
    while (!file.exists(gate)) {
        if (Sys.time() > deadline) stop("no gate ", gate)
        Sys.sleep(0.005)
    }
    i
}"""


@pytest.fixture(scope="module")
def r(r_library):
    """Two R workers shared by the tests that leave the pool as they found it."""
    with mizu.RExecutor(2) as pool:
        yield pool


@pytest.mark.parametrize("ordered", [True, False])
@pytest.mark.parametrize("chunksize", [1, 3])
def test_buffersize_bounds_the_r_calls_started(r, tmp_path, ordered, chunksize):
    check_bound(r, _STARTED, tmp_path, ordered, chunksize)


def test_an_unordered_r_map_yields_results_as_calls_complete(r, tmp_path):
    results = r.map(_GATED, itertools.repeat(str(tmp_path)), range(2), ordered=False, timeout=120)
    (tmp_path / "go-1").touch()
    assert next(results) == 1
    (tmp_path / "go-0").touch()
    assert list(results) == [0]
    # Every result once, whatever the chunks and the buffer.
    for chunksize, buffersize in ((1, None), (7, None), (3, 2)):
        assert sorted(r.map("function(x) x * 2", range(40), chunksize=chunksize, buffersize=buffersize,
                            ordered=False)) == [2 * x for x in range(40)]


def test_an_r_error_ends_an_unordered_map_at_its_turn(r, tmp_path):
    results = r.map("function(i) if (i == 4) stop('four') else i", range(8), ordered=False)
    seen = []
    with pytest.raises(mizu.RError, match="four"):
        seen.extend(results)
    assert next(results, "end") == "end"
    assert 4 not in seen and len(set(seen)) == len(seen)


def test_an_unordered_r_map_times_out_from_the_call_to_map(r, tmp_path):
    (tmp_path / "go-1").touch()
    results = r.map(_GATED, itertools.repeat(str(tmp_path)), range(2), ordered=False, timeout=1.0)
    assert next(results) == 1
    with pytest.raises(cf.TimeoutError):
        next(results)
    (tmp_path / "go-0").touch()


def test_an_r_consumer_that_stops_early_leaves_nothing_running_or_queued(r_library, tmp_path):
    with mizu.RExecutor(2) as pool:
        results = pool.map(_STARTED, itertools.repeat(str(tmp_path)), range(60), itertools.repeat(0.5),
                           ordered=False)
        assert next(results) in range(60)
        results.close()
        pool.shutdown(wait=True)
        after_shutdown = calls_started(tmp_path)
        assert after_shutdown <= 8
        time.sleep(SETTLE)
        assert calls_started(tmp_path) == after_shutdown
