# cython: auto_pickle=False
"""Collecting the workers' results and settling their futures: the one place where a task's future is done.

A caller waiting on a future pops the result ring itself (collect_until),
and otherwise the manager thread does (mizu._manager); either settles what
it pops here (settle): the codec of the pool's kind of worker says what
an answer means (a result, or an exception raised), and settle completes
its future with it; a worker's notice (up, retiring, failed to start) goes
to its roster entry.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.exc cimport PyErr_CheckSignals
from cpython.object cimport PyObject
from cpython.ref cimport Py_DECREF
from libc.stdint cimport int64_t, uint64_t

from mizu._failures cimport Watchdog, reap
from mizu._future cimport Cell, cell_of, drop_task, is_done, own_cell, set_exception, set_result
from mizu._messages cimport GONE, READY, RETIRING, Reassembler, body_with, is_chunk, take_buffers
from mizu._roster cimport MAX_DEPTH, Worker
from mizu._observers cimport SETTLED, UP
from mizu._rings cimport _Ring
from mizu._sync cimport Fifo, Lock
from mizu.includes.messages cimport Message, kResult, read_message
from mizu.includes.spin cimport kForever, now_ns

import threading
import traceback
from concurrent.futures import _base

from mizu._errors import (COLLECTED, COLLECTED_FUTURE, FORCED, FORCED_FUTURE, NOT_REPLACED, NOT_REPLACED_FUTURE,
                          brief)
from mizu._future import LazyFuture

__all__ = ["Collector", "Future"]

cdef enum:
    UNBUILT = -1   # settle's status of a result whose value could not be built here (read_again)

_SHORT_TASK = 200e-6
cdef double _SHORT_TASK_C = _SHORT_TASK
cdef int64_t _DRAIN_NS = 100_000_000   # the longest drain() waits for a push under way


cdef extern from "pythread.h":
    unsigned long PyThread_get_thread_ident()


cdef extern from *:
    """
    // The object a weak reference refers to (a new reference), or NULL once
    // it is gone, without a call through the weakref's type.
    static inline PyObject* mizu_referent(PyObject* ref) {
    #if PY_VERSION_HEX >= 0x030D0000
        PyObject* obj = NULL;
        return PyWeakref_GetRef(ref, &obj) < 0 ? NULL : obj;
    #else
        PyObject* obj = PyWeakref_GET_OBJECT(ref);
        if (obj == Py_None) return NULL;
        Py_INCREF(obj);
        return obj;
    #endif
    }
    """
    PyObject* mizu_referent(object ref)


cdef object _lazy_result = LazyFuture.result
cdef object _lazy_exception = LazyFuture.exception
cdef object _FINISHED = _base.FINISHED


cdef object _collect_for(Cell cell, timeout):
    """Collect results in this thread until the future of cell is done; the part of timeout left for the stdlib's own wait."""
    if is_done(cell):
        return timeout
    cdef PyObject* referent = NULL
    if cell.pool is not None:   # else a future that no pool made
        referent = mizu_referent(cell.pool)
    if referent == NULL:
        return timeout
    pool = <object>referent
    Py_DECREF(pool)
    if timeout is None:
        (<Collector>pool).wait_until(cell, kForever)
        return None
    if isinstance(timeout, (str, bytes, bytearray)):   # as the stdlib's wait, which compares it with 0
        raise TypeError(f"timeout must be None or a number of seconds, not {type(timeout).__name__}")
    cdef int64_t deadline = now_ns() + <int64_t>(max(0.0, min(float(timeout), 1e9)) * 1e9)
    (<Collector>pool).wait_until(cell, deadline)
    return max(0, deadline - now_ns()) * 1e-9


class Future(LazyFuture):
    """A concurrent.futures.Future whose waiting caller collects results itself.

    Its name is the stdlib's, so that it prints as the stdlib's futures do.
    """

    def _observed(self):
        # A callback, wait() or as_completed() now depends on the manager thread.
        ref = (<Cell>self._cell).pool
        pool = None if ref is None else ref()   # None: a future that no pool made
        if pool is not None:
            pool.observe()

    def result(self, timeout=None):
        cdef Cell cell = own_cell(self)
        if cell.state is not _FINISHED:
            timeout = _collect_for(cell, timeout)
            if cell.state is not _FINISHED:
                return _lazy_result(self, timeout)
        # A traceback through Cython code holds no frame with this future in
        # it, so raising here makes no reference cycle.
        if cell.exception is not None:
            raise cell.exception
        return cell.result

    def exception(self, timeout=None):
        return _lazy_exception(self, _collect_for(own_cell(self), timeout))


cdef object _answered(Fifo in_flight, unsigned long long task_id):
    """Take the future of task_id from a worker's in_flight, or None: the oldest, unless the worker broke protocol."""
    if in_flight.size() and cell_of(in_flight.oldest()).task_id == task_id:
        return in_flight.pop_oldest()
    for future in in_flight.snapshot():
        if cell_of(future).task_id == task_id:
            in_flight.remove(future)
            return future
    return None


cdef class Collector(Watchdog):
    """The pool collecting its results: the result ring, recv_lock, and what each result settles."""

    def __init__(self, max_workers, launcher, max_tasks):
        super().__init__(max_workers, launcher, max_tasks)
        self.codec = launcher.codec
        self.recv_lock = Lock()
        self.recv_owner = 0             # the thread holding recv_lock
        self.collecting = 0
        self.watched = 0
        self.reassembler = Reassembler()
        self.task_seconds = _SHORT_TASK
        self.depth = 2

    cdef dispatch(self):
        """Send the tasks pending, and what waits in outboxes (mizu._dispatch.Dispatcher's)."""
        raise NotImplementedError

    cdef bint take_recv(self, int64_t deadline_ns) except -1:
        """Acquire recv_lock by deadline_ns (0: only if free), remembering the owner: callbacks run under it."""
        if not self.recv_lock.take(deadline_ns):
            return False
        self.recv_owner = PyThread_get_thread_ident()
        return True

    cdef give_recv(self):
        self.recv_owner = 0
        self.recv_lock.give()

    cdef wait_until(self, Cell cell, int64_t deadline_ns):
        """Drain results in this thread until cell's future is done or deadline_ns (now_ns's clock, or kForever) passes."""
        cdef int64_t now
        if self.recv_owner == PyThread_get_thread_ident():
            # A done-callback: nothing is collected while it runs. With a
            # timeout it waits that out and times out, as the stdlib's
            # callback, which blocks its manager thread, does; without one
            # it would wait forever.
            if deadline_ns != kForever:
                return
            raise RuntimeError("a done-callback cannot wait for a future of its own pool without a timeout: it "
                               "runs in the thread that collects the results")
        self.collecting += 1
        try:
            while not is_done(cell):
                now = now_ns()
                if now >= deadline_ns:
                    return
                if not self.take_recv(min(deadline_ns, now + SLICE_NS)):
                    continue
                try:
                    if self.results is None:   # let go of: every future is done
                        return
                    self.collect_until(cell, deadline_ns)
                finally:
                    self.give_recv()
                if self.broken is not None or not self.started:
                    return
        finally:
            self.collecting -= 1

    cdef collect_until(self, Cell cell, int64_t deadline_ns):
        cdef _Ring ring = self.results
        cdef int64_t now, wait
        # A dead worker's successor starts as soon as the death is seen:
        # the exit bell says when, or else a look every millisecond.
        cdef int64_t slice_ns = REPLACING_SLICE_NS if self.replace_dead and self.bell is None else SLICE_NS
        while not is_done(cell) and self.broken is None:
            now = now_ns()
            if now - self.checked_ns >= slice_ns:
                # Results from other workers may keep coming while the one
                # this future waits on is dead; and a caller that waits on
                # one result after another (an unordered map) calls this
                # anew for each, while the manager thread leaves the looks
                # to it: the clock is the pool's, not this call's.
                self.check_workers()
                continue
            wait = min(self.checked_ns + slice_ns - now, deadline_ns - now, max(0, self.next_check_ns - now))
            if wait <= 0:
                if now >= deadline_ns:
                    return
                self.check_workers()   # a task's deadline, or an ending worker, is due
                continue
            if self.feeding or self.unbalanced:
                # Chunks of a large task wait for room in a worker's ring,
                # which frees as the worker reads: keep feeding it. Or
                # tasks may soon be taken back for an idle worker.
                self.dispatch()
                wait = min(wait, FEED_NS)
            try:
                slot = ring._pop(now + wait, None, self.core_to_spare())
            except TimeoutError:
                self.check_workers()
                continue
            self.handle(slot)
            self.collect_ready()

    cdef bint core_to_spare(self):
        """Whether a waiting caller may spin: a core is left beside the workers that have tasks."""
        cdef Worker worker
        cdef Py_ssize_t busy = 0
        for worker in self.workers:
            if worker.in_flight.size():
                busy += 1
                if busy >= self.cores:
                    return False
        return True

    cdef collect_ready(self):
        cdef _Ring ring = self.results
        slot = ring._try_pop()
        while slot is not None:
            self.handle(slot)
            slot = ring._try_pop()
        self.dispatch()
        if self.deferred:
            self.start_put_off()

    cdef drain(self):
        """Collect every message pushed so far, then dispatch: a push under way is waited for, up to _DRAIN_NS.

        Before a dead worker is replaced or a task's deadline is judged, so
        that what was answered counts as answered. The wait is for each
        message in turn: handling one may take long (a retired worker's
        successor starting, on a busy machine), which is no reason to leave
        the next unread; a slot that stays unfinished (its worker stopped,
        or killed as it began its push) ends the drain.
        """
        cdef _Ring ring = self.results
        cdef uint64_t pushed = ring.popped + len(ring)
        while ring.popped < pushed:
            try:
                slot = ring._pop(now_ns() + _DRAIN_NS, None, False)
            except TimeoutError:
                break
            self.handle(slot)
        self.dispatch()

    cdef collect_if_free(self):
        """Collect the results in the ring now, unless another thread is collecting or the pool let go of it."""
        if self.take_recv(0):
            try:
                if self.results is not None:
                    self.collect_ready()
            finally:
                self.give_recv()

    def collect_now(self):
        """Collect the results in the ring now, unless another thread is collecting: for a thread that must not wait.

        An event loop's thread calls it as it takes a batch of completions
        (mizu._aio): what has come meanwhile settles in that thread, without
        waking it again from the manager thread.
        """
        self.collect_if_free()

    cdef start_put_off(self):
        """start_deferred, then break the pool if a start failed."""
        with self.state_lock:
            failure = self.start_deferred()
        if failure is not None:
            self.terminate_broken(failure)

    cdef handle(self, bytes slot):
        # A signal handler's exception (Ctrl-C's KeyboardInterrupt, in the
        # main thread) must not cut the handling of a slot short: its result
        # would be lost, and its future never done. Handlers of signals that
        # came while the slot was awaited run now, and what they raise is
        # raised once the slot is handled; so is what one raises while the
        # slot's result is read or settled (settle keeps it in `interrupted`).
        self.interrupted = None
        try:
            PyErr_CheckSignals()
        except BaseException as exc:
            self.interrupted = exc   # so that a second Ctrl-C, while the result is read, gives it up
            self.settle(slot)
            self.interrupted = None
            raise
        self.settle(slot)
        if self.interrupted is not None:
            interrupted, self.interrupted = self.interrupted, None
            raise interrupted

    cdef settle(self, bytes slot):
        cdef Worker worker
        cdef Cell cell
        cdef Message m
        cdef bytes message = slot
        cdef int status
        cdef bint raised
        cdef unsigned long long task_id
        cdef bint reading = False
        if not PyBytes_GET_SIZE(slot):
            return   # left half-written by a worker that died (Controller.recover)
        try:
            if is_chunk(slot):
                try:
                    message = self.reassembler.feed(slot)
                except ValueError as exc:
                    self.terminate_broken(f"A result's chunks do not fit together: {exc}.")
                    return
                if message is None:
                    return
            read_message(PyBytes_AS_STRING(message), PyBytes_GET_SIZE(message), m)
            if m.kind == kResult and m.result.status == GONE:
                # The exit bell's (mizu._failures.ExitBell), maybe for a
                # worker the pool has given back: the workers are looked at next.
                self.arm(0)
                return
            # The roster's: a worker's first notice may come before grow()
            # has added it to `workers`.
            if m.kind != kResult or m.sender >= len(self.roster):
                raise ValueError(f"a message from worker {m.sender} of {len(self.roster)} that is not a result")
            worker = self.roster[m.sender]
            status, task_id = m.result.status, m.result.task_id
            buffers = take_buffers(m, worker.channel)
            reading = True
            value = body_with(m, message, buffers)
        except BaseException as exc:
            if not reading:
                self.read_again(exc, m, message, None, 0)
                return
            read = self.read_again(exc, m, message, buffers, task_id)
            if read is None:
                return
            value, unbuilt = read
            if unbuilt is not None:
                status, value = UNBUILT, unbuilt
        if status == READY:
            worker.up = True
            self.tell(UP, worker.index, None, 0.0)
            if worker.starting:
                worker.starting = False
                self.coming -= 1
            self.unbalanced = True
            return
        if status == RETIRING:
            # Unless its successor has started: the notice of a process
            # that retired and died before it was collected (Watchdog.drain).
            if worker.up:
                self.replace(worker)
            return
        future = _answered(worker.in_flight, task_id)
        if future is None:
            if task_id == 0:
                worker.failure = value
            return
        worker.held = False
        if not worker.in_flight.size() and not self.pending.size() and self.queued_behind():
            self.unbalanced = True   # it idles: dispatch takes back tasks for it (rebalance)
        cell = cell_of(future)
        self.learn(m.result.seconds / cell.calls)
        try:
            self.tell(SETTLED, worker.index, cell, m.result.seconds)
        except BaseException as exc:
            # A progress bar's own errors it logs; a signal's exception
            # raised during its write must not keep the future from settling.
            self.interrupted = exc
        drop_task(cell)
        if self.deferred:
            self.deferred -= 1
        elif self.on_demand and len(self.workers) < len(self.roster):
            self.idle.append(None)
        if cell.observed and self.watched:
            self.watched -= 1
        if status == UNBUILT:
            set_exception(future, cell, value)
        else:
            value = self.codec.outcome(cell, status, value, &raised)
            if raised:
                set_exception(future, cell, value)
            else:
                set_result(future, cell, value)

    cdef tuple read_again(self, BaseException exc, Message& m, bytes message, list buffers,
                          unsigned long long task_id):
        """settle's answer to exc, raised as it read a result (task_id 0: before its value): (value, None) read
        again, or (None, error) that its task fails with; or None once the pool is broken.
        """
        if (isinstance(exc, KeyboardInterrupt) and task_id and self.interrupted is None
                and threading.current_thread() is threading.main_thread()):
            # Ctrl-C during unpickling, which runs Python code: the result is
            # read again, and Ctrl-C raised once it is settled (handle). A
            # second Ctrl-C gives the result up. (Only the main thread takes
            # signals: the manager thread, which must not end, breaks the
            # pool on a KeyboardInterrupt that unpickling code raises itself.)
            self.interrupted = exc
            try:
                return body_with(m, message, buffers), None
            except BaseException as again:
                exc = again
        if isinstance(exc, KeyboardInterrupt):
            self.interrupted = None
            self.terminate_broken(f"Collecting a result was interrupted by {exc!r}; the result is lost.")
            raise exc
        if task_id and isinstance(exc, Exception) and self.codec.unbuilt_fails_task:
            # A whole message whose value cannot be built here (an R frame
            # that pandas cannot hold): its task fails with why.
            return None, exc
        # SystemExit too, raised by the result's own unpickling code: the
        # stdlib breaks the pool on whatever its result reader raises.
        self.terminate_broken(f"A result could not be unpickled: {brief.repr(exc)}.",
                              "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
        return None

    cdef void learn(self, double seconds) noexcept:
        """Fold a task's duration into the depth: deep for short tasks, shallow for long ones."""
        self.task_seconds = seconds = 0.8 * self.task_seconds + 0.2 * seconds
        if seconds >= _SHORT_TASK_C:
            self.depth = 2
        else:
            self.depth = <Py_ssize_t>min(<double>MAX_DEPTH, max(2.0, _SHORT_TASK_C / max(seconds, 1e-7)))

    cdef bint queued_behind(self) noexcept:
        """Whether a worker has a task queued behind the one it runs, or one it is not up to run yet."""
        cdef Worker worker
        for worker in self.workers:
            if worker.in_flight.size() >= 2 or worker.in_flight.size() and not worker.up:
                return True
        return False

    cdef replace(self, Worker worker, bint exited=False):
        proc = worker.process
        if not exited:
            proc.join()
        try:
            self.succeed(worker)
        finally:
            if exited:
                # Once the successor has started: the forkserver's word of
                # the exit code comes a moment after the process has gone.
                reap(proc)

    cdef succeed(self, Worker worker):
        """Start a successor for worker, whose process has exited; or break the pool if it was the last one."""
        self.reassembler.forget(worker.index)
        # What it did not claim (a worker that retired for its memory, or
        # died, leaves tasks queued) is sent again, to its successor or
        # another worker; the ring starts afresh.
        self.take_back(worker)
        failed = None
        with self.state_lock:
            wanted = self.broken is None and not (self.shutting_down and self.outstanding() is None)
            if wanted and self.collected is None and not self.forced:
                try:
                    self.launch(worker)
                    return
                except Exception as exc:
                    failed = exc
            # It exited as asked, or no successor started: its end is no
            # death for check_workers to report.
            worker.watch = None
        if not wanted or any(other.watch is not None for other in self.workers):
            return   # the other workers run the tasks left
        # It was the last worker, and none can follow: the tasks left can
        # never run, and fail as the stdlib's do (gh-152967).
        last = f"Process {worker.process.pid} ({worker.process.name}) was its last worker."
        if failed is not None:
            self.terminate_broken(f"{last} Starting its successor raised {brief.repr(failed)}.",
                                  "".join(traceback.format_exception(type(failed), failed, failed.__traceback__)),
                                  NOT_REPLACED, NOT_REPLACED_FUTURE)
        elif self.forced:
            self.terminate_broken(last, None, FORCED, FORCED_FUTURE)
        else:
            self.terminate_broken(last, None, COLLECTED.format(executor=self.collected),
                                  COLLECTED_FUTURE.format(executor=self.collected))

