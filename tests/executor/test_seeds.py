"""seed=: each task of a seeded pool or map has its own random stream, numpy's SeedSequence(seed).spawn child.

The oracle is the same computation run serially here, each call with
``numpy.random.default_rng(SeedSequence(seed).spawn(n)[i])`` and Python's
random seeded from that child as the user guide says, where i is the call's
index in its map, or a submit's order of submission. The pool must give
exactly that whatever its workers, start method, chunksize and scheduling.
"""

import multiprocessing
import random
import time

import numpy as np
import pytest

import mizu
from executor_children import draws, random_state_digest, rng_outside_a_seeded_task

pytestmark = pytest.mark.timeout(120)

N = 40


def oracle(seed, positions, xs, scale=1):
    """draws(x, scale) at each position of seed's streams, run here."""
    children = np.random.SeedSequence(seed).spawn(max(positions) + 1)
    out = []
    for position, x in zip(positions, xs):
        child = children[position]
        words = child.generate_state(4, np.uint64)
        python = random.Random(sum(int(word) << (64 * k) for k, word in enumerate(words)))
        generator = np.random.default_rng(child)
        out.append((x, scale * python.random(), generator.random(), int(generator.integers(1 << 30))))
    return out


@pytest.mark.parametrize("workers", [1, 2, 4])
def test_the_same_seed_gives_the_oracles_streams_whatever_the_pool(start_method, workers):
    xs = list(range(N))
    with mizu.ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context(start_method), seed=12345) as ex:
        # A map's calls take their index in the map, whatever the chunks; each map starts again at 0.
        assert list(ex.map(draws, xs)) == oracle(12345, range(N), xs)
        assert list(ex.map(draws, xs, chunksize=16)) == oracle(12345, range(N), xs)
        assert list(ex.map(draws, xs, [3] * N, chunksize=16)) == oracle(12345, range(N), xs, scale=3)
        # Submits take their order of submission to the pool, keywords too.
        futures = [ex.submit(draws, x, scale=2) for x in xs]
        assert [f.result(timeout=60) for f in futures] == oracle(12345, range(N), xs, scale=2)
        assert ex.submit(draws, "next").result(timeout=60) == oracle(12345, [N], ["next"])[0]


def test_asyncio_submits_and_maps_take_the_same_streams(run_loop):
    xs = list(range(N))

    async def main(ex):
        import asyncio

        submitted = await asyncio.gather(*(ex.asubmit(draws, x) for x in xs))
        mapped = [value async for value in ex.amap(draws, xs, chunksize=3)]
        unordered = [value async for value in ex.amap(draws, xs, seed=7, ordered=False)]
        return submitted, mapped, unordered

    with mizu.ProcessPoolExecutor(2, seed=12345) as ex:
        submitted, mapped, unordered = run_loop(main(ex))
    assert submitted == oracle(12345, range(N), xs)
    assert mapped == oracle(12345, range(N), xs)
    assert sorted(unordered) == oracle(7, range(N), xs)


def test_a_map_or_an_options_view_takes_a_seed_of_its_own():
    xs = list(range(N))
    with mizu.ProcessPoolExecutor(2) as ex:
        assert list(ex.map(draws, xs, seed=7, chunksize=3)) == oracle(7, range(N), xs)
        assert list(ex.map(draws, xs, seed=[7, 8, 9])) == oracle([7, 8, 9], range(N), xs)
        view = ex.options(seed=99)
        assert [view.submit(draws, x).result(timeout=60) for x in range(3)] == oracle(99, range(3), range(3))
        # A view made from that one keeps its seed and its count of submits; a map through it, its seed.
        later = view.options()
        assert later.submit(draws, 3).result(timeout=60) == oracle(99, [3], [3])[0]
        assert list(later.map(draws, xs)) == oracle(99, range(N), xs)
        assert list(later.map(draws, xs, seed=5)) == oracle(5, range(N), xs)
        assert "seed=99" in repr(later)
    with mizu.ProcessPoolExecutor(2, seed=1) as ex:
        # A view without a seed is the pool's: its submits count among the pool's.
        assert ex.submit(draws, 0).result(timeout=60) == oracle(1, [0], [0])[0]
        assert ex.options().submit(draws, 1).result(timeout=60) == oracle(1, [1], [1])[0]
        assert list(ex.map(draws, xs, seed=2)) == oracle(2, range(N), xs)


def test_different_seeds_give_different_streams():
    with mizu.ProcessPoolExecutor(2) as ex:
        first, second = (list(ex.map(draws, range(N), seed=seed)) for seed in (1, 2))
    assert all(a[1:] != b[1:] for a, b in zip(first, second))
    assert len({row[2] for row in first}) == N


def test_without_a_seed_tasks_draw_as_without_mizu(start_method):
    context = multiprocessing.get_context(start_method)
    with mizu.ProcessPoolExecutor(1, mp_context=context) as ex, \
            mizu.ProcessPoolExecutor(1, mp_context=context) as other:
        name, message = ex.submit(rng_outside_a_seeded_task).result(timeout=60)
        assert name == "RuntimeError"
        assert "seed=" in message and "numpy.random.default_rng()" in message
        # A seeded task leaves the worker's random as it found it.
        before = ex.submit(random_state_digest).result(timeout=60)
        assert list(ex.options(seed=3).map(draws, range(5))) == oracle(3, range(5), range(5))
        assert ex.submit(random_state_digest).result(timeout=60) == before
        # And workers of unseeded pools draw their own numbers, as the stdlib's do.
        assert before != other.submit(random_state_digest).result(timeout=60)


def test_rng_outside_a_task_says_what_to_do():
    with pytest.raises(RuntimeError, match=r"ProcessPoolExecutor\(seed=\.\.\.\)"):
        mizu.rng()


@pytest.mark.parametrize("seed, error, words", [
    (-1, ValueError, "negative"),
    (1.5, TypeError, "float"),
    ("42", TypeError, "str"),
    (True, TypeError, "bool"),
    ([1, -2], ValueError, "negative"),
    ([1, 2.0], TypeError, "float"),
    ([], ValueError, "empty"),
])
def test_a_bad_seed_is_refused_saying_what_to_pass(seed, error, words):
    expected = rf"int >= 0 or a sequence of them .*{words}"
    with pytest.raises(error, match=expected):
        mizu.ProcessPoolExecutor(1, seed=seed)
    with mizu.ProcessPoolExecutor(1) as ex:
        with pytest.raises(error, match=expected):
            ex.map(draws, range(3), seed=seed)
        with pytest.raises(error, match=expected):
            ex.options(seed=seed)
        assert ex.submit(abs, -1).result(timeout=60) == 1


def test_a_seeded_map_of_no_iterables_has_no_calls():
    with mizu.ProcessPoolExecutor(1, seed=4) as ex:
        assert list(ex.map(draws)) == []


class CountingExecutor(mizu.ProcessPoolExecutor):
    """A pool with a submit of its own, as tqdm's process_map makes: its map is the stdlib's, over that submit."""

    def submit(self, fn, /, *args, **kwargs):
        self.submitted = getattr(self, "submitted", 0) + 1
        return super().submit(fn, *args, **kwargs)


def test_a_pool_with_a_submit_of_its_own_maps_the_same_streams():
    xs = list(range(N))
    with CountingExecutor(2, seed=6) as ex:
        assert list(ex.map(draws, xs, chunksize=16)) == oracle(6, range(N), xs)
        assert ex.submitted == 3
        assert list(ex.map(draws, xs, seed=8)) == oracle(8, range(N), xs)
        # The map's chunks took no submit positions: the first submit is still at 0.
        assert ex.submit(draws, "first").result(timeout=60) == oracle(6, [0], ["first"])[0]
        # An options view with a seed alone keeps the pool's other controls, and maps through that submit too.
        assert list(ex.options(seed=9).map(draws, xs, chunksize=7)) == oracle(9, range(N), xs)


def test_an_options_view_with_a_seed_keeps_the_pool_s_task_timeout():
    context = multiprocessing.get_context("forkserver")
    with mizu.ProcessPoolExecutor(1, mp_context=context, task_timeout=0.5, seed=3) as ex:
        view = ex.options(seed=5)
        assert "task_timeout=the pool's" in repr(view)
        with pytest.raises(TimeoutError):
            view.submit(time.sleep, 30).result(timeout=60)
        # The replacement worker imports numpy as it reads this task, before the task's clock starts: the draws
        # then need not import it within their 0.5 s, which a loaded machine may take.
        assert ex.submit(np.negative, np.ones(1)).result(timeout=60) == -1
        assert view.submit(draws, 1).result(timeout=60) == oracle(5, [1], [1])[0]
        # Asked for, no limit is still what None says.
        assert "task_timeout=None" in repr(view.options(task_timeout=None))
