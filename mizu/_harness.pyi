__all__ = ["pin_process", "pingpong_floor", "pingpong_ring", "stress"]

def pingpong_floor(rounds: int, *, one_line: bool = False, pin: bool = True) -> float: ...
def pingpong_ring(
    rounds: int, msg_size: int = 8, spin_ns: int = 50000, waiter: str | None = None, *, pin: bool = True
) -> float: ...
def pin_process(cpu: int) -> bool: ...
def stress(
    producers: int,
    consumers: int,
    per_producer: int,
    capacity: int = 1024,
    max_message: int = 200,
    waiter: str | None = None,
) -> dict[str, int]: ...
