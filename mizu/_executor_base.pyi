import asyncio
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
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
def within_reach(limit: int | None) -> int | None: ...

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
    def asubmit(self, fn: Callable[..., _T], /, *args: Any, **kwargs: Any) -> asyncio.Future[_T]: ...
    def amap(
        self,
        fn: Callable[..., _T],
        *iterables: Iterable[Any],
        ordered: bool = True,
        buffersize: int | None = None,
        chunksize: int = 1,
        timeout: float | None = None,
        seed: int | Sequence[int] | None = None,
    ) -> AsyncIterator[_T]: ...
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
    def _task_fn(self, fn: Any) -> Any: ...
    def asubmit(self, fn: Callable[..., _T], /, *args: Any, **kwargs: Any) -> asyncio.Future[_T]: ...
    def _asubmit(
        self,
        fn: Callable[..., _T],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        timeout_ns: int,
        seeds: _Seeds | None,
    ) -> asyncio.Future[_T]: ...
    def amap(
        self,
        fn: Callable[..., _T],
        *iterables: Iterable[Any],
        ordered: bool = True,
        buffersize: int | None = None,
        chunksize: int = 1,
        timeout: float | None = None,
        seed: int | Sequence[int] | None = None,
    ) -> AsyncIterator[_T]: ...
    def _amap(
        self,
        fn: Callable[..., _T],
        iterables: tuple[Iterable[Any], ...],
        ordered: bool,
        buffersize: int | None,
        chunksize: int,
        timeout: float | None,
        timeout_ns: int,
        seeds: _Seeds | None,
    ) -> AsyncIterator[_T]: ...
    def insights(self) -> Insights: ...
    def options(self, *, task_timeout: float | None = ..., seed: int | Sequence[int] | None = None) -> PoolOptions: ...
    def stop(self, future: Future[Any]) -> bool: ...
    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None: ...
