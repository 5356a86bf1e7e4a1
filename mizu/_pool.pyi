from typing import Any

from mizu._collect import Future
from mizu._launchers import Launcher
from mizu._manager import Manager, _python_exit

from typing_extensions import disjoint_base

__all__ = ["Future", "Pool"]

@disjoint_base
class Pool(Manager):
    seeds: Any
    def __init__(self, max_workers: int, launcher: Launcher, max_tasks: int | None) -> None: ...
