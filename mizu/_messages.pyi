import socket
from typing import Any, final

from typing_extensions import Self, disjoint_base

__all__ = [
    "BATCH", "CALL", "CALLABLE", "DECODING", "EXITING", "FLAT", "GONE", "INITIALIZER", "KEYWORDS", "OK", "RAISED",
    "READY", "RETIRING", "SINGLE", "STARTING", "Codec", "PeerCodec", "PeerGone", "Reassembler", "chunks_of",
    "decode_message", "encode_result", "encode_task",
]

BATCH: int
CALL: int
CALLABLE: int
DECODING: int
EXITING: int
FLAT: int
GONE: int
INITIALIZER: int
KEYWORDS: int
OK: int
RAISED: int
READY: int
RETIRING: int
SINGLE: int
STARTING: int
INLINE: int

@disjoint_base
class Codec:
    by_value: bool
    @property
    def language(self) -> str: ...
    @property
    def unbuilt_fails_task(self) -> bool: ...
    def __new__(cls, language: str = "Python") -> Self: ...

class PeerCodec(Codec): ...

class PeerGone(ConnectionError): ...

@final
class Reassembler:
    def feed(self, chunk: bytes) -> bytes | None: ...
    def forget(self, sender: int) -> None: ...
    @property
    def pending(self) -> int: ...

def encode_task(
    task_id: int, fn_id: int, flags: int, value: Any, channel: socket.socket | None = None, codec: Codec | None = None
) -> bytes: ...
def encode_result(
    sender: int, task_id: int, status: int, seconds: float, value: Any, channel: socket.socket | None = None
) -> bytes: ...
def decode_message(message: bytes, channel: socket.socket | None = None) -> tuple[str, dict[str, Any], Any]: ...
def chunks_of(message: bytes, sender: int, limit: int) -> list[bytes]: ...
