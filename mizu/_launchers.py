"""How a worker process starts: the protocol every launcher follows, and the launcher of Python workers.

The pool engine (mizu._pool) starts every worker through the launcher it is
given, and knows nothing else of how. Each kind of worker has one: Python
workers `MultiprocessingLauncher`, R workers mizu._r.launcher.RLauncher.
"""

from __future__ import annotations

import os
import socket
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from mizu._messages import Codec
from mizu._pickler import ByValue
from mizu._worker import main as _worker_main

if TYPE_CHECKING:
    from multiprocessing.process import BaseProcess

    from mizu._rings import _Ring

__all__ = ["Launcher", "MultiprocessingLauncher"]


@runtime_checkable
class Launcher(Protocol):
    """What the pool engine asks of a kind of worker: how to start one, and how it takes values.

    Attributes
    ----------
    codec : mizu._messages.Codec
        How this kind of worker takes values and what its answers mean.
    on_demand : bool
        Workers start one per task that finds none idle, rather than all
        at once.
    paced : bool
        Those starts may be paced a few at a time
        (mizu._pool.Pool.start_deferred).
    starting_hint : str
        What most often kills a worker of this kind before its first task,
        for the pool's error messages; or "".
    setup_name : str
        What runs in a worker before its first task ("initializer"), for
        the pool's error messages.
    safe_with_threads : bool
        A worker may start while the pool runs threads (not so with fork):
        the controls that replace a worker while the pool runs need it
        (mizu._control).
    """

    codec: Codec
    on_demand: bool
    paced: bool
    starting_hint: str
    setup_name: str
    safe_with_threads: bool

    def launch(self, index: int, tasks: _Ring, results: _Ring) -> tuple[BaseProcess, socket.socket]:
        """Start worker `index`, which pops its tasks from the ring `tasks` and pushes its results to `results`.

        Returns
        -------
        process
            A handle with the part of multiprocessing.Process's API that
            the engine and the stdlib's private ``_processes`` use (pid,
            name, exitcode, join, terminate, kill, is_alive).
        channel : socket.socket
            The client's end of a Unix socket pair shared with the worker,
            which carries the descriptors of shared-memory segments that
            messages' arrays live in (doc/dev/messages.rst).
        """


class MultiprocessingLauncher:
    """Starts Python workers as processes of a multiprocessing context, as the stdlib's pool does.

    Parameters
    ----------
    context : multiprocessing context
        Starts the processes, with its start method.
    initializer, initargs, max_tasks
        The Executor's: each worker calls ``initializer(*initargs)`` first
        and retires after `max_tasks` tasks (None: never).
    max_memory : int or None
        Bytes a worker may hold resident after a task; above them it retires.
    by_value : bool
        Pickle by value the functions and classes of tasks, and the
        initializer, that pickle would name (mizu._pickler).
    """

    def __init__(self, context, initializer, initargs, max_tasks, by_value=False, max_memory=None):
        self.codec = Codec()
        self.codec.by_value = by_value
        self.setup_name = "initializer"
        self.context = context
        if by_value and initializer is not None:
            initializer = ByValue(initializer)
        self.initializer, self.initargs, self.max_tasks = initializer, initargs, max_tasks
        self.max_memory = max_memory
        method = context.get_start_method(allow_none=False)
        # The stdlib's rule: fork starts every worker at once; spawn and
        # forkserver, one whenever a task finds no idle worker.
        self.on_demand = method != "fork"
        self.safe_with_threads = method != "fork"
        # An initializer may wait (on a network, a lock) rather than compute:
        # its workers all start at once, as the stdlib's do.
        self.paced = self.on_demand and initializer is None
        self.preload = method == "forkserver"
        # The commonest cause of a worker dying before its first task.
        self.starting_hint = "" if method == "fork" else (
            "a worker started with spawn or forkserver first imports the main module: does it start its pools "
            "under `if __name__ == \"__main__\":`?")

    def launch(self, index, tasks, results):
        """Start worker `index` on the rings tasks and results; (its multiprocessing.Process, the client's channel)."""
        if self.preload:
            # Where the forkserver will look, which is where the program is now.
            self.preload = False
            _preload_in_forkserver(self.context)
        channel, worker_end = socket.socketpair()
        process = self.context.Process(
            target=_worker_main,
            args=(tasks, results, worker_end, index, os.getpid(), self.initializer, self.initargs, self.max_tasks,
                  self.max_memory, self.codec.by_value),
            name=f"mizu-worker-{index}")
        try:
            process.start()
        except BaseException:
            channel.close()
            raise
        finally:
            worker_end.close()
        return process, channel


def _preload_in_forkserver(context):
    """Have the forkserver import mizu's worker code before it forks any worker.

    The forkserver imports its preload modules once, when it starts; a
    worker forked from it then starts with mizu loaded instead of importing
    it again (its main module's ``import mizu`` included: the stdlib's
    preload of ``__main__`` has no effect before Python 3.14). Once the
    forkserver runs, a new preload takes effect only if it is restarted,
    which mizu leaves to the program.

    The forkserver imports with its own sys.path (the current directory,
    then the interpreter's), not the program's, so mizu is preloaded only
    where that finds this very mizu: installed in site-packages, and not
    shadowed by a folder of the current directory (a source tree).
    """
    import importlib.machinery
    import site
    import sys
    from multiprocessing import forkserver

    modules = getattr(getattr(forkserver, "_forkserver", None), "_preload_modules", None)
    if not isinstance(modules, list) or "mizu._worker" in modules:
        return
    ours = os.path.dirname(os.path.abspath(sys.modules["mizu"].__file__))
    found = importlib.machinery.PathFinder.find_spec("mizu", [os.getcwd(), *sys.path])
    installed = [*getattr(site, "getsitepackages", list)(), getattr(site, "getusersitepackages", str)()]
    if (found is None or found.submodule_search_locations is None
            or [os.path.abspath(p) for p in found.submodule_search_locations] != [ours]
            or not any(os.path.abspath(p) == os.path.dirname(ours) for p in installed)):
        return
    context.set_forkserver_preload([*modules, "mizu._worker"])
