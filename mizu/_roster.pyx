# cython: auto_pickle=False
"""The pool's workers: its roster, starting and pacing their processes, and ending them.

The state that every part of the engine shares (the roster, the tasks
pending, whether the pool is broken or shutting down) is held here, at the
base of the engine's classes; the data flow is drawn in mizu._pool.
"""

from mizu._observers cimport LAUNCHED, REPLACED, ProgressBars, SentByValue, WorkFigures
from mizu._sync cimport Fifo, Lock
from mizu.includes.spin cimport kForever

import collections
import threading
import warnings
from time import monotonic as _monotonic

from mizu import _arena, _core
from mizu._array_data import release_idle_memory
from mizu._errors import SHORT_OF_PROCESSES, brief, error_of, short_of_processes

__all__ = ["Roster", "Worker"]

_SLOT_BYTES = 4096 - 16   # the size of every ring's slots
_GRACE = 1.0          # seconds a worker has to end on SIGTERM when the pool breaks
_STARTING = 0.1       # seconds a worker's start counts against the starts at once (see start_deferred)


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
        self.last_fn = None
        self.started_tasks = 0        # tasks sent to the current process

    cdef release(self):
        self.ring = None
        self.process = self.watch = self.channel = self.last_fn = None
        self.registered.clear()


def _ring_slots(max_workers):
    """(slots of each worker's task ring, slots of the result ring) for a pool of max_workers.

    Every page of the pool's segment is reserved when it is made, which
    takes time in proportion (doc/dev/core.rst), so the rings are as deep
    as the pool can use: a worker's ring holds its deepest queue of short
    tasks (MAX_DEPTH) while the pool has 16 workers or fewer, and 32 of
    them beyond; the result ring holds a result for each task that all the
    workers' queues hold, between 256 and 1024 slots. A ring that is full
    makes its sender wait, or queue the message in the client.
    """
    results = 256
    while results < min(1024, max_workers * MAX_DEPTH):
        results *= 2
    return (64 if max_workers <= 16 else 32), results


cdef class Roster:
    """Roster(max_workers, launcher, max_tasks)

    The pool's workers, and the state shared by the Executor, its futures
    and the manager thread.

    launcher starts each worker (mizu._launchers); max_tasks: the tasks a
    worker runs before it retires, or None.
    """

    def __init__(self, max_workers, launcher, max_tasks):
        self.launcher = launcher
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
        self.feeding = set()
        self.state_lock = threading.RLock()
        self.kicked = threading.Event()
        self.cores = _core.usable_cpus()
        self.broken = None
        self.shutting_down = False
        self.started = False
        self.next_check_ns = kForever
        self.figures = WorkFigures(self.roster)
        self.bars = ProgressBars()
        self.sent_by_value = SentByValue(max_workers)

    def control(self, int64_t task_timeout_ns, bint replace_dead):
        """Set the controls of running work (mizu._control): a task's deadline unless it has its own, replace_dead."""
        self.task_timeout_ns = task_timeout_ns
        self.replace_dead = replace_dead

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
        worker.last_fn = None
        worker.started_tasks = 0
        worker.held = False
        worker.popped_at_start = worker.ring.popped
        worker.failure = None
        worker.up = False
        worker.ending = False
        worker.kill_at = 0
        # A first start counts in `coming` (see pick); a successor, replacing
        # a retired process, does not hold the other workers' depth down.
        worker.starting = worker.process is None
        self.coming += worker.starting
        self.tell(LAUNCHED if worker.starting else REPLACED, worker.index, None, 0.0)
        proc = None
        try:
            proc, channel = self.launcher.launch(worker.index, worker.ring, self.results,
                                                 [w.ring for w in self.roster] if self.wants_spare() else None)
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
        self.watch_exit(worker)
        # From now: the client's own time starting it (a fork and exec
        # under spawn) is not the worker's.
        worker.counted_until = _monotonic() + _STARTING

    cdef bint wants_spare(self):
        """Whether a spare process should be kept ready for the next launch: not while the pool is ending."""
        return self.broken is None and not self.shutting_down and not self.forced and self.collected is None

    cdef watch_exit(self, Worker worker):
        """Have the pool hear of the exit of worker's new process (mizu._failures.Watchdog's)."""
        raise NotImplementedError

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

    cdef Py_ssize_t requeue(self, Worker worker, Py_ssize_t keep) except -1:
        """Put worker's tasks in flight after its first `keep` back in front of `pending`, in order; how many. Under send_lock.

        They must be withdrawn from its ring (or its process gone): they are
        running futures that no process has claimed, as reserved tasks are,
        and dispatch sends them again.
        """
        cdef Py_ssize_t n = 0
        while worker.in_flight.size() > keep:
            self.pending.push_oldest(worker.in_flight.pop_newest())
            n += 1
        self.reserved += n
        worker.started_tasks -= n
        return n

    cdef void arm(self, int64_t at_ns) noexcept:
        """Have whoever collects look at deadlines and ending workers by at_ns (now_ns's clock)."""
        if at_ns < self.next_check_ns:
            self.next_check_ns = at_ns

    cdef list take_futures(self):
        """Take the futures of every task not answered, pending or in flight, and drop the messages not sent."""
        cdef Worker worker
        futures = self.pending.take_all()
        self.reserved = 0
        for worker in self.workers:
            futures.extend(worker.in_flight.take_all())
            worker.outbox.clear()
        self.feeding.clear()
        return futures

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
        try:
            for worker in self.roster:
                if worker.ending and worker.process is not None:
                    # Ended by the pool (mizu._control), and maybe ignoring SIGTERM.
                    signal_process(worker.process, "kill")
            for ring, _, _ in parts:
                if ring is not None:
                    ring.close()
            if kill is not None:
                for proc in procs:
                    signal_process(proc, kill)
                deadline = _monotonic() + _GRACE
                for proc in procs:
                    proc.join(max(0.0, deadline - _monotonic()))
                    # A worker that ignores or handles SIGTERM, or is stopped, must not hold the caller.
                    signal_process(proc, "kill")
            for ring, proc, channel in parts:
                if proc is not None:
                    proc.join()
                    channel.close()
                    if ring is not None:
                        _arena.release_held(ring)
            # What the workers shared here and this process kept mapped goes
            # back now, and so do the segments of its arenas that hold no
            # block any more (the arrays it copied for the workers, once
            # dropped; the first segment stays for the next small array).
            _arena.forget_exited_peers()
            release_idle_memory(0)
        finally:
            # Its spare, if it keeps one, once the workers are told to end:
            # an exception in between (Ctrl-C) must not leave it running.
            self.launcher.close()

    cdef take_back(self, Worker worker):
        """Put every task sent to worker, whose process has exited, back in `pending`; its ring starts afresh.

        Until launch gives it a new process, it takes no task (Dispatcher.pick).
        """
        self.send_lock.take(kForever)
        try:
            worker.watch = None
            self.requeue(worker, 0)
            worker.outbox.clear()
            self.feeding.discard(worker)
            # The arrays of the task it died running, say, go back.
            _arena.release_held(worker.ring)
            worker.ring.reset_consumer()
        finally:
            self.send_lock.give()

    cdef bint leave_out(self, Worker worker) except -1:
        """Go on without worker, which could not start for want of processes; False if no other worker runs."""
        self.take_back(worker)   # a successor's first task (Dispatcher.pick)
        if worker.starting:
            worker.starting = False
            self.coming -= 1
        if not self.running():
            return False
        with self.state_lock:
            self.grow_no_more(SHORT_OF_PROCESSES.format(error=error_of(worker.failure[1])))
        return True


cdef signal_process(object proc, str operation):
    """proc.terminate() or proc.kill() unless it has exited."""
    if proc.exitcode is None:
        try:
            getattr(proc, operation)()
        except (ValueError, ProcessLookupError):
            pass
