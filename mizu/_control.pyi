from concurrent.futures import Future

from mizu._collect import Collector

__all__ = ["Controller"]

class Controller(Collector):
    def stop(self, future: Future[object]) -> bool: ...
