from collections.abc import Iterable, Mapping
from typing import Any

from mizu._messages import PeerCodec

__all__ = ["RCodec", "RError", "RWarning", "error_from_record"]

class RError(Exception):
    message: str
    call: str | None
    classes: tuple[str, ...]
    traceback: tuple[str, ...]
    def __init__(
        self, message: str, call: str | None = None, classes: Iterable[str] = (), traceback: Iterable[str] = ()
    ) -> None: ...

class RWarning(UserWarning): ...

def error_from_record(record: Mapping[str, Any]) -> Exception: ...

class RCodec(PeerCodec): ...
