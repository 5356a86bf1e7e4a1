"""Dask's distributed workers on mizu pools.

A Dask worker runs each task in its executor: a thread pool unless told
otherwise. `WorkerPool`, a WorkerPlugin, gives a worker a mizu pool instead,
sized to its threads, so its tasks run in processes of their own and a
pure-Python task no longer waits for the GIL; as a preload, this module does
the same for each worker it is given::

    client.register_plugin(mizu.dask.WorkerPool())
    dask worker tcp://scheduler:8786 --preload mizu.dask

Importing this module imports distributed.
"""

import asyncio
import concurrent.futures
import multiprocessing
import threading

from distributed import WorkerPlugin
from distributed.protocol import pickle as dask_pickle
from distributed.worker import _run_task_simple

from mizu._executor import ProcessPoolExecutor

__all__ = ["WorkerPool", "dask_setup"]


def _run_task(task, data, time_delay):
    """Runs a task as a worker runs it in a process pool, with a result that pickles back whatever it raised.

    A failed task's result holds the exception itself beside Dask's own
    safely pickled copy of it; when the exception itself does not pickle
    (get_worker() raises one whose context holds a ContextVar), the copy,
    which the client receives in any case, takes its place.
    """
    result = _run_task_simple(task, data, time_delay)
    if result["op"] == "task-erred":
        try:
            dask_pickle.dumps(result["actual_exception"])
        except Exception:
            result["actual_exception"] = dask_pickle.loads(result["exception"].data)
    return result


class _RenewedPool(concurrent.futures.Executor):
    """A mizu pool that a worker's death does not end: the next task finds a new pool.

    The tasks that the dead worker's pool held fail with BrokenProcessPool,
    as they would in that pool; Dask reports them as erred, and the tasks
    after them run.
    """

    def __init__(self, make):
        self._make = make
        self._pool = make()
        self._max_workers = self._pool._max_workers
        self._lock = threading.Lock()

    def submit(self, fn, /, *args, **kwargs):
        if fn is _run_task_simple:
            fn = _run_task
        pool = self._pool
        try:
            return pool.submit(fn, *args, **kwargs)
        except concurrent.futures.process.BrokenProcessPool:
            with self._lock:
                if self._pool is pool:
                    self._pool = self._make()
                    pool.shutdown(wait=False)
            return self._pool.submit(fn, *args, **kwargs)

    def shutdown(self, wait=True, *, cancel_futures=False):
        with self._lock:
            self._pool.shutdown(wait=wait, cancel_futures=cancel_futures)

    def __repr__(self):
        return f"<mizu.dask pool: {self._pool!r}>"


class WorkerPool(WorkerPlugin):
    """A WorkerPlugin that runs a Dask worker's tasks in a mizu pool.

    Parameters
    ----------
    max_workers : int, optional
        Processes in each worker's pool; by default the worker's number of
        threads, which is how many tasks Dask runs on it at once.
    start_method : {"fork", "forkserver", "spawn"}, optional
        How the pool starts its processes; by default multiprocessing's
        default start method.
    by_value : bool, default True
        Pickle by value the functions that the client sent, as Dask itself
        does: a function of the client's ``__main__``, a lambda or a
        closure reaches the worker by value and could not be found there by
        its name.
    max_tasks_per_child : int, optional
        As for :class:`mizu.ProcessPoolExecutor`.
    executor : str, default "default"
        The worker's executor to set. "default" runs every task in the
        pool; another name adds an executor that only the tasks annotated
        with it (``dask.annotate(executor=name)``) run in.

    Notes
    -----
    A task runs in another process than its worker, so what needs the
    worker itself does not work inside it: ``get_worker()``,
    ``worker_client()``, ``secede()`` and ``rejoin()``, and context
    variables set in the worker. The task's arguments and result cross
    to the pool and back; numpy arrays of 4 KiB or more do so through
    shared memory. If a process of the pool dies, the tasks it was running
    and those waiting in the same pool fail with BrokenProcessPool, and the
    worker starts a new pool for the tasks after them.

    Examples
    --------
    >>> from distributed import Client, LocalCluster
    >>> import mizu.dask
    >>> with LocalCluster(n_workers=2, threads_per_worker=2) as cluster, Client(cluster) as client:
    ...     client.register_plugin(mizu.dask.WorkerPool())
    ...     client.submit(sum, range(10)).result()
    45
    """

    name = "mizu"

    def __init__(self, max_workers=None, *, start_method=None, by_value=True, max_tasks_per_child=None,
                 executor="default"):
        if max_workers is not None and (not isinstance(max_workers, int) or max_workers < 1):
            raise ValueError(f"max_workers must be a positive int or None, not {max_workers!r}")
        if start_method is not None and start_method not in multiprocessing.get_all_start_methods():
            raise ValueError(f"start_method must be one of {multiprocessing.get_all_start_methods()} or None, "
                             f"not {start_method!r}")
        if not isinstance(executor, str) or executor in ("offload", "actor"):
            raise ValueError(f"executor must name an executor other than Dask's own 'offload' and 'actor', "
                             f"not {executor!r}")
        self.max_workers, self.start_method, self.by_value = max_workers, start_method, by_value
        self.max_tasks_per_child, self.executor = max_tasks_per_child, executor
        self.name = "mizu" if executor == "default" else f"mizu-{executor}"

    def setup(self, worker):
        # A Dask worker that a nanny started is a daemonic process, which
        # multiprocessing forbids to start processes lest they be orphaned
        # when it ends. A mizu worker ends with the process that started its
        # pool, so the rule's reason does not hold for it.
        multiprocessing.current_process().daemon = False
        context = multiprocessing.get_context(self.start_method)
        size = self.max_workers or worker.state.nthreads
        self._pool = _RenewedPool(lambda: ProcessPoolExecutor(
            size, mp_context=context, max_tasks_per_child=self.max_tasks_per_child, by_value=self.by_value))
        replaced = worker.executors.get(self.executor)
        worker.executors[self.executor] = self._pool
        if isinstance(replaced, concurrent.futures.ThreadPoolExecutor) and self.executor == "default":
            # The worker's own thread pool: the tasks it is running end as they would.
            replaced.shutdown(wait=False)

    async def teardown(self, worker):
        pool = getattr(self, "_pool", None)
        if pool is None:
            return
        if worker.executors.get(self.executor) is pool:
            if self.executor == "default":
                # A worker that goes on after the plugin is removed runs its tasks in threads again.
                worker.executors["default"] = concurrent.futures.ThreadPoolExecutor(
                    worker.state.nthreads, thread_name_prefix="Dask-Default-Threads")
            else:
                del worker.executors[self.executor]
        # The tasks it is running end first, without holding up the worker's event loop.
        await asyncio.to_thread(pool.shutdown)


async def dask_setup(worker):
    """The preload's entry point: ``dask worker --preload mizu.dask`` gives each worker a `WorkerPool`."""
    from distributed import Worker

    if not isinstance(worker, Worker):
        raise TypeError(f"mizu.dask is a preload for workers (--preload), not for {type(worker).__name__}s")
    await worker.plugin_add(WorkerPool(), catch_errors=False)
