from typing import Any, TypeVar

from mizu._failures import Watchdog
from mizu._future import LazyFuture
from mizu._messages import Codec
from mizu._sync import Lock

from typing_extensions import disjoint_base

__all__ = ["Collector", "Future"]

_T = TypeVar("_T")

class Future(LazyFuture[_T]):
    def result(self, timeout: float | None = None) -> _T: ...
    def exception(self, timeout: float | None = None) -> BaseException | None: ...

@disjoint_base
class Collector(Watchdog):
    @property
    def codec(self) -> Codec: ...
    @property
    def recv_lock(self) -> Lock: ...
    @property
    def recv_owner(self) -> int: ...
    @property
    def collecting(self) -> int: ...
    @property
    def reassembler(self) -> Any: ...
    @property
    def watched(self) -> int: ...
    def collect_now(self) -> None: ...
    task_seconds: float
    depth: int
