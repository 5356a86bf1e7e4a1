"""mizu: parallelism across processes on one machine, through shared memory."""

# Every public name is imported on first use, each from its module: `import
# mizu` costs about what `import concurrent.futures` costs, the array
# constructors load numpy, the R pool its launcher and R's codec. A program,
# or a worker, that never makes an array or an R pool does not pay for them.
_LAZY = {
    "ProcessPoolExecutor": ("mizu._executor", "ProcessPoolExecutor"),
    "Executor": ("mizu._executor", "ProcessPoolExecutor"),
    "PeerDiedError": ("mizu._core", "PeerDiedError"),
    **{name: ("mizu._insights", name) for name in ["Insights", "SlowTask", "WorkerInsights"]},
    "arena_block": ("mizu._arena", "arena_block"),
    "default_arena": ("mizu._arena", "default_arena"),
    **{name: ("mizu._arrays", name) for name in ["asarray", "empty", "empty_like", "full", "zeros", "zeros_like"]},
    "RExecutor": ("mizu._r.executor", "RExecutor"),
    "RError": ("mizu._r.codec", "RError"),
    "RWarning": ("mizu._r.codec", "RWarning"),
    "WorkerDied": ("mizu._errors", "WorkerDied"),
    "rng": ("mizu._seeds", "rng"),
    "__version__": ("mizu._version", "__version__"),
}

TYPE_CHECKING = False
if TYPE_CHECKING:
    from mizu._arena import arena_block, default_arena
    from mizu._arrays import asarray, empty, empty_like, full, zeros, zeros_like
    from mizu._core import PeerDiedError
    from mizu._errors import WorkerDied
    from mizu._executor import ProcessPoolExecutor
    from mizu._executor import ProcessPoolExecutor as Executor
    from mizu._insights import Insights, SlowTask, WorkerInsights
    from mizu._r.codec import RError, RWarning
    from mizu._r.executor import RExecutor
    from mizu._seeds import rng
    from mizu._version import __version__


def __getattr__(name):
    found = _LAZY.get(name)
    if found is None:
        raise AttributeError(f"module 'mizu' has no attribute {name!r}")
    import importlib

    module, attribute = found
    try:
        value = getattr(importlib.import_module(module), attribute)
    except ImportError as exc:
        import os

        if os.path.exists(os.path.join(os.path.dirname(__file__), "_rings.pyx")):
            raise ImportError(
                "mizu is being imported from its source folder, which holds no compiled "
                "modules. Install it (`pip install .`) and run Python or pytest from "
                "elsewhere, or with `python -P`."
            ) from exc
        raise
    globals()[name] = value
    return value


def __dir__():
    # TYPE_CHECKING is for type checkers (and mypy's stubtest), not a name of mizu's.
    return sorted((set(globals()) | set(_LAZY)) - {"TYPE_CHECKING"})


class _JoblibWatch:
    """Registers joblib's "mizu" backend (mizu._joblib) once joblib.parallel is loaded, without importing joblib.

    A finder first on sys.meta_path: it finds joblib.parallel through the
    finders after it and wraps its loader, which then registers the backend
    as the module is loaded, and steps aside. Any other import costs it a
    comparison. A mizu imported anew (importlib.reload) finds its earlier
    watch by the mark it bears, and takes its place.
    """

    mizu_joblib_watch = True

    @staticmethod
    def find_spec(name, path=None, target=None):
        if name != "joblib.parallel":
            return None
        import sys

        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if getattr(finder, "mizu_joblib_watch", False) or find is None:
                continue
            spec = find(name, path, target)
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _ThenRegister(spec.loader)
                return spec
        return None


class _ThenRegister:
    """A loader that loads joblib.parallel as its own loader does, then registers mizu's backend with it."""

    def __init__(self, loader):
        self.loader = loader

    def __getattr__(self, name):
        if name == "loader":
            raise AttributeError(name)
        return getattr(self.loader, name)

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        # The module keeps its own loader, as if this one had not been.
        module.__loader__ = module.__spec__.loader = self.loader
        self.loader.exec_module(module)
        _register()


def _register():
    import sys

    _stop_watching()
    if "mizu._joblib" in sys.modules:
        # Loaded already, or being loaded (its own imports load
        # joblib.parallel): it registers the backend at its end.
        return
    try:
        import mizu._joblib  # noqa: F401  (registers the backend)
    except Exception as exc:
        import warnings

        warnings.warn(f"mizu could not register its joblib backend ({type(exc).__name__}: {exc}); "
                      f"Parallel(backend='mizu') will not be found", RuntimeWarning, stacklevel=2)


def _stop_watching():
    import sys

    sys.meta_path[:] = [f for f in sys.meta_path if not getattr(f, "mizu_joblib_watch", False)]


def _watch_for_joblib():
    import sys

    _stop_watching()
    if "joblib.parallel" in sys.modules:
        _register()
    else:
        sys.meta_path.insert(0, _JoblibWatch)


_watch_for_joblib()

__all__ = [
    "Executor",
    "Insights",
    "PeerDiedError",
    "ProcessPoolExecutor",
    "RError",
    "RExecutor",
    "RWarning",
    "SlowTask",
    "WorkerDied",
    "WorkerInsights",
    "__version__",
    "arena_block",
    "asarray",
    "default_arena",
    "empty",
    "empty_like",
    "full",
    "rng",
    "zeros",
    "zeros_like",
]
