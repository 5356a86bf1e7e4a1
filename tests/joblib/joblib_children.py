"""The tasks of the joblib backend's tests, among them joblib loops that a task runs."""

import os
import signal
import time

from children import double


def kill_self_at(x, fatal=7):
    """x, a moment later; at x == fatal, this process dies by SIGKILL instead."""
    if x == fatal:
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(0.01)
    return x


def nested_sum(n):
    """The sum of double(j) for j < 10 n, computed by a joblib loop of this process on the mizu backend."""
    from joblib import Parallel, delayed

    return sum(Parallel(backend="mizu", n_jobs=2)(delayed(double)(j) for j in range(10 * n)))


def fill_then_first(array, value):
    """Write value over array, then return its first item."""
    array[:] = value
    return int(array[0])


def add_then_first(array, value):
    """Add value to every item of array, then return its first item."""
    array += value
    return int(array[0])


def mark_first(array, value):
    """(the file of the numpy.memmap under array or None, the sum of its items); then value goes over its first."""
    import numpy as np

    owner = array
    while owner is not None and not isinstance(owner, np.memmap):
        owner = getattr(owner, "base", None)
    found = None if owner is None else str(owner.filename), float(array.sum())
    array.flat[0] = value
    return found


def view_of_file(path, mode, view):
    """view of the numpy.memmap that np.load maps from path in mode."""
    import numpy as np

    return view(np.load(path, mmap_mode=mode))


def marked_copy_on_write(path):
    """The first four items of a copy-on-write numpy.memmap of path, after -5 went over its first."""
    import numpy as np

    array = np.load(path, mmap_mode="c")
    array[0] = -5
    return array[:4]


def block_of(array):
    """The arena block that array lies in, as (arena, segment, offset), or None for this process's own memory.

    Every process names a block alike, where its address differs.
    """
    import mizu

    found = mizu.arena_block(array)
    return None if found is None else (found[0].arena_id, found[0].segment_id, found[0].offset)


class Holder:
    """An object that holds an array, as a model or a dataset class does."""

    def __init__(self, array):
        self.array = array


def set_first(value, item):
    """Set the first item of a pandas Series or DataFrame in place, then return it."""
    if value.ndim == 1:
        value.iloc[0] = item
        return int(value.iloc[0])
    value.iloc[0, 0] = item
    return int(value.iloc[0, 0])


def _array_inside(value):
    """The first numpy array in value: itself, a pandas object's data, a Holder's, or in its lists, tuples and dicts."""
    import numpy as np

    if isinstance(value, np.ndarray):
        return value
    if isinstance(value, Holder):
        return value.array
    if hasattr(value, "to_numpy"):
        return value.to_numpy()   # a view of the one block of a Series, or of a DataFrame of one dtype
    for item in value.values() if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else ():
        found = _array_inside(item)
        if found is not None:
            return found
    return None


def block_inside(value):
    """block_of the first array in value (_array_inside)."""
    return block_of(_array_inside(value))


def writeable_inside(value=None, held=None):
    """Whether the first array in value, or held, is writeable here."""
    return bool(_array_inside(held if value is None else value).flags.writeable)


def same(a, b):
    """Whether a and b are one object here."""
    return a is b


def environ(name):
    """This process's environment variable name, or None."""
    return os.environ.get(name)


def joblib_loop_pids(backend):
    """Where a joblib loop of this process runs its calls, how many jobs it has, and what it warned of."""
    import warnings

    import mizu  # noqa: F401  (registers the backend)
    from joblib import Parallel, delayed

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        parallel = Parallel(backend=backend, n_jobs=2)
        pids = set(parallel(delayed(os.getpid)() for _ in range(4)))
        n_jobs = parallel._effective_n_jobs()
    return {"pid": os.getpid(), "pids": pids, "n_jobs": n_jobs, "warning": " ".join(str(w.message) for w in caught)}


SHARED = None   # set by a test before a fork pool starts, so its workers inherit it


def shared_value(*_):
    """SHARED as this worker has it: the test's value under fork, None in a worker that spawn or forkserver
    started."""
    return SHARED
