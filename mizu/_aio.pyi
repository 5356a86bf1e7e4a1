import asyncio
import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from typing import Any, Protocol, TypeVar

from mizu._amap import AsyncMapResults
from mizu._pool import Pool

__all__ = ["amap_results", "running_bridge", "submit_awaitable"]

_T = TypeVar("_T")

class _Receiver(Protocol):
    def deliver(self) -> None: ...

class Bridge:
    loop: asyncio.AbstractEventLoop
    thread: int
    lock: threading.Lock
    batch: list[_Receiver]
    pool: Pool | None
    unwatched: list[Awaited[Any]]
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None: ...
    def watch(self, awaited: Awaited[Any]) -> None: ...
    def watch_all(self) -> None: ...
    def collect(self) -> None: ...
    def post(self, receiver: _Receiver) -> None: ...
    def drain(self) -> None: ...

def running_bridge() -> Bridge: ...

class Awaited(asyncio.Future[_T]):
    def cancel(self, msg: Any | None = None) -> bool: ...
    def settled(self, call: Future[_T]) -> None: ...
    def deliver(self) -> None: ...

def submit_awaitable(bridge: Bridge, call: Future[_T], pool: Pool) -> Awaited[_T]: ...

class Completions:
    bridge: Bridge
    keep: bool
    lock: threading.Lock
    settled: list[Future[Any]]
    posted: bool
    waiter: asyncio.Future[None] | None
    def __init__(self, bridge: Bridge, keep: bool) -> None: ...
    def add(self, future: Future[Any]) -> None: ...
    def deliver(self) -> None: ...
    def take(self) -> list[Future[Any]]: ...
    async def wait(self, end_time: float | None) -> None: ...

def amap_results(
    pool: Pool,
    fn: Callable[..., object],
    iterables: Sequence[Iterable[Any]],
    ordered: bool,
    buffersize: int | None,
    chunksize: int,
    timeout: float | None,
    workers: int,
    timeout_ns: int = -1,
) -> AsyncMapResults: ...
