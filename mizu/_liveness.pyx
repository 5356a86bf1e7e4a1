"""Watching a peer process for its exit (csrc/liveness.hpp)."""

from cpython.exc cimport PyErr_CheckSignals
from libc.stdint cimport int64_t

from mizu.includes.liveness cimport PeerWatch as CPeerWatch
from mizu.includes.spin cimport kForever, now_ns
from mizu._waiter cimport _deadline

import operator
import threading

__all__ = ["PeerWatch", "PeerDiedError"]


class PeerDiedError(ConnectionError):
    """The process a blocking call was watching exited before the call could finish.

    Attributes
    ----------
    pid : int
        The process that died.
    """

    def __init__(self, pid):
        super().__init__(f"peer process {pid} exited while this process waited on it")
        self.pid = pid


cdef class PeerWatch:
    """PeerWatch(pid)

    Learns without races against pid reuse that a process has exited.

    Pass one as ``peer=`` to a ring's blocking calls so that they raise
    `PeerDiedError` within milliseconds of the peer's death instead of
    waiting forever.

    Raises
    ------
    ProcessLookupError
        No process has this pid.
    """

    def __init__(self, pid):
        self.watch.reset(new CPeerWatch(operator.index(pid)))

    @property
    def pid(self):
        """The watched process."""
        return self.watch.get().pid()

    def alive(self):
        """True until the process has exited."""
        return self.watch.get().alive()

    def wait(self, timeout=None):
        """wait(timeout=None)

        Block until the process exits or `timeout` seconds pass. In the main
        thread the wait wakes every 20 ms to run signal handlers; in other
        threads it is one blocking call.

        Returns
        -------
        bool
            Whether the process has exited.
        """
        cdef int64_t deadline = _deadline(timeout)
        cdef int64_t step
        cdef bint dead = False
        cdef bint main = threading.current_thread() is threading.main_thread()
        while True:
            if deadline == kForever and not main:
                step = -1
            else:
                step = deadline - now_ns()
                if main and step > 20000000:
                    step = 20000000
                if step < 0:
                    step = 0
            with nogil:
                dead = self.watch.get().wait_exit(step)
            if dead or (step == 0 and deadline != kForever):
                return dead
            PyErr_CheckSignals()

    def wait_for_index(self, socket_fd):
        """wait_for_index(socket_fd)

        Block until the peer at the other end of the stream socket
        `socket_fd` has written 4 bytes there (a signal does not end the
        wait), or this process exits: how a spare waits for the index of the
        worker it is to be. It then writes one byte back, which tells the
        peer that it had its index alive.

        Returns
        -------
        int
            The 4 bytes as a little-endian number, or -1 once the socket's
            other end is shut down or closed, or this process has exited.
        """
        cdef int fd = operator.index(socket_fd)
        cdef long index
        with nogil:
            index = self.watch.get().wait_for_index(fd)
        return index
