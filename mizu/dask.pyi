from typing import Literal

from distributed import Worker, WorkerPlugin

__all__ = ["WorkerPool", "dask_setup"]

class WorkerPool(WorkerPlugin):
    name: str
    max_workers: int | None
    start_method: Literal["fork", "forkserver", "spawn"] | None
    by_value: bool
    max_tasks_per_child: int | None
    executor: str
    def __init__(
        self,
        max_workers: int | None = None,
        *,
        start_method: Literal["fork", "forkserver", "spawn"] | None = None,
        by_value: bool = True,
        max_tasks_per_child: int | None = None,
        executor: str = "default",
    ) -> None: ...
    def setup(self, worker: Worker) -> None: ...
    async def teardown(self, worker: Worker) -> None: ...  # type: ignore[override]

async def dask_setup(worker: Worker) -> None: ...
