"""RExecutor: a concurrent.futures Executor whose workers are R processes.

The engine is the Python pool's (mizu._pool); the workers start through
mizu._r.launcher.RLauncher and answer in the terms of mizu._r.codec.
"""

import concurrent.futures
import os
import pathlib
import re

from mizu._core import usable_cpus
from mizu._executor_base import ExecutorBase, check_controls, check_max_tasks, checked_workers, within_reach
from mizu._map import map_results
from mizu._messages import CALL
from mizu._r import package
from mizu._r.launcher import RLauncher
from mizu._r.streams import Streams

__all__ = ["RExecutor"]

# A setup str that is a file's name: a path of plain characters ending in
# .R, which no R code is (R code that names a file assigns or calls).
_R_FILE = re.compile(r"[\w./~+-]+\.[Rr]")


def _check_function(fn):
    if not isinstance(fn, str):
        raise TypeError(f"an R worker runs R functions, given as R source (\"function(x) x + 1\") or by name "
                        f"(\"mean\", \"stats::median\") in a str, not {type(fn).__name__}")
    return fn


class RExecutor(ExecutorBase, concurrent.futures.Executor):
    """RExecutor(max_workers=None, *, setup=None, max_tasks_per_child=None, rscript=None, task_timeout=None, worker_death="break", max_worker_memory=None, seed=None)

    An Executor whose workers are R processes, exchanging values with
    Python through shared memory.

    Each worker is an ``Rscript`` running mizu's R package, which is built
    on first use (`mizu._r.package`). A task names an R function, as R
    source or by name, and its arguments; the function is evaluated once in
    each worker, then sent by id. Its arguments become R values
    (keywords become named arguments), and its value becomes a Python
    value. Arrays in shared memory (`mizu.empty`) of more than 64 KiB
    reach R as views of the same memory, uncopied where R's type and
    layout match; others are copied once. Results of any size come back
    through shared memory. The rules for each type, and for ``NA``, are in the
    user guide's R chapter.

    Parameters
    ----------
    max_workers : int, optional
        Number of R processes; by default the CPUs this process may use.
    setup : str or os.PathLike, optional
        Run once in each worker, in its global environment, before its
        first task: R code in a str, or the path of an R file to source
        (a str that is a file's name ending in ``.R`` is one too). If it
        fails, the pool breaks with R's error.
    max_tasks_per_child : int, optional
        Tasks a worker runs before it exits and a new one replaces it (R's
        memory fragments: a fresh process is the cure).
    rscript : os.PathLike or str, optional
        The ``Rscript`` to run; by default the first on ``PATH``.
    task_timeout : float, optional
        Seconds each R call may run once a worker has started it: past it,
        its future fails with `TimeoutError` and the worker is ended
        (SIGTERM, then SIGKILL: a call stuck in C code ends too) and
        replaced. By default there is no limit; `options` sets it for some
        calls only.
    worker_death : {"break", "replace"}
        ``"break"``: a worker's death breaks the pool, as a
        `ProcessPoolExecutor`'s; ``"replace"``: only the call it ran fails,
        with `mizu.WorkerDied`, and a new worker takes its place.
    max_worker_memory : int, optional
        Bytes of memory a worker may hold after a call (its resident memory,
        and the client's arrays its R values view): above them it is
        replaced before its next.
    seed : int, optional
        Run each call with its own L'Ecuyer-CMRG random stream, as R's
        ``parallel::clusterSetRNGStream(cl, seed)`` gives its workers: the
        call at position i (its order of submission; a map's call, its index
        in the map) has ``.Random.seed`` set to the i-th stream after
        ``set.seed(seed, kind = "L'Ecuyer-CMRG")`` (the 0th: that state,
        then each ``parallel::nextRNGStream`` of the one before), and the
        worker's own put back after it. The same seed gives the same results
        whatever the number of workers, chunksize and scheduling. `map`
        and `options` take a seed of their own. By default (None) calls
        draw from each worker's own stream.

    Raises
    ------
    ValueError
        `max_workers`, `max_tasks_per_child`, `task_timeout` or
        `max_worker_memory` is not positive, `worker_death` is neither
        ``"break"`` nor ``"replace"``, or `seed` is outside R's integers.
    TypeError
        `setup` is neither a str nor a path, `max_tasks_per_child` or
        `max_worker_memory` is not an int, `task_timeout` is not a
        number, or `seed` is not an int.
    FileNotFoundError
        R is not installed (the message says how to install it), `rscript`
        is not an executable file, or `setup` names an R file that does
        not exist.
    mizu._r.package.RPackageBuildError
        mizu's R package could not be built (no compiler, say); the message
        names what is missing and ends with R's output.

    See Also
    --------
    ProcessPoolExecutor : the same pool with Python workers.

    Examples
    --------
    >>> import mizu, numpy as np
    >>> with mizu.RExecutor(2) as r:
    ...     r.submit("function(x, p) quantile(x, p, names = FALSE)", np.arange(101.0), 0.9).result()
    90.0
    """

    def __init__(self, max_workers=None, *, setup=None, max_tasks_per_child=None, rscript=None, task_timeout=None,
                 worker_death="break", max_worker_memory=None, seed=None):
        max_workers = checked_workers(max_workers, usable_cpus)
        if setup is not None and not isinstance(setup, (str, os.PathLike)):
            raise TypeError(f"setup must be R code in a str or the path of an R file, not {type(setup).__name__}")
        if isinstance(setup, str) and setup.endswith((".R", ".r")) and os.path.isfile(os.path.expanduser(setup)):
            setup = pathlib.Path(os.path.expanduser(setup))
        elif isinstance(setup, str) and _R_FILE.fullmatch(setup):
            # A file's name, not R code (which would look the name up as a variable).
            raise FileNotFoundError(f"setup names the R file {setup!r}, which does not exist (from {os.getcwd()}): "
                                    f"pass R code, or the path of an existing file")
        check_max_tasks(max_tasks_per_child)
        check_controls(task_timeout, worker_death, max_worker_memory)
        seeds = self._seeds_of(seed)
        rscript = package.find_rscript(rscript)
        library = package.ensure_installed(rscript=rscript)
        max_tasks_per_child, max_worker_memory = within_reach(max_tasks_per_child), within_reach(max_worker_memory)
        self._start_pool(max_workers, RLauncher(rscript, library, setup, max_tasks_per_child, max_worker_memory),
                         max_tasks_per_child, task_timeout, worker_death, seeds)

    def submit(self, fn, /, *args, **kwargs):
        """submit(fn, /, *args, **kwargs)

        Schedule the R call ``fn(*args, **kwargs)`` in a worker and return
        its Future.

        Parameters
        ----------
        fn : str
            An R function: its source (``"function(x) sum(x)"``) or its name
            (``"mean"``, ``"stats::median"``).
        *args, **kwargs
            Its arguments; keywords become named R arguments.

        Returns
        -------
        concurrent.futures.Future
            Its result is the call's value; an R error sets `RError`, and R's
            warnings are shown as `RWarning` when the result arrives.

        Raises
        ------
        TypeError
            `fn` is not a str. (An argument R cannot take fails the future
            with TypeError or ValueError.)
        BrokenProcessPool
            A worker died, or the setup script failed.
        RuntimeError
            The executor was shut down.
        """
        return self._submit(fn, args, kwargs, -1, self._pool.seeds)

    def _task_fn(self, fn):
        return _check_function(fn)

    def _submit(self, fn, args, kwargs, timeout_ns, seeds):
        # A view's (options): the call's deadline and seeds its own.
        fn = _check_function(fn)
        if seeds is not None:
            fn, args = seeds.task(fn, args)
        return self._pool.submit(CALL, fn, args, kwargs, 1, None, timeout_ns)

    @staticmethod
    def _seeds_of(seed, inherited=None):
        return inherited if seed is None else Streams(seed)

    def map(self, fn, *iterables, timeout=None, chunksize=1, buffersize=None, ordered=True, progress=False,
            seed=None):
        """map(fn, *iterables, timeout=None, chunksize=1, buffersize=None, ordered=True, progress=False, seed=None)

        Like the builtin `map`, with the R function `fn` called in the
        workers, `chunksize` calls to a task. `buffersize`, `ordered` and
        `progress` are as in `ProcessPoolExecutor.map`: at most `buffersize`
        tasks (chunks of `chunksize` calls) submitted ahead of the results
        consumed (None: all at once); ``ordered=False`` yields results as
        their calls complete, each exactly once; `progress` shows a bar
        counting calls as they complete. `seed` gives the call at index i
        the i-th L'Ecuyer-CMRG stream of that seed, as the pool's `seed`
        does (None: the pool's seed, if it has one).

        Returns
        -------
        iterator
            The results, in the order of the calls (or of their completion).
            Ending the iteration early cancels the calls not yet started.

        Raises
        ------
        TimeoutError
            A result is not ready `timeout` seconds after the call to map.
        RError
            The R call of an item failed, when iteration reaches it.
        TypeError
            `buffersize` is not an int, or `ordered` not a bool.
        ValueError
            `chunksize` or `buffersize` is less than 1.
        TypeError, ValueError
            `seed` is not an int that R's ``set.seed`` takes.
        """
        return self._map(fn, iterables, timeout, chunksize, buffersize, progress, -1,
                         self._seeds_of(seed, self._pool.seeds), ordered)

    def _map(self, fn, iterables, timeout, chunksize, buffersize, progress, timeout_ns=-1, seeds=None, ordered=True):
        fn = _check_function(fn)
        if seeds is not None:
            fn, iterables = seeds.map(fn, iterables)
        return map_results(self._pool, fn, iterables, timeout, chunksize, buffersize, self._max_workers, progress,
                           timeout_ns, ordered)
