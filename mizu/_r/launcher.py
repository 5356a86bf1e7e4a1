"""How an R worker starts: ``Rscript`` running the worker loop of mizu's R package."""

import os
import signal
import socket
import subprocess

from mizu._launchers import KeepsSpare
from mizu._r.codec import RCodec

__all__ = ["RLauncher", "RProcess", "r_string"]


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


class RLauncher(KeepsSpare):
    """Starts R workers: ``Rscript`` running the worker loop of mizu's R package (mizu._r.package).

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
    max_memory : int or None
        Bytes a worker may hold resident after a task; above them it retires.
    """

    worker_name = "mizu-R-worker-{}"
    on_demand = False
    paced = False
    starting_hint = ""
    setup_name = "setup script"
    safe_with_threads = True   # Rscript starts through fork and exec at once

    def __init__(self, rscript, library, setup, max_tasks, max_memory=None):
        super().__init__()
        self.codec = RCodec()
        self.rscript, self.library, self.max_tasks = os.fspath(rscript), os.fspath(library), max_tasks
        self.max_memory = max_memory
        if setup is not None and not isinstance(setup, str):
            setup = f"source({r_string(os.path.abspath(os.fspath(setup)))})"
        self.setup = setup
        libs = os.environ.get("R_LIBS")
        self.environ = dict(os.environ, R_LIBS=self.library if not libs else os.pathsep.join([self.library, libs]))

    def start_worker(self, index, tasks, results):
        """See mizu._launchers.KeepsSpare.start_worker: Rscript running mizu::worker (its RProcess, the channel)."""
        return self._start("worker", tasks.segment.fd, f"{tasks.offset}, {results.offset}", index,
                           self.worker_name.format(index))

    def start_spare(self, rings, results):
        """See mizu._launchers.KeepsSpare.start_spare: Rscript running mizu::spare."""
        offsets = ", ".join(str(ring.offset) for ring in rings)
        return self._start("spare", results.segment.fd, f"c({offsets}), {results.offset}", None, "mizu-R-spare")

    def _start(self, function, segment, rings, index, name):
        channel, worker_end = socket.socketpair()
        index = "" if index is None else f"{index}, "
        code = (f"mizu::{function}({segment}, {rings}, {worker_end.fileno()}, {index}{os.getpid()}, "
                f"{self.max_tasks or 0}, {self.max_memory or 0}, "
                "setup = if (length(commandArgs(TRUE))) commandArgs(TRUE) else NULL)")
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
        return RProcess(popen, name), channel
