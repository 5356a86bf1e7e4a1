"""How a worker process starts: one launcher per kind of worker.

The pool engine (mizu._pool) starts every worker through the launcher it is
given, and knows nothing else of how. ``launch(index, tasks, results)``
starts worker `index`, which pops its tasks from the ring
`tasks` and pushes its results to the ring `results`, and returns
``(process, channel)``: a handle with the part of multiprocessing.Process's
API that the engine and the stdlib's private ``_processes`` use (pid, name,
exitcode, join, terminate, kill, is_alive), and the client's end of a Unix
socket pair shared with the worker, which carries the descriptors of
shared-memory segments that messages' arrays live in (doc/dev/messages.rst).

A worker of another language (an ``Rscript`` started with subprocess and
inherited descriptors) is another launcher with the same three members.
"""

import os
import socket

from mizu._messages import Codec
from mizu._worker import main as _worker_main


class MultiprocessingLauncher:
    """Starts Python workers as processes of a multiprocessing context, as the stdlib's pool does.

    Parameters
    ----------
    context : multiprocessing context
        Starts the processes, with its start method.
    initializer, initargs, max_tasks
        The Executor's: each worker calls ``initializer(*initargs)`` first
        and retires after `max_tasks` tasks (None: never).
    """

    def __init__(self, context, initializer, initargs, max_tasks):
        self.codec = Codec()
        self.context = context
        self.initializer, self.initargs, self.max_tasks = initializer, initargs, max_tasks
        method = context.get_start_method(allow_none=False)
        # The stdlib's rule: fork starts every worker at once; spawn and
        # forkserver, one whenever a task finds no idle worker.
        self.on_demand = method != "fork"
        # The commonest cause of a worker dying before its first task.
        self.starting_hint = "" if method == "fork" else (
            "a worker started with spawn or forkserver first imports the main module: does it start its pools "
            "under `if __name__ == \"__main__\":`?")

    def launch(self, index, tasks, results):
        """Start worker `index` on the rings tasks and results; (its multiprocessing.Process, the client's channel)."""
        channel, worker_end = socket.socketpair()
        process = self.context.Process(
            target=_worker_main,
            args=(tasks, results, worker_end, index, os.getpid(), self.initializer, self.initargs, self.max_tasks),
            name=f"mizu-worker-{index}")
        try:
            process.start()
        except BaseException:
            channel.close()
            raise
        finally:
            worker_end.close()
        return process, channel
