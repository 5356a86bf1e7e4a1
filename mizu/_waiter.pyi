__all__: list[str] = []

_BACKEND_NAMES: dict[int, str]

def _backend(waiter: str | None) -> int: ...
