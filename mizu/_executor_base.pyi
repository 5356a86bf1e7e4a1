from collections.abc import Callable

from mizu._insights import Insights
from mizu._launchers import Launcher
from mizu._pool import Pool

__all__ = ["ExecutorBase", "check_max_tasks", "checked_workers"]

def checked_workers(max_workers: int | None, default: Callable[[], int]) -> int: ...
def check_max_tasks(max_tasks_per_child: int | None) -> None: ...

class ExecutorBase:
    _max_workers: int
    _pool: Pool
    def _start_pool(self, max_workers: int, launcher: Launcher, max_tasks_per_child: int | None) -> None: ...
    def insights(self) -> Insights: ...
    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None: ...
