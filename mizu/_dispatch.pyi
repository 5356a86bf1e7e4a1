from collections.abc import Callable
from concurrent.futures import Future as _StdlibFuture
from typing import Any

from mizu._control import Controller
from mizu._observers import _Counter

from typing_extensions import disjoint_base

__all__ = ["Dispatcher"]

@disjoint_base
class Dispatcher(Controller):
    @property
    def ref(self) -> Any: ...
    def submit(
        self,
        kind: int,
        fn: Callable[..., object],
        first: Any,
        second: Any,
        calls: int,
        counter: _Counter | None = None,
        timeout_ns: int = -1,
    ) -> _StdlibFuture[Any]: ...
