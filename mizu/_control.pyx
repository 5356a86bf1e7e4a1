# cython: auto_pickle=False
"""The controls of running work: a task's deadline, stopping one task, replacing a worker that died.

Asked for (worker_death="replace"), a worker that dies once it is up fails
only the task it was running, with WorkerDied, and is replaced (recover);
one that dies before it says it is up (holding at most the one task sent
ahead to it, which it never took) still breaks the pool
(mizu._failures), as its successor would most likely die the same way, and
a task that kills its worker fails once and is not run again: no death
loops. A task past its deadline (task_timeout), or stopped while it runs
(stop), has its worker ended: the tasks queued behind it on its ring are
withdrawn and sent again, the worker gets SIGTERM and, after a grace,
SIGKILL, and once it has exited it is replaced (end_running, then
recover). Whether a task has started, and when, is read from its ring's
tickets (claim, last_claim): the hot paths keep no clock. A worker marks
the answer of a task with a deadline (TIMED) before it sends it, so that
a deadline judged meanwhile leaves it be (Ring.answer); it notes that of
any task as it sends it (RingBase::note_answered, _sent), so that a stop()
once it has finds it ended, however late its result is collected.
Whoever collects looks at the deadlines once the earliest may have passed
(Roster.next_check_ns, check_deadlines), and the waits of the collecting
caller and the manager thread end by then.
"""

from libc.stdint cimport int64_t, uint64_t

from mizu._collect cimport Collector
from mizu._future cimport Cell, cell_of, drop_task, is_done, set_cancelled, set_exception
from mizu._observers cimport SETTLED
from mizu._rings cimport _Ring
from mizu._roster cimport Worker, signal_process
from mizu.includes.ring cimport kTicketBits, kWithdrawn
from mizu.includes.spin cimport kForever, now_ns

from concurrent.futures import _base

from mizu._collect import Future
from mizu._errors import WorkerDied, obituary, task_repr

__all__ = ["Controller"]

cdef uint64_t _EVERY_TICKET = kTicketBits   # withdrawing up to it withdraws every ticket to come
cdef int64_t _END_GRACE_NS = 200_000_000     # an ending worker's time from SIGTERM to SIGKILL
cdef int64_t _DEATH_POLL_NS = 1_000_000      # how often an ending worker is looked at until it has exited

cdef object _RUNNING = _base.RUNNING


cdef inline bint _claimed(uint64_t word, uint64_t task_id) noexcept:
    """Whether a ring's consumer has claimed task_id, by its ticket word (last_claim), of a task still in flight.

    Answered or not: a task whose answer the worker has marked ran.
    """
    # Withdrawn: behind the one it ran then, which it had claimed.
    return task_id <= (word & kTicketBits) if word & kWithdrawn else (word & kTicketBits) >= task_id


cdef inline bint _sent(Worker worker, Cell cell) noexcept:
    """Whether worker has sent the outcome of cell's task, by the answer it notes beside its ring's tickets.

    A hint (RingBase::note_answered): it may send it a moment after this look.
    """
    return (<_Ring>worker.ring).ring.get().base().answered() >= cell.task_id


cdef class Controller(Collector):
    """The pool controlling running work: deadlines, stop(), and workers ended or dead replaced."""

    def stop(self, future):
        """Stop the task of future, pending or running; whether it did (False once it ended). Its future is cancelled.

        A task has ended once its worker has sent its outcome, collected or
        not: its result is kept.

        A task not started yet is taken back (withdrawn from its worker's
        ring, the tasks queued behind it sent again); a running one's worker
        is ended and replaced (end_running).
        """
        cdef Cell cell
        cdef Worker worker, holder
        cdef int64_t at = 0
        cdef uint64_t word
        cdef Py_ssize_t i, claimed
        if not isinstance(future, Future) or cell_of(future).pool is None or cell_of(future).pool() is not self:
            raise ValueError(f"stop() takes a future that this executor's submit or map returned, not {future!r}")
        cell = cell_of(future)
        # Answered tasks leave the workers' queues first.
        self.collect_if_free()
        ended = []
        self.send_lock.take(kForever)
        try:
            # Tried again if its worker claims a task meanwhile.
            while not is_done(cell):
                if self.pending.remove(future):
                    if cell.state is _RUNNING:   # taken back earlier, or reserved for a worker coming up
                        self.reserved -= 1
                    ended.append((None, future, None, 0.0))
                    break
                holder = None
                for worker in self.workers:
                    if worker.in_flight.index(future) >= 0:
                        holder = worker
                        break
                if holder is None or holder.ending:
                    break
                word = (<_Ring>holder.ring)._last_claim(&at)
                if _claimed(word, cell.task_id):
                    if _sent(holder, cell):
                        break   # ended: its result is on its way
                    if not self.launcher.safe_with_threads:
                        raise ValueError("stop() cannot stop a running task of a pool whose workers start with "
                                         "fork: its worker would be replaced while the pool runs threads, which "
                                         "fork cannot do safely; make the pool with another mp_context")
                    if self.end_running(holder, future):
                        ended.append((holder, future, None, max(0.0, (now_ns() - at) * 1e-9)))
                    break   # else it has just been answered
                # Not started: every task of its worker after the one it runs
                # is withdrawn, even once that one is answered (the worker
                # may not claim another while this thread holds send_lock:
                # its next task may be still in its outbox, its answer
                # waiting for room in the ring, or the worker retiring);
                # this one is dropped, the others sent again. A withdrawal
                # fails only if the worker has claimed a task meanwhile.
                if (<_Ring>holder.ring)._withdraw(
                        word & kTicketBits, cell_of(holder.in_flight.at(holder.in_flight.size() - 1)).task_id,
                        True):
                    claimed = 0
                    while (claimed < holder.in_flight.size()
                           and _claimed(word, cell_of(holder.in_flight.at(claimed)).task_id)):
                        claimed += 1
                    self.requeue(holder, claimed)
                    self.pending.remove(future)
                    self.reserved -= 1
                    ended.append((None, future, None, 0.0))
                    break
        finally:
            self.send_lock.give()
        self.close_ended(ended)
        self.dispatch()
        return bool(ended)

    cdef check_deadlines(self):
        """End the workers whose running task is past its deadline; SIGKILL the ending ones past their grace.

        Called with recv_lock held once next_check_ns has passed; sets it
        again. A task that has not started yet cannot pass its deadline
        before now plus its timeout, which is when it is looked at again,
        even behind a running task whose own deadline is later (or none).
        """
        cdef Worker worker
        cdef Cell cell
        cdef Py_ssize_t i
        cdef int64_t now, at, due, next_ns = kForever
        cdef uint64_t word
        ended = []
        # A task answered just now is not past its deadline, however late
        # its result is collected.
        self.drain()
        self.send_lock.take(kForever)
        try:
            now = now_ns()
            for worker in self.workers:
                if worker.ending:
                    if worker.kill_at and now >= worker.kill_at:
                        signal_process(worker.process, "kill")
                        worker.kill_at = 0
                    next_ns = min(next_ns, worker.kill_at or now + _DEATH_POLL_NS)
                    continue
                for i in range(worker.in_flight.size()):
                    future = worker.in_flight.at(i)
                    cell = cell_of(future)
                    if not cell.timeout_ns:
                        continue
                    due = now + cell.timeout_ns
                    if i == 0:
                        word = worker.ring._last_claim(&at)
                        if _claimed(word, cell.task_id):
                            due = at + cell.timeout_ns
                            if due <= now:
                                timeout = cell.timeout_ns * 1e-9
                                task = task_repr(cell.kind, cell.fn, cell.first, cell.second, cell.calls)
                                if self.end_running(worker, future):
                                    error = TimeoutError(
                                        f"{task} ran longer than its task_timeout of {timeout:g} s: its worker "
                                        f"(process {worker.process.pid}) was ended, and is replaced.")
                                    ended.append((worker, future, error, (now - at) * 1e-9))
                                # Ended now (what was queued behind it is
                                # pending again), or it has just answered
                                # and its result is in the ring.
                                next_ns = min(next_ns, now + _DEATH_POLL_NS)
                                break
                    next_ns = min(next_ns, due)
            self.next_check_ns = next_ns
        finally:
            self.send_lock.give()
        self.close_ended(ended)
        if ended:
            self.dispatch()   # the tasks queued behind them, to the other workers

    cdef bint end_running(self, Worker worker, future) except -1:
        """End the task of future, which worker runs: its process ends, and is replaced. Under send_lock.

        The tickets queued behind it are withdrawn first, so the worker runs
        none of them, and they go back to `pending`; False if the worker has
        answered the task meanwhile. The future is the caller's to settle
        (close_ended).
        """
        cdef Cell cell = cell_of(future)
        # Sent, its result not collected yet: it has ended. (A task with a
        # deadline is marked answered before, which the withdrawal sees.)
        if _sent(worker, cell) or not (<_Ring>worker.ring)._withdraw(cell.task_id, _EVERY_TICKET):
            return False
        self.requeue(worker, worker.in_flight.index(future) + 1)
        worker.in_flight.pop_newest()
        worker.outbox.clear()
        self.feeding.discard(worker)
        worker.ending = True
        worker.kill_at = now_ns() + _END_GRACE_NS
        self.arm(now_ns() + _DEATH_POLL_NS)
        signal_process(worker.process, "terminate")
        self.kicked.set()   # the manager thread looks for its end from now on
        return True

    cdef close_ended(self, list ended):
        """Settle the futures of tasks ended outside a worker.

        ended: (worker that ran it or None, future, error or None to cancel
        it, seconds it ran).
        """
        cdef Cell cell
        for worker, future, error, seconds in ended:
            cell = cell_of(future)
            if worker is not None:
                self.tell(SETTLED, (<Worker>worker).index, cell, seconds)
            drop_task(cell)
            if cell.observed and self.watched:
                self.watched -= 1
            try:
                if error is None:
                    set_cancelled(future, cell)
                else:
                    set_exception(future, cell, error)
            except _base.InvalidStateError:
                pass

    cdef recover(self, Worker worker):
        """Replace worker, whose process exited without retiring; fail the task it ran.

        Its results are all collected, what it left half pushed in the
        result ring voided (check_workers), and the task it had claimed,
        unless the pool ended it (end_running), fails with WorkerDied once
        the successor has started and the process is reaped. What it had
        not claimed runs elsewhere or on its successor (replace).
        """
        cdef Cell cell
        cdef int64_t at = 0
        cdef uint64_t word
        proc = worker.process
        running = None
        self.send_lock.take(kForever)
        try:
            if worker.in_flight.size():
                word = (<_Ring>worker.ring)._last_claim(&at)
                if _claimed(word, cell_of(worker.in_flight.oldest()).task_id):
                    running = worker.in_flight.pop_oldest()
        finally:
            self.send_lock.give()
        try:
            self.replace(worker, True)
        finally:
            # Taken out of in_flight: settled here whatever replace raised.
            if running is not None:
                cell = cell_of(running)
                task = task_repr(cell.kind, cell.fn, cell.first, cell.second, cell.calls)
                code = proc.exitcode
                error = WorkerDied(f"{obituary(proc, None, True, task, '')[:-1]}; the pool replaces it.", proc.pid,
                                   code if code is not None and code >= 0 else None,
                                   -code if code is not None and code < 0 else None, task)
                self.close_ended([(worker, running, error, max(0.0, (now_ns() - at) * 1e-9))])
        self.dispatch()   # what it had queued, to the other workers
        # A pool that lost one worker will likely lose another: the next
        # successor is started ahead, once this one is sent what it runs
        # first. Not for a pool that is ending, or that started none.
        if worker.watch is not None and self.wants_spare():
            self.launcher.keep_spare([w.ring for w in self.roster], self.results)

