from typing_extensions import disjoint_base

from mizu._rings import _Ring
from mizu._roster import Roster

__all__ = ["ExitBell", "Watchdog"]

@disjoint_base
class ExitBell:
    def __init__(self, results: _Ring) -> None: ...
    def watch(self, index: int, pid: int) -> None: ...

@disjoint_base
class Watchdog(Roster): ...
