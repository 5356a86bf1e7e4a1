from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from typing import Any

from typing_extensions import disjoint_base

from mizu._pool import Pool

__all__ = ["MapResults", "batch_values", "check_ordered", "map_results", "planned"]

@disjoint_base
class MapResults(Iterator[Any]):
    def __new__(cls, batches: Iterator[list[Any]]) -> MapResults: ...
    def __iter__(self) -> MapResults: ...
    def __next__(self) -> Any: ...
    def close(self) -> None: ...

def map_results(
    pool: Pool,
    fn: Callable[..., object],
    iterables: Sequence[Iterable[Any]],
    timeout: float | None,
    chunksize: int,
    buffersize: int | None,
    workers: int,
    progress: bool | Mapping[str, Any] | None = False,
    timeout_ns: int = -1,
    ordered: bool = True,
) -> MapResults: ...

def check_ordered(ordered: object) -> None: ...
def planned(
    pool: Pool,
    fn: Callable[..., object],
    iterables: Sequence[Iterable[Any]],
    chunksize: int,
    buffersize: int | None,
    workers: int,
    timeout_ns: int = -1,
    ordered: bool = True,
) -> tuple[Iterator[list[Any]], bool, int | None, Callable[..., Future[Any]]]: ...
def batch_values(outcome: tuple[list[Any], list[tuple[int, BaseException]]], flat: bool) -> tuple[list[Any], BaseException | None]: ...
