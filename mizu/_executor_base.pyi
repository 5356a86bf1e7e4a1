from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from typing import Any, Protocol, TypeVar

from mizu._insights import Insights
from mizu._launchers import Launcher
from mizu._pool import Pool

__all__ = ["ExecutorBase", "PoolOptions", "check_controls", "check_max_tasks", "checked_workers"]

_T = TypeVar("_T")

class _Seeds(Protocol):
    # mizu._seeds.Seeds or mizu._r.streams.Streams
    seed: int | tuple[int, ...]
    def task(self, fn: Any, args: tuple[Any, ...]) -> tuple[Any, tuple[Any, ...]]: ...
    def map(self, fn: Any, iterables: tuple[Iterable[Any], ...]) -> tuple[Any, tuple[Iterable[Any], ...]]: ...

def checked_workers(max_workers: int | None, default: Callable[[], int]) -> int: ...
def check_max_tasks(max_tasks_per_child: int | None) -> None: ...
def check_controls(task_timeout: float | None, worker_death: str, max_worker_memory: int | None) -> None: ...

class PoolOptions:
    def __init__(self, executor: ExecutorBase, timeout_ns: int, seeds: _Seeds | None) -> None: ...
    def submit(self, fn: Callable[..., _T], /, *args: Any, **kwargs: Any) -> Future[_T]: ...
    def map(
        self,
        fn: Callable[..., _T],
        *iterables: Iterable[Any],
        timeout: float | None = None,
        chunksize: int = 1,
        buffersize: int | None = None,
        ordered: bool = True,
        progress: bool | Mapping[str, Any] | None = False,
        seed: int | Sequence[int] | None = None,
    ) -> Iterator[_T]: ...
    def options(self, **controls: Any) -> PoolOptions: ...
    def __getattr__(self, name: str) -> Any: ...

class ExecutorBase:
    _max_workers: int
    _pool: Pool
    def _start_pool(
        self,
        max_workers: int,
        launcher: Launcher,
        max_tasks_per_child: int | None,
        task_timeout: float | None = None,
        worker_death: str = "break",
        seeds: _Seeds | None = None,
    ) -> None: ...
    def insights(self) -> Insights: ...
    def options(self, *, task_timeout: float | None = None, seed: int | Sequence[int] | None = None) -> PoolOptions: ...
    def stop(self, future: Future[Any]) -> bool: ...
    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None: ...
