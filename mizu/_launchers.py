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

Each launcher also says how its kind of worker takes values (`codec`,
mizu._messages), whether workers start all at once or one per task that
finds none idle (`on_demand`), whether those starts may be paced a few at
a time (`paced`, mizu._pool.Pool.start_deferred), what most often kills
one before its first task (`starting_hint`) and what runs in a worker
before its first task (`setup_name`, for the pool's error messages).
"""

import os
import signal
import socket
import subprocess

from mizu._messages import Codec
from mizu._pickler import ByValue
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
    by_value : bool
        Pickle by value the functions and classes of tasks, and the
        initializer, that pickle would name (mizu._pickler).
    """

    def __init__(self, context, initializer, initargs, max_tasks, by_value=False):
        self.codec = Codec()
        self.codec.by_value = by_value
        self.setup_name = "initializer"
        self.context = context
        if by_value and initializer is not None:
            initializer = ByValue(initializer)
        self.initializer, self.initargs, self.max_tasks = initializer, initargs, max_tasks
        method = context.get_start_method(allow_none=False)
        # The stdlib's rule: fork starts every worker at once; spawn and
        # forkserver, one whenever a task finds no idle worker.
        self.on_demand = method != "fork"
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
                  self.codec.by_value),
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


def r_string(text):
    """text as an R string literal."""
    escaped = "".join(
        "\\\\" if c == "\\" else '\\"' if c == '"' else c if c >= " " else f"\\x{ord(c):02x}" for c in text)
    return f'"{escaped}"'


class RProcess:
    """An R worker's Rscript, with the part of multiprocessing.Process's API that the pool uses."""

    def __init__(self, popen, name):
        self._popen = popen
        self.pid = popen.pid
        self.name = name

    @property
    def exitcode(self):
        """None while it runs, then its exit code, or minus the signal that ended it."""
        return self._popen.poll()

    def is_alive(self):
        return self._popen.poll() is None

    def join(self, timeout=None):
        try:
            self._popen.wait(timeout)
        except subprocess.TimeoutExpired:
            pass

    def terminate(self):
        self._signal(signal.SIGTERM)

    def kill(self):
        self._signal(signal.SIGKILL)

    def _signal(self, number):
        if self._popen.poll() is None:
            try:
                os.kill(self.pid, number)
            except ProcessLookupError:
                pass

    def __repr__(self):
        code = self.exitcode
        state = "started" if code is None else f"stopped exitcode={code}"
        return f"<RProcess name={self.name!r} pid={self.pid} {state}>"


class RLauncher:
    """Starts R workers: ``Rscript`` running the worker loop of mizu's R package (mizu._rpackage).

    A worker inherits the descriptors of the pool's segment and of its end
    of the socket pair, and runs in a session of its own, so that a Ctrl-C
    in a terminal reaches the client alone: the client decides what
    becomes of the pool, as with Python workers' KeyboardInterrupt.

    Parameters
    ----------
    rscript : path
        The Rscript to run.
    library : path
        The R library holding mizu's R package, put first on ``R_LIBS``.
    setup : str or os.PathLike or None
        R code run once in each worker, in its global environment, before
        its first task; a path: an R file to source there.
    max_tasks : int or None
        Tasks a worker runs before it retires.
    """

    on_demand = False
    paced = False
    starting_hint = ""
    setup_name = "setup script"

    def __init__(self, rscript, library, setup, max_tasks):
        from mizu._rcodec import RCodec

        self.codec = RCodec()
        self.rscript, self.library, self.max_tasks = os.fspath(rscript), os.fspath(library), max_tasks
        if setup is not None and not isinstance(setup, str):
            setup = f"source({r_string(os.path.abspath(os.fspath(setup)))})"
        self.setup = setup
        libs = os.environ.get("R_LIBS")
        self.environ = dict(os.environ, R_LIBS=self.library if not libs else os.pathsep.join([self.library, libs]))

    def launch(self, index, tasks, results):
        """Start R worker `index` on the rings tasks and results; (its RProcess, the client's channel)."""
        channel, worker_end = socket.socketpair()
        segment = tasks.segment.fd
        code = (f"mizu::worker({segment}, {tasks.offset}, {results.offset}, {worker_end.fileno()}, {index}, "
                f"{os.getpid()}, {self.max_tasks or 0}, setup = if (length(commandArgs(TRUE))) commandArgs(TRUE) "
                "else NULL)")
        argv = [self.rscript, "--no-save", "--no-restore", "-e", code]
        if self.setup is not None:
            argv.append(self.setup)
        try:
            popen = subprocess.Popen(argv, stdin=subprocess.DEVNULL, env=self.environ, start_new_session=True,
                                     pass_fds=(segment, worker_end.fileno()))
        except BaseException:
            channel.close()
            raise
        finally:
            worker_end.close()
        return RProcess(popen, f"mizu-R-worker-{index}"), channel
