"""How a worker process starts: the protocol every launcher follows, and the launcher of Python workers.

The pool engine (mizu._pool) starts every worker through the launcher it is
given, and knows nothing else of how. Each kind of worker has one: Python
workers `MultiprocessingLauncher`, R workers mizu._r.launcher.RLauncher.
"""

from __future__ import annotations

import multiprocessing
import os
import select
import signal
import socket
import threading
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from mizu._liveness import PeerWatch
from mizu._messages import Codec
from mizu._pickler import ByValue
from mizu._worker import main as _worker_main

if TYPE_CHECKING:
    from multiprocessing.process import BaseProcess

    from mizu._rings import _Ring

__all__ = ["KeepsSpare", "Launcher", "MultiprocessingLauncher"]


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

    def launch(self, index: int, tasks: _Ring, results: _Ring,
               rings: list[_Ring] | None = None) -> tuple[BaseProcess, socket.socket]:
        """Start worker `index`, which pops its tasks from the ring `tasks` and pushes its results to `results`.

        `rings`, the task rings of the whole roster, is given while the
        pool wants a spare (see keep_spare): a launch that takes the spare
        starts the next one on them at once, before the one it took has
        finished starting, so that deaths coming faster than a process
        starts each find one further on.

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

    def keep_spare(self, rings: list[_Ring], results: _Ring) -> None:
        """Have a process ready to be the next worker launched, so that it starts sooner; return at once.

        The pool asks for one once a worker was replaced (mizu._control):
        it will likely replace another. `rings` are the task rings of the
        whole roster, in its order. A launcher may do nothing.
        """

    def close(self) -> None:
        """End what keep_spare started and nothing took; keep no spare from now on."""


class KeepsSpare:
    """A launcher's spare (Launcher.keep_spare): a process started ahead, which waits for its index on its socket.

    A subclass starts its processes with start_worker(index, tasks,
    results), a worker at once, and start_spare(rings, results), a process
    that reads the index of the worker it is to be, 4 bytes little-endian,
    from its end of the socket pair, and acknowledges it with one byte back
    (PeerWatch.wait_for_index does both), then is that worker; it ends, doing
    nothing, once the client shuts its end down or exits. Both return
    (process, channel), as Launcher.launch does. `worker_name` formats a
    worker's process name from its index.
    """

    worker_name = "mizu-worker-{}"

    def __init__(self):
        self._spare_lock = threading.Condition(threading.Lock())
        self._spare = None   # the _SpareStart that no launch has taken yet, or None
        self._closed = False
        self._owner = os.getpid()

    def launch(self, index, tasks, results, rings=None):
        """See Launcher.launch: the spare if there is one, one still starting included, else a process started now."""
        with self._spare_lock:
            start, self._spare = self._spare, None
        if start is not None:
            try:
                if rings is not None:
                    self.keep_spare(rings, results)
            except BaseException:
                start.drop(self._spare_lock)
                raise
            spare = start.take(self._spare_lock, _SPARE_WAIT)
            if spare is not None and self._hand(spare, index):
                return spare
        return self.start_worker(index, tasks, results)

    def _hand(self, spare, index):
        """Make spare worker `index`; whether it took its place. One that did not is gone on return."""
        process, channel = spare
        handed = False
        try:
            handed = _hand_index(channel, index)
        finally:
            if not handed:
                # It died waiting, or is too slow to say it took its index:
                # it is gone before another process is started on its rings.
                process.kill()
                process.join()
                channel.close()
        if handed:
            process.name = self.worker_name.format(index)
        return handed

    def keep_spare(self, rings, results):
        """See Launcher.keep_spare: start_spare, in a thread of its own."""
        with self._spare_lock:
            if self._spare is not None or self._closed:
                return
            start = self._spare = _SpareStart()
        try:
            threading.Thread(target=self._start_spare, args=(start, rings, results), name="mizu-spare-start",
                             daemon=True).start()
        except BaseException as exc:
            start.settle(self._spare_lock, None)
            if not isinstance(exc, Exception):
                raise
            # Without a thread to spare, the pool goes without a spare.

    def _start_spare(self, start, rings, results):
        try:
            spare = self.start_spare(rings, results)
        except BaseException:
            # Without one, the next worker starts as the first ones did.
            spare = None
        start.settle(self._spare_lock, spare)

    def close(self):
        """See Launcher.close. In a child forked from the pool's process, forget the spare, which is the parent's."""
        if os.getpid() != self._owner:
            # Its lock may have been held by a thread the child does not have.
            self._spare, self._closed = None, True
            return
        with self._spare_lock:
            self._closed = True
            start, self._spare = self._spare, None
        if start is not None:
            spare = start.take(self._spare_lock, _SPARE_WAIT)
            if spare is not None:
                _end(*spare)

    def start_worker(self, index, tasks, results):
        raise NotImplementedError

    def start_spare(self, rings, results):
        raise NotImplementedError


class MultiprocessingLauncher(KeepsSpare):
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
        super().__init__()
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

    def start_worker(self, index, tasks, results):
        """See KeepsSpare.start_worker: a process of the context (its multiprocessing.Process, the client's channel)."""
        return self._start(_worker_main, (tasks, results), index, self.worker_name.format(index))

    def start_spare(self, rings, results):
        """See KeepsSpare.start_spare."""
        return self._start(_spare_main, (rings, results), None, "mizu-spare")

    def _start(self, target, rings, index, name):
        if self.preload:
            # Where the forkserver will look, which is where the program is now.
            self.preload = False
            _preload_in_forkserver(self.context)
        channel, worker_end = socket.socketpair()
        args = ((*rings, worker_end) if index is None else (*rings, worker_end, index)) + (
            os.getpid(), self.initializer, self.initargs, self.max_tasks, self.max_memory, self.codec.by_value)
        process = self.context.Process(target=target, args=args, name=name)
        try:
            process.start()
        except BaseException:
            channel.close()
            raise
        finally:
            worker_end.close()
        return process, channel


class _SpareStart:
    """One spare being started: its thread settles it with (process, channel), or None if the start failed.

    A launch, or close, takes it once. A spare settled after its taker
    stopped waiting, or settled twice, is ended by its thread.
    """

    __slots__ = ("done", "spare", "taken")

    def __init__(self):
        self.done, self.spare, self.taken = False, None, False

    def settle(self, lock, spare):
        with lock:
            if not (self.done or self.taken):
                self.spare, spare = spare, None
            self.done = True
            lock.notify_all()
        if spare is not None:
            _end(*spare)

    def take(self, lock, wait):
        """The spare, once started, within `wait` seconds: (process, channel), or None if it failed or was late.

        The wait is bounded: the thread starting it runs Python code, whose
        garbage collection may run a finalizer that needs a lock the caller
        holds.
        """
        with lock:
            try:
                lock.wait_for(lambda: self.done, wait)
            finally:
                spare, self.spare, self.taken = self.spare, None, True
        return spare

    def drop(self, lock):
        """Take it without waiting, and end what was ready: a launch that fails before it could hand it a place."""
        spare = self.take(lock, 0)
        if spare is not None:
            _end(*spare)


_INDEX_BYTES = 4
_SPARE_WAIT = 1.0    # seconds a launch, or close, waits for a spare being started
_SPARE_GRACE = 0.1   # seconds a spare has to exit once its channel is shut down (it has run no task)
_SPARE_ACK_WAIT = 1.0   # seconds a launch waits for a spare to acknowledge its index


def _spare_main(rings, results, channel, client_pid, *setup):
    """Entry point of a spare: wait for the index of the worker it is to be, then be that worker.

    It has imported the program's main module and mapped the pool's rings
    by then; it runs the initializer only once it has a place. The client
    shutting its end of the channel down (the pool closed), or exiting,
    ends it.
    """
    # A Ctrl-C at a terminal reaches the whole process group: it would kill
    # the spare as soon as it took a worker's place.
    interrupt = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        index = PeerWatch(client_pid).wait_for_index(channel.fileno())
    except ProcessLookupError:
        return
    signal.signal(signal.SIGINT, interrupt)
    if index < 0 or index >= len(rings):
        return
    multiprocessing.current_process().name = MultiprocessingLauncher.worker_name.format(index)
    _worker_main(rings[index], results, channel, index, client_pid, *setup)


def _hand_index(channel, index):
    """Send a spare the index of the worker it is to be; whether it took it, alive.

    A spare acknowledges its index with one byte (PeerWatch.wait_for_index).
    One killed as it waited never does, though it may not have exited, nor
    closed its end, when the index is sent: without the acknowledgement, it
    would count as a worker that died starting, which breaks the pool. One
    still silent after _SPARE_ACK_WAIT (a machine too busy to run it) is not
    taken either: its acknowledgement, come later, would be read from the
    channel as the start of a message's descriptors.
    """
    try:
        channel.sendall(index.to_bytes(_INDEX_BYTES, "little"))
        answer = select.poll()
        answer.register(channel, select.POLLIN)
        return bool(answer.poll(_SPARE_ACK_WAIT * 1000)) and channel.recv(1, socket.MSG_DONTWAIT) == b"\x01"
    except OSError:
        return False


def _end(process, channel):
    """End a spare: it exits once its channel is shut down; one that does not is killed."""
    try:
        # Shut down, not only closed: a child the client forked holds a copy.
        channel.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    channel.close()
    process.join(_SPARE_GRACE)
    if process.exitcode is None:
        process.kill()
        process.join()


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
