import socket
from collections.abc import Callable
from typing import Any

from mizu._rings import _Ring

__all__ = ["main"]

def main(
    tasks: _Ring,
    results: _Ring,
    channel: socket.socket,
    index: int,
    client_pid: int,
    initializer: Callable[..., object] | None,
    initargs: tuple[Any, ...],
    max_tasks: int | None,
    max_memory: int | None = None,
    by_value: bool = False,
) -> None: ...
