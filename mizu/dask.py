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
import contextvars
import multiprocessing
import threading

from dask._task_spec import _execute_subgraph
from distributed import WorkerPlugin
from distributed.core import Status
from distributed.protocol import pickle as dask_pickle
from distributed.threadpoolexecutor import ThreadPoolExecutor
from distributed.worker import _run_task, _run_task_simple

from mizu._executor import ProcessPoolExecutor

__all__ = ["WorkerPool", "dask_setup"]


def _run_in_process(task, data, time_delay):
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


def _needs_the_worker(task):
    """Whether a task is, or has fused into it, one of Dask's P2P tasks (of shuffles, merges, rechunks), which
    reach the worker itself: a function of distributed.shuffle, or dask's own wrapper of one (its transfers)."""
    func = getattr(task, "func", None)
    if func is _execute_subgraph:
        return any(_needs_the_worker(inner) for inner in task.args[0].values())
    module = getattr(func, "__module__", None) or ""
    return module.startswith("distributed.shuffle") or (
        module.startswith("dask.") and "transfer" in getattr(func, "__name__", ""))


class _RenewedPool(concurrent.futures.Executor):
    """A worker's mizu pool, which a process's death does not end: the next task finds a new pool.

    The tasks that the dead process's pool held fail with BrokenProcessPool,
    as they would in that pool; Dask reports them as erred, and the tasks
    after them run. Dask's P2P tasks (shuffles, merges, rechunks) run in
    threads of the worker, as they reach it by get_worker().
    """

    def __init__(self, make, worker):
        self._make = make
        self._pool = make()
        self._max_workers = self._pool._max_workers
        self._worker = worker
        self._threads = None
        self._closed = False
        self._lock = threading.Lock()

    def submit(self, fn, /, *args, **kwargs):
        if fn is _run_task_simple:
            if _needs_the_worker(args[0]):
                # As the worker runs a task in its own threads, where get_worker() finds it.
                task, data, time_delay = args
                worker = self._worker
                return self._in_threads().submit(
                    contextvars.copy_context().run, _run_task, task, data, worker.execution_state, task.key,
                    worker.active_threads, worker.active_threads_lock, time_delay)
            fn = _run_in_process
        pool = self._pool
        try:
            return pool.submit(fn, *args, **kwargs)
        except concurrent.futures.process.BrokenProcessPool:
            with self._lock:
                if self._closed:
                    raise RuntimeError("cannot schedule new futures after shutdown") from None
                if self._pool is pool:
                    self._pool = self._make()
                    pool.shutdown(wait=False)
            return self._pool.submit(fn, *args, **kwargs)

    def _in_threads(self):
        with self._lock:
            if self._closed:
                raise RuntimeError("cannot schedule new futures after shutdown")
            if self._threads is None:
                self._threads = concurrent.futures.ThreadPoolExecutor(self._max_workers,
                                                                      thread_name_prefix="mizu-dask-p2p")
            return self._threads

    def kill(self):
        """Shut down at once: cancel what has not started, kill the processes that run the rest."""
        with self._lock:
            self._closed = True
            threads = self._threads
        self._pool._pool.force_shutdown("kill")
        if threads is not None:
            threads.shutdown(wait=False, cancel_futures=True)

    def shutdown(self, wait=True, *, cancel_futures=False):
        with self._lock:
            self._closed = True
            threads = self._threads
        self._pool.shutdown(wait=wait, cancel_futures=cancel_futures)
        if threads is not None:
            threads.shutdown(wait=wait, cancel_futures=cancel_futures)

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
        How the pool starts its processes; by default as
        :class:`mizu.ProcessPoolExecutor` does without `mp_context`.
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
    shared memory. Dask's P2P tasks (shuffles, merges, rechunks), which
    need the worker, run in its threads. If a process of the pool dies, the
    tasks it was running and those waiting in the same pool fail with
    BrokenProcessPool, and the worker starts a new pool for the tasks after
    them. The worker's memory limit does not count the pool's memory.

    Examples
    --------
    >>> from distributed import Client, LocalCluster
    >>> import mizu.dask
    >>> with LocalCluster(n_workers=2, threads_per_worker=2) as cluster, Client(cluster) as client:
    ...     _ = client.register_plugin(mizu.dask.WorkerPool())
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
        if max_tasks_per_child is not None and (not isinstance(max_tasks_per_child, int) or max_tasks_per_child < 1):
            raise ValueError(f"max_tasks_per_child must be a positive int or None, not {max_tasks_per_child!r}")
        if max_tasks_per_child is not None and start_method == "fork":
            raise ValueError("max_tasks_per_child needs start_method 'spawn' or 'forkserver' (or None, which is "
                             "spawn then), not 'fork'")
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
        context = None if self.start_method is None else multiprocessing.get_context(self.start_method)
        size = self.max_workers or worker.state.nthreads
        self._pool = _RenewedPool(lambda: ProcessPoolExecutor(
            size, mp_context=context, max_tasks_per_child=self.max_tasks_per_child, by_value=self.by_value), worker)
        replaced = worker.executors.get(self.executor)
        shared = replaced is worker.executors.get("offload") or replaced is worker.executors.get("actor")
        worker.executors[self.executor] = self._pool
        if self.executor == "default" and isinstance(replaced, concurrent.futures.ThreadPoolExecutor) and not shared:
            # The worker's own thread pool: the tasks it is running end as they would.
            replaced.shutdown(wait=False)

    async def teardown(self, worker):
        pool = getattr(self, "_pool", None)
        if pool is None:
            return
        if worker.executors.get(self.executor) is pool:
            if self.executor == "default":
                # A worker that goes on after the plugin is removed runs its tasks in threads again, in the
                # thread pool that secede() and worker_client() know.
                worker.executors["default"] = ThreadPoolExecutor(
                    worker.state.nthreads, thread_name_prefix=f"{worker.name}-Dask-Default-Threads")
            else:
                del worker.executors[self.executor]
        if worker.status in (Status.closing, Status.closing_gracefully, Status.closed):
            # The worker is closing: its pool goes without waiting for the tasks it runs, which end with their
            # processes, as a closing worker's threads do with the process.
            pool.kill()
        else:
            # The tasks it is running end first, without holding up the worker's event loop.
            await asyncio.to_thread(pool.shutdown)


async def dask_setup(worker):
    """The preload's entry point: ``dask worker --preload mizu.dask`` gives each worker a `WorkerPool`."""
    from distributed import Worker

    if not isinstance(worker, Worker):
        raise TypeError(f"mizu.dask is a preload for workers (--preload), not for {type(worker).__name__}s")
    await worker.plugin_add(WorkerPool(), catch_errors=False)
