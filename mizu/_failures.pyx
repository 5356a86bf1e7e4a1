# cython: auto_pickle=False
"""A worker's death, and what breaks the pool: BrokenProcessPool on every pending future, then on submit.

Every 20 ms slice, whoever collects polls each worker's pidfd; a worker that
died without retiring breaks the pool as the stdlib's does. In a pool that
replaces dead workers, an ExitBell's thread tells whoever waits for results
of a death as soon as it happens (without a bell, it looks every
millisecond). The messages add to the stdlib's text the dead process, its
exit code or signal, the task it was running and, when its initializer or
the unpickling of a task raised, that error (the worker sends its traceback
before it exits; the texts are mizu._errors'). The other workers get
SIGTERM, and SIGKILL if they outlast a grace period.

Asked for (worker_death="replace"), or when the pool ended it, a worker
that dies is replaced instead (mizu._control).
"""

from cython.operator cimport dereference as deref
from libcpp.vector cimport vector

from mizu._future cimport Cell, cell_of, drop_task
from mizu._liveness cimport PeerWatch
from mizu._messages cimport STARTING
from mizu._roster cimport Roster, Worker
from mizu.includes.liveness cimport PeerWatch as CPeerWatch
from mizu.includes.spin cimport now_ns

import time
from concurrent.futures import _base
from concurrent.futures.process import BrokenProcessPool, _RemoteTraceback
from time import monotonic as _monotonic

from mizu._errors import BROKEN, BROKEN_FUTURE, NOT_STARTED, NOT_STARTED_FUTURE, obituary, task_repr

__all__ = ["ExitBell", "Watchdog"]


cdef class ExitBell:
    """ExitBell(results)

    A thread that pushes a GONE notice for a worker into the result ring
    `results` as soon as the worker's process exits (csrc/exit_bell.hpp),
    waking whoever waits for results. It holds `results`, so the pool's
    segment stays mapped while the thread may push.
    """

    def __init__(self, _Ring results not None):
        self.results = results
        self.bell.reset(new CExitBell(deref(results.ring)))

    def watch(self, index, pid):
        """Ring for pid, the process of worker `index`, from now on, in place of the one before it."""
        self.bell.get().watch(index, pid)

    cdef void abandon(self) noexcept:
        """In a child forked from the pool's process: never touch the thread, which is the parent's."""
        self.bell.release()

    def __dealloc__(self):
        with nogil:
            self.bell.reset()


cdef class Watchdog(Roster):
    """The pool watching its workers for a death, and breaking."""

    cdef collect_ready(self):
        """Collect the results in the ring, then dispatch what waits (mizu._collect.Collector's)."""
        raise NotImplementedError

    cdef replace(self, Worker worker, bint exited=False):
        """Start a successor for worker, which retired, or whose process has exited (mizu._collect.Collector's)."""
        raise NotImplementedError

    cdef check_workers(self):
        """Break the pool if a worker died without retiring, or replace it. Called with recv_lock held."""
        cdef vector[CPeerWatch*] watches
        self.checked_ns = now_ns()
        if self.checked_ns >= self.next_check_ns:
            self.check_deadlines()
        for worker in self.workers:
            if worker.watch is not None:
                watches.push_back((<PeerWatch>worker.watch).watch.get())
        if not CPeerWatch.any_exited(watches.data(), watches.size()):
            return
        # Their last results, and retirement notices, may still be in the
        # ring, behind what a dead worker left half-pushed: voided, then
        # everything pushed so far is collected, before any is replaced.
        # Only these are replaced now: one that dies meanwhile may have
        # answered a task since the drain, and claimed the next, which would
        # be taken for the task it died running; the next check has it.
        dead = [(worker, worker.process) for worker in self.workers
                if worker.watch is not None and not worker.watch.alive()]
        for worker, process in dead:
            self.results.void_abandoned(process.pid)
        self.drain()
        for worker, process in dead:
            # One whose retirement notice the drain found has its successor,
            # judged by a later check: the successor may have lived its whole
            # life (max_tasks_per_child) while the drain ran, its messages
            # pushed after the drain's mark.
            if self.broken is not None or worker.watch is None or worker.process is not process:
                continue
            if worker.ending or (self.replace_dead and worker.up and worker.failure is None):
                self.recover(worker)
                continue
            reap(worker.process)
            if not worker.up and worker.failure is not None and worker.failure[0] == STARTING:
                if self.leave_out(worker):
                    continue
                self.terminate_broken(self.obituary_of(worker), None, NOT_STARTED, NOT_STARTED_FUTURE)
                return
            self.terminate_broken(self.obituary_of(worker), None if worker.failure is None else worker.failure[1])
            return

    cdef drain(self):
        """Collect every message pushed so far (mizu._collect.Collector's)."""
        raise NotImplementedError

    cdef check_deadlines(self):
        """End the tasks past their deadline (mizu._control.Controller's)."""
        raise NotImplementedError

    cdef recover(self, Worker worker):
        """Replace worker, which died once up (mizu._control.Controller's)."""
        raise NotImplementedError

    cdef watch_exit(self, Worker worker):
        """Have the bell ring when worker's new process exits, in a pool that replaces dead workers.

        A caller waiting for a result then starts the successor at once,
        not a slice of its wait later. Without a thread or descriptor to
        spare, the pool goes without: whoever collects still looks at the
        workers once a slice.
        """
        if not self.replace_dead or self.results is None:
            return
        try:
            if self.bell is None:
                self.bell = ExitBell(self.results)
            self.bell.watch(worker.index, worker.process.pid)
        except Exception:
            pass

    cdef str obituary_of(self, Worker worker):
        # It runs its tasks in the order they were sent: the oldest not answered is its current one.
        future = worker.in_flight.oldest()
        cdef Cell cell = None if future is None else cell_of(future)
        task = None if cell is None else task_repr(cell.kind, cell.fn, cell.first, cell.second, cell.calls)
        return obituary(worker.process, worker.failure, worker.ring.popped != worker.popped_at_start, task,
                        self.launcher.starting_hint, self.launcher.setup_name)

    cdef terminate_broken(self, detail, remote=None, pool_text=BROKEN, future_text=BROKEN_FUTURE):
        """Break the pool: BrokenProcessPool on every pending future, then on submit.

        detail, a sentence saying what broke it, follows pool_text (by
        default the stdlib's) in later submits' errors and future_text in
        the futures'; the cause of each future's error shows remote (a
        traceback), or detail.
        """
        with self.state_lock:
            if self.broken is not None:
                return
            results = self.results   # the manager thread may let go of it as soon as the pool is broken
            with self.send_lock:
                self.broken = f"{pool_text}. {detail}"
                futures = self.take_futures()
        cause = f"\n'''\n{detail if remote is None else remote.rstrip()}\n'''"
        for future in futures:
            drop_task(cell_of(future))
            error = BrokenProcessPool(f"{future_text} {detail}")
            error.__cause__ = _RemoteTraceback(cause)
            try:
                future.set_exception(error)
            except _base.InvalidStateError:
                pass
        self.close_workers(kill="terminate")
        if results is not None:
            results.close()


cdef reap(object proc):
    """Join proc, which has exited, and wait until its exit code is recorded.

    multiprocessing reaps its children from whichever thread polls first
    (Process.start() polls them all): a join that loses that race returns
    before the winner has stored the code, which it does a moment later.
    """
    proc.join()
    deadline = _monotonic() + 1.0
    while proc.exitcode is None and _monotonic() < deadline:
        time.sleep(0.001)

