from mizu._collect import Future
from mizu._manager import Manager, _python_exit
from mizu._roster import _Launcher

__all__ = ["Future", "Pool"]

class Pool(Manager):
    def __init__(self, max_workers: int, launcher: _Launcher, max_tasks: int | None) -> None: ...
