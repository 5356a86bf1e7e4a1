import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from concurrent.futures import ProcessPoolExecutor as _StdlibProcessPoolExecutor
from multiprocessing.context import BaseContext
from multiprocessing.process import BaseProcess
from threading import RLock, Thread
from typing import Any, Literal, ParamSpec, TypeVar

from mizu._executor_base import ExecutorBase
from mizu._seeds import Seeds

__all__ = ["ProcessPoolExecutor"]

_T = TypeVar("_T")
_P = ParamSpec("_P")

class ProcessPoolExecutor(ExecutorBase, _StdlibProcessPoolExecutor):
    _mp_context: BaseContext
    # The stdlib's are attributes its pool writes; these are read-only views of mizu's pool.
    @property
    def _processes(self) -> dict[int, BaseProcess] | None: ...  # type: ignore[override]
    @property
    def _executor_manager_thread(self) -> Thread | None: ...  # type: ignore[override]
    @property
    def _broken(self) -> str | bool: ...  # type: ignore[override]
    @property
    def _shutdown_lock(self) -> RLock: ...  # type: ignore[override]
    @property
    def _force_shutting_down(self) -> bool: ...
    @_force_shutting_down.setter
    def _force_shutting_down(self, value: bool) -> None: ...
    def __init__(
        self,
        max_workers: int | None = None,
        mp_context: BaseContext | None = None,
        initializer: Callable[..., object] | None = None,
        initargs: tuple[Any, ...] = (),
        *,
        max_tasks_per_child: int | None = None,
        by_value: bool | None = None,
        task_timeout: float | None = None,
        worker_death: Literal["break", "replace"] = "break",
        max_worker_memory: int | None = None,
        seed: int | Sequence[int] | None = None,
    ) -> None: ...
    def submit(self, fn: Callable[_P, _T], /, *args: _P.args, **kwargs: _P.kwargs) -> Future[_T]: ...
    def _submit(
        self, fn: Callable[..., _T], args: tuple[Any, ...], kwargs: dict[str, Any], timeout_ns: int, seeds: Seeds | None
    ) -> Future[_T]: ...
    @staticmethod
    def _seeds_of(seed: int | Sequence[int] | None, inherited: Seeds | None = None) -> Seeds | None: ...
    def _map(
        self,
        fn: Callable[..., _T],
        iterables: tuple[Iterable[Any], ...],
        timeout: float | None,
        chunksize: int,
        buffersize: int | None,
        progress: bool | Mapping[str, Any] | None,
        timeout_ns: int = -1,
        seeds: Seeds | None = None,
        ordered: bool = True,
    ) -> Iterator[_T]: ...
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
    if sys.version_info >= (3, 14):
        def terminate_workers(self) -> None: ...
        def kill_workers(self) -> None: ...
        def _force_shutdown(self, operation: str) -> None: ...
