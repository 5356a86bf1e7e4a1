from concurrent.futures import Future
from typing import Any, TypeVar

from typing_extensions import disjoint_base

__all__ = ["Cell", "LazyFuture"]

_T = TypeVar("_T")

@disjoint_base
class Cell:
    state: str
    result: Any
    exception: BaseException | None
    condition: Any
    pool: Any

class LazyFuture(Future[_T]):
    def _observed(self) -> None: ...
