from typing import Any, Protocol

from mizu._insights import Insights

from typing_extensions import disjoint_base

__all__ = ["Observer", "ProgressBars", "SentByValue", "WorkFigures"]

class _Counter(Protocol):
    def add(self, calls: int) -> None: ...
    def close(self) -> None: ...

@disjoint_base
class Observer: ...

@disjoint_base
class WorkFigures(Observer):
    def __init__(self, roster: list[Any]) -> None: ...
    def workers(self) -> list[tuple[int, int | None, int, float, float, float]]: ...
    def insights(self) -> Insights: ...

@disjoint_base
class ProgressBars(Observer):
    def __init__(self) -> None: ...
    @property
    def counters(self) -> dict[Any, _Counter]: ...

@disjoint_base
class SentByValue(Observer):
    def __init__(self, max_workers: int) -> None: ...
