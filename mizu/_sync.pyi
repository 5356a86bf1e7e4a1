from typing import Any, final

from typing_extensions import disjoint_base

__all__ = ["Fifo", "Lock"]

@disjoint_base
class Lock:
    def __enter__(self) -> Lock: ...
    def __exit__(self, *exc_info: Any) -> None: ...

@final
class Fifo: ...
