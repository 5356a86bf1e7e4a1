"""seed= for R workers: each call has its own L'Ecuyer-CMRG stream, as parallel::clusterSetRNGStream deals them out.

The oracle is Rscript running the same function serially: after
``set.seed(seed, kind = "L'Ecuyer-CMRG")`` the call at position i runs with
the i-th stream as .Random.seed (the 0th: that state; each next one
``parallel::nextRNGStream`` of the one before), as clusterSetRNGStream
gives its i-th worker. The pool must give exactly that whatever its
workers, chunksize and scheduling.
"""

import numpy as np
import pytest

import mizu
from rsession import run_rscript

pytestmark = pytest.mark.timeout(120)

N = 12
# Draws of the uniform, normal and sample kinds, and the kind of the generator the call ran with.
DRAWS = "function(x, scale = 1) c(x, scale * runif(2), rnorm(1), sample.int(1000L, 1L))"


def oracle(library, seed, xs, scale=1):
    """DRAWS(x, scale) for each x of xs, serially in Rscript with the streams of seed in order."""
    code = f"""
    f <- {DRAWS}
    set.seed({seed}L, kind = "L'Ecuyer-CMRG")
    stream <- .Random.seed
    for (x in c({", ".join(map(str, xs))})) {{
        assign(".Random.seed", stream, envir = globalenv())
        cat(sprintf("%.17g", f(x, {scale})), "\\n")
        stream <- parallel::nextRNGStream(stream)
    }}
    """
    return [[float(v) for v in line.split()] for line in run_rscript(library, code).splitlines()]


def rows(results):
    return [np.asarray(row, dtype=float).tolist() for row in results]


@pytest.mark.parametrize("workers", [1, 2])
def test_the_same_seed_gives_rs_serial_streams(r_library, workers):
    xs = list(range(N))
    with mizu.RExecutor(workers, seed=2024) as ex:
        expected = oracle(r_library, 2024, xs)
        assert rows(ex.map(DRAWS, xs)) == expected
        assert rows(ex.map(DRAWS, xs, chunksize=5)) == expected
        # Submits take their order of submission to the pool.
        futures = [ex.submit(DRAWS, x, scale=2) for x in xs]
        assert rows(f.result(timeout=60) for f in futures) == oracle(r_library, 2024, xs, scale=2)


def test_a_map_or_an_options_view_takes_a_seed_of_its_own(r_library):
    xs = list(range(N))
    with mizu.RExecutor(2) as ex:
        assert rows(ex.map(DRAWS, xs, seed=-7, chunksize=4)) == oracle(r_library, -7, xs)
        view = ex.options(seed=2147483647)
        assert rows(view.submit(DRAWS, x).result(timeout=60) for x in xs) == oracle(r_library, 2147483647, xs)
        assert rows(ex.map(DRAWS, xs, seed=1)) != rows(ex.map(DRAWS, xs, seed=2))


def test_without_a_seed_the_workers_stream_is_left_as_it_was(r_library):
    state = "function() c(RNGkind(), .Random.seed[1:3])"
    with mizu.RExecutor(1) as ex:
        ex.submit("function() runif(1)").result(timeout=60)
        before = ex.submit(state).result(timeout=60)
        assert before[0] == "Mersenne-Twister"
        assert rows(ex.map(DRAWS, [1, 2], seed=5)) == oracle(r_library, 5, [1, 2])
        assert ex.submit(state).result(timeout=60) == before


@pytest.mark.parametrize("seed, error, words", [
    (1.5, TypeError, "not float"),
    ("42", TypeError, "not str"),
    (2**31, ValueError, "from -2147483647 to 2147483647"),
])
def test_a_bad_seed_is_refused_saying_what_to_pass(r_library, seed, error, words):
    with pytest.raises(error, match=rf"an R pool's seed must be an int.*{words}"):
        mizu.RExecutor(1, seed=seed)
    with mizu.RExecutor(1) as ex:
        with pytest.raises(error, match=words):
            ex.map(DRAWS, [1], seed=seed)
        with pytest.raises(error, match=words):
            ex.options(seed=seed)
