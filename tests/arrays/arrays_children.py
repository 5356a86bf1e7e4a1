"""The tasks of the arrays' tests: arrays in shared memory as tasks receive, write and return them."""

import dataclasses
import os


def fill_slice(arr, start, stop, value):
    """Write value into arr[start:stop] of an array inherited through fork."""
    arr[start:stop] = value


def fill(arr, value):
    """Write value into every element of arr."""
    arr[...] = value


def arrays_in_child(parent_arena_id, report):
    """Report whether a new mizu array here lives in an arena of this process's own."""
    import mizu

    arr = mizu.zeros(1000)
    arr += 1
    block = mizu.arena_block(arr)[0]
    arena = mizu.default_arena()
    report.send((arena.id != parent_arena_id, block.arena_id == arena.id, float(arr.sum())))


def describe(value):
    """What a worker received: type, and for arrays dtype, shape, order and writability."""
    import numpy as np

    if isinstance(value, np.ndarray):
        return ("ndarray", value.dtype.str, value.shape, value.flags.f_contiguous and not value.flags.c_contiguous,
                value.flags.writeable)
    return (type(value).__name__,)


def arange(n, dtype="float64"):
    import numpy as np

    return np.arange(n, dtype=dtype)


@dataclasses.dataclass
class Holder:
    """An array inside a dataclass, as tasks receive them."""

    name: str
    data: object


SHARED = None   # set by a test before a fork pool starts, so its workers inherit it


def shared_slice(n):
    """A view of the array the worker inherited through fork."""
    return SHARED[:n]


def new_array(kind, n):
    """A new array of about n float64s that a task makes, of one of the kinds numpy users return."""
    import numpy as np

    base = np.arange(n, dtype=np.float64)
    made = {
        "negated": lambda: -base,
        "empty filled": lambda: np.full(n, 2.5),
        "zeros": lambda: np.zeros((n // 100, 100)),
        "ufunc": lambda: np.sqrt(base),
        "slice of a new one": lambda: (base * 2)[10:-10],
        "small slice of a new one": lambda: (base * 2)[: n // 100],
        "Fortran": lambda: np.asfortranarray((base + 1).reshape(100, -1)),
        "int32": lambda: base.astype(np.int32),
        "in a dict": lambda: {"a": base + 1, "b": [base - 1, "x"], "c": (base * 3)[::2]},
    }[kind]()
    del base
    return made


_kept = {}


def make_and_keep(n, value):
    """A new array that this process also keeps, and returns."""
    import numpy as np

    _kept["array"] = np.full(n, value)
    return _kept["array"]


def make_and_keep_a_view(n, value):
    """A new array returned while this process keeps a view of it."""
    import numpy as np

    made = np.full(n, value)
    _kept["view"] = made[5:]
    return made


def kept_first(name, value=None):
    """The first item of the kept array or view, after writing value to all of it if given."""
    if value is not None:
        _kept[name][:] = value
    return float(_kept[name][0])


def arena_stats():
    """The stats() of the arena that this process's large numpy arrays come from."""
    from mizu._array_data import array_arena

    return array_arena().stats()


def handler_of_new_array(n):
    """The name of numpy's data handler of an array of n bytes made here."""
    import numpy as np

    try:
        from numpy._core.multiarray import get_handler_name
    except ImportError:   # numpy 1
        from numpy.core.multiarray import get_handler_name
    return get_handler_name(np.empty(n, dtype=np.uint8))


def sum_of_new(n):
    """The sum of a new array of n ones."""
    import numpy as np

    return float(np.ones(n).sum())


def fork_and_churn(n):
    """The exit status of a forked child that resizes, writes, frees and makes arrays like those inherited, and
    the sum of the one it wrote to, here (n float64s of 2.0)."""
    import numpy as np

    inherited = [np.full(n, 1.0), np.full(n, 2.0)]
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            inherited[0].resize(2 * n, refcheck=False)
            inherited[1][:] = 9.0
            inherited.pop()
            made = np.full(n, 3.0)
            status = 0 if inherited[0][:n].sum() == n and made.sum() == 3 * n else 2
        finally:
            os._exit(status)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), float(inherited[1].sum())


def fill_each(parts, value):
    """Write value into every element of each array of parts."""
    for part in parts:
        part[...] = value


def fill_row(parts, k):
    """Write k + 1 into row k of each array of parts; those rows, views of the arrays."""
    for part in parts:
        part[k] = k + 1
    return [part[k] for part in parts]


def head(arr, n):
    """The first n items of arr, a view of it."""
    return arr[:n]
