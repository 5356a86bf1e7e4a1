import weakref

from mizu._manager import Manager

__all__ = ["pools"]

pools: weakref.WeakSet[Manager]
