"""joblib's "mizu" backend: ``Parallel(backend="mizu")`` runs its batches in a mizu pool.

`import mizu` registers the backend once joblib is imported (mizu/__init__.py
watches for it), so this module, which imports joblib, loads only then.

The backend keeps one pool for the whole process and reuses it across
``Parallel`` calls while their number of jobs, worker environment,
initializer and start method stay the same, as loky's reusable executor
does: scikit-learn makes many short calls. A call that ends by an error, a
timeout or Ctrl-C kills the pool's workers, so no task of it goes on
running, and the next call gets a new pool.
"""

import multiprocessing
import os
import sys
import threading
import warnings
import weakref
from concurrent.futures import CancelledError

# joblib and threadpoolctl ship no type information.
from joblib._parallel_backends import (  # type: ignore[import-untyped]
    AutoBatchingMixin, FallbackToBackend, ParallelBackendBase, SequentialBackend)

from mizu._errors import call_repr
from mizu._executor import ProcessPoolExecutor
from mizu._pickler import file_mapping, memmap_under, share_arrays_after

# What Parallel and parallel_config pass on to a backend that the mizu backend takes: the initializer,
# the multiprocessing context (its start method), and joblib's memmapping options: max_nbytes and
# mmap_mode say which arrays go to shared memory once per loop (_LoopArrays); temp_folder and verbose
# have nothing to do.
_OPTIONS = {"initializer", "initargs", "context", "max_nbytes", "mmap_mode", "temp_folder", "verbose"}


class _LoopArrays:
    """How one loop's arrays go to the workers, as loky's memmapping sends them.

    An array that a numpy.memmap maps shared from a file (a memmap opened
    "r", "r+" or "w+", or any view of one: a slice, ``numpy.asarray`` of
    one, windows that as_strided makes), of any size, goes as a mapping of
    the same bytes of that file, read-only if the memmap was opened "r" or
    the array is read-only: workers' writes to an "r+" memmap reach its
    file, as loky's do. One of a copy-on-write memmap ("c") goes with each
    batch, as each of loky's batches maps its file privately (a batch's
    pickle holds it once, whatever number of its calls take it); it holds
    the caller's bytes, where loky's workers read the file's, and one of
    more than max_nbytes arrives as a plain array.

    Any other plain numpy array or numpy.memmap of more than max_nbytes
    bytes anywhere in a call's arguments (in containers, pandas objects,
    any object that pickles its arrays, or captured by a function pickled
    by value: mizu._pickler._cloudpickled), not in shared memory
    already, is copied into an arena block the first time a call takes it;
    the loop's later calls that take the same array get that block. With
    mmap_mode "r" (joblib's default) the copy is read-only in the workers,
    as loky's memmaps are; with "r+" or "w+" the loop's tasks share it
    writable. max_nbytes None, or mmap_mode "c", makes no copies: such an
    array goes with each batch. An array of a memmap whose file cannot be
    mapped (gone, shorter than it, unnamed, or strides made by hand beyond
    the memmap) is copied the same way, keeping its own writeability. A
    copy whose array has gone goes when the next copy is made; the others
    go once the loop has ended and its batches are gone.
    """

    def __init__(self, max_nbytes, mmap_mode):
        import numpy

        self.ndarray, self.memmap = numpy.ndarray, numpy.memmap
        self.max_nbytes = max_nbytes if mmap_mode in ("r", "r+", "w+") else None
        self.writeable = mmap_mode != "r"
        self.copies = {}   # id of an array: (a weak reference to it, its copy)

    def shared(self, value):
        """value, its loop's copy in shared memory, or its file's mapping (a share of share_arrays_after)."""
        kind = type(value)
        if kind is not self.ndarray and kind is not self.memmap:
            return value
        owner = None if value.base is None else memmap_under(value)
        if owner is not None:
            mapping = file_mapping(value, owner)
            if mapping is not None:
                return mapping
        if self.max_nbytes is None or value.nbytes <= self.max_nbytes or value.dtype.hasobject:
            return value
        if owner is not None and owner.mode == "c":
            return value.view(self.ndarray)   # the caller's bytes, with each batch, out of band
        found = self.copies.get(id(value))
        if found is not None and found[0]() is value:
            return found[1]
        from mizu._arena import arena_block
        from mizu._arrays import asarray

        if arena_block(value) is not None:
            return value
        copy = asarray(value)
        # The copy of a memmap's array keeps its writeability, as loky keeps a memmap's mode.
        copy.flags.writeable = self.writeable if owner is None else value.flags.writeable
        # The copies of arrays that have gone (a view made for each call) go now: no call can name them.
        for key in [key for key, (ref, _) in self.copies.items() if ref() is None]:
            del self.copies[key]
        self.copies[id(value)] = (weakref.ref(value), copy)
        return copy


def _file_or_value(value):
    """A result array as it goes back: a mapping of its file if a memmap maps it shared from one, else itself."""
    return file_mapping(value) or value


_lock = threading.Lock()
_shared = None   # the process's reusable pool: a _Shared


class _Shared:
    """The reusable pool, what it was made for, and how many loops run on it now."""

    def __init__(self, made_for, pool):
        self.made_for, self.pool, self.users = made_for, pool, 1

    def fits(self, wanted):
        n_jobs, env, initializer, initargs, method = self.made_for
        return (not self.pool._broken and not self.pool._pool.shutting_down and n_jobs == wanted[0]
                and env == wanted[1] and initializer is wanted[2] and _same(initargs, wanted[3])
                and method == wanted[4])


def _start_worker(env, initializer, initargs):
    """A worker's first call: the thread limits joblib asks of its workers, then the user's initializer."""
    os.environ.update(env)
    try:
        from threadpoolctl import threadpool_limits  # type: ignore[import-untyped]
    except ImportError:
        pass
    else:
        # The libraries that a forked worker has loaded already read the environment.
        limit = env["OMP_NUM_THREADS"]
        if limit.isdigit():
            threadpool_limits(int(limit))
    if initializer is not None:
        initializer(*initargs)


class _Batch:
    """A joblib batch (a BatchedCalls), shown by its calls: a dead worker's error names them.

    arrays: the loop's _LoopArrays, through which the batch's arrays are pickled, or None.
    """

    __slots__ = ("calls", "arrays")

    def __init__(self, calls, arrays=None):
        self.calls, self.arrays = calls, arrays

    def __reduce__(self):
        return _Batch, (self.calls,)

    def __repr__(self):
        items = self.calls.items
        shown = ", ".join(call_repr(fn, args, kwargs) for fn, args, kwargs in items[:3])
        return f"[{shown}{', ...' if len(items) > 3 else ''}]"


# A batch's arrays go through its loop's copies.
share_arrays_after(_Batch, lambda batch: None if batch.arrays is None else batch.arrays.shared)


class _Returned:
    """A batch's results as its worker pickles them: they unpickle as their list.

    Arrays among them that a numpy.memmap maps shared from a file go back as
    mappings of that file (file_mapping), as loky sends them back; the
    others go as any result does.
    """

    __slots__ = ("results",)

    def __init__(self, results):
        self.results = results

    def __reduce__(self):
        return list, (self.results,)


share_arrays_after(_Returned, lambda returned: _file_or_value)


_PLAIN = frozenset({int, float, complex, bool, str, bytes, type(None)})


def _run_batch(batch):
    results = batch.calls()
    # Results that hold no array keep the wire's encoding of plain values.
    return results if all(type(result) in _PLAIN for result in results) else _Returned(results)


def _same(a, b):
    try:
        return bool(a == b)
    except Exception:
        return a is b


def _take_pool(n_jobs, env, initializer, initargs, context):
    """A pool for one loop: the shared one if it was made for the same arguments, else a new one.

    A new pool becomes the shared one unless another loop still runs on the
    shared one (a generator not yet consumed, a loop in another thread):
    then it is this loop's own, and ends with it.
    """
    global _shared
    wanted = (n_jobs, env, initializer, initargs, context.get_start_method())

    def make():
        return ProcessPoolExecutor(n_jobs, mp_context=context, initializer=_start_worker,
                                   initargs=(env, initializer, initargs), by_value=True)

    with _lock:
        if _shared is not None and _shared.fits(wanted):
            _shared.users += 1
            return _shared.pool
        if _shared is not None and _shared.users > 0:
            return make()
        if _shared is not None:
            _shared.pool.shutdown(wait=False)
        _shared = _Shared(wanted, make())
        return _shared.pool


def _give_back(pool, kill):
    """A loop is done with its pool; kill: it ended by an error, a timeout or Ctrl-C.

    The shared pool stays for the next loop, but an aborted loop's tasks may
    still run in it: it is killed unless another loop runs on it, and then
    only the aborted loop's tasks that have not started are cancelled (by
    the caller). A loop's own pool ends with it.
    """
    global _shared
    with _lock:
        shared = _shared is not None and _shared.pool is pool
        if shared:
            _shared.users -= 1
            if not kill or _shared.users > 0:
                return
            _shared = None
    if kill:
        pool._pool.force_shutdown("kill")
    else:
        pool.shutdown(wait=False)


class MizuBackend(AutoBatchingMixin, ParallelBackendBase):
    """joblib's backend on a mizu pool: ``parallel_config(backend="mizu")``.

    Like loky's: ``n_jobs`` is 1 by default (then the loop runs in the
    caller), -1 is every CPU and -2 all but one; tasks are batched
    automatically; functions, lambdas and closures pickle by value; a
    worker's BLAS and OpenMP use ``cpu_count() // n_jobs`` threads unless
    ``inner_max_num_threads`` says otherwise; an array of more than
    ``max_nbytes`` anywhere in the arguments (in a pandas object too) goes
    to the workers once per loop, read-only unless ``mmap_mode`` is "r+"
    or "w+"; an array that a numpy.memmap maps from a file goes as a
    mapping of that file, read-only if the memmap or the array is, and one
    of a copy-on-write memmap as a copy with each batch. Unlike loky's, other
    arrays go to the workers and back through mizu's shared memory,
    results included; ``temp_folder`` has nothing to do.
    """

    supports_retrieve_callback = True
    supports_inner_max_num_threads = True
    uses_threads = False
    supports_sharedmem = False

    def __init__(self, nesting_level=None, inner_max_num_threads=None, **backend_kwargs):
        super().__init__(nesting_level=nesting_level, inner_max_num_threads=inner_max_num_threads, **backend_kwargs)
        self._workers, self._pending, self._arrays = None, set(), None

    def effective_n_jobs(self, n_jobs):
        if n_jobs == 0:
            raise ValueError("n_jobs == 0 in Parallel has no meaning")
        if n_jobs is None:
            return 1
        # loky's rules: a daemonic process may not start processes, and a
        # loop nested in a thread runs in that thread.
        if multiprocessing.current_process().daemon:
            if n_jobs != 1:
                warnings.warn("the mizu backend cannot start workers in a daemonic process: "
                              "setting n_jobs=1", stacklevel=3)
            return 1
        if not (self.in_main_thread() or self.nesting_level == 0):
            if n_jobs != 1:
                warnings.warn("the mizu backend's loops nested in a thread run in it: setting n_jobs=1",
                              stacklevel=3)
            return 1
        if n_jobs < 0:
            return max((os.cpu_count() or 1) + 1 + n_jobs, 1)
        return n_jobs

    def configure(self, n_jobs=1, parallel=None, prefer=None, require=None, **options):
        n_jobs = self.effective_n_jobs(n_jobs)
        if n_jobs == 1:
            raise FallbackToBackend(SequentialBackend(nesting_level=self.nesting_level))
        # Parallel's arguments over parallel_config's, but the context: Parallel passes joblib's default one
        # always, and parallel_config's is the user's choice.
        options = {**self.backend_kwargs, **options}
        if "context" in self.backend_kwargs:
            options["context"] = self.backend_kwargs["context"]
        unknown = sorted(set(options) - _OPTIONS)
        if unknown:
            raise TypeError(f"the mizu backend takes no argument {', '.join(map(repr, unknown))}; it takes "
                            f"{', '.join(sorted(_OPTIONS))}")
        self.parallel, self._options = parallel, options
        self._initializer, self._initargs = options.get("initializer"), tuple(options.get("initargs", ()))
        self._context = options.get("context") or multiprocessing.get_context()
        env = self._prepare_worker_env(n_jobs=n_jobs)
        self._release(kill=False)
        self._workers = _take_pool(n_jobs, env, self._initializer, self._initargs, self._context)
        self._pending = set()
        max_nbytes, mmap_mode = options.get("max_nbytes", 1 << 20), options.get("mmap_mode", "r")
        self._arrays = _LoopArrays(max_nbytes, mmap_mode) if "numpy" in sys.modules else None
        return n_jobs

    def submit(self, func, callback=None):
        future = self._workers.submit(_run_batch, _Batch(func, self._arrays))
        self._pending.add(future)
        future.add_done_callback(self._pending.discard)
        if callback is not None:
            future.add_done_callback(callback)
        return future

    def retrieve_result_callback(self, future):
        try:
            return future.result()
        except CancelledError:
            raise RuntimeError("this loop's tasks were cancelled as it was stopped (an error, a timeout, "
                               "Ctrl-C, or its generator was dropped)") from None

    def _release(self, kill):
        pool, self._workers = self._workers, None
        if pool is None:
            return
        pending, self._pending, self._arrays = self._pending, set(), None
        if kill:
            for future in list(pending):
                future.cancel()
        _give_back(pool, kill)

    def terminate(self):
        # The shared pool stays for the next loop.
        self._release(kill=False)
        self.reset_batch_stats()

    def abort_everything(self, ensure_ready=True):
        self._release(kill=True)
        if ensure_ready:
            self.configure(n_jobs=self.parallel.n_jobs, parallel=self.parallel, **self._options)


def register(joblib_parallel):
    """Register the backend with joblib (its module joblib.parallel), under the name "mizu"."""
    joblib_parallel.register_parallel_backend("mizu", MizuBackend)


# mizu's watch (mizu/__init__.py) imports this module once joblib.parallel
# is loaded; imported first, this module loads joblib.parallel itself.
register(sys.modules["joblib.parallel"])


def shutdown():
    """Shut the backend's pool down, waiting for its tasks; the next call makes another."""
    global _shared
    with _lock:
        found, _shared = _shared, None
    if found is not None:
        found.pool.shutdown(wait=True)
