"""mizu: parallelism across processes on one machine, through shared memory."""


def _require_compiled_modules():
    try:
        from mizu import _core  # noqa: F401  (fails first when run from the source folder)
    except ImportError as exc:  # pragma: no cover - only when run from a source tree
        import os

        if os.path.exists(os.path.join(os.path.dirname(__file__), "_core.pyx")):
            raise ImportError(
                "mizu is being imported from its source folder, which holds no compiled "
                "modules. Install it (`pip install .`) and run Python or pytest from "
                "elsewhere, or with `python -P`."
            ) from exc
        raise


_require_compiled_modules()

from mizu._arena import arena_block, default_arena
from mizu._core import PeerDiedError
from mizu._executor import ProcessPoolExecutor

Executor = ProcessPoolExecutor

# Imported on first use, each from its module: the array constructors load
# numpy, the R pool its launcher and R's codec. A program, or a worker, that
# never makes an array or an R pool does not pay for them.
_LAZY = {
    **dict.fromkeys(["asarray", "empty", "empty_like", "full", "zeros", "zeros_like"], "mizu._arrays"),
    "RExecutor": "mizu._rexecutor",
    "RError": "mizu._rcodec",
    "RWarning": "mizu._rcodec",
}

TYPE_CHECKING = False
if TYPE_CHECKING:
    from mizu._arrays import asarray, empty, empty_like, full, zeros, zeros_like
    from mizu._rcodec import RError, RWarning
    from mizu._rexecutor import RExecutor


def __getattr__(name):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'mizu' has no attribute {name!r}")
    import importlib

    value = globals()[name] = getattr(importlib.import_module(module), name)
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))

__version__ = "0.1.0"

__all__ = [
    "Executor",
    "PeerDiedError",
    "ProcessPoolExecutor",
    "RError",
    "RExecutor",
    "RWarning",
    "__version__",
    "arena_block",
    "asarray",
    "default_arena",
    "empty",
    "empty_like",
    "full",
    "zeros",
    "zeros_like",
]
