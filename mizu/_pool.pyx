# cython: auto_pickle=False
"""The pool engine: starts and stops workers, dispatches tasks, collects results, breaks, shuts down.

Data flow (one shared segment per pool; the rings are in it):

  caller threads                                     workers 0..N-1 (mizu._worker),
                                                     started by the pool's launcher
  submit() / map()
    | a Future, its task in its Cell, joins `pending`
    v
  dispatch()  [send_lock]
    | to the worker with the fewest tasks in flight,
    | at most `depth` each: its `in_flight` <- the future,
    | (once nothing is pending and a worker idles, the
    | tasks queued behind a running one are withdrawn
    | and sent again: rebalance)
    | its task ring <- the encoded task -------- SpscRing per worker ---->  pop a task, run it
    | A full ring, or a message longer than a slot:                              |
    | the message, or the pieces of a long one,                                  |
    | waits in the worker's `outbox` (the worker is                              |
    | then in `feeding`); each dispatch pushes what                              |
    | room has come, and so does each collecting slice.                          v
    | submit() then, if tasks still wait and nobody                        push its result
    | collects, collects what is ready (so in-flight room                        |
    | frees) and dispatches again.                                               |
    v                                                                            |
  Future.result() / exception()  [recv_lock]   <------- one MpmcRing shared by all
    collect_until(): the caller pops the result ring itself (spinning while a
    core is to spare beside the busy workers, else sleeping in the waiter),
    settles futures (set_result / set_exception, which run their callbacks),
    dispatches whatever waits, and checks the workers every 20 ms.

  manager thread ("mizu-manager", started by the first submit)  [recv_lock, taken only if free]
    Collects only while no caller does: while a callback, wait() or
    as_completed() waits on a future not done yet (`watched`), it sleeps in
    the result ring's waiter and collects as results come, running the
    callbacks (waking within 2 ms while tasks may be taken back for a
    worker that idles; but naps while a thread submitting a backlog collects);
    otherwise it wakes every 2 ms (0.2 ms while an outbox waits, 100 ms when
    nothing is outstanding) to collect what is ready and check the workers.
    Once the pool is shutting down and nothing is outstanding, it closes the
    task rings (each worker exits when its ring is closed and empty), joins
    the workers, closes the result ring and lets go of the segment.

Beside its ring, each worker shares a Unix socket pair with the client: the
descriptors of shared-memory segments that a message's arrays live in cross
it, in both directions, just before the message enters a ring (see
mizu._messages). A worker that reaches max_tasks_per_child says it retires;
the pool joins it and launches its successor on the same ring. With fork every
worker starts at the first submit, whose task goes to the first worker up
while the others are forked (Pool.start); with spawn and forkserver one starts
whenever a submit finds none idle, at most one per CPU at a time (the others
put off until one is up; Pool.start_deferred). Tasks wait in `pending` until a
worker's first message says it is up, and go one at a time while others
are still starting or their starts are put off (Pool.pick).

Every 20 ms slice, whoever collects polls each worker's pidfd; a worker that
died without retiring breaks the pool as the stdlib's does (BrokenProcessPool
on every pending future, then on submit). The messages add to the stdlib's
text the dead process, its exit code or signal, the task it was running and,
when its initializer or the unpickling of a task raised, that error (the
worker sends its traceback before it exits; see mizu._errors). The other
workers get SIGTERM, and SIGKILL if they outlast a grace period.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.exc cimport PyErr_CheckSignals
from libc.stdint cimport int64_t
from libc.string cimport memset
from libcpp.vector cimport vector

from mizu._core cimport PeerWatch, _Ring
from mizu._future cimport Cell, cell_of, is_done, new_future, set_exception, set_result, set_running
from mizu._messages cimport (BATCH, CALL, CALLABLE, KEYWORDS, OK, READY, RETIRING, STARTING, Codec, Reassembler, body_of,
                             chunks, is_chunk)
from mizu.includes.messages cimport Message, TaskHeader, kResult, read_message, task_header
from mizu._sync cimport Fifo, Lock
from mizu.includes.liveness cimport PeerWatch as CPeerWatch
from mizu.includes.wire cimport Writer
from mizu.includes.spin cimport kForever, now_ns

import collections
import os
import threading
import time
import traceback
import types
import warnings
import weakref
from concurrent.futures import _base
from concurrent.futures.process import BrokenProcessPool, _RemoteTraceback
from time import monotonic as _monotonic

from mizu import _core
from mizu._errors import (BROKEN, BROKEN_FUTURE, COLLECTED, COLLECTED_FUTURE, FORCED, FORCED_FUTURE, NOT_REPLACED,
                          NOT_REPLACED_FUTURE, NOT_STARTED, NOT_STARTED_FUTURE, SHORT_OF_PROCESSES, TERMINATED,
                          TERMINATED_FUTURE, brief, error_of, fail_unpicklable, obituary, outline_repr,
                          short_of_processes, task_repr)
from mizu._future import LazyFuture
from mizu._pickler import named

__all__ = ["Future", "Pool", "Worker"]

_SLICE = 0.02
cdef int64_t _SLICE_NS = 20_000_000
_IDLE = 0.1
_POLL = 0.002
_FEED = 0.0002
cdef int64_t _FEED_NS = 200_000
_SLOT_BYTES = 4096 - 16   # the size of every ring's slots
_MAX_DEPTH = 48
_SHORT_TASK = 200e-6
cdef Py_ssize_t _MAX_DEPTH_C = _MAX_DEPTH
cdef double _SHORT_TASK_C = _SHORT_TASK
_TAKE_BACK = 0.001     # seconds a task runs before those queued behind it are taken back for an idle worker
cdef int64_t _TAKE_BACK_NS = <int64_t>(_TAKE_BACK * 1e9)
_GRACE = 1.0          # seconds a worker has to end on SIGTERM when the pool breaks
_SLOWEST = 5          # the slowest tasks that insights() reports
_UNNAMED_KEPT = 64    # functions sent by value that a worker keeps registered (see task_message)
_STARTING = 0.1       # seconds a worker's start counts against the starts at once (see start_deferred)


cdef extern from "pythread.h":
    unsigned long PyThread_get_thread_ident()


cdef inline void _drop_task(Cell cell) noexcept:
    """Let go of the call of a task that has ended (or never will run): its arguments may be large."""
    cell.fn = cell.first = cell.second = None


cdef object _lazy_result = LazyFuture.result
cdef object _lazy_exception = LazyFuture.exception
cdef object _FINISHED = _base.FINISHED
cdef object _RUNNING = _base.RUNNING


cdef object _collect_for(Cell cell, timeout):
    """Collect results in this thread until the future of cell is done; the part of timeout left for the stdlib's own wait."""
    if is_done(cell):
        return timeout
    pool = cell.pool()
    if pool is None:
        return timeout
    if timeout is None:
        (<Pool>pool).wait_until(cell, kForever)
        return None
    cdef int64_t deadline = now_ns() + <int64_t>(max(0.0, min(float(timeout), 1e9)) * 1e9)
    (<Pool>pool).wait_until(cell, deadline)
    return max(0, deadline - now_ns()) * 1e-9


class Future(LazyFuture):
    """A concurrent.futures.Future whose waiting caller collects results itself.

    Its name is the stdlib's, so that it prints as the stdlib's futures do.
    """

    def _observed(self):
        # A callback, wait() or as_completed() now depends on the manager thread.
        pool = (<Cell>self._cell).pool()
        if pool is not None:
            pool.observe()

    def result(self, timeout=None):
        cdef Cell cell = self._cell
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
        return _lazy_exception(self, _collect_for(self._cell, timeout))


cdef class Worker:
    """One of the pool's workers: its task ring, the process serving it (a successor after one retires), bookkeeping."""

    def __init__(self, index, ring):
        self.index = index
        self.ring = ring
        self.process = None
        self.watch = None             # the process's PeerWatch
        self.channel = None           # this end of the socket pair shared with the process
        self.failure = None           # (stage, traceback[, error]) if its initializer or a task's unpickling raised
        # The futures of the tasks sent, oldest first: a worker answers in the order it is sent tasks.
        self.in_flight = Fifo()
        self.outbox = collections.deque()   # messages, or the pieces of a long one, waiting for room in the ring
        self.registered = {}          # callable -> id, for this process
        self.unnamed = {}             # those of them sent by value (by_value), oldest first
        self.last_fn = None
        self.started_tasks = 0        # tasks sent to the current process

    cdef release(self):
        self.ring = None
        self.process = self.watch = self.channel = self.last_fn = None
        self.registered.clear()
        self.unnamed.clear()


cdef object _answered(Fifo in_flight, unsigned long long task_id):
    """Take the future of task_id from a worker's in_flight, or None: the oldest, unless the worker broke protocol."""
    if in_flight.size() and cell_of(in_flight.oldest()).task_id == task_id:
        return in_flight.pop_oldest()
    for future in in_flight.snapshot():
        if cell_of(future).task_id == task_id:
            in_flight.remove(future)
            return future
    return None


def _ring_slots(max_workers):
    """(slots of each worker's task ring, slots of the result ring) for a pool of max_workers.

    Every page of the pool's segment is reserved when it is made, which
    takes time in proportion (doc/dev/core.rst), so the rings are as deep
    as the pool can use: a worker's ring holds its deepest queue of short
    tasks (_MAX_DEPTH) while the pool has 16 workers or fewer, and 32 of
    them beyond; the result ring holds a result for each task that all the
    workers' queues hold, between 256 and 1024 slots. A ring that is full
    makes its sender wait, or queue the message in the client.
    """
    results = 256
    while results < min(1024, max_workers * _MAX_DEPTH):
        results *= 2
    return (64 if max_workers <= 16 else 32), results


cdef class Pool:
    """Pool(max_workers, launcher, max_tasks)

    The state shared by the Executor, its futures and the manager thread.

    launcher starts each worker (mizu._launchers), and its codec says how
    that kind of worker takes values (mizu._messages); max_tasks: the tasks
    a worker runs before it retires, or None.
    """

    def __init__(self, max_workers, launcher, max_tasks):
        self.launcher = launcher
        self.codec = launcher.codec
        self.max_tasks = max_tasks
        # Each allocation is rounded up to 128 bytes; a page covers the segment's header.
        task_slots, result_slots = _ring_slots(max_workers)
        ring_bytes = (_core.MpmcRing.footprint(result_slots, _SLOT_BYTES)
                      + max_workers * _core.SpscRing.footprint(task_slots, _SLOT_BYTES))
        self.segment = _core.Segment(ring_bytes + 128 * (max_workers + 1) + 4096)
        self.results = _core.MpmcRing(self.segment, result_slots, _SLOT_BYTES)
        self.roster = [Worker(i, _core.SpscRing(self.segment, task_slots, _SLOT_BYTES))
                       for i in range(max_workers)]
        # The workers of the roster that have started, in its order: all at
        # once, or (on_demand, as the stdlib does with spawn and forkserver)
        # one whenever a task finds no idle worker.
        self.workers = []
        self.on_demand = launcher.on_demand
        self.paced = launcher.paced
        self.idle = collections.deque()   # one entry per completed task, taken by a submit instead of a start
        self.deferred = 0
        self.pending = Fifo()
        self.send_lock = Lock()
        self.recv_lock = Lock()
        self.state_lock = threading.RLock()
        self.recv_owner = 0             # the thread holding recv_lock
        self.collecting = 0
        self.watched = 0
        self.backlogged = 0
        self.kicked = threading.Event()
        self.reassembler = Reassembler()
        self.task_seconds = _SHORT_TASK
        self.depth = 2
        self.cores = _core.usable_cpus()
        self.feeding = set()          # workers whose outbox is not empty
        self.broken = None
        self.shutting_down = False
        self.started = False
        self.manager = None
        self.ref = weakref.ref(self)
        self.owner = os.getpid()
        self.slowest = []
        self.slow_floor = 0.0
        self.counters = {}
        self.stopped_at = self.final_workers = None
        _all_pools.add(self)

    # -- starting and stopping -------------------------------------------------------------

    def start(self, first):
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
        _signal(worker.process, "kill")
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

    cdef grow(self):
        worker = self.roster[len(self.workers)]
        self.launch(worker)
        self.workers.append(worker)

    cdef bint grow_while_possible(self) except -1:
        """grow(); False if the system gives no more processes while other workers run: the pool goes on with them.

        With none running, the error says what to do.
        """
        try:
            self.grow()
        except OSError as exc:
            if not short_of_processes(exc):
                raise
            text = SHORT_OF_PROCESSES.format(error=exc.strerror)
            if not self.running():
                raise type(exc)(exc.errno, f"No worker of the pool could start: {text}.") from exc
            self.grow_no_more(text)
            return False
        return True

    cdef grow_no_more(self, str reason):
        """Start no worker beyond those started, and say so once: reason, why no more can start."""
        asked = len(self.roster)
        del self.roster[len(self.workers):]
        if not self.short_told:
            self.short_told = True
            warnings.warn(f"mizu's pool goes on with {self.running()} of the {asked} workers asked for: {reason}.",
                          RuntimeWarning)

    cdef Py_ssize_t running(self):
        """The workers whose processes run (started, not exited or left out)."""
        cdef Worker worker
        cdef Py_ssize_t n = 0
        for worker in self.workers:
            n += worker.watch is not None
        return n

    cdef adjust(self, bint put_off=False):
        """On demand: start a worker unless a completed task left one idle (the stdlib's rule).

        A paced pool puts the start off (start_deferred) while as many
        workers as there are CPUs are starting, or while earlier starts are
        put off; any pool does if put_off. Under state_lock, unless put_off:
        then it runs no Python code, so no other thread runs meanwhile.
        """
        if len(self.workers) < len(self.roster):
            if self.idle:
                self.idle.pop()
            elif put_off or (self.paced and (self.deferred or self.starting_now() >= self.cores)):
                self.deferred += 1   # started as results and notices are collected, or by the manager thread
            else:
                self.grow_while_possible()

    cdef str start_deferred(self):
        """Start the workers that submits put off, while fewer than one per CPU are starting. Under state_lock.

        Starting a worker under spawn or forkserver takes tens of
        milliseconds of CPU. Started all at once, as the stdlib's pool
        starts them, many workers share the CPUs and each comes up only
        when nearly all do; started a few at a time, the first run tasks
        while the next start, and a task that ends before a put-off start
        leaves its worker idle to take the next task instead (a result
        cancels a put-off start as it would have spared the stdlib's a
        start). A start counts for _STARTING seconds at most, so that one
        that waits (for a slow disk, a loaded machine) does not hold the
        next back longer. Called after results and notices are collected
        (a worker that came up has its task by then) and by the manager
        thread. Once `pending` is empty, or every worker has started, the
        starts put off are dropped.
        Returns what broke the pool if a start failed, for the caller to
        break it once it no longer holds state_lock (start_put_off).
        """
        while (self.deferred and self.broken is None and len(self.workers) < len(self.roster)
               and self.pending.size() > self.coming and self.starting_now() < self.cores):
            self.deferred -= 1
            try:
                if not self.grow_while_possible():
                    break
            except Exception as exc:
                if short_of_processes(exc.__cause__):
                    return str(exc)
                return f"A worker could not be started: {brief.repr(exc)}."
        if not self.pending.size() or len(self.workers) == len(self.roster):
            self.deferred = 0
        return None

    cdef start_put_off(self):
        """start_deferred, then break the pool if a start failed."""
        with self.state_lock:
            failure = self.start_deferred()
        if failure is not None:
            self.terminate_broken(failure)

    cdef Py_ssize_t starting_now(self):
        """The workers not up yet whose first process was started less than _STARTING seconds ago."""
        cdef Worker worker
        cdef Py_ssize_t n = 0
        cdef double now = _monotonic()
        for worker in self.workers:
            if worker.starting and worker.counted_until > now:
                n += 1
        return n

    cdef launch(self, Worker worker):
        """Start a process for worker, its first or the successor of one that retired."""
        # All set before the process starts: another thread may collect its
        # first notice (ready, or its initializer's failure) at once.
        worker.registered.clear()
        worker.unnamed.clear()
        worker.last_fn = None
        worker.started_tasks = 0
        worker.held = False
        worker.popped_at_start = worker.ring.popped
        worker.failure = None
        worker.up = False
        # A first start counts in `coming` (see pick); a successor, replacing
        # a retired process, does not hold the other workers' depth down.
        worker.starting = worker.process is None
        self.coming += worker.starting
        if worker.starting:
            worker.launched_at = _monotonic()
        proc = None
        try:
            proc, channel = self.launcher.launch(worker.index, worker.ring, self.results)
            watch = _core.PeerWatch(proc.pid)
        except BaseException:
            if worker.starting:
                worker.starting = False
                self.coming -= 1
            if proc is not None:
                channel.close()
                proc.kill()
                proc.join()
            raise
        if worker.channel is not None:
            worker.channel.close()
        worker.process, worker.watch, worker.channel = proc, watch, channel
        # From now: the client's own time starting it (a fork and exec
        # under spawn) is not the worker's.
        worker.counted_until = _monotonic() + _STARTING

    cdef bint sending(self):
        return bool(self.feeding)

    cdef outstanding(self):
        """A future that is not done yet, or None. Safe while other threads submit and collect."""
        cdef Worker worker
        for worker in self.workers:
            future = worker.in_flight.oldest()
            if future is not None:
                return future
        for future in self.pending.snapshot():
            if not future.done():
                return future
        return None

    cdef close_workers(self, kill=None):
        """Close every worker's ring, so it exits; with kill ("terminate"), signal them too; join them.

        The rings of the whole roster: a process forked just before a start
        was cut short (Ctrl-C) may run without the pool knowing it. It works
        on its own list of the workers' parts: the manager thread may let go
        of the pool's (release) meanwhile.
        """
        cdef Worker worker
        parts = [(worker.ring, worker.process, worker.channel) for worker in self.roster]
        procs = [proc for _, proc, _ in parts if proc is not None]
        for ring, _, _ in parts:
            if ring is not None:
                ring.close()
        if kill is not None:
            for proc in procs:
                _signal(proc, kill)
            deadline = _monotonic() + _GRACE
            for proc in procs:
                proc.join(max(0.0, deadline - _monotonic()))
                # A worker that ignores or handles SIGTERM, or is stopped, must not hold the caller.
                _signal(proc, "kill")
        for _, proc, channel in parts:
            if proc is not None:
                proc.join()
                channel.close()

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
            self.final_workers = self.worker_figures()
            self.stopped_at = _monotonic()
            # The bars of maps whose tasks never settled (cancelled at
            # shutdown, unpicklable, lost with a broken pool) end here.
            counters, self.counters = list(self.counters.values()), {}
            for counter in set(counters):
                counter.close()
            for worker in self.roster:
                if worker.channel is not None:
                    worker.channel.close()
                worker.release()
            self.workers, self.roster = [], []
            self.results = self.segment = None
        finally:
            self.send_lock.give()
            self.recv_lock.give()

    # -- submitting ---------------------------------------------------------------------------

    cpdef submit(self, int kind, fn, first, second, Py_ssize_t calls, counter=None):
        """The future of a task: its call's kind (CALL or BATCH), fn, and args and kwargs, or units and shape."""
        cdef Cell cell = Cell.__new__(Cell)
        cell.pool = self.ref
        cell.kind, cell.fn, cell.first, cell.second, cell.calls = kind, fn, first, second, calls
        future = new_future(Future, cell)
        if self.send_owner == PyThread_get_thread_ident():
            # Submitted by the pickling code of a task that this thread is
            # sending, under send_lock: it takes no other lock (a thread
            # holding state_lock may wait for send_lock), and dispatch's loop
            # sends it too or leaves it pending; a start it calls for is put off.
            self.refuse_if_closed()
            self.pending.push(future)
            if counter is not None:
                self.counters[cell] = counter
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
                self.counters[cell] = counter
        else:
            if self.on_demand and not self.idle and self.started:
                # A result already in the ring leaves its worker idle: count
                # it before deciding to start another, as the stdlib's manager
                # thread counts each result as it arrives.
                self.collect_if_free()
            with self.state_lock:
                self.refuse_if_closed()
                if counter is not None:
                    self.counters[cell] = counter
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
                            _drop_task(cell)
                            self.counters.pop(cell, None)
                        raise
        self.dispatch()
        if self.pending.size():
            self.backlogged += 1
            self.collect_if_free()
        return future

    cdef collect_if_free(self):
        """Collect the results in the ring now, unless another thread is collecting or the pool let go of it."""
        if self.take_recv(0):
            try:
                if self.results is not None:
                    self.collect_ready()
            finally:
                self.give_recv()

    cdef int refuse_if_closed(self) except -1:
        if self.broken is not None:
            raise BrokenProcessPool(self.broken)
        if self.shutting_down:
            raise RuntimeError("cannot schedule new futures after shutdown")
        if _interpreter_exiting:
            raise RuntimeError("cannot schedule new futures after interpreter shutdown")
        return 0

    cdef void learn(self, double seconds) noexcept:
        """Fold a task's duration into the depth: deep for short tasks, shallow for long ones."""
        self.task_seconds = seconds = 0.8 * self.task_seconds + 0.2 * seconds
        if seconds >= _SHORT_TASK_C:
            self.depth = 2
        else:
            self.depth = <Py_ssize_t>min(<double>_MAX_DEPTH_C, max(2.0, _SHORT_TASK_C / max(seconds, 1e-7)))

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
                    _drop_task(cell)
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
                    worker.in_flight.pop_newest()
                    _drop_task(cell)
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
                _drop_task(cell)

    cdef bytes task_message(self, Worker worker, Cell cell, Writer& w):
        """The message that sends the task of cell to worker, or None if it is written in w (empty). Under send_lock."""
        cdef TaskHeader head
        cdef int flags = cell.kind
        cdef unsigned long long fn_id = 0
        call = cell.first
        if cell.kind == BATCH:
            flags |= cell.second
        elif cell.second:
            flags |= KEYWORDS
            call = (cell.first, cell.second)
        fn = cell.fn
        evicted = unnamed = None
        if fn is worker.last_fn:
            fn_id = worker.last_fn_id
        elif self.codec.registrable(fn):
            known = worker.registered.get(fn)
            if known is None:
                if self.codec.by_value and not named(fn):
                    # A lambda or closure sent by value: the worker keeps at
                    # most _UNNAMED_KEPT of them, the newest, a new one
                    # taking the id of the oldest (the worker's registry
                    # lets go of it then), or a loop making closures would
                    # keep every one alive in both processes.
                    unnamed = worker.unnamed
                    if len(unnamed) >= _UNNAMED_KEPT:
                        evicted, fn_id = next(iter(unnamed.items()))
                if evicted is None:
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
            if evicted is not None:
                del unnamed[evicted], worker.registered[evicted]
            if unnamed is not None:
                unnamed[fn] = fn_id
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
        # (rebalance), until it ends.
        cdef Worker worker, best = None
        if self.coming or self.deferred:
            depth = 1
        for worker in self.workers:
            if not worker.up or worker.outbox or worker.held or worker.in_flight.size() >= depth:
                continue
            if self.max_tasks is not None and worker.started_tasks >= self.max_tasks:
                continue
            if best is None or worker.in_flight.size() < best.in_flight.size():
                best = worker
        return best

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
        `pending`). Only once that task has run for _TAKE_BACK (counted
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
            if worker.outbox:
                continue
            n = worker.in_flight.size()
            if n >= 2:
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
        if busiest is not None and not busiest.ring._withdraw(
                cell_of(busiest.in_flight.oldest()).task_id,
                cell_of(busiest.in_flight.at(busiest.in_flight.size() - 1)).task_id):
            busiest, waiting = None, True   # between tasks
        self.unbalanced = waiting
        if busiest is None:
            return False
        busiest.held = True
        while busiest.in_flight.size() > 1:
            self.pending.push_oldest(busiest.in_flight.pop_newest())
            self.reserved += 1
            busiest.started_tasks -= 1
        return True

    cdef bint queued_behind(self) noexcept:
        """Whether a worker has a task queued behind the one it runs."""
        cdef Worker worker
        for worker in self.workers:
            if worker.in_flight.size() >= 2:
                return True
        return False

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

    # -- receiving -----------------------------------------------------------------------------

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
            raise RuntimeError("a done-callback cannot wait for a future of its own pool: it runs in the "
                               "thread that collects the results")
        self.collecting += 1
        try:
            while not is_done(cell):
                now = now_ns()
                if now >= deadline_ns:
                    return
                if not self.take_recv(min(deadline_ns, now + _SLICE_NS)):
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
        cdef int64_t now, wait, checked = now_ns()
        while not is_done(cell) and self.broken is None:
            now = now_ns()
            if now - checked >= _SLICE_NS:
                # Results from other workers may keep coming while the one
                # this future waits on is dead.
                checked = now
                self.check_workers()
                continue
            wait = min(_SLICE_NS, deadline_ns - now)
            if wait <= 0:
                return
            if self.feeding or self.unbalanced:
                # Chunks of a large task wait for room in a worker's ring,
                # which frees as the worker reads: keep feeding it. Or
                # tasks may soon be taken back for an idle worker.
                self.dispatch()
                wait = min(wait, _FEED_NS)
            try:
                slot = ring._pop(wait * 1e-9, None, self.core_to_spare())
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

    cdef handle(self, bytes slot):
        # A signal handler's exception (Ctrl-C's KeyboardInterrupt, in the
        # main thread) must not cut the handling of a slot short: its result
        # would be lost, and its future never done. Handlers of signals that
        # came while the slot was awaited run now, and what they raise is
        # raised once the slot is handled.
        try:
            PyErr_CheckSignals()
        except BaseException:
            self.settle(slot)
            raise
        self.settle(slot)

    cdef settle(self, bytes slot):
        cdef Worker worker
        cdef Cell cell
        cdef Message m
        cdef bytes message = slot
        cdef int status
        cdef unsigned long long task_id
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
            # The roster's: a worker's first notice may come before grow()
            # has added it to `workers`.
            if m.kind != kResult or m.sender >= len(self.roster):
                raise ValueError(f"a message from worker {m.sender} of {len(self.roster)} that is not a result")
            worker = self.roster[m.sender]
            value = body_of(m, message, worker.channel)
            status, task_id = m.result.status, m.result.task_id
        except KeyboardInterrupt as exc:
            # A signal came during unpickling, which runs Python code: what
            # was read of the result is gone, so its future cannot be done.
            self.terminate_broken(f"Collecting a result was interrupted by {exc!r}; the result is lost.")
            raise
        except BaseException as exc:
            # SystemExit too, raised by the result's own unpickling code: the
            # stdlib breaks the pool on whatever its result reader raises.
            self.terminate_broken(f"A result could not be unpickled: {brief.repr(exc)}.",
                                  "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
            return
        if status == READY:
            worker.up = True
            if not worker.up_at:
                worker.up_at = _monotonic()
            if worker.starting:
                worker.starting = False
                self.coming -= 1
            self.unbalanced = True
            return
        if status == RETIRING:
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
        worker.calls_done += cell.calls
        worker.busy += m.result.seconds
        if m.result.seconds > self.slow_floor:
            self.note_slow(worker, cell, m.result.seconds)
        _drop_task(cell)
        interrupted = None
        if self.counters:
            counter = self.counters.pop(cell, None)
            if counter is not None:
                # A bar's own errors it logs; a signal's exception raised
                # during its write must not keep the future from settling.
                try:
                    counter.add(cell.calls)
                except BaseException as exc:
                    interrupted = exc
        if self.deferred:
            self.deferred -= 1
        elif self.on_demand and len(self.workers) < len(self.roster):
            self.idle.append(None)
        if cell.observed and self.watched:
            self.watched -= 1
        self.codec.complete(future, cell, status, value)
        if interrupted is not None:
            raise interrupted

    cdef note_slow(self, Worker worker, Cell cell, double seconds):
        """Count the task of cell among the slowest (a new list: insights() may read the old one meanwhile).

        Its arguments are described by outline_repr, in bounded time; a
        callable whose name cannot be read is described by its type.
        """
        try:
            text = task_repr(cell.kind, cell.fn, cell.first, cell.second, cell.calls, outline_repr)
        except Exception:
            text = f"a task of {outline_repr(cell.fn)}"
        slowest = sorted(self.slowest + [(seconds, worker.index, text)], key=lambda entry: -entry[0])[:_SLOWEST]
        if len(slowest) == _SLOWEST:
            self.slow_floor = slowest[-1][0]
        self.slowest = slowest

    def worker_figures(self):
        """(index, pid or None, calls, busy, up_at, launched_at) of each worker, as of now or of its release."""
        cdef Worker worker
        if self.final_workers is not None:
            return self.final_workers
        return [(worker.index, None if worker.process is None else worker.process.pid, worker.calls_done, worker.busy,
                 worker.up_at, worker.launched_at) for worker in list(self.roster)]

    def insights(self):
        """Insights: each worker's calls, busy and idle time, and the slowest tasks so far."""
        # Imported here: dataclasses costs milliseconds that a pool not asked for insights need not pay.
        from mizu._insights import Insights, SlowTask, WorkerInsights

        end = _monotonic() if self.stopped_at is None else self.stopped_at
        workers = tuple(
            WorkerInsights(index=index, pid=pid, calls=calls, busy=busy,
                           idle=max(0.0, end - up_at - busy) if up_at else 0.0,
                           startup=up_at - launched_at if up_at else None)
            for index, pid, calls, busy, up_at, launched_at in self.worker_figures())
        return Insights(workers=workers,
                        slowest=tuple(SlowTask(seconds, index, task) for seconds, index, task in self.slowest))

    cdef replace(self, Worker worker):
        worker.process.join()
        self.reassembler.forget(worker.index)
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
            if self.watched and not submitting:
                try:
                    ring.wait_readable(_FEED if self.sending() else _POLL if self.unbalanced else _SLICE)
                except EOFError:
                    break
            elif self.kicked.wait(_IDLE if idle else _FEED if self.sending() or self.watched else _POLL):
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

    # -- failure --------------------------------------------------------------------------------

    cdef check_workers(self):
        """Break the pool if a worker died without retiring. Called with recv_lock held."""
        cdef vector[CPeerWatch*] watches
        for worker in self.workers:
            if worker.watch is not None:
                watches.push_back((<PeerWatch>worker.watch).watch.get())
        if not CPeerWatch.any_exited(watches.data(), watches.size()):
            return
        for worker in self.workers:
            if worker.watch is None or worker.watch.alive():
                continue
            # Its last results, and a retirement notice, may still be in the ring.
            self.collect_ready()
            if worker.watch.alive() or self.broken is not None:
                continue
            _reap(worker.process)
            if not worker.up and worker.failure is not None and worker.failure[0] == STARTING:
                if self.leave_out(worker):
                    continue
                self.terminate_broken(self.obituary_of(worker), None, NOT_STARTED, NOT_STARTED_FUTURE)
                return
            self.terminate_broken(self.obituary_of(worker), None if worker.failure is None else worker.failure[1])
            return

    cdef bint leave_out(self, Worker worker) except -1:
        """Go on without worker, which could not start for want of processes; False if no other worker runs."""
        worker.watch = None
        if worker.starting:
            worker.starting = False
            self.coming -= 1
        if not self.running():
            return False
        with self.state_lock:
            self.grow_no_more(SHORT_OF_PROCESSES.format(error=error_of(worker.failure[1])))
        return True

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
        cdef Worker worker
        with self.state_lock:
            if self.broken is not None:
                return
            results = self.results   # the manager thread may let go of it as soon as the pool is broken
            with self.send_lock:
                self.broken = f"{pool_text}. {detail}"
                futures = self.pending.take_all()
                self.reserved = 0
                for worker in self.workers:
                    futures.extend(worker.in_flight.take_all())
                    worker.outbox.clear()
                self.feeding.clear()
        cause = f"\n'''\n{detail if remote is None else remote.rstrip()}\n'''"
        for future in futures:
            _drop_task(cell_of(future))
            error = BrokenProcessPool(f"{future_text} {detail}")
            error.__cause__ = _RemoteTraceback(cause)
            try:
                future.set_exception(error)
            except _base.InvalidStateError:
                pass
        self.close_workers(kill="terminate")
        if results is not None:
            results.close()

    cdef abandon(self):
        """In a child forked from the pool's process: let go of the pool without touching its rings or processes.

        They are the parent's: a push or pop here would take its tasks and
        results. Every lock may have been held by a thread that the child
        does not have, so none is taken. The futures not done yet fail here,
        and their callbacks (the parent's) do not run.

        A started (or starting) pool's workers, rings, segment and locks are
        kept in _inherited, not freed: freeing them would write to every
        page they lie on, and so copy it, in each worker that a fork pool
        forks. The child's mapping of the segment, and its copies of the
        workers' descriptors, last until it exits. A pool not started yet
        lets go of them, so that its segment is freed once its own process
        frees it.
        """
        cdef Cell cell
        cdef Worker worker
        self.broken = (f"This pool belongs to process {self.owner}; a process forked from it cannot use it: create "
                       f"a new ProcessPoolExecutor in the child")
        futures = self.pending.take_all()
        self.reserved = 0
        for worker in self.workers:
            futures.extend(worker.in_flight.take_all())
        self.feeding.clear()
        self.counters.clear()
        if self.started or self.launching:
            _inherited.append((self.workers, self.roster, self.results, self.segment, self.send_lock,
                               self.recv_lock, self.state_lock, self.kicked))
        self.workers, self.roster, self.results, self.segment = [], [], None, None
        self.send_lock, self.recv_lock, self.state_lock = Lock(), Lock(), threading.RLock()
        self.kicked = threading.Event()
        self.recv_owner = 0
        self.collecting = 0
        for future in futures:
            cell = cell_of(future)
            cell.observed = False
            cell.condition = cell.waiters = cell.callbacks = None
            _drop_task(cell)
            set_exception(future, cell, BrokenProcessPool(self.broken))

    # -- shutdown -----------------------------------------------------------------------------------

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
                future.cancel()
                _drop_task(cell_of(future))
        if not self.started:
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
        for worker in self.workers:
            if worker.process is not None:
                _signal(worker.process, operation)


def _reap(proc):
    """Join proc, which has exited, and wait until its exit code is recorded.

    multiprocessing reaps its children from whichever thread polls first
    (Process.start() polls them all): a join that loses that race returns
    before the winner has stored the code, which it does a moment later.
    """
    proc.join()
    deadline = _monotonic() + 1.0
    while proc.exitcode is None and _monotonic() < deadline:
        time.sleep(0.001)


def _signal(proc, operation):
    """proc.terminate() or proc.kill() unless it has exited."""
    if proc.exitcode is None:
        try:
            getattr(proc, operation)()
        except (ValueError, ProcessLookupError):
            pass


_live_pools = set()       # started and not yet let go of: shut down at interpreter exit
cdef bint _interpreter_exiting = False
_all_pools = weakref.WeakSet()
_inherited = []           # in a forked child, what its parent's pools held (Pool.abandon)


def _abandon_inherited_pools():
    _live_pools.clear()
    for pool in list(_all_pools):
        (<Pool>pool).abandon()


os.register_at_fork(after_in_child=_abandon_inherited_pools)


def _python_exit(cancel_futures=False):
    global _interpreter_exiting
    _interpreter_exiting = True
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
