"""What every Executor over mizu's pool shares, whatever its workers: the checks of their common arguments, the pool.

Each public Executor (mizu._executor's for Python workers, mizu._r.executor's
for R workers) checks its arguments, with `checked_workers`,
`check_max_tasks` and `check_controls` for those they have in common, makes
the launcher of its kind of worker (mizu._launchers.Launcher) and starts its
pool with `ExecutorBase._start_pool`; `insights`, `shutdown`, `stop` and
`options` are the pool's, and so are `asubmit` and `amap`, asyncio's
forms of `submit` and `map` (mizu._aio). Each supplies `_submit` and
`_map`, which the views that `options` returns call with their controls,
`_task_fn`, which checks a task's function, and `_seeds_of`, which makes
the seeds of a ``seed=`` (for None, those inherited) for its `_submit`
and `_map`: what gives each task its own random stream.
"""

import numbers
import weakref

from mizu._pool import Pool

__all__ = ["ExecutorBase", "PoolOptions", "check_controls", "check_max_tasks", "checked_workers"]

_WORKER_DEATHS = ("break", "replace")
_POOLS = object()   # options(task_timeout=...) not given: the pool's
_aio = None   # mizu._aio, imported by the first asubmit or amap: asyncio takes longer to import than mizu


def _asyncio_part():
    global _aio
    if _aio is None:
        from mizu import _aio
    return _aio


def checked_workers(max_workers, default):
    """max_workers as the stdlib checks it; default() if it is None."""
    if max_workers is None:
        return default()
    if max_workers <= 0:
        raise ValueError("max_workers must be greater than 0")
    return max_workers


def check_max_tasks(max_tasks_per_child):
    """Raise as the stdlib does unless max_tasks_per_child is None or an int >= 1."""
    if max_tasks_per_child is not None:
        if not isinstance(max_tasks_per_child, int):
            raise TypeError("max_tasks_per_child must be an integer")
        if max_tasks_per_child <= 0:
            raise ValueError("max_tasks_per_child must be >= 1")


# Limits no pool comes near: a count of tasks or of bytes from here on, or
# a deadline of 2**62 ns (146 years), means none. Below them every layer,
# down to the R worker's doubles, holds the value exactly.
_UNREACHED_COUNT = 2 ** 53
_UNREACHED_NS = 2 ** 62


def within_reach(limit):
    """A count limit (max_tasks_per_child, max_worker_memory), checked: None (no limit) from 2**53 on."""
    return None if limit is None or limit >= _UNREACHED_COUNT else limit


def _timeout_ns(task_timeout):
    """task_timeout (seconds, or None) in ns (0: none), or the error that says what is wrong with it."""
    if task_timeout is None:
        return 0
    if isinstance(task_timeout, bool) or not isinstance(task_timeout, numbers.Real):
        raise TypeError(f"task_timeout must be a number of seconds, or None for no limit, not "
                        f"{type(task_timeout).__name__}")
    if not task_timeout > 0:
        raise ValueError(f"task_timeout must be more than 0 seconds (None: no limit), not {task_timeout!r}")
    # Compared before it is scaled: an int too large for a float compares.
    return 0 if task_timeout >= _UNREACHED_NS * 1e-9 else max(1, int(task_timeout * 1e9))


def check_controls(task_timeout, worker_death, max_worker_memory):
    """Raise, saying what to pass instead, unless the controls of running work are valid."""
    _timeout_ns(task_timeout)
    if worker_death not in _WORKER_DEATHS:
        raise ValueError(f"worker_death must be 'break' (a dead worker breaks the pool, as the stdlib's) or "
                         f"'replace' (it fails only its task and is replaced), not {worker_death!r}")
    if max_worker_memory is not None:
        if isinstance(max_worker_memory, bool) or not isinstance(max_worker_memory, numbers.Integral):
            raise TypeError(f"max_worker_memory must be a number of bytes (an int), or None for no limit, not "
                            f"{type(max_worker_memory).__name__}")
        if max_worker_memory <= 0:
            raise ValueError(f"max_worker_memory must be more than 0 bytes (None: no limit), not {max_worker_memory!r}")


class PoolOptions:
    """A view of an Executor whose submit, map, asubmit and amap give their tasks other controls (Executor.options).

    Everything else is the Executor's own: shutting the view down shuts
    the pool down.
    """

    def __init__(self, executor, timeout_ns, seeds):
        self._executor, self._timeout_ns, self._seeds = executor, timeout_ns, seeds

    def submit(self, fn, /, *args, **kwargs):
        """As the Executor's submit, with this view's task_timeout and seed."""
        return self._executor._submit(fn, args, kwargs, self._timeout_ns, self._seeds)

    def map(self, fn, *iterables, timeout=None, chunksize=1, buffersize=None, ordered=True, progress=False,
            seed=None):
        """As the Executor's map, with this view's task_timeout (a task per chunk of `chunksize` calls, which
        `buffersize` counts; with ``ordered=False`` results come as each completes) and seed."""
        seeds = self._executor._seeds_of(seed, self._seeds)
        return self._executor._map(fn, iterables, timeout, chunksize, buffersize, progress, self._timeout_ns, seeds,
                                   ordered)

    def asubmit(self, fn, /, *args, **kwargs):
        """As the Executor's asubmit, with this view's task_timeout and seed."""
        return self._executor._asubmit(fn, args, kwargs, self._timeout_ns, self._seeds)

    def amap(self, fn, *iterables, ordered=True, buffersize=None, chunksize=1, timeout=None, seed=None):
        """As the Executor's amap, with this view's task_timeout and seed."""
        seeds = self._executor._seeds_of(seed, self._seeds)
        return self._executor._amap(fn, iterables, ordered, buffersize, chunksize, timeout, self._timeout_ns, seeds)

    def options(self, **controls):
        """A view with these controls in place of this one's (Executor.options); this one's for those not given."""
        if self._timeout_ns >= 0:
            controls.setdefault("task_timeout", self._timeout_ns * 1e-9 or None)
        view = self._executor.options(**controls)
        if controls.get("seed") is None:
            view._seeds = self._seeds
        return view

    def __getattr__(self, name):
        return getattr(self._executor, name)

    def __repr__(self):
        seed = None if self._seeds is None else self._seeds.seed
        timeout = "the pool's" if self._timeout_ns < 0 else self._timeout_ns * 1e-9 or None
        return f"<options of {self._executor!r}: task_timeout={timeout}, seed={seed!r}>"


class ExecutorBase:
    """The part of an Executor over mizu's pool (mizu._pool.Pool) that does not depend on its kind of worker."""

    def _start_pool(self, max_workers, launcher, max_tasks_per_child, task_timeout=None, worker_death="break",
                    seeds=None):
        self._max_workers = max_workers
        self._pool = Pool(max_workers, launcher, max_tasks_per_child)
        self._pool.seeds = seeds
        self._pool.control(_timeout_ns(task_timeout), worker_death == "replace")
        # Collecting the executor shuts the pool down; work already submitted still completes, unless
        # max_tasks_per_child retires every worker first.
        weakref.finalize(self, Pool.collect, self._pool, type(self).__name__)

    def _task_fn(self, fn):
        """fn, checked as this kind of worker takes a task's function."""
        return fn

    def asubmit(self, fn, /, *args, **kwargs):
        """asubmit(fn, /, *args, **kwargs)

        Schedule ``fn(*args, **kwargs)`` as `submit` does, and return an
        awaitable of its result, for a coroutine of the running asyncio
        event loop. Not in the stdlib's Executor: its counterpart is
        ``loop.run_in_executor(pool, fn, *args)``, whose outcomes it gives,
        at a fraction of its cost per task.

        Returns
        -------
        asyncio.Future
            Of the running loop: done with the call's result, or its
            exception as `Future.result` raises it (with the worker's
            traceback as its ``__cause__``). Results reach the loop in
            batches: one wake-up of the loop for all the tasks that ended
            since the last.

        Raises
        ------
        RuntimeError
            No asyncio event loop runs in this thread, or the pool was shut
            down.
        BrokenProcessPool
            A worker died; the pool cannot be used any more.

        Notes
        -----
        Cancelling the future, as cancelling the task that awaits it does
        (``asyncio.wait_for``'s timeout, a ``TaskGroup`` failing), cancels
        the call if no worker has started it. A call already running runs
        to its end, as under ``run_in_executor``, and its result is dropped:
        ending it would end its worker, which the pool does only when asked
        (`stop`), or past a `task_timeout`, which bounds how long a call
        may run however it is awaited.

        Submitting never waits for the workers: a task that finds their
        rings full waits in the pool's queue, and the loop goes on. (The
        first submit starts the pool, as `submit` does; with ``spawn``, a
        worker starts whenever a submit finds none idle.)

        Examples
        --------
        >>> import asyncio, mizu, operator
        >>> async def main(pool):
        ...     return await asyncio.gather(*(pool.asubmit(operator.mul, i, i) for i in range(4)))
        >>> with mizu.ProcessPoolExecutor(2) as pool:
        ...     asyncio.run(main(pool))
        [0, 1, 4, 9]
        """
        return self._asubmit(fn, args, kwargs, -1, self._pool.seeds)

    def _asubmit(self, fn, args, kwargs, timeout_ns, seeds):
        aio = _aio or _asyncio_part()
        bridge = aio.running_bridge()
        return aio.submit_awaitable(bridge, self._submit(fn, args, kwargs, timeout_ns, seeds), self._pool)

    def amap(self, fn, *iterables, ordered=True, buffersize=None, chunksize=1, timeout=None, seed=None):
        """amap(fn, *iterables, ordered=True, buffersize=None, chunksize=1, timeout=None, seed=None)

        `map` for a coroutine of the running asyncio event loop: an async
        iterator of the values of ``fn`` over `iterables`, calls made in the
        workers. Not in the stdlib's Executor.

        Parameters
        ----------
        ordered : bool
            Yield the values in the order of the calls (True), or as the
            tasks end (False): a slow call then holds back no other.
        buffersize : int, optional
            Submit at most this many tasks ahead of the values yielded, and
            read the iterables as it goes (None: all at once, as `map`).
        chunksize : int
            Calls to a task; an exception stands for its whole chunk.
        timeout : float, optional
            Seconds from the call to amap by which each value must be ready.
        seed : int or sequence of int, optional
            Each call's random stream, as `map`'s `seed` gives it (None: the
            pool's seed, if it has one).

        Returns
        -------
        collections.abc.AsyncIterator
            Its values, which reach the loop in batches, as those of
            `asubmit` do. Once iteration has begun, closing it before its
            end (``break`` out of its ``async for``, ``aclose()``) cancels
            the tasks not yet started, as for `map`'s iterator.

        Raises
        ------
        RuntimeError
            No asyncio event loop runs in this thread, or the pool was shut
            down.
        ValueError, TypeError
            `chunksize` is below 1, `buffersize` is not a positive int,
            `ordered` is not a bool, or `seed` is not one the pool's kind of
            worker takes.
        TimeoutError
            A value is not ready `timeout` seconds after the call to amap
            (``concurrent.futures.TimeoutError``, as `map` raises).
        Exception
            Whatever a call raised, when iteration reaches it (with the
            worker's traceback as its ``__cause__``).

        Examples
        --------
        >>> import asyncio, mizu, operator
        >>> async def main(pool):
        ...     return [x async for x in pool.amap(operator.neg, range(4))]
        >>> with mizu.ProcessPoolExecutor(2) as pool:
        ...     asyncio.run(main(pool))
        [0, -1, -2, -3]
        """
        return self._amap(fn, iterables, ordered, buffersize, chunksize, timeout, -1,
                          self._seeds_of(seed, self._pool.seeds))

    def _amap(self, fn, iterables, ordered, buffersize, chunksize, timeout, timeout_ns, seeds):
        fn = self._task_fn(fn)
        if seeds is not None:
            fn, iterables = seeds.map(fn, iterables)
        return (_aio or _asyncio_part()).amap_results(self._pool, fn, iterables, ordered, buffersize, chunksize,
                                                      timeout, self._max_workers, timeout_ns)

    def insights(self):
        """insights()

        What the pool has done so far, for a map that is slower than it
        should be: each worker's calls, its time busy running tasks and idle
        beside them, its start-up, and the five slowest tasks. Not in the
        stdlib's Executor.

        Returns
        -------
        Insights
            A snapshot; ``print()`` shows it as a table. After shutdown, the
            workers' figures as of their end.
        """
        return self._pool.insights()

    def options(self, *, task_timeout=_POOLS, seed=None):
        """options(*, task_timeout=<the pool's>, seed=None)

        A view of this pool whose `submit`, `map`, `asubmit` and `amap` give
        each task these controls; everything else is the pool's own. Not in
        the stdlib's Executor.

        Parameters
        ----------
        task_timeout : float or None, optional
            Seconds each task may run once a worker has started it (None: no
            limit), in place of the pool's; not given, the pool's.
        seed : int or sequence of int, optional
            The seed of the random streams of the view's tasks, in place of
            the pool's (None: the pool's, if it has one). Its submits take
            their positions in the order they are submitted to the view;
            the user guide says what a seed gives each task.

        Returns
        -------
        PoolOptions
            The view.

        Raises
        ------
        TypeError, ValueError
            `task_timeout` is not a number of seconds > 0 or None.
        ValueError
            `task_timeout` is set on a pool whose workers start with ``fork``.
        TypeError, ValueError
            `seed` is not one the pool's kind of worker takes; the message
            says what to pass.
        """
        timeout_ns = -1 if task_timeout is _POOLS else _timeout_ns(task_timeout)
        if timeout_ns > 0 and not self._pool.launcher.safe_with_threads:
            raise ValueError(f"task_timeout is incompatible with the 'fork' multiprocessing start method: a task "
                             f"past it has its worker replaced while the pool runs threads, which fork cannot do "
                             f"safely; make the pool with another mp_context")
        return PoolOptions(self, timeout_ns, self._seeds_of(seed, self._pool.seeds))

    def stop(self, future):
        """stop(future)

        Stop the task of `future`, pending or running: its future is then
        cancelled. `future` may be what `asubmit` returned. A running task's worker is ended (SIGTERM, then SIGKILL)
        and replaced; the tasks queued behind it run on other workers. Not
        in the stdlib's Executor, whose ``future.cancel()`` cannot stop a
        running task (nor can this pool's).

        Returns
        -------
        bool
            Whether it stopped the task: False if it had already ended,
            its result sent (then kept) even if not yet collected.

        Raises
        ------
        ValueError
            `future` is not one that this Executor's submit, map or
            asubmit returned, or its task runs in a pool whose workers start
            with ``fork``, which cannot replace one safely while the pool
            runs threads.
        """
        if _aio is not None and isinstance(future, _aio.Awaited):
            future = future._call
        return self._pool.stop(future)

    def shutdown(self, wait=True, *, cancel_futures=False):
        """shutdown(wait=True, *, cancel_futures=False)

        Free the pool's processes and memory once pending futures are done.

        Parameters
        ----------
        wait : bool
            Block until every pending future is done and the workers exited.
        cancel_futures : bool
            Cancel the futures that no worker has started; ``wait`` and
            ``as_completed`` count them done at once (the stdlib's pool
            leaves them to wait for: CPython gh-136655).
        """
        self._pool.shutdown(wait, cancel_futures)
