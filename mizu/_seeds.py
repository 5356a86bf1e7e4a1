"""seed=: each task of a seeded pool or map runs with its own random stream, numpy's SeedSequence(seed).spawn child.

The wire carries no seed: the client wraps the task's callable in a
`SeededCall` (a submit: its position is the order of submission) or a
`SeededMap` (a map: the position of each call is its index, sent as its
first argument), which the worker unpickles and calls. Around the call it
makes the child ``SeedSequence(entropy, spawn_key=(position,))`` the
task's (`rng` builds the task's Generator from it on first use) and seeds
Python's `random` from it; at the end it puts back `random`'s state from
before the call, so that a task without a seed draws from the worker's own
stream as if no seeded task had run. An unseeded pool runs none of this.
"""

import functools
import itertools
import numbers
import random
import sys
import threading

__all__ = ["SeededCall", "SeededMap", "Seeds", "check_seed", "rng"]

# The running task's [SeedSequence, its Generator or None until rng() makes it]; None outside a seeded task.
_task = None


def check_seed(seed):
    """seed as numpy's SeedSequence takes it (an int >= 0, or a tuple of them), or the error saying what to pass."""
    what = ("a seed must be an int >= 0 or a sequence of them (numpy's SeedSequence entropy), or None for no "
            "seed")
    if isinstance(seed, numbers.Integral) and not isinstance(seed, bool):
        if seed < 0:
            raise ValueError(f"{what}, not the negative {seed!r}")
        return int(seed)
    if isinstance(seed, (str, bytes)) or not hasattr(seed, "__iter__"):
        raise TypeError(f"{what}, not {type(seed).__name__}: {seed!r}")
    entropy = tuple(seed)
    if not entropy:
        raise ValueError(f"{what}, not an empty sequence")
    for part in entropy:
        if isinstance(part, bool) or not isinstance(part, numbers.Integral):
            raise TypeError(f"{what}; the sequence holds {type(part).__name__} {part!r}")
        if part < 0:
            raise ValueError(f"{what}; the sequence holds the negative {part!r}")
    return tuple(int(part) for part in entropy)


class Seeds:
    """A seeded pool's or options view's seed (the entropy of its SeedSequence), and the positions of its submits.

    What mizu._r.streams.Streams is to an R pool: `task` and `map` give
    the callable and arguments that run with the streams of the seed.
    """

    def __init__(self, seed):
        self.seed = check_seed(seed)
        self._positions = itertools.count()
        self._lock = threading.Lock()

    def task(self, fn, args):
        """fn and args of the next submitted task: fn in a SeededCall at the next position.

        A chunk of a seeded map that the stdlib's map submits (on a pool
        with a submit of its own) is left as it is: its calls have their
        streams already, and it takes no position from the submits.
        """
        if isinstance(fn, functools.partial) and fn.args and isinstance(fn.args[0], SeededMap):
            return fn, args
        with self._lock:
            position = next(self._positions)
        return SeededCall(fn, self.seed, position), args

    def map(self, fn, iterables):
        """fn and iterables of a map: fn in a SeededMap, whose first argument is each call's index."""
        if not iterables:
            return fn, iterables
        return SeededMap(fn, self.seed), (range(sys.maxsize), *iterables)


def _run(fn, entropy, position, args, kwargs):
    """fn(*args, **kwargs) as the task at position of the stream family of entropy."""
    global _task
    from numpy import uint64
    from numpy.random import SeedSequence

    sequence = SeedSequence(entropy, spawn_key=(position,))
    outer, state = _task, random.getstate()
    words = sequence.generate_state(4, uint64)
    random.seed(sum(int(word) << (64 * k) for k, word in enumerate(words)))
    _task = [sequence, None]
    try:
        return fn(*args, **kwargs)
    finally:
        _task = outer
        random.setstate(state)


class SeededCall:
    """A submitted task's callable, run with the stream at its position (the order of submission)."""

    __slots__ = ("fn", "entropy", "position")

    def __init__(self, fn, entropy, position):
        self.fn, self.entropy, self.position = fn, entropy, position

    def __reduce__(self):
        return SeededCall, (self.fn, self.entropy, self.position)

    def __call__(self, /, *args, **kwargs):
        return _run(self.fn, self.entropy, self.position, args, kwargs)


class SeededMap:
    """A map's callable: each call's first argument is its index in the map, the position of its stream."""

    __slots__ = ("fn", "entropy")

    def __init__(self, fn, entropy):
        self.fn, self.entropy = fn, entropy

    def __reduce__(self):
        return SeededMap, (self.fn, self.entropy)

    def __call__(self, position, /, *args):
        return _run(self.fn, self.entropy, position, args, {})


def rng():
    """rng()

    The random generator of the running task of a seeded pool or map.

    A `numpy.random.Generator` made with ``numpy.random.default_rng`` from
    the task's child of the seed, ``SeedSequence(seed, spawn_key=(i,))``,
    which is ``SeedSequence(seed).spawn(n)[i]``: for a map's call, ``i`` is
    its index in the map; for a submit, the order in which it was submitted
    to its pool (or to its `options` view with a seed of its own). The same
    generator all through the task: each call continues its stream.

    Returns
    -------
    numpy.random.Generator

    Raises
    ------
    RuntimeError
        Not called inside a task of a seeded pool or map.

    See Also
    --------
    ProcessPoolExecutor : its ``seed``, and that of its `map` and `options`.
    """
    task = _task
    if task is None:
        raise RuntimeError("mizu.rng() is the random generator of a task of a seeded pool or map: call it in a task "
                           "of ProcessPoolExecutor(seed=...), of map(..., seed=...) or of options(seed=...); for a "
                           "generator without a seed, use numpy.random.default_rng()")
    if task[1] is None:
        from numpy.random import default_rng

        task[1] = default_rng(task[0])
    return task[1]
