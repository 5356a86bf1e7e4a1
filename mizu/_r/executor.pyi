import os
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import Executor, Future
from typing import Any, Literal

from mizu._executor_base import ExecutorBase
from mizu._r.streams import Streams

__all__ = ["RExecutor"]

class RExecutor(ExecutorBase, Executor):
    def __init__(
        self,
        max_workers: int | None = None,
        *,
        setup: str | os.PathLike[str] | None = None,
        max_tasks_per_child: int | None = None,
        rscript: str | os.PathLike[str] | None = None,
        task_timeout: float | None = None,
        worker_death: Literal["break", "replace"] = "break",
        max_worker_memory: int | None = None,
        seed: int | None = None,
    ) -> None: ...
    def _task_fn(self, fn: str) -> str: ...
    def _submit(
        self, fn: str, args: tuple[Any, ...], kwargs: dict[str, Any], timeout_ns: int, seeds: Streams | None
    ) -> Future[Any]: ...
    @staticmethod
    def _seeds_of(seed: int | None, inherited: Streams | None = None) -> Streams | None: ...
    def _map(
        self,
        fn: str,
        iterables: tuple[Iterable[Any], ...],
        timeout: float | None,
        chunksize: int,
        buffersize: int | None,
        progress: bool | Mapping[str, Any] | None,
        timeout_ns: int = -1,
        seeds: Streams | None = None,
        ordered: bool = True,
    ) -> Iterator[Any]: ...
    def submit(self, fn: str, /, *args: Any, **kwargs: Any) -> Future[Any]: ...  # type: ignore[override]
    def map(  # type: ignore[override]
        self,
        fn: str,
        *iterables: Iterable[Any],
        timeout: float | None = None,
        chunksize: int = 1,
        buffersize: int | None = None,
        ordered: bool = True,
        progress: bool | Mapping[str, Any] | None = False,
        seed: int | None = None,
    ) -> Iterator[Any]: ...
