# cython: auto_pickle=False
"""Sending tasks: a submit's future joins `pending`, and dispatch sends it to the worker with the fewest in flight.

The picture of the whole flow is drawn in mizu._pool.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from libc.stdint cimport int64_t, uint64_t

from mizu._control cimport Controller
from mizu._future cimport Cell, cell_of, drop_task, new_future, set_running
from mizu._messages cimport BATCH, CALLABLE, KEYWORDS, TIMED, chunks
from mizu._rings cimport _Ring
from mizu._roster cimport Worker
from mizu.includes.messages cimport TaskHeader, task_header
from mizu.includes.ring cimport kTicketBits, kWithdrawn
from mizu.includes.spin cimport kForever, now_ns
from mizu.includes.wire cimport Writer

import weakref
from concurrent.futures import _base
from concurrent.futures.process import BrokenProcessPool

from mizu._collect import Future
from mizu._errors import fail_unpicklable
from mizu._messages import PeerGone
from mizu._pickler import named

__all__ = ["Dispatcher"]

_TAKE_BACK = 0.001     # seconds a task runs before those queued behind it are taken back for an idle worker
cdef int64_t _TAKE_BACK_NS = <int64_t>(_TAKE_BACK * 1e9)

cdef object _RUNNING = _base.RUNNING


cdef bint _withdraw_waiting(Worker worker) except -1:
    """Withdraw from worker's ring the tasks that wait there: those behind the one it runs, or, not up yet, all.

    False if the worker is between tasks, or has just claimed its first.
    """
    cdef _Ring ring = worker.ring
    cdef int64_t at = 0
    cdef uint64_t word, first = cell_of(worker.in_flight.oldest()).task_id
    cdef uint64_t last = cell_of(worker.in_flight.at(worker.in_flight.size() - 1)).task_id
    if worker.up:
        return ring._withdraw(first, last)
    # Not up, it has claimed none of them unless it has just come up.
    word = ring._last_claim(&at)
    if not word & kWithdrawn and word >= first:
        return False
    return ring._withdraw(word & kTicketBits, last)
cdef bint _interpreter_exiting = False


cdef extern from "pythread.h":
    unsigned long PyThread_get_thread_ident()


cdef void interpreter_exits() noexcept:
    """The interpreter is exiting: submits are refused from now on."""
    global _interpreter_exiting
    _interpreter_exiting = True


cdef class Dispatcher(Controller):
    """The pool sending its tasks: submit, the choice of a worker, each worker's ring and outbox."""

    def __init__(self, max_workers, launcher, max_tasks):
        super().__init__(max_workers, launcher, max_tasks)
        self.ref = weakref.ref(self)
        self.backlogged = 0

    cdef start(self, first):
        """Start the pool for the future `first`, its first task (mizu._manager.Manager's)."""
        raise NotImplementedError

    cpdef submit(self, int kind, fn, first, second, Py_ssize_t calls, counter=None, int64_t timeout_ns=-1):
        """The future of a task: its call's kind (CALL or BATCH), fn, and args and kwargs (or None), or units and shape.

        timeout_ns: its deadline once started, in ns (0: none); -1: the pool's.
        """
        cdef Cell cell = Cell.__new__(Cell)
        cell.pool = self.ref
        cell.kind, cell.fn, cell.first, cell.second, cell.calls = kind, fn, first, second, calls
        cell.timeout_ns = self.task_timeout_ns if timeout_ns < 0 else timeout_ns
        future = new_future(Future, cell)
        if self.send_owner == PyThread_get_thread_ident():
            # Submitted by the pickling code of a task that this thread is
            # sending, under send_lock: it takes no other lock (a thread
            # holding state_lock may wait for send_lock), and dispatch's loop
            # sends it too or leaves it pending; a start it calls for is put off.
            self.refuse_if_closed()
            self.pending.push(future)
            if counter is not None:
                self.bars.counters[cell] = counter
            if self.on_demand:
                self.adjust(True)
            return future
        if self.started and len(self.workers) == len(self.roster):
            # Every worker has started. Nothing from here to the append runs
            # Python code, so under the GIL no other thread runs in between:
            # shutdown() and terminate_broken() set their flags, and the
            # latter empties `pending`, either wholly before or wholly after.
            self.refuse_if_closed()
            self.pending.push(future)
            if counter is not None:
                self.bars.counters[cell] = counter
        else:
            if self.on_demand and not self.idle and self.started:
                # A result already in the ring leaves its worker idle: count
                # it before deciding to start another, as the stdlib's manager
                # thread counts each result as it arrives.
                self.collect_if_free()
            with self.state_lock:
                self.refuse_if_closed()
                if counter is not None:
                    self.bars.counters[cell] = counter
                # Not while this thread starts the pool: pickling the first
                # task runs Python code, which may submit.
                if not self.started and not self.launching:
                    self.start(future)
                else:
                    self.pending.push(future)
                if self.on_demand:
                    try:
                        self.adjust()
                    except BaseException:
                        # No worker started for it (an initializer that cannot
                        # be pickled for spawn, no descriptors left): it must not
                        # stay pending, or shutdown would wait for it forever.
                        # (Another thread may have sent it to a running worker.)
                        if self.pending.remove(future):
                            if cell.state is _RUNNING:   # reserved meanwhile by another thread's dispatch
                                self.reserved -= 1
                            drop_task(cell)
                            self.bars.counters.pop(cell, None)
                        raise
        self.dispatch()
        if self.pending.size():
            self.backlogged += 1
            self.collect_if_free()
        return future

    cdef int refuse_if_closed(self) except -1:
        if self.broken is not None:
            raise BrokenProcessPool(self.broken)
        if self.shutting_down:
            raise RuntimeError("cannot schedule new futures after shutdown")
        if _interpreter_exiting:
            raise RuntimeError("cannot schedule new futures after interpreter shutdown")
        return 0

    cdef dispatch(self):
        cdef Worker worker
        cdef Cell cell
        cdef Writer w
        if not self.pending.size() and not self.feeding and not self.unbalanced:
            return
        cdef list unpicklable = None
        cdef Py_ssize_t depth
        interrupted = None
        self.send_lock.take(kForever)
        self.send_owner = PyThread_get_thread_ident()
        try:
            depth = self.depth
            if self.feeding:
                for worker in list(self.feeding):
                    self.flush(worker)
            # terminate_broken takes send_lock: no task is between pending
            # and in_flight while it collects them.
            while self.pending.size() and self.broken is None or self.unbalanced and self.rebalance():
                worker = self.pick(depth)
                if worker is None:
                    break
                future = self.pending.pop_oldest()
                cell = cell_of(future)
                if self.reserved:
                    self.reserved -= 1
                elif not set_running(future, cell):   # cancelled
                    drop_task(cell)
                    continue
                self.last_task_id += 1
                cell.task_id = self.last_task_id
                # In flight before it is pickled: pickling may run Python code
                # and let another thread in, whose shutdown() must see it.
                worker.in_flight.push(future)
                try:
                    w.clear()
                    data = self.task_message(worker, cell, w)
                except BaseException as exc:
                    if type(exc) is PeerGone:
                        # Its arrays' descriptors found the worker's process
                        # gone: the task stays in flight, unsent, for the
                        # successor or the broken pool's error, as those it
                        # sent and the process did not take.
                        break
                    worker.in_flight.pop_newest()
                    drop_task(cell)
                    if unpicklable is None:
                        unpicklable = []
                    unpicklable.append((future, exc))
                    if not isinstance(exc, Exception):
                        # Ctrl-C or SystemExit while pickling: the task fails
                        # with it, and the caller still gets it.
                        interrupted = exc
                        break
                    continue
                worker.started_tasks += 1
                if data is None:
                    self.send(worker, w.data(), w.size(), None)
                else:
                    self.send(worker, PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data), data)
                if cell.timeout_ns:
                    # It cannot start before now (see Watchdog.check_deadlines).
                    self.arm(now_ns() + cell.timeout_ns)
            self.reserve()
        finally:
            self.send_owner = 0
            self.send_lock.give()
        # Completing a future runs its callbacks, which may submit: not under send_lock.
        if unpicklable is not None:
            for future, exc in unpicklable:
                fail_unpicklable(future, exc)
        if interrupted is not None:
            raise interrupted

    cdef reserve(self):
        """Set running the first pending tasks, one for each worker coming up. Under send_lock.

        They are the tasks that the stdlib's pool would have put in its call
        queue: the workers still starting will run them (whichever is up
        first), and shutdown(cancel_futures=True) does not cancel them.
        """
        cdef Cell cell
        while self.reserved < self.coming and self.reserved < self.pending.size():
            future = self.pending.at(self.reserved)
            cell = cell_of(future)
            if set_running(future, cell):
                self.reserved += 1
            else:   # cancelled
                self.pending.remove(future)
                drop_task(cell)

    cdef bytes task_message(self, Worker worker, Cell cell, Writer& w):
        """The message that sends the task of cell to worker, or None if it is written in w (empty). Under send_lock."""
        cdef TaskHeader head
        cdef int flags = cell.kind
        cdef unsigned long long fn_id = 0
        call = cell.first
        if cell.timeout_ns:
            flags |= TIMED
        if cell.kind == BATCH:
            flags |= cell.second
        elif cell.second:
            flags |= KEYWORDS
            call = (cell.first, cell.second)
        fn = cell.fn
        if fn is worker.last_fn:
            fn_id = worker.last_fn_id
        elif self.codec.registrable(fn):
            known = worker.registered.get(fn)
            if known is None:
                if self.codec.by_value and not named(fn):
                    fn_id = self.sent_by_value.id_for(worker.index, fn, worker.registered, &self.last_fn_id)
                else:
                    self.last_fn_id += 1
                    fn_id = self.last_fn_id
                flags |= CALLABLE
                call = (fn, call)
            else:
                fn_id = worker.last_fn_id = known
                worker.last_fn = fn
        else:
            flags |= CALLABLE
            call = (fn, call)
        head = task_header(cell.task_id, fn_id, flags)
        data = self.codec.encode(w, &head, sizeof(TaskHeader), call, 0, worker.channel)
        if flags & CALLABLE and fn_id:
            # Sent with it: the worker knows it from now on.
            worker.registered[fn] = worker.last_fn_id = fn_id
            worker.last_fn = fn
        return data

    cdef Worker pick(self, Py_ssize_t depth):
        # As with the stdlib's shared call queue, a task goes to a worker once
        # it is up (its initializer ran), and one at a time while others are
        # starting for the first time or are still to start (put off by a
        # paced pool): tasks bound early to the last of many starting workers
        # (spawn starts one in tens of milliseconds of CPU), or to one with a
        # slow initializer, would wait for it while the others idle, and
        # tasks queued behind busy workers would leave none pending for a
        # put-off start. Nor does a task join those of a worker whose
        # oldest has run so long that tasks were taken back from behind it
        # (rebalance), until it ends. A successor, though, replacing a
        # worker that retired or died, takes one task before it is up when
        # no worker that is up has room: it runs it as soon as it starts,
        # as the stdlib's worker finds its first task in the call queue.
        cdef Worker worker, best = None, successor = None
        if self.coming or self.deferred:
            depth = 1
        for worker in self.workers:
            # No process (watch None): between take_back and the successor's
            # launch, it takes no task.
            if worker.outbox or worker.held or worker.ending or worker.watch is None:
                continue
            if self.max_tasks is not None and worker.started_tasks >= self.max_tasks:
                continue
            if not worker.up:
                if successor is None and not worker.starting and not worker.in_flight.size():
                    successor = worker
                continue
            if worker.in_flight.size() >= depth:
                continue
            if best is None or worker.in_flight.size() < best.in_flight.size():
                best = worker
        return successor if best is None else best

    cdef bint rebalance(self) except -1:
        """Take back the tasks queued behind a running one while a worker idles; whether it did. Under send_lock.

        Called while `unbalanced`, which settle sets when a worker idles
        with nothing pending and tasks queued behind others.

        A worker's ring holds tasks behind the one it runs so that a busy
        pool pipelines; once nothing is pending and a worker idles, those
        wait for nothing. The busiest worker's are withdrawn (the ring's
        tickets decide each race with the worker: a task runs once) and
        put back in front of `pending`, running, as reserved tasks are:
        dispatch sends them again, to other workers (the worker is `held`
        until its oldest task ends; what they cannot take waits in
        `pending`). So is the task that a successor took before it was up
        (pick), which its initializer, however long, would hold back: all of
        a worker's tasks while it is not up, without holding it. Only once
        that task has run, or waited, for _TAKE_BACK (counted
        from when this first saw it oldest):
        fine-grained work drains sooner than its tasks could be sent
        again. Until then, or while the worker is between tasks (it has
        not claimed the oldest, or has ended it and claimed the next),
        `unbalanced` stays set and whoever collects tries again shortly
        (_FEED in a waiting caller, _POLL in the manager).
        """
        cdef Worker worker, idle = None, busiest = None
        cdef Py_ssize_t n
        cdef unsigned long long head
        cdef int64_t now
        cdef bint waiting = False
        self.unbalanced = False
        if self.pending.size() or self.broken is not None:
            return False
        now = now_ns()
        for worker in self.workers:
            if worker.outbox or worker.ending:
                continue
            n = worker.in_flight.size()
            if n >= 2 or n and not worker.up:
                # A task's run counts from when this first saw it oldest:
                # the hot paths keep no clock.
                head = cell_of(worker.in_flight.oldest()).task_id
                if head != worker.head_seen:
                    worker.head_seen, worker.head_seen_at = head, now
                    waiting = True
                elif now - worker.head_seen_at < _TAKE_BACK_NS:
                    waiting = True
                elif busiest is None or n > busiest.in_flight.size():
                    busiest = worker
            elif (n == 0 and idle is None and worker.up
                  and (self.max_tasks is None or worker.started_tasks < self.max_tasks)):
                idle = worker
        if idle is None:
            return False
        if busiest is not None and not _withdraw_waiting(busiest):
            busiest, waiting = None, True   # between tasks, or coming up
        self.unbalanced = waiting
        if busiest is None:
            return False
        if busiest.up:
            busiest.held = True
            self.requeue(busiest, 1)
        else:
            self.requeue(busiest, 0)
        return True

    cdef send(self, Worker worker, const char* data, Py_ssize_t n, bytes message):
        """Push the n bytes at data (message: them as bytes, or None) to worker's ring, or queue them in its outbox."""
        cdef _Ring ring = worker.ring
        if not worker.outbox and n <= ring.max_msg and ring._push(data, n, False, None, None):
            return
        if message is None:
            message = PyBytes_FromStringAndSize(data, n)
        if n <= ring.max_msg:
            worker.outbox.append(message)
        else:
            worker.outbox.extend(chunks(PyBytes_AS_STRING(message), PyBytes_GET_SIZE(message), 0, ring.max_msg))
        self.feeding.add(worker)
        self.flush(worker)

    cdef flush(self, Worker worker):
        cdef _Ring ring = worker.ring
        outbox = worker.outbox
        while outbox and ring._with_buffer(outbox[0], False, None, None):
            outbox.popleft()
        if not outbox:
            self.feeding.discard(worker)

    cdef bint sending(self):
        return bool(self.feeding)

