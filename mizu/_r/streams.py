"""seed= for R workers: each task's own L'Ecuyer-CMRG stream, as R's parallel package deals them out.

``set.seed(seed, kind = "L'Ecuyer-CMRG")`` gives the state of stream 0;
``parallel::nextRNGStream`` of stream i is stream i + 1. A task at position
i (its order of submission; a map's call, its index in the map) runs with
stream i as R's ``.Random.seed``, as ``parallel::clusterSetRNGStream`` gives
the i-th worker of a cluster. The client computes the streams (each from the
one before: one 3x3 product per component, MRG32k3a's stream jump, as R's
rngstream.c) and sends each as the first argument of `seeded`'s function,
which evaluates the task's function once and calls it through the R
package's ``with_stream``; that puts back the worker's own ``.Random.seed``
after the call.
"""

import numbers
import sys
import threading

import numpy as np

__all__ = ["Streams", "first_stream", "next_stream", "seeded"]

_M1, _M2 = 4294967087, 4294944443
# The jump of 2^127 steps of each component (R's src/library/parallel/src/rngstream.c, A1p127 and A2p127).
_A1 = ((2427906178, 3580155704, 949770784), (226153695, 1230515664, 3580155704), (1988835001, 986791581, 1230515664))
_A2 = ((1464411153, 277697599, 1610723613), (32183930, 1464411153, 1022607788), (2824425944, 32183930, 2093834863))
# .Random.seed[1] of L'Ecuyer-CMRG with R's default normal (Inversion) and sample (Rejection) kinds.
_KIND = 10407


def _check(seed):
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise TypeError(f"an R pool's seed must be an int, as R's set.seed takes, or None for no seed, not "
                        f"{type(seed).__name__}: {seed!r}")
    if not -2**31 < seed < 2**31:
        raise ValueError(f"an R pool's seed must be an int that R's set.seed takes, from -2147483647 to 2147483647, "
                         f"not {seed!r}")
    return int(seed)


def first_stream(seed):
    """The six state words (unsigned) of ``set.seed(seed, kind = "L'Ecuyer-CMRG")``, as R's RNG_Init makes them."""
    word = seed & 0xFFFFFFFF
    for _ in range(50):
        word = (69069 * word + 1) & 0xFFFFFFFF
    state = []
    for _ in range(6):
        word = (69069 * word + 1) & 0xFFFFFFFF
        while word >= _M2:
            word = (69069 * word + 1) & 0xFFFFFFFF
        state.append(word)
    return state


def next_stream(state):
    """``parallel::nextRNGStream``: the state of the stream after the one of state."""
    return ([sum(a * s for a, s in zip(row, state[:3])) % _M1 for row in _A1] +
            [sum(a * s for a, s in zip(row, state[3:])) % _M2 for row in _A2])


def _random_seed(state):
    """The .Random.seed of state as doubles, the kind then the unsigned words: R's with_stream makes them R's integers.

    Not an int32 array: a word of 2^31 is the bits of R's NA_integer_, which
    an R integer vector from Python may not hold.
    """
    return np.array([_KIND, *state], dtype=np.float64)


class _Streams:
    """The .Random.seed of every stream in order, from stream 0; as long as any iterable, for map's count of calls."""

    def __init__(self, seed):
        self.seed = seed

    def __len__(self):
        return sys.maxsize

    def __iter__(self):
        state = first_stream(self.seed)
        while True:
            yield _random_seed(state)
            state = next_stream(state)


def seeded(fn):
    """The R source of the function that calls fn (R source or a name) with the stream of its first argument."""
    return (f"local({{\n.mizu_function <- (\n{fn}\n)\nfunction(.mizu_stream, ...) "
            f"mizu:::with_stream(.mizu_stream, .mizu_function, ...)\n}})")


class Streams:
    """An R pool's or options view's seed, and the stream of its next submit.

    What mizu._seeds.Seeds is to a Python pool: `task` and `map` give the
    function and arguments that run with the streams of the seed.
    """

    def __init__(self, seed):
        self.seed = _check(seed)
        self._next = iter(_Streams(self.seed))
        self._lock = threading.Lock()

    def task(self, fn, args):
        """fn and args of the next submitted task: with_stream's, at the next stream."""
        with self._lock:
            stream = next(self._next)
        return seeded(fn), (stream, *args)

    def map(self, fn, iterables):
        """fn and iterables of a map: with_stream's, its call at index i with stream i."""
        if not iterables:
            return fn, iterables
        return seeded(fn), (_Streams(self.seed), *iterables)
