from collections.abc import Callable, Iterable
from typing import Any

from numpy.random import Generator

__all__ = ["SeededCall", "SeededMap", "Seeds", "check_seed", "rng"]

def check_seed(seed: object) -> int | tuple[int, ...]: ...

class Seeds:
    seed: int | tuple[int, ...]
    def __init__(self, seed: object) -> None: ...
    def task(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> tuple[Callable[..., Any], tuple[Any, ...]]: ...
    def map(
        self, fn: Callable[..., Any], iterables: tuple[Iterable[Any], ...]
    ) -> tuple[Callable[..., Any], tuple[Iterable[Any], ...]]: ...

class SeededCall:
    fn: Callable[..., Any]
    entropy: int | tuple[int, ...]
    position: int
    def __init__(self, fn: Callable[..., Any], entropy: int | tuple[int, ...], position: int) -> None: ...
    def __call__(self, /, *args: Any, **kwargs: Any) -> Any: ...

class SeededMap:
    fn: Callable[..., Any]
    entropy: int | tuple[int, ...]
    def __init__(self, fn: Callable[..., Any], entropy: int | tuple[int, ...]) -> None: ...
    def __call__(self, position: int, /, *args: Any) -> Any: ...

def rng() -> Generator: ...
