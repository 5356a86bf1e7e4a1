# cython: auto_pickle=False
"""The manager thread, and the pool's life: its start, shutdown, and the workers' figures once they are gone.

The manager thread collects only while no caller does (the picture in
mizu._pool shows where it stands); once the pool is shutting down and
nothing is outstanding, it closes the task rings, joins the workers,
closes the result ring and lets go of the segment.
"""

from mizu._collect cimport FEED_NS, SLICE_NS
from mizu._dispatch cimport Dispatcher, interpreter_exits
from mizu._future cimport cell_of, drop_task
from mizu._observers cimport RELEASED
from mizu._roster cimport Worker, signal_process
from mizu.includes.spin cimport kForever, now_ns

import os
import threading

from mizu import _core
from mizu._errors import (NOT_STARTED, SHORT_OF_PROCESSES, TERMINATED, TERMINATED_FUTURE, brief,
                          short_of_processes)

__all__ = ["Manager"]

_SLICE = SLICE_NS * 1e-9
_FEED = FEED_NS * 1e-9
_IDLE = 0.1
_POLL = 0.002


cdef extern from "pythread.h":
    unsigned long PyThread_get_thread_ident()


cdef class Manager(Dispatcher):
    """The pool with its manager thread: starting, shutting down, letting go of its segment."""

    def __init__(self, max_workers, launcher, max_tasks):
        super().__init__(max_workers, launcher, max_tasks)
        self.manager = None
        self.owner = os.getpid()

    cdef start(self, first):
        """Start the pool for the future `first`, its first task: every worker (unless on demand), then the manager thread.

        Results are collected after each fork, so `first` goes to the first
        worker up rather than after the last fork (each fork copies the
        client's page tables: 64 take tens of milliseconds). Where the
        system gives no more processes once some workers run, the pool goes
        on with them and warns (grow_while_possible). A start cut short (no
        descriptors or processes left, Ctrl-C, no thread at interpreter
        exit) raises from the submit and breaks the pool; its workers are
        terminated, the one running `first` too (the stdlib's
        pool, whose failed start leaves the task queued, runs it at the
        next submit that starts the pool). A result that breaks the pool
        while it forks (one that cannot be unpickled) stops the forks, and
        submit returns `first`, failed.
        """
        self.pending.push(first)
        self.launching = True
        try:
            # Fork before the thread exists: forking a process with threads risks the child's locks.
            if not self.on_demand:
                for worker in self.roster:
                    if self.broken is not None or not self.grow_while_possible():
                        break
                    self.collect_if_free()
            if self.broken is None:
                self.start_manager()
        except BaseException as exc:
            # The workers are terminated and the result ring closed: one may
            # be running `first`, or wait to push its result.
            # Raised for want of processes (grow_while_possible, start_manager),
            # it says what to do; its cause does not.
            short = short_of_processes(exc.__cause__)
            self.terminate_broken(str(exc) if short else f"Starting them raised {brief.repr(exc)}.", None,
                                  NOT_STARTED)
            self.release()
            raise
        finally:
            self.launching = False
        if self.broken is not None:
            self.release()
            return
        _live_pools.add(self)
        self.started = True

    cdef start_manager(self):
        """Start the manager thread; short of processes, in the room that the workers started last give back."""
        while True:
            manager = threading.Thread(target=self.manage, name="mizu-manager", daemon=True)
            try:
                manager.start()
            except RuntimeError as exc:
                if not short_of_processes(exc):
                    raise
                # A thread counts as a process against the system's limit.
                if not self.short_told or not self.give_back():
                    raise RuntimeError(f"The pool's manager thread could not start: "
                                       f"{SHORT_OF_PROCESSES.format(error=exc)}.") from exc
                continue
            self.manager = manager
            return

    cdef bint give_back(self) except -1:
        """End the worker started last, unless it is the only one or has tasks; False if it stays.

        Before the manager thread starts, when no other thread collects.
        """
        cdef Worker worker
        if self.running() < 2:
            return False
        worker = self.workers[-1]
        if worker.in_flight.size() or worker.started_tasks:
            return False
        signal_process(worker.process, "kill")
        worker.process.join()
        # Its notices, all in the ring now, are settled while its index is in the roster.
        self.workers.pop()
        self.collect_if_free()
        del self.roster[len(self.workers):]
        if worker.starting:
            worker.starting = False
            self.coming -= 1
        worker.ring.close()
        worker.channel.close()
        self.reassembler.forget(worker.index)
        return True

    cdef release(self):
        """Let go of the segment, the rings and every worker's descriptors, once the workers are gone.

        The segment unmaps, and its descriptor closes, when the last handle
        to one of its rings goes; a thread still inside a ring call holds its
        handle until it returns.
        """
        cdef Worker worker
        self.recv_lock.take(kForever)
        self.send_lock.take(kForever)
        try:
            self.tell(RELEASED, -1, None, 0.0)
            for worker in self.roster:
                if worker.channel is not None:
                    worker.channel.close()
                worker.release()
            self.workers, self.roster = [], []
            self.bell = None   # its thread stops before the segment can unmap
            self.results = self.segment = None
        finally:
            self.send_lock.give()
            self.recv_lock.give()

    def insights(self):
        """Insights: each worker's calls, busy and idle time, and the slowest tasks so far."""
        return self.figures.insights()

    def observe(self):
        """A future not done yet has a callback, or a thread waits on it without collecting (wait(), as_completed())."""
        self.watched += 1
        if self.watched == 1:
            self.kicked.set()

    def manage(self):
        """The manager thread: collects when no caller does, checks the workers, finishes shutdown.

        It sleeps on the result ring only while a future not done yet is
        watched by a callback, wait() or as_completed(); otherwise a caller
        that wants a result collects from the ring itself, and this thread
        wakes every few milliseconds to keep outstanding work moving and to
        check the workers. Sleeping on the ring all the time would make every
        worker's push a wake-up system call. So would sleeping on it while a
        thread submits faster than the workers answer, which collects as it
        submits: then this thread only naps.
        """
        cdef size_t backlogged = 0
        cdef bint submitting
        ring = _core.MpmcRing.attach(self.segment, self.results.offset)
        ring.spin_ns = 0
        while self.broken is None:
            if self.deferred:
                self.start_put_off()
            if self.collecting:
                if self.kicked.wait(_POLL):
                    self.kicked.clear()
                continue
            idle = self.outstanding() is None
            if idle:
                # Cancelled futures that were watched settle without a result.
                self.watched = 0
                if self.shutting_down:
                    break
            # A submit since the last round that left a backlog: its thread collects.
            submitting = self.pending.size() > 0 and self.backlogged != backlogged
            backlogged = self.backlogged
            # Not past a task's deadline, or an ending worker's next look
            # (mizu._control); a nap at least, should another thread hold
            # recv_lock then.
            due = max(_FEED, (self.next_check_ns - now_ns()) * 1e-9)
            if self.watched and not submitting:
                try:
                    ring.wait_readable(min(due, _FEED if self.sending() else
                                           _POLL if self.unbalanced or self.replace_dead else _SLICE))
                except EOFError:
                    break
            elif self.kicked.wait(min(due, _IDLE if idle else _FEED if self.sending() or self.watched else _POLL)):
                self.kicked.clear()
            if self.take_recv(0):
                try:
                    self.collect_ready()
                    self.check_workers()
                finally:
                    self.give_recv()
        if self.broken is None:
            self.close_workers()
        self.results.close()
        self.release()
        _live_pools.discard(self)

    def shutdown(self, wait, cancel_futures):
        with self.state_lock:
            self.shutting_down = True
        if cancel_futures:
            with self.send_lock:
                # The reserved tasks, already running, stay.
                dropped = self.pending.take_all()
                for future in dropped[:self.reserved]:
                    self.pending.push(future)
                del dropped[:self.reserved]
            for future in dropped:
                # Notified too, unlike the stdlib's (CPython gh-136655): wait()
                # and as_completed() count it done, not a future still to come.
                if future.cancel():
                    future.set_running_or_notify_cancel()
                drop_task(cell_of(future))
        if not self.started:
            # Never started, nor can it be now: its segment goes at once.
            if self.segment is not None:
                self.release()
            return
        if wait and self.recv_owner == PyThread_get_thread_ident():
            self.kicked.set()
            raise RuntimeError("shutdown(wait=True) cannot wait from a done-callback: it runs in the thread "
                               "that collects the pool's results")
        try:
            if wait:
                future = self.outstanding()
                while future is not None and self.broken is None:
                    self.wait_until(future._cell, kForever)
                    future = self.outstanding()
            self.kicked.set()
            if wait:
                self.manager.join()
        except BaseException as exc:
            # Ctrl-C (or another signal handler's exception) while waiting
            # for the tasks: stop now instead.
            self.interrupt(exc)
            raise

    def collect(self, executor):
        """Its Executor (a class name) was garbage collected: shut down without waiting, replace no retiring worker."""
        with self.state_lock:
            # Both at once: a retirement seen between them would break a pool with nothing pending.
            self.collected = executor
            self.shutting_down = True
        self.shutdown(False, False)

    def interrupt(self, exc):
        """Stop at once because exc interrupted a wait for the pool's tasks: cancel, terminate, fail what ran."""
        if not self.started or self.segment is None:
            return
        self.shutting_down = True
        self.terminate_broken(f"Waiting for the pool's tasks was interrupted by {type(exc).__name__}, so the pool "
                              f"terminated its workers.", None, TERMINATED, TERMINATED_FUTURE)

    def force_shutdown(self, operation):
        with self.state_lock:
            # Before the signals: a successor started after them would run on.
            self.forced = True
        self.shutdown(False, True)
        with self.state_lock:
            # Under the lock that a broken pool's terminate_broken takes
            # before it terminates the workers: the first worker's death must
            # not have the rest terminated before they get operation's signal.
            for worker in self.workers:
                if worker.process is not None:
                    signal_process(worker.process, operation)




_live_pools = set()       # started and not yet let go of: shut down at interpreter exit


def _python_exit(cancel_futures=False):
    interpreter_exits()
    pools = list(_live_pools)
    try:
        for pool in pools:
            pool.shutdown(wait=True, cancel_futures=cancel_futures)
    except BaseException as exc:
        # Interrupted: the pool it waited for has stopped; the others stop too.
        for pool in pools:
            pool.interrupt(exc)
        raise


threading._register_atexit(_python_exit)
