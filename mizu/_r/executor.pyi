import os
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import Executor, Future
from typing import Any

from mizu._executor_base import ExecutorBase

__all__ = ["RExecutor"]

class RExecutor(ExecutorBase, Executor):
    def __init__(
        self,
        max_workers: int | None = None,
        *,
        setup: str | os.PathLike[str] | None = None,
        max_tasks_per_child: int | None = None,
        rscript: str | os.PathLike[str] | None = None,
    ) -> None: ...
    def submit(self, fn: str, /, *args: Any, **kwargs: Any) -> Future[Any]: ...  # type: ignore[override]
    def map(  # type: ignore[override]
        self,
        fn: str,
        *iterables: Iterable[Any],
        timeout: float | None = None,
        chunksize: int = 1,
        buffersize: int | None = None,
        progress: bool | Mapping[str, Any] | None = False,
    ) -> Iterator[Any]: ...
