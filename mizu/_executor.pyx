"""The drop-in ProcessPoolExecutor: the stdlib's arguments, checked as it checks them, over mizu's pool.

The engine that runs the pool is mizu._pool (its data flow is drawn at its
top); map's batching is mizu._map; how workers start is mizu._launchers;
what it shares with the R pool's Executor is mizu._executor_base.
"""

from cpython.object cimport PyObject, PyObject_TypeCheck, PyTypeObject
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE, PyTuple_New, PyTuple_SET_ITEM

from mizu._future cimport slot_offset
from mizu._messages cimport CALL
from mizu._pool cimport Pool

import multiprocessing
import os
import sys
from concurrent.futures import process as _process

from mizu._executor_base import ExecutorBase, check_controls, check_max_tasks, checked_workers, within_reach
from mizu._launchers import MultiprocessingLauncher
from mizu._map import check_ordered, map_results
from mizu._pickler import by_value as pickling_by_value
from mizu._progress import wanted
from mizu._seeds import Seeds

__all__ = ["ProcessPoolExecutor"]


def _default_workers():
    # The stdlib's default max_workers for the running Python, so that mizu is
    # a drop-in: not the CPUs this process may use (mizu._core.usable_cpus(),
    # which the pool's spinning counts), since before 3.13 the stdlib counts
    # every CPU of the machine.
    count = os.process_cpu_count() if hasattr(os, "process_cpu_count") else os.cpu_count()
    return count or 1


_MAP_DOC = """map(fn, *iterables, timeout=None, chunksize=1, buffersize=None, ordered=True, progress=False, seed=None)

    Like the builtin `map`, with calls made in the workers, `chunksize`
    calls to a task.

    Parameters
    ----------
    timeout : float, optional
        Seconds from the call to map within which each result must be ready.
    chunksize : int
        Calls sent to a worker as one task.
    buffersize : int, optional
        At most this many tasks submitted ahead of the results consumed: the
        iterables are read as results are, so a map over an endless or huge
        iterable runs in bounded memory. A task is a chunk of `chunksize`
        calls, as in the stdlib's (3.14) `Executor.map`: buffersize counts
        chunks, not calls. None: every call is submitted at once. In the
        stdlib's signature from Python 3.14; here on every Python.
    ordered : bool
        True: results in the order of the calls. False: results as their
        calls complete (a chunk's as the chunk completes), each exactly
        once, as `multiprocessing.pool.Pool.imap_unordered` yields them; a
        slow call holds back no other's result, and with `buffersize` a
        task is submitted as each one completes. Not in the stdlib's
        signature.
    progress : bool or dict
        Show a progress bar that counts calls as they complete, once the map
        has run for 0.1 s: tqdm's (``tqdm.auto``) when tqdm is installed,
        with a dict's items as its options (``delay`` sets when it appears),
        else a plain line on stderr (of the options, only ``desc``,
        ``total`` and ``delay`` are used). False or None: no bar. Not in the
        stdlib's signature.
    seed : int or sequence of int, optional
        Each call runs with its own random stream, ``mizu.rng()`` and
        Python's `random`, made from this seed and the call's index in the
        map, whatever the workers, chunksize and scheduling (None: the
        pool's seed, if it has one). Not in the stdlib's signature.

    Returns
    -------
    iterator
        The results. A call that raised re-raises its exception when
        iteration reaches it (in completion order if `ordered` is False),
        ending the iteration; ending it early (an exception, ``break``
        with the iterator dropped, or its ``close()``) cancels the calls
        not yet started, as the stdlib's map does.

    Raises
    ------
    TimeoutError
        A result is not ready `timeout` seconds after the call to map.
    TypeError
        `progress` is neither a bool nor a dict, or is asked of a pool with
        a ``submit`` of its own (tqdm's ``process_map`` sets one), as is
        ``ordered=False`` (or `buffersize` before Python 3.14); `buffersize`
        is not an int, or `ordered` not a bool.
    ValueError
        `progress`'s ``delay`` is not a number of seconds >= 0, `chunksize`
        is less than 1, or `buffersize` is less than 1.
    TypeError, ValueError
        `seed` is neither an int >= 0, nor a sequence of them, nor None.
    """


class ProcessPoolExecutor(ExecutorBase, _process.ProcessPoolExecutor):
    """ProcessPoolExecutor(max_workers=None, mp_context=None, initializer=None, initargs=(), *, max_tasks_per_child=None, by_value=None, task_timeout=None, worker_death="break", max_worker_memory=None, seed=None)

    An Executor that runs calls in worker processes, through shared memory.

    A drop-in replacement for `concurrent.futures.ProcessPoolExecutor`: the
    same arguments, methods, futures and exceptions. Tasks and results cross
    between processes through lock-free rings in one shared segment instead
    of pipes, and a caller waiting on a result collects it itself.

    Parameters
    ----------
    max_workers : int, optional
        Number of worker processes; by default the stdlib's: the number of
        CPUs this process may use (3.13+), or of the machine (before).
    mp_context : multiprocessing context, optional
        Starts the workers; by default the running Python's default context
        (``spawn`` if `max_tasks_per_child` is given, and ``forkserver`` in
        place of ``fork`` if `task_timeout`, ``worker_death="replace"`` or
        `max_worker_memory` is: each starts workers while the pool runs
        threads, which ``fork`` cannot do safely).
    initializer : callable, optional
        Called in each worker, with `initargs`, before its first task. If it
        raises, the pool breaks as the stdlib's does.
    initargs : tuple
        Arguments for `initializer`.
    max_tasks_per_child : int, optional
        Tasks a worker runs before it exits and is replaced.
    by_value : bool, optional
        Pickle by value, with cloudpickle (which must be installed), the
        functions and classes that pickle would name but a worker may not
        find by name: lambdas, closures, and those defined in ``__main__``
        or a notebook, as a task's callable, its `initializer`, or inside its
        arguments and results. They then run under every start method;
        everything else stays with the stdlib's pickle, and each callable
        still goes to a worker once. By default (None) the ``MIZU_BY_VALUE``
        environment variable decides (``1`` or ``true``: on); off, as in the
        stdlib, they are pickled by name. Not in the stdlib's signature.
    task_timeout : float, optional
        Seconds each task may run once a worker has started it. A task past
        it fails with `TimeoutError`, and its worker is ended (SIGTERM, then
        SIGKILL) and replaced; the tasks queued behind it run on other
        workers. By default there is no limit. `options` sets it for some
        tasks only. Not in the stdlib's signature.
    worker_death : {"break", "replace"}
        What a worker's death does: ``"break"``, the stdlib's, breaks the
        pool (`BrokenProcessPool` for every pending task); ``"replace"``
        fails only the task it ran, with `mizu.WorkerDied`, and starts a
        new worker in its place. A worker that dies before it is up breaks
        the pool either way. Not in the stdlib's signature.
    max_worker_memory : int, optional
        Bytes of memory a worker may hold after a task (its own resident
        memory, and the shared-memory arrays it holds): above them it is
        replaced before its next task, as `max_tasks_per_child` replaces it
        after a count. Not in the stdlib's signature.
    seed : int or sequence of int, optional
        Run each task with its own random stream, numpy's
        ``SeedSequence(seed).spawn`` child at the task's position (its
        order of submission; a map's call, its index in the map):
        ``mizu.rng()`` in the task is a `numpy.random.Generator` of that
        stream, and Python's `random` is seeded from it. The same seed gives
        the same results whatever the number of workers, the start method,
        chunksize and scheduling. `map` and `options` take a seed of their
        own. By default (None) tasks run as without mizu. Not in the
        stdlib's signature.

    Raises
    ------
    ValueError
        `max_workers` or `max_tasks_per_child` is not positive,
        `max_tasks_per_child` or a control that replaces workers is
        combined with a ``fork`` context,
        ``MIZU_BY_VALUE`` is set to something other than 0, 1, false or true,
        `task_timeout` or `max_worker_memory` is not positive,
        `worker_death` is neither ``"break"`` nor ``"replace"``, or `seed` is
        a negative int (or holds one).
    TypeError
        `initializer` is not callable, `max_tasks_per_child` or
        `max_worker_memory` is not an int, `task_timeout` is not a number,
        `by_value` is not a bool or None, or `seed` is neither an int, nor a
        sequence of ints, nor None.
    ImportError
        Pickling by value is on and cloudpickle is not installed.

    See Also
    --------
    concurrent.futures.ProcessPoolExecutor
    """

    __slots__ = ("_pool",)   # read in C by submit

    def __init__(self, max_workers=None, mp_context=None, initializer=None, initargs=(), *,
                 max_tasks_per_child=None, by_value=None, task_timeout=None, worker_death="break",
                 max_worker_memory=None, seed=None):
        max_workers = checked_workers(max_workers, _default_workers)
        if initializer is not None and not callable(initializer):
            raise TypeError("initializer must be a callable")
        check_max_tasks(max_tasks_per_child)
        check_controls(task_timeout, worker_death, max_worker_memory)
        seeds = self._seeds_of(seed)
        # What starts workers while the pool runs threads, which fork cannot do safely.
        replacing = ("max_tasks_per_child" if max_tasks_per_child is not None else
                     "task_timeout" if task_timeout is not None else
                     "worker_death='replace'" if worker_death == "replace" else
                     "max_worker_memory" if max_worker_memory is not None else None)
        if replacing is not None:
            if mp_context is None:
                # The stdlib's choice for max_tasks_per_child; for the others,
                # the default unless it is fork, else forkserver, whose
                # workers start in a fraction of spawn's time.
                default = multiprocessing.get_context()
                mp_context = (multiprocessing.get_context("spawn") if max_tasks_per_child is not None else
                              default if default.get_start_method() != "fork" else
                              multiprocessing.get_context("forkserver"))
            elif mp_context.get_start_method(allow_none=False) == "fork":
                raise ValueError(f"{replacing} is incompatible with the 'fork' multiprocessing start "
                                 f"method; supply a different mp_context.")
        if mp_context is None:
            mp_context = multiprocessing.get_context()
        self._mp_context = mp_context
        max_tasks_per_child, max_worker_memory = within_reach(max_tasks_per_child), within_reach(max_worker_memory)
        launcher = MultiprocessingLauncher(mp_context, initializer, initargs, max_tasks_per_child,
                                           pickling_by_value(by_value), max_worker_memory)
        self._start_pool(max_workers, launcher, max_tasks_per_child, task_timeout, worker_death, seeds)

    def _submit(self, fn, args, kwargs, timeout_ns, seeds):
        # A view's (options): the task's deadline and seeds its own.
        if seeds is not None:
            fn, args = seeds.task(fn, args)
        return _pool_of(self).submit(CALL, fn, args, kwargs, 1, None, timeout_ns)

    @staticmethod
    def _seeds_of(seed, inherited=None):
        return inherited if seed is None else Seeds(seed)

    def _map(self, fn, iterables, timeout, chunksize, buffersize, progress, timeout_ns=-1, seeds=None, ordered=True):
        if seeds is not None:
            fn, iterables = seeds.map(fn, iterables)
        if "submit" in self.__dict__ or type(self).submit is not ProcessPoolExecutor.submit:
            # A submit of its own, set on this pool (tqdm's process_map
            # counts the futures it returns) or a subclass's, sees every
            # task, as under the stdlib's map: one per chunk of calls.
            if wanted(progress):
                raise TypeError("progress cannot be combined with a submit of the pool's own (set on it, or a "
                                "subclass's); leave progress=False, or count the futures that submit returns")
            if timeout_ns >= 0:
                raise TypeError("task_timeout cannot be set through options() on a pool with a submit of its own "
                                "(set on it, or a subclass's): set it on the pool")
            check_ordered(ordered)
            if not ordered:
                raise TypeError("ordered=False cannot be combined with a submit of the pool's own (set on it, or a "
                                "subclass's); leave ordered=True, or use concurrent.futures.as_completed over the "
                                "futures that submit returns")
            extra = {}
            if buffersize is not None:
                if sys.version_info < (3, 14):
                    raise TypeError("buffersize cannot be combined with a submit of the pool's own (set on it, or a "
                                    "subclass's) before Python 3.14, whose Executor.map takes it; leave it None")
                extra["buffersize"] = buffersize
            return _process.ProcessPoolExecutor.map(self, fn, *iterables, timeout=timeout, chunksize=chunksize,
                                                    **extra)
        return map_results(self._pool, fn, iterables, timeout, chunksize, buffersize, self._max_workers, progress,
                           timeout_ns, ordered)

    def map(self, fn, *iterables, timeout=None, chunksize=1, buffersize=None, ordered=True, progress=False,
            seed=None):
        return self._map(fn, iterables, timeout, chunksize, buffersize, progress, -1,
                         self._seeds_of(seed, self._pool.seeds), ordered)

    map.__doc__ = _MAP_DOC

    # The stdlib's private attributes that its own tests and some user code
    # read: the live worker processes by pid, the thread that collects
    # results (None before the first submit) and the reason the pool broke.
    @property
    def _processes(self):
        if self._pool.shutting_down and self._pool.segment is None:   # the stdlib's is None after shutdown too
            return None
        return {w.process.pid: w.process for w in self._pool.workers}

    @property
    def _executor_manager_thread(self):
        return self._pool.manager

    @property
    def _broken(self):
        return self._pool.broken or False

    # And the stdlib's lock and flag for a forced shutdown, whose worker
    # replacement they stop (gh-152967): the pool's state lock, under which
    # it replaces a retiring worker, and its own flag.
    @property
    def _shutdown_lock(self):
        return self._pool.state_lock

    @property
    def _force_shutting_down(self):
        return self._pool.forced

    @_force_shutting_down.setter
    def _force_shutting_down(self, value):
        self._pool.forced = value

    if sys.version_info >= (3, 14):
        def terminate_workers(self):
            """terminate_workers()

            Shut down at once: cancel what has not started and send SIGTERM
            to every worker. Running futures get BrokenProcessPool.
            """
            return self._force_shutdown(operation="terminate")

        def kill_workers(self):
            """kill_workers()

            As `terminate_workers`, with SIGKILL.
            """
            return self._force_shutdown(operation="kill")

        def _force_shutdown(self, operation):
            # The stdlib's name for what both call, "terminate" or "kill".
            if operation not in ("terminate", "kill"):
                raise ValueError(f"Unsupported operation: {operation!r}")
            self._pool.force_shutdown(operation)


# submit is a method written in C (METH_FASTCALL | METH_KEYWORDS): a def
# with **kwargs would make a dict for every call, even one without keywords.
cdef extern from *:
    """
    typedef PyObject* (*mizu_fastcall)(PyObject*, PyObject* const*, Py_ssize_t, PyObject*);
    static mizu_fastcall mizu_submit_impl;
    static PyObject* mizu_submit_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
        return mizu_submit_impl(self, args, nargs, kwnames);
    }
    static PyMethodDef mizu_submit_def = {
        "submit", (PyCFunction)(void (*)(void))mizu_submit_entry, METH_FASTCALL | METH_KEYWORDS,
        "submit($self, fn, /, *args, **kwargs)\\n--\\n\\n"
        "Schedule ``fn(*args, **kwargs)`` in a worker and return its Future.\\n\\n"
        "Raises\\n"
        "------\\n"
        "BrokenProcessPool\\n"
        "    A worker died; the pool cannot be used any more.\\n"
        "RuntimeError\\n"
        "    The executor was shut down.\\n"};
    """
    ctypedef PyObject* (*mizu_fastcall)(PyObject*, PyObject* const*, Py_ssize_t, PyObject*)
    mizu_fastcall mizu_submit_impl
    ctypedef struct PyMethodDef:
        pass
    PyMethodDef mizu_submit_def
    object PyDescr_NewMethod(PyTypeObject* type, PyMethodDef* method)


cdef object _submit_call(object self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames):
    """ProcessPoolExecutor.submit(fn, /, *args, **kwargs), from the vectorcall's arguments."""
    cdef Py_ssize_t i, nkw = 0 if kwnames == NULL else PyTuple_GET_SIZE(<object>kwnames)
    cdef tuple positional
    cdef dict keywords = None
    if nargs < 1:
        raise TypeError("ProcessPoolExecutor.submit() missing 1 required positional argument: 'fn'")
    fn = <object>args[0]
    positional = PyTuple_New(nargs - 1)
    for i in range(1, nargs):
        Py_INCREF(<object>args[i])
        PyTuple_SET_ITEM(positional, i - 1, <object>args[i])
    if nkw:
        keywords = {}
        for i in range(nkw):
            keywords[<object>PyTuple_GET_ITEM(<object>kwnames, i)] = <object>args[nargs + i]
    cdef Pool pool = _pool_of(self)
    if pool.seeds is not None:
        fn, positional = pool.seeds.task(fn, positional)
    return pool.submit(CALL, fn, positional, keywords, 1)


mizu_submit_impl = <mizu_fastcall>_submit_call
ProcessPoolExecutor.submit = PyDescr_NewMethod(<PyTypeObject*>ProcessPoolExecutor, &mizu_submit_def)


cdef Py_ssize_t _pool_offset = slot_offset(ProcessPoolExecutor, "_pool")
cdef PyTypeObject* _executor_type = <PyTypeObject*>ProcessPoolExecutor


cdef Pool _pool_of(object executor):
    """executor._pool, read in C when executor is a ProcessPoolExecutor whose pool is set."""
    cdef PyObject* pool
    if PyObject_TypeCheck(executor, _executor_type):
        pool = (<PyObject**>(<char*><PyObject*>executor + _pool_offset))[0]
        if pool != NULL:
            return <Pool>pool
    return <Pool>executor._pool
