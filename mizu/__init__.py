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

# The array constructors load numpy, so they are imported on first use: a
# program, or a worker, that never makes an array does not pay for it.
_ARRAY_CONSTRUCTORS = frozenset(["asarray", "empty", "empty_like", "full", "zeros", "zeros_like"])

TYPE_CHECKING = False
if TYPE_CHECKING:
    from mizu._arrays import asarray, empty, empty_like, full, zeros, zeros_like


def __getattr__(name):
    if name in _ARRAY_CONSTRUCTORS:
        from mizu import _arrays

        value = globals()[name] = getattr(_arrays, name)
        return value
    raise AttributeError(f"module 'mizu' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | _ARRAY_CONSTRUCTORS)

__version__ = "0.1.0"

__all__ = [
    "Executor",
    "PeerDiedError",
    "ProcessPoolExecutor",
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
