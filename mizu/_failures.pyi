from mizu._roster import Roster

__all__ = ["Watchdog"]

class Watchdog(Roster): ...
