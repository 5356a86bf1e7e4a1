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

import os
import threading

from joblib._parallel_backends import AutoBatchingMixin, FallbackToBackend, ParallelBackendBase, SequentialBackend

from mizu._errors import call_repr
from mizu._executor import ProcessPoolExecutor

# What Parallel and parallel_config pass on to a backend that the mizu backend takes: the initializer,
# the multiprocessing context (its start method), and joblib's memmapping options, which arrays crossing
# through shared memory leave with nothing to do.
_OPTIONS = {"initializer", "initargs", "context", "max_nbytes", "mmap_mode", "temp_folder", "verbose"}

_lock = threading.Lock()
_shared = None   # (what the pool was made for, the pool)


def _start_worker(env, initializer, initargs):
    """A worker's first call: the thread limits joblib asks of its workers, then the user's initializer."""
    os.environ.update(env)
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        pass
    else:
        # The libraries that a forked worker has loaded already read the environment.
        threadpool_limits(int(env["OMP_NUM_THREADS"]))
    if initializer is not None:
        initializer(*initargs)


class _Batch:
    """A joblib batch (a BatchedCalls), shown by its calls: a dead worker's error names them."""

    __slots__ = ("calls",)

    def __init__(self, calls):
        self.calls = calls

    def __reduce__(self):
        return _Batch, (self.calls,)

    def __repr__(self):
        items = self.calls.items
        shown = ", ".join(call_repr(fn, args, kwargs) for fn, args, kwargs in items[:3])
        return f"[{shown}{', ...' if len(items) > 3 else ''}]"


def _run_batch(batch):
    return batch.calls()


def _same(a, b):
    try:
        return bool(a == b)
    except Exception:
        return a is b


def _pool_for(n_jobs, env, initializer, initargs, context):
    """The shared pool, made anew unless the one there is whole and was made for the same arguments."""
    global _shared
    wanted = (n_jobs, env, initializer, initargs, context.get_start_method())
    with _lock:
        if _shared is not None:
            made_for, pool = _shared
            if (not pool._broken and not pool._pool.shutting_down and made_for[0] == n_jobs and made_for[1] == env
                    and made_for[2] is initializer and _same(made_for[3], initargs) and made_for[4] == wanted[4]):
                return pool
            pool.shutdown(wait=False)
        pool = ProcessPoolExecutor(n_jobs, mp_context=context, initializer=_start_worker,
                                   initargs=(env, initializer, initargs), by_value=True)
        _shared = (wanted, pool)
        return pool


def _discard(pool):
    """Kill the pool's workers, whatever they run, and forget it."""
    global _shared
    with _lock:
        if _shared is not None and _shared[1] is pool:
            _shared = None
    pool._pool.force_shutdown("kill")


class MizuBackend(AutoBatchingMixin, ParallelBackendBase):
    """joblib's backend on a mizu pool: ``parallel_config(backend="mizu")``.

    Like loky's: ``n_jobs`` is 1 by default (then the loop runs in the
    caller), -1 is every CPU and -2 all but one; tasks are batched
    automatically; functions, lambdas and closures pickle by value; a
    worker's BLAS and OpenMP use ``cpu_count() // n_jobs`` threads unless
    ``inner_max_num_threads`` says otherwise. Unlike loky's, arrays go to
    the workers and back through mizu's shared memory, so ``max_nbytes``,
    ``mmap_mode`` and ``temp_folder`` have nothing to do and are ignored.
    """

    supports_retrieve_callback = True
    supports_inner_max_num_threads = True
    uses_threads = False
    supports_sharedmem = False

    def __init__(self, nesting_level=None, inner_max_num_threads=None, **backend_kwargs):
        super().__init__(nesting_level=nesting_level, inner_max_num_threads=inner_max_num_threads, **backend_kwargs)
        self._workers = None

    def effective_n_jobs(self, n_jobs):
        if n_jobs == 0:
            raise ValueError("n_jobs == 0 in Parallel has no meaning")
        if n_jobs is None:
            return 1
        if n_jobs < 0:
            return max((os.cpu_count() or 1) + 1 + n_jobs, 1)
        return n_jobs

    def configure(self, n_jobs=1, parallel=None, prefer=None, require=None, **options):
        n_jobs = self.effective_n_jobs(n_jobs)
        if n_jobs == 1:
            raise FallbackToBackend(SequentialBackend(nesting_level=self.nesting_level))
        import multiprocessing

        # Parallel's arguments over parallel_config's.
        options = {**self.backend_kwargs, **options}
        unknown = sorted(set(options) - _OPTIONS)
        if unknown:
            raise TypeError(f"the mizu backend takes no argument {', '.join(map(repr, unknown))}; it takes "
                            f"{', '.join(sorted(_OPTIONS))}")
        self.parallel = parallel
        self._initializer, self._initargs = options.get("initializer"), tuple(options.get("initargs", ()))
        self._context = options.get("context") or multiprocessing.get_context()
        env = self._prepare_worker_env(n_jobs=n_jobs)
        self._workers = _pool_for(n_jobs, env, self._initializer, self._initargs, self._context)
        return n_jobs

    def submit(self, func, callback=None):
        future = self._workers.submit(_run_batch, _Batch(func))
        if callback is not None:
            future.add_done_callback(callback)
        return future

    def retrieve_result_callback(self, future):
        return future.result()

    def terminate(self):
        # The pool stays for the next call.
        self._workers = None
        self.reset_batch_stats()

    def abort_everything(self, ensure_ready=True):
        if self._workers is not None:
            _discard(self._workers)
            self._workers = None
        if ensure_ready:
            self.configure(n_jobs=self.parallel.n_jobs, parallel=self.parallel, initializer=self._initializer,
                           initargs=self._initargs, context=self._context)


def register(joblib_parallel):
    """Register the backend with joblib (its module joblib.parallel), under the name "mizu"."""
    joblib_parallel.register_parallel_backend("mizu", MizuBackend)


def shutdown():
    """Shut the backend's pool down, waiting for its tasks; the next call makes another."""
    global _shared
    with _lock:
        found, _shared = _shared, None
    if found is not None:
        found[1].shutdown(wait=True)
