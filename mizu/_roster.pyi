import socket
import threading
from collections import deque
from collections.abc import Callable
from multiprocessing.process import BaseProcess
from typing import Any

from mizu._core import MpmcRing, PeerWatch, Segment, SpscRing
from mizu._launchers import Launcher
from mizu._messages import Codec
from mizu._observers import ProgressBars, WorkFigures
from mizu._sync import Fifo, Lock

from typing_extensions import disjoint_base

__all__ = ["Roster", "Worker"]

@disjoint_base
class Worker:
    @property
    def index(self) -> int: ...
    @property
    def ring(self) -> SpscRing | None: ...
    @property
    def outbox(self) -> deque[bytes]: ...
    @property
    def in_flight(self) -> Fifo: ...
    @property
    def registered(self) -> dict[Callable[..., object], int]: ...
    process: BaseProcess | None
    watch: PeerWatch | None
    channel: socket.socket | None
    failure: tuple[int, str] | None
    started_tasks: int
    popped_at_start: int
    up: bool
    starting: bool
    def __init__(self, index: int, ring: SpscRing) -> None: ...

@disjoint_base
class Roster:
    @property
    def launcher(self) -> Launcher: ...
    @property
    def max_tasks(self) -> int | None: ...
    @property
    def segment(self) -> Segment | None: ...
    @property
    def results(self) -> MpmcRing | None: ...
    @property
    def roster(self) -> list[Worker]: ...
    @property
    def workers(self) -> list[Worker]: ...
    @property
    def on_demand(self) -> bool: ...
    @property
    def idle(self) -> deque[None]: ...
    @property
    def state_lock(self) -> Any: ...
    @property
    def pending(self) -> Fifo: ...
    @property
    def send_lock(self) -> Lock: ...
    @property
    def feeding(self) -> set[Worker]: ...
    broken: str | None
    shutting_down: bool
    started: bool
    @property
    def collected(self) -> str | None: ...
    forced: bool
    @property
    def figures(self) -> WorkFigures: ...
    @property
    def bars(self) -> ProgressBars: ...
    def __init__(self, max_workers: int, launcher: Launcher, max_tasks: int | None) -> None: ...
