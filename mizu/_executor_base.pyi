from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Future
from typing import Any, TypeVar

from mizu._insights import Insights
from mizu._launchers import Launcher
from mizu._pool import Pool

__all__ = ["ExecutorBase", "PoolOptions", "check_controls", "check_max_tasks", "checked_workers"]

_T = TypeVar("_T")

def checked_workers(max_workers: int | None, default: Callable[[], int]) -> int: ...
def check_max_tasks(max_tasks_per_child: int | None) -> None: ...
def check_controls(task_timeout: float | None, worker_death: str, max_worker_memory: int | None) -> None: ...

class PoolOptions:
    def __init__(self, executor: ExecutorBase, timeout_ns: int) -> None: ...
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
    ) -> None: ...
    def insights(self) -> Insights: ...
    def options(self, *, task_timeout: float | None = None) -> PoolOptions: ...
    def stop(self, future: Future[Any]) -> bool: ...
    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None: ...
