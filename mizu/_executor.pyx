"""The drop-in ProcessPoolExecutor.

Data flow (one shared segment per pool; every arrow is a ring in it):

    submit() / map()                                   worker 0..N-1
      |  future + task go to `pending`                   (mizu._worker)
      v
    dispatch()  --- one SpscRing per worker ------->  pop task, run it
      |  (client side, under `send_lock`; at most        |
      |   `depth` tasks in flight per worker)            |
      |                                                  v
    drain_*()  <------ one MpmcRing shared by all ---  push result
      |  (under `recv_lock`, by whichever thread needs a result: a caller
      |   blocked in Future.result() drains the ring itself; the
      |   `mizu-drain` thread drains when nobody else does, and runs
      |   callbacks, as_completed and asyncio)
      v
    future.set_result() / set_exception()

Beside its ring, each worker shares a Unix socket pair with the client: the
descriptors of shared-memory segments that a message's arrays live in cross
it, in both directions, just before the message enters a ring (see
mizu._protocol). With fork every worker starts at the first submit; with
spawn and forkserver one starts whenever a submit finds none idle.

Every 20 ms slice, whoever drains polls each worker's pidfd; a worker that
died without retiring breaks the pool as the stdlib's does (BrokenProcessPool
on every pending future, then on submit). The messages add to the stdlib's
text the dead process, its exit code or signal, the task it was running and,
when its initializer or the unpickling of a task raised, that error (the
worker sends its traceback before it exits). The other workers get SIGTERM,
and SIGKILL if they outlast a grace period.
"""

cimport cython
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.exc cimport PyErr_CheckSignals
from cpython.list cimport PyList_Append, PyList_GET_ITEM, PyList_GET_SIZE, PyList_SET_ITEM
from cpython.ref cimport Py_DECREF, Py_INCREF, PyObject
from cpython.pythread cimport (NOWAIT_LOCK, PY_LOCK_ACQUIRED, PyLockStatus, PyThread_acquire_lock,
                               PyThread_allocate_lock, PyThread_free_lock, PyThread_release_lock, PyThread_type_lock)
from libc.stdint cimport int64_t
from libc.string cimport memset

from mizu._core cimport _Ring
from mizu._future cimport Cell, cell_of, is_done, new_future, set_exception, set_result, set_running
from mizu._messages cimport ResultHeader, TaskHeader
from mizu._wire cimport decode, decode_after, encode_plain, encode_plain_into
from mizu.includes.wire cimport Writer
from mizu.includes.spin cimport kForever, now_ns

import collections
import itertools
import multiprocessing
import os
import reprlib
import signal
import socket
import sys
import threading
import traceback
import types
import weakref
from concurrent.futures import _base
from concurrent.futures import process as _process
from concurrent.futures.process import BrokenProcessPool, _RemoteTraceback
from time import monotonic as _monotonic

from mizu import _core
from mizu._future import LazyFuture
from mizu._protocol import (BATCH, CALL, CONTINUED, FIRST, FLAT, INITIALIZER, OK, OOB, RESULT, RETIRING, SINGLE, TASK,
                            UNPICKLING, WIRE, Reassembler, dumps_pickled, frames, loads, sender_of)
from mizu._worker import main as _worker_main

cdef unsigned char _FIRST_FRAME = FIRST, _CONTINUED_FRAME = CONTINUED, _OOB_MESSAGE = OOB, _WIRE_MESSAGE = WIRE
cdef unsigned char _TASK_MESSAGE = TASK, _RESULT_MESSAGE = RESULT
cdef int _OK = OK, _RETIRING = RETIRING, _CALL = CALL
_SLICE = 0.02
cdef int64_t _SLICE_NS = 20_000_000
_IDLE = 0.1
_POLL = 0.002
_FEED = 0.0002
cdef int64_t _FEED_NS = 200_000
_TASK_SLOTS, _RESULT_SLOTS, _SLOT_BYTES = 64, 1024, 4096 - 16
_MAX_DEPTH = 48
_SHORT_TASK = 200e-6
cdef Py_ssize_t _MAX_DEPTH_C = _MAX_DEPTH
cdef double _SHORT_TASK_C = _SHORT_TASK
_BATCH_SECONDS = 500e-6
_MAX_BATCH = 1024
_GRACE = 1.0          # seconds a worker has to end on SIGTERM when the pool breaks
_TASK_REPR = 200      # characters of a task's call in an error message

_BROKEN = "A child process terminated abruptly, the process pool is not usable anymore"
_BROKEN_FUTURE = ("A process in the process pool was terminated abruptly while the future was running or "
                  "pending.")
_TERMINATED = "The process pool was terminated, it is not usable anymore"
_TERMINATED_FUTURE = "The process pool was terminated while the future was running or pending."


cdef extern from "Python.h":
    int _delete_slice "PyList_SetSlice"(object list, Py_ssize_t low, Py_ssize_t high, PyObject* itemlist) except -1

cdef extern from "pythread.h":
    PyLockStatus PyThread_acquire_lock_timed(PyThread_type_lock lock, long long microseconds, int intr_flag) nogil
    unsigned long PyThread_get_thread_ident()


cdef class _Lock:
    """A mutex that Cython takes and releases without a Python call.

    A blocking take releases the GIL and wakes every slice to run signal
    handlers, so Ctrl-C interrupts it as it does threading.Lock.acquire().
    """

    cdef PyThread_type_lock lock

    def __cinit__(self):
        self.lock = PyThread_allocate_lock()
        if self.lock == NULL:
            raise MemoryError("cannot allocate a lock")

    def __dealloc__(self):
        if self.lock != NULL:
            PyThread_free_lock(self.lock)

    cdef bint take(self, int64_t deadline_ns) except -1:
        """Acquire by deadline_ns (now_ns's clock; 0: only if free, kForever: no limit)."""
        cdef int64_t step
        cdef PyLockStatus status
        if PyThread_acquire_lock(self.lock, NOWAIT_LOCK):
            return True
        while deadline_ns != 0:
            step = _SLICE_NS if deadline_ns == kForever else min(_SLICE_NS, deadline_ns - now_ns())
            if step <= 0:
                return False
            with nogil:
                status = PyThread_acquire_lock_timed(self.lock, step // 1000, 0)
            if status == PY_LOCK_ACQUIRED:
                return True
            PyErr_CheckSignals()
        return False

    cdef void give(self) noexcept:
        PyThread_release_lock(self.lock)

    def __enter__(self):
        self.take(kForever)
        return self

    def __exit__(self, *exc_info):
        self.give()


@cython.final
cdef class _Fifo:
    """A first-in, first-out queue of futures that Cython code works in C.

    Each operation runs no Python code and, until the queue is changed,
    allocates nothing that could start a collection (whose finalizers could
    let another thread in), so under the GIL it is atomic, as a deque's
    are. The items live in a list from `head` on; the consumed front, left
    as None, is cut off once it is long and half the list.
    """

    cdef list items
    cdef Py_ssize_t head

    def __cinit__(self):
        self.items = []

    cdef inline Py_ssize_t size(self) noexcept:
        return PyList_GET_SIZE(self.items) - self.head

    cdef inline int push(self, x) except -1:
        return PyList_Append(self.items, x)

    cdef object oldest(self):
        """The first item, or None if empty."""
        return <object>PyList_GET_ITEM(self.items, self.head) if self.size() else None

    cdef object pop_oldest(self):
        """Take the first item (the queue is not empty)."""
        item = <object>PyList_GET_ITEM(self.items, self.head)
        Py_DECREF(item)          # the list's reference, which item now holds
        Py_INCREF(None)
        PyList_SET_ITEM(self.items, self.head, None)
        self.head += 1
        if self.head >= 64 and 2 * self.head >= PyList_GET_SIZE(self.items):
            _delete_slice(self.items, 0, self.head, NULL)   # allocates nothing, so no collection runs
            self.head = 0
        return item

    cdef object pop_newest(self):
        """Take the last item (the queue is not empty)."""
        return self.items.pop()

    cdef bint remove(self, x) except -1:
        """Take x out of the queue; False if it was not there."""
        cdef Py_ssize_t i
        for i in range(self.head, PyList_GET_SIZE(self.items)):
            if self.items[i] is x:
                del self.items[i]
                return True
        return False

    cdef list snapshot(self):
        return self.items[self.head:]

    cdef list take_all(self):
        """Empty the queue, returning what it held."""
        fresh = []
        items, head = self.items, self.head
        self.items, self.head = fresh, 0
        return items[head:]


cdef inline void _drop_task(Cell cell) noexcept:
    """Let go of the call of a task that has ended (or never will run): its arguments may be large."""
    cell.fn = cell.first = cell.second = None


cdef object _lazy_result = LazyFuture.result
cdef object _lazy_exception = LazyFuture.exception
cdef object _FINISHED = _base.FINISHED


cdef object _drain_for(Cell cell, timeout):
    """Drain results until the future of cell is done; the part of timeout left for the stdlib's own wait."""
    if is_done(cell):
        return timeout
    pool = cell.pool()
    if pool is None:
        return timeout
    if timeout is None:
        (<_Pool>pool).wait_until(cell, kForever)
        return None
    cdef int64_t deadline = now_ns() + <int64_t>(max(0.0, min(float(timeout), 1e9)) * 1e9)
    (<_Pool>pool).wait_until(cell, deadline)
    return max(0, deadline - now_ns()) * 1e-9


class Future(LazyFuture):
    """A concurrent.futures.Future whose waiting caller drains results itself.

    Its name is the stdlib's, so that it prints as the stdlib's futures do.
    """

    def _watched(self):
        # A callback, wait() or as_completed() now depends on the drain thread.
        pool = (<Cell>self._cell).pool()
        if pool is not None:
            pool.watch()

    def result(self, timeout=None):
        cdef Cell cell = self._cell
        if cell.state is not _FINISHED:
            timeout = _drain_for(cell, timeout)
            if cell.state is not _FINISHED:
                return _lazy_result(self, timeout)
        # A traceback through Cython code holds no frame with this future in
        # it, so raising here makes no reference cycle.
        if cell.exception is not None:
            raise cell.exception
        return cell.result

    def exception(self, timeout=None):
        return _lazy_exception(self, _drain_for(self._cell, timeout))


cdef class _Worker:
    """One worker slot: its process, task ring and client-side bookkeeping."""

    cdef readonly Py_ssize_t index
    cdef readonly _Ring ring          # None once the pool has let go of its segment
    cdef readonly object outbox
    cdef readonly _Fifo in_flight
    cdef readonly dict registered
    cdef public object process, watch, channel, failure
    cdef public Py_ssize_t started_tasks
    cdef public unsigned long long popped_at_start   # the ring's count of popped messages when the process started

    def __init__(self, index, ring):
        self.index = index
        self.ring = ring
        self.process = None
        self.watch = None
        self.channel = None           # this end of the socket pair shared with the process
        self.failure = None           # (stage, traceback) if its initializer or a task's unpickling raised
        # The futures of the tasks sent, oldest first: a worker answers in the order it is sent tasks.
        self.in_flight = _Fifo()
        self.outbox = collections.deque()   # frames waiting for room in the ring
        self.registered = {}          # callable -> id, for this process
        self.started_tasks = 0        # tasks sent to the current process

    cdef release(self):
        self.ring = None
        self.process = self.watch = self.channel = None
        self.registered.clear()


cdef object _answered(_Fifo in_flight, unsigned long long task_id):
    """Take the future of task_id from a worker's in_flight, or None: the oldest, unless the worker broke protocol."""
    if in_flight.size() and cell_of(in_flight.oldest()).task_id == task_id:
        return in_flight.pop_oldest()
    for future in in_flight.snapshot():
        if cell_of(future).task_id == task_id:
            in_flight.remove(future)
            return future
    return None


cdef object _FunctionType = types.FunctionType
cdef object _BuiltinFunctionType = types.BuiltinFunctionType
cdef object _ModuleType = types.ModuleType


cdef inline bint _registrable(fn) except -1:
    # Plain functions and module-level builtins pickle by qualified name, so
    # sending one once and then its id is exactly what pickling it every
    # time would do. Anything else (bound methods, partials, instances)
    # carries state that may change between calls, and is pickled each time.
    kind = type(fn)
    return kind is _FunctionType or (kind is _BuiltinFunctionType and isinstance(fn.__self__, _ModuleType))


cdef class _Pool:
    """The state shared by the Executor, its futures and the drain thread."""

    cdef readonly object context, initializer, initargs, max_tasks, segment
    cdef readonly _Ring results
    cdef readonly list slots, workers
    cdef readonly Py_ssize_t drainers     # callers draining in wait_until
    cdef readonly bint on_demand
    cdef readonly object idle, state_lock, kicked, reassembler, ref
    cdef readonly _Fifo pending
    cdef readonly _Lock send_lock, recv_lock
    cdef readonly set feeding
    cdef readonly unsigned long recv_owner
    cdef public object broken, thread
    cdef public bint watched, shutting_down, started
    cdef public double task_seconds
    cdef public Py_ssize_t depth
    cdef Py_ssize_t cores               # this process's CPUs
    cdef unsigned long long last_task_id, last_fn_id     # under send_lock
    cdef int owner                      # the process that made the pool
    cdef object __weakref__

    def __init__(self, max_workers, context, initializer, initargs, max_tasks):
        self.context = context
        self.initializer, self.initargs, self.max_tasks = initializer, initargs, max_tasks
        # Each allocation is rounded up to 128 bytes; a page covers the segment's header.
        ring_bytes = (_core.MpmcRing.footprint(_RESULT_SLOTS, _SLOT_BYTES)
                      + max_workers * _core.SpscRing.footprint(_TASK_SLOTS, _SLOT_BYTES))
        self.segment = _core.Segment(ring_bytes + 128 * (max_workers + 1) + 4096)
        self.results = _core.MpmcRing(self.segment, _RESULT_SLOTS, _SLOT_BYTES)
        self.slots = [_Worker(i, _core.SpscRing(self.segment, _TASK_SLOTS, _SLOT_BYTES))
                      for i in range(max_workers)]
        # The slots whose process has started, in slot order: fork starts them
        # all at once; spawn and forkserver, like the stdlib, one whenever a
        # task finds no idle worker.
        self.workers = []
        self.on_demand = context.get_start_method(allow_none=False) != "fork"
        self.idle = collections.deque()   # one entry per completed task, taken by a submit instead of a start
        self.pending = _Fifo()
        self.send_lock = _Lock()
        self.recv_lock = _Lock()
        self.state_lock = threading.RLock()
        self.recv_owner = 0             # the thread holding recv_lock
        self.drainers = 0
        self.watched = False
        self.kicked = threading.Event()
        self.reassembler = Reassembler()
        self.task_seconds = _SHORT_TASK
        self.depth = 2
        self.cores = _usable_cores()
        self.feeding = set()          # workers whose outbox holds frames
        self.broken = None
        self.shutting_down = False
        self.started = False
        self.thread = None
        self.ref = weakref.ref(self)
        self.owner = os.getpid()
        _all_pools.add(self)

    # -- starting and stopping -------------------------------------------------------------

    def start(self):
        try:
            # Fork before the thread exists: forking a process with threads risks the child's locks.
            if not self.on_demand:
                for worker in self.slots:
                    self.grow()
            self.thread = threading.Thread(target=self.drain_forever, name="mizu-drain", daemon=True)
            self.thread.start()
        except BaseException as exc:
            # No descriptors or processes left, or at interpreter exit no
            # thread can start: the workers already started are told to stop
            # (their rings are closed, so the pool cannot start again).
            self.close_workers()
            self.broken = f"The pool could not start its workers: {exc!r}"
            self.release()
            raise
        _live_pools.add(self)
        self.started = True

    cdef grow(self):
        worker = self.slots[len(self.workers)]
        self.spawn(worker)
        self.workers.append(worker)

    cdef adjust(self):
        """On demand: start a worker unless a completed task left one idle (the stdlib's rule). Under state_lock."""
        if len(self.workers) < len(self.slots):
            if self.idle:
                self.idle.pop()
            else:
                self.grow()

    cdef spawn(self, _Worker worker):
        # The socket pair carries shared-memory descriptors for large buffers (see mizu._protocol).
        channel, worker_end = socket.socketpair()
        proc = self.context.Process(
            target=_worker_main,
            args=(worker.ring, self.results, worker_end, worker.index, os.getpid(), self.initializer,
                  self.initargs, self.max_tasks),
            name=f"mizu-worker-{worker.index}")
        try:
            proc.start()
        except BaseException:
            channel.close()
            raise
        finally:
            worker_end.close()
        if worker.channel is not None:
            worker.channel.close()
        worker.process, worker.watch, worker.channel = proc, _core.PeerWatch(proc.pid), channel
        worker.registered.clear()
        worker.started_tasks = 0
        worker.popped_at_start = worker.ring.popped
        worker.failure = None

    cdef bint sending(self):
        return bool(self.feeding)

    cdef outstanding(self):
        """A future that is not done yet, or None. Safe while other threads submit and drain."""
        cdef _Worker worker
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

        It works on its own list of the workers' parts: the drain thread may
        let go of the pool's (release) meanwhile.
        """
        cdef _Worker worker
        parts = [(worker.ring, worker.process, worker.channel) for worker in self.workers]
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
        cdef _Worker worker
        self.recv_lock.take(kForever)
        self.send_lock.take(kForever)
        try:
            for worker in self.slots:
                if worker.channel is not None:
                    worker.channel.close()
                worker.release()
            self.workers, self.slots = [], []
            self.results = self.segment = None
        finally:
            self.send_lock.give()
            self.recv_lock.give()

    # -- submitting ---------------------------------------------------------------------------

    cpdef submit(self, int kind, fn, first, second, Py_ssize_t calls):
        """The future of a task: (kind, fn, first, second) as a message has them (mizu._protocol)."""
        cdef Cell cell = Cell.__new__(Cell)
        cell.pool = self.ref
        cell.kind, cell.fn, cell.first, cell.second, cell.calls = kind, fn, first, second, calls
        future = new_future(Future, cell)
        if self.started and len(self.workers) == len(self.slots):
            # Every worker has started. Nothing from here to the append runs
            # Python code, so under the GIL no other thread runs in between:
            # shutdown() and terminate_broken() set their flags, and the
            # latter empties `pending`, either wholly before or wholly after.
            self.refuse_if_closed()
            self.pending.push(future)
        else:
            with self.state_lock:
                self.refuse_if_closed()
                if not self.started:
                    self.start()
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
                            _drop_task(cell)
                        raise
        self.dispatch()
        if self.pending.size() and self.take_recv(0):
            try:
                self.drain_ready()
            finally:
                self.give_recv()
        return future

    cdef int refuse_if_closed(self) except -1:
        if self.broken is not None:
            raise BrokenProcessPool(self.broken)
        if self.shutting_down:
            raise RuntimeError("cannot schedule new futures after shutdown")
        if _interpreter_exiting:
            raise RuntimeError("cannot schedule new futures after interpreter shutdown")
        return 0

    def batch_size(self, units, chunksize, workers):
        """Units per batch: enough batches to keep every worker busy to the end, each worth ~_BATCH_SECONDS."""
        by_time = max(1, int(_BATCH_SECONDS / (self.task_seconds * chunksize)))
        by_balance = max(1, units // (workers * 8))
        return min(by_time, by_balance, _MAX_BATCH)

    cdef void learn(self, double seconds) noexcept:
        """Fold a task's duration into the depth: deep for short tasks, shallow for long ones."""
        self.task_seconds = seconds = 0.8 * self.task_seconds + 0.2 * seconds
        if seconds >= _SHORT_TASK_C:
            self.depth = 2
        else:
            self.depth = <Py_ssize_t>min(<double>_MAX_DEPTH_C, max(2.0, _SHORT_TASK_C / max(seconds, 1e-7)))

    cdef dispatch(self):
        cdef _Worker worker
        cdef Cell cell
        cdef Writer w
        if not self.pending.size() and not self.feeding:
            return
        cdef list unpicklable = None
        cdef Py_ssize_t depth
        interrupted = None
        self.send_lock.take(kForever)
        try:
            depth = self.depth
            if self.feeding:
                for worker in list(self.feeding):
                    self.flush(worker)
            # terminate_broken takes send_lock: no task is between pending
            # and in_flight while it collects them.
            while self.pending.size() and self.broken is None:
                worker = self.pick(depth)
                if worker is None:
                    break
                future = self.pending.pop_oldest()
                cell = cell_of(future)
                if not set_running(future, cell):   # cancelled
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
        finally:
            self.send_lock.give()
        # Completing a future runs its callbacks, which may submit: not under send_lock.
        if unpicklable is not None:
            for future, exc in unpicklable:
                _fail_like_the_feeder(future, exc)
        if interrupted is not None:
            raise interrupted

    cdef bytes task_message(self, _Worker worker, Cell cell, Writer& w):
        """The message that sends the task of cell to worker, or None if it is written in w (empty). Under send_lock."""
        cdef TaskHeader head
        cdef bint plain = True
        fn = fn_ref = cell.fn
        if _registrable(fn):
            fn_ref = worker.registered.get(fn)
            if fn_ref is None:
                self.last_fn_id += 1
                fn_ref = (self.last_fn_id, fn)
            elif cell.kind == _CALL and not cell.second:
                memset(&head, 0, sizeof(TaskHeader))
                head.tag, head.task_id, head.fn_id = _TASK_MESSAGE, cell.task_id, fn_ref
                if not encode_plain_into(w, &head, sizeof(TaskHeader), cell.first):
                    return None
                w.clear()
                plain = False   # the arguments, so the whole message too
        message = (cell.kind, cell.task_id, fn_ref, cell.first, cell.second)
        data = encode_plain(message) if plain else None
        if data is None:
            data = dumps_pickled(message, 0, worker.channel)
        if type(fn_ref) is tuple:
            # Pickled with it: the worker knows it from now on.
            worker.registered[fn] = fn_ref[0]
        return data

    cdef _Worker pick(self, Py_ssize_t depth):
        cdef _Worker worker, best = None
        for worker in self.workers:
            if worker.outbox or worker.in_flight.size() >= depth:
                continue
            if self.max_tasks is not None and worker.started_tasks >= self.max_tasks:
                continue
            if best is None or worker.in_flight.size() < best.in_flight.size():
                best = worker
        return best

    cdef send(self, _Worker worker, const char* data, Py_ssize_t n, bytes message):
        """Push the n bytes at data (message: them as bytes, or None) to worker's ring, or queue them in its outbox."""
        cdef _Ring ring = worker.ring
        if not worker.outbox and n <= ring.max_msg and ring._push(data, n, False, None, None):
            return
        if message is None:
            message = PyBytes_FromStringAndSize(data, n)
        if n <= ring.max_msg:
            worker.outbox.append(message)
        else:
            worker.outbox.extend(frames(message, worker.index, ring.max_msg))
        self.feeding.add(worker)
        self.flush(worker)

    cdef flush(self, _Worker worker):
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
        self.drainers += 1
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
                    self.drain_until(cell, deadline_ns)
                finally:
                    self.give_recv()
                if self.broken is not None or not self.started:
                    return
        finally:
            self.drainers -= 1

    cdef drain_until(self, Cell cell, int64_t deadline_ns):
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
            if self.feeding:
                # Frames of a large task wait for room in a worker's ring,
                # which frees as the worker reads: keep feeding it.
                self.dispatch()
                wait = min(wait, _FEED_NS)
            try:
                frame = ring._pop(wait * 1e-9, None, self.core_to_spare())
            except TimeoutError:
                self.check_workers()
                continue
            self.handle(frame)
            self.drain_ready()

    cdef bint core_to_spare(self):
        """Whether a waiting caller may spin: a core is left beside the workers that have tasks."""
        cdef _Worker worker
        cdef Py_ssize_t busy = 0
        for worker in self.workers:
            if worker.in_flight.size():
                busy += 1
                if busy >= self.cores:
                    return False
        return True

    cdef drain_ready(self):
        cdef _Ring ring = self.results
        frame = ring._try_pop()
        while frame is not None:
            self.handle(frame)
            frame = ring._try_pop()
        self.dispatch()

    cdef handle(self, bytes frame):
        # A signal handler's exception (Ctrl-C's KeyboardInterrupt, in the
        # main thread) must not cut the handling of a frame short: its result
        # would be lost, and its future never done. Handlers of signals that
        # came while the frame was awaited run now, and what they raise is
        # raised once the frame is handled.
        try:
            PyErr_CheckSignals()
        except BaseException:
            self.settle(frame)
            raise
        self.settle(frame)

    cdef settle(self, bytes frame):
        cdef _Worker worker
        cdef Cell cell
        cdef ResultHeader head
        cdef bytes message = frame
        cdef unsigned char kind = frame[0]
        cdef int status
        cdef Py_ssize_t index
        cdef unsigned long long task_id
        cdef double seconds
        try:
            if kind == _FIRST_FRAME or kind == _CONTINUED_FRAME:
                try:
                    message = self.reassembler.feed(frame)
                except ValueError as exc:
                    self.terminate_broken(f"A result's frames do not fit together: {exc}.")
                    return
                if message is None:
                    return
                kind = message[0]
            if kind == _RESULT_MESSAGE:
                value = decode_after(&head, sizeof(ResultHeader), PyBytes_AS_STRING(message),
                                     PyBytes_GET_SIZE(message), "result")
                index, task_id, status, seconds = head.sender, head.task_id, _OK, head.seconds
            elif kind == _WIRE_MESSAGE:
                index, task_id, status, value, seconds = <tuple?>decode(message)
            else:
                channel = (<_Worker>self.workers[sender_of(message)]).channel if kind == _OOB_MESSAGE else None
                index, task_id, status, value, seconds = <tuple?>loads(message, channel)
            worker = self.workers[index]
        except KeyboardInterrupt as exc:
            # A signal came during unpickling, which runs Python code: what
            # was read of the result is gone, so its future cannot be done.
            self.terminate_broken(f"Collecting a result was interrupted by {exc!r}; the result is lost.")
            raise
        except BaseException as exc:
            # SystemExit too, raised by the result's own unpickling code: the
            # stdlib breaks the pool on whatever its result reader raises.
            self.terminate_broken(f"A result could not be unpickled: {_brief.repr(exc)}.",
                                  "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
            return
        if status == _RETIRING:
            self.replace(worker)
            return
        future = _answered(worker.in_flight, task_id)
        if future is None:
            if task_id == 0:
                worker.failure = value
            return
        cell = cell_of(future)
        self.learn(seconds / cell.calls)
        _drop_task(cell)
        if self.on_demand and len(self.workers) < len(self.slots):
            self.idle.append(None)
        if status == _OK:
            set_result(future, cell, value)
        else:
            set_exception(future, cell, value)

    cdef replace(self, _Worker worker):
        worker.process.join()
        self.reassembler.forget(worker.index)
        with self.state_lock:
            if self.broken is None and not (self.shutting_down and self.outstanding() is None):
                self.spawn(worker)
            else:
                # It exited as asked: its end is no death for check_workers to report.
                worker.watch = None

    def watch(self):
        """Someone waits on a future without draining (a callback, wait(), as_completed())."""
        if not self.watched:
            self.watched = True
            self.kicked.set()

    def drain_forever(self):
        """The mizu-drain thread: drains when no caller does, watches the workers, finishes shutdown.

        It sleeps on the result ring only while a future is watched by a
        callback, wait() or as_completed(); otherwise a caller that wants a
        result drains the ring itself, and this thread wakes every few
        milliseconds to keep outstanding work moving and to check the workers.
        Sleeping on the ring all the time would make every worker's push a
        wake-up system call.
        """
        ring = _core.MpmcRing.attach(self.segment, self.results.offset)
        ring.spin_ns = 0
        while self.broken is None:
            if self.drainers:
                if self.kicked.wait(_POLL):
                    self.kicked.clear()
                continue
            idle = self.outstanding() is None
            if idle:
                self.watched = False
                if self.shutting_down:
                    break
            if self.watched:
                try:
                    ring.wait_readable(_SLICE)
                except EOFError:
                    break
            elif self.kicked.wait(_IDLE if idle else _FEED if self.sending() else _POLL):
                self.kicked.clear()
            if self.take_recv(0):
                try:
                    self.drain_ready()
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
        for worker in self.workers:
            if worker.watch is None or worker.watch.alive():
                continue
            # Its last results, and a retirement notice, may still be in the ring.
            self.drain_ready()
            if worker.watch.alive() or self.broken is not None:
                continue
            worker.process.join()
            self.terminate_broken(_obituary(worker, self.on_demand), None if worker.failure is None else worker.failure[1])
            return

    cdef terminate_broken(self, detail, remote=None, pool_text=_BROKEN, future_text=_BROKEN_FUTURE):
        """Break the pool: BrokenProcessPool on every pending future, then on submit.

        detail, a sentence saying what broke it, follows pool_text (by
        default the stdlib's) in later submits' errors and future_text in
        the futures'; the cause of each future's error shows remote (a
        traceback), or detail.
        """
        cdef _Worker worker
        with self.state_lock:
            if self.broken is not None:
                return
            results = self.results   # the drain thread may let go of it as soon as the pool is broken
            with self.send_lock:
                self.broken = f"{pool_text}. {detail}"
                futures = self.pending.take_all()
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
        """
        cdef Cell cell
        cdef _Worker worker
        self.broken = (f"This pool belongs to process {self.owner}; a process forked from it cannot use it: create "
                       f"a new ProcessPoolExecutor in the child")
        futures = self.pending.take_all()
        for worker in self.workers:
            futures.extend(worker.in_flight.take_all())
        self.feeding.clear()
        self.workers, self.slots, self.results, self.segment = [], [], None, None
        self.send_lock, self.recv_lock, self.state_lock = _Lock(), _Lock(), threading.RLock()
        self.kicked = threading.Event()
        self.recv_owner = 0
        self.drainers = 0
        for future in futures:
            cell = cell_of(future)
            cell.condition = None
            _drop_task(cell)
            set_exception(future, cell, BrokenProcessPool(self.broken))

    # -- shutdown -----------------------------------------------------------------------------------

    def shutdown(self, wait, cancel_futures):
        with self.state_lock:
            self.shutting_down = True
        if cancel_futures:
            with self.send_lock:
                dropped = self.pending.take_all()
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
                self.thread.join()
        except BaseException as exc:
            # Ctrl-C (or another signal handler's exception) while waiting
            # for the tasks: stop now instead.
            self.interrupt(exc)
            raise

    def interrupt(self, exc):
        """Stop at once because exc interrupted a wait for the pool's tasks: cancel, terminate, fail what ran."""
        if not self.started or self.segment is None:
            return
        self.shutting_down = True
        self.terminate_broken(f"Waiting for the pool's tasks was interrupted by {type(exc).__name__}, so the pool "
                              f"terminated its workers.", None, _TERMINATED, _TERMINATED_FUTURE)

    def force_shutdown(self, operation):
        self.shutdown(False, True)
        for worker in self.workers:
            if worker.process is not None:
                _signal(worker.process, operation)


def _signal(proc, operation):
    """proc.terminate() or proc.kill() unless it has exited."""
    if proc.exitcode is None:
        try:
            getattr(proc, operation)()
        except (ValueError, ProcessLookupError):
            pass


class _BriefRepr(reprlib.Repr):
    """reprlib's short reprs, also for bytes: a task's argument may be a large buffer."""

    def repr_bytes(self, obj, level):
        text = repr(obj[:self.maxstring])
        return text if len(obj) <= self.maxstring else f"{text[:-1]}...{text[-1]} ({len(obj)} bytes)"

    repr_bytearray = repr_bytes


_brief = _BriefRepr()
_brief.maxstring, _brief.maxother = 60, 100


def _call_repr(fn, args, kwargs):
    """fn(*args, **kwargs) as a short string: the function's qualified name, the arguments' brief reprs."""
    module, name = getattr(fn, "__module__", None), getattr(fn, "__qualname__", None)
    label = f"{module}.{name}" if module and name else _brief.repr(fn)
    parts = [_brief.repr(arg) for arg in args]
    parts.extend(f"{key}={_brief.repr(value)}" for key, value in kwargs.items())
    text = f"{label}({', '.join(parts)})"
    return text if len(text) <= _TASK_REPR else text[:_TASK_REPR - 3] + "..."


def _task_repr(future):
    """The call a future's task stands for, or the first of its map batch, for an error message."""
    cdef Cell cell = cell_of(future)
    if cell.kind == CALL:
        return _call_repr(cell.fn, cell.first, cell.second)
    units, shape = cell.first, cell.second
    args = units[0] if shape & FLAT else units[0][0]
    return (f"a map batch of {cell.calls} call{'s' if cell.calls != 1 else ''}, the first "
            f"{_call_repr(cell.fn, (args,) if shape & SINGLE else args, {})}")


def _obituary(_Worker worker, bint imports_main):
    """A sentence on a worker that died without retiring: its pid, exit code or signal, its task, its error.

    imports_main: the worker started by spawn or forkserver, so it imported the main module first.
    """
    proc = worker.process
    code = proc.exitcode
    if code is not None and code < 0:
        try:
            how = f"was killed by signal {-code} ({signal.Signals(-code).name})"
        except ValueError:
            how = f"was killed by signal {-code}"
    else:
        how = f"exited with code {code}"
    text = f"Process {proc.pid} ({proc.name}) {how}"
    stage, tb = worker.failure if worker.failure is not None else (None, None)
    if stage == INITIALIZER:
        return f"{text}: its initializer raised {tb.splitlines()[-1]}."
    if worker.ring.popped == worker.popped_at_start:
        text = f"{text} while starting, before it took a task"
        if imports_main:
            # The commonest cause: the main module starts a pool when a spawned worker imports it.
            text += (" (a worker started with spawn or forkserver first imports the main module: does it start "
                     "its pools under `if __name__ == \"__main__\":`?)")
        return text + "."
    # It runs its tasks in the order they were sent: the oldest not answered is its current one.
    future = worker.in_flight.oldest()
    if future is not None:
        text = f"{text} while running {_task_repr(future)}"
    if stage == UNPICKLING:
        text = f"{text}: unpickling the task raised {tb.splitlines()[-1]}"
    return text + "."


def _fail_like_the_feeder(future, exc):
    """What the stdlib's queue feeder does with a task that fails to pickle: the error goes on its future."""
    tb = traceback.format_exception(type(exc), exc, exc.__traceback__)
    exc.__cause__ = _RemoteTraceback('\n"""\n{}"""'.format("".join(tb)))
    future.set_exception(exc)


_live_pools = set()
_interpreter_exiting = False
_all_pools = weakref.WeakSet()


def _abandon_inherited_pools():
    _live_pools.clear()
    for pool in list(_all_pools):
        (<_Pool>pool).abandon()


os.register_at_fork(after_in_child=_abandon_inherited_pools)


cdef class _Flattened:
    """The iterator map returns: the values of each list that `batches` yields, popped from its end.

    Popped, not iterated: a value the caller has dropped stays alive nowhere
    here. Once iteration has begun, dropping or closing it closes `batches`,
    which cancels the tasks not yet started, as closing the stdlib's
    generator does.
    """

    cdef list values
    cdef object batches
    cdef object __weakref__

    def __cinit__(self, batches):
        self.values = []
        self.batches = batches

    def __iter__(self):
        return self

    def __next__(self):
        cdef list values = self.values
        while not PyList_GET_SIZE(values):
            if self.batches is None:
                raise StopIteration
            values = self.values = next(self.batches)
        return values.pop()

    def close(self):
        """Stop early: once iteration has begun, tasks not yet started are cancelled."""
        if self.batches is not None:
            # Raises, and changes nothing, while another thread is in next().
            self.batches.close()
        self.values = []
        self.batches = None


def _slices(sequence, size):
    for start in range(0, len(sequence), size):
        yield sequence[start:start + size]


def _chunks(arguments, size):
    while chunk := list(itertools.islice(arguments, size)):
        yield chunk


def _usable_cores():
    # Before 3.13 the default max_workers counts every CPU, not those this process may use.
    if not hasattr(os, "process_cpu_count") and hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return _default_workers()


def _default_workers():
    count = os.process_cpu_count() if hasattr(os, "process_cpu_count") else os.cpu_count()
    return count or 1


class ProcessPoolExecutor(_process.ProcessPoolExecutor):
    """ProcessPoolExecutor(max_workers=None, mp_context=None, initializer=None, initargs=(), *, max_tasks_per_child=None)

    An Executor that runs calls in worker processes, through shared memory.

    A drop-in replacement for `concurrent.futures.ProcessPoolExecutor`: the
    same arguments, methods, futures and exceptions. Tasks and results cross
    between processes through lock-free rings in one shared segment instead
    of pipes, and a caller waiting on a result collects it itself.

    Parameters
    ----------
    max_workers : int, optional
        Number of worker processes; by default the number of CPUs this
        process may use.
    mp_context : multiprocessing context, optional
        Starts the workers; by default the running Python's default context
        (``spawn`` if `max_tasks_per_child` is given).
    initializer : callable, optional
        Called in each worker, with `initargs`, before its first task. If it
        raises, the pool breaks as the stdlib's does.
    initargs : tuple
        Arguments for `initializer`.
    max_tasks_per_child : int, optional
        Tasks a worker runs before it exits and is replaced.

    Raises
    ------
    ValueError
        `max_workers` or `max_tasks_per_child` is not positive, or
        `max_tasks_per_child` is combined with a ``fork`` context.
    TypeError
        `initializer` is not callable, or `max_tasks_per_child` is not an int.

    See Also
    --------
    concurrent.futures.ProcessPoolExecutor
    """

    def __init__(self, max_workers=None, mp_context=None, initializer=None, initargs=(), *,
                 max_tasks_per_child=None):
        if max_workers is None:
            max_workers = _default_workers()
        elif max_workers <= 0:
            raise ValueError("max_workers must be greater than 0")
        if initializer is not None and not callable(initializer):
            raise TypeError("initializer must be a callable")
        if max_tasks_per_child is not None:
            if not isinstance(max_tasks_per_child, int):
                raise TypeError("max_tasks_per_child must be an integer")
            if max_tasks_per_child <= 0:
                raise ValueError("max_tasks_per_child must be >= 1")
            if mp_context is None:
                mp_context = multiprocessing.get_context("spawn")
            elif mp_context.get_start_method(allow_none=False) == "fork":
                raise ValueError("max_tasks_per_child is incompatible with the 'fork' multiprocessing start "
                                 "method; supply a different mp_context.")
        if mp_context is None:
            mp_context = multiprocessing.get_context()
        self._max_workers = max_workers
        self._mp_context = mp_context
        self._pool = _Pool(max_workers, mp_context, initializer, initargs, max_tasks_per_child)
        # Collecting the executor shuts the pool down; work already submitted still completes.
        weakref.finalize(self, _Pool.shutdown, self._pool, False, False)

    def submit(self, fn, /, *args, **kwargs):
        """submit(fn, /, *args, **kwargs)

        Schedule ``fn(*args, **kwargs)`` in a worker and return its Future.

        Raises
        ------
        BrokenProcessPool
            A worker died; the pool cannot be used any more.
        RuntimeError
            The executor was shut down.
        """
        return (<_Pool>self._pool).submit(CALL, fn, args, kwargs, 1)

    def _map(self, fn, iterables, timeout, chunksize, buffersize):
        if chunksize < 1:
            raise ValueError("chunksize must be >= 1.")
        if buffersize is not None:
            if not isinstance(buffersize, int):
                raise TypeError("buffersize must be an integer or None")
            if buffersize < 1:
                raise ValueError("buffersize must be None or > 0")
        end_time = None if timeout is None else timeout + _monotonic()
        pool = self._pool
        # Units are the stdlib's chunks: an exception stands for its whole
        # unit. Several units travel as one batch, with no Future per unit;
        # with chunksize 1 a unit is the call itself. A call's arguments are
        # a tuple, or with one iterable the bare item.
        flat = chunksize == 1
        single = len(iterables) == 1
        calls = iter(iterables[0]) if single else zip(*iterables)
        units = calls if flat else _chunks(calls, chunksize)
        shape = (FLAT if flat else 0) | (SINGLE if single else 0)
        if buffersize is None:
            units = list(units)
            per_batch = pool.batch_size(len(units), chunksize, self._max_workers)
            # Not a generator expression: that would keep `units` in the
            # closure of results(), for the collector to walk until the end.
            batches = _slices(units, per_batch)
        else:
            batches = _chunks(units, 1)
        submit = pool.submit

        def send(batch):
            return submit(BATCH, fn, batch, shape, len(batch) if flat else sum(map(len, batch)))

        futures = collections.deque(
            map(send, batches if buffersize is None else itertools.islice(batches, buffersize)))

        def results():
            """Each batch's values, in a list in reverse order, for _Flattened to pop."""
            try:
                while futures:
                    if buffersize is not None:
                        futures.extend(map(send, itertools.islice(batches, 1)))
                    future = futures.popleft()
                    try:
                        values, failures = future.result(None if end_time is None else end_time - _monotonic())
                    except _base.TimeoutError:
                        future.cancel()
                        raise
                    del future
                    if failures:
                        del values[failures[0][0]:]
                    if not flat:
                        values = list(itertools.chain.from_iterable(values))
                    values.reverse()
                    yield values
                    if failures:
                        raise failures[0][1]
            finally:
                for future in futures:
                    future.cancel()

        return _Flattened(results())

    if sys.version_info >= (3, 14):
        def map(self, fn, *iterables, timeout=None, chunksize=1, buffersize=None):
            """map(fn, *iterables, timeout=None, chunksize=1, buffersize=None)

            Like the builtin `map`, with calls made in the workers, `chunksize`
            calls to a task, at most `buffersize` tasks submitted ahead.
            Results are yielded in order.

            Raises
            ------
            TimeoutError
                A result is not ready `timeout` seconds after the call to map.
            """
            return self._map(fn, iterables, timeout, chunksize, buffersize)
    else:
        def map(self, fn, *iterables, timeout=None, chunksize=1):
            """map(fn, *iterables, timeout=None, chunksize=1)

            Like the builtin `map`, with calls made in the workers, `chunksize`
            calls to a task. Results are yielded in order.

            Raises
            ------
            TimeoutError
                A result is not ready `timeout` seconds after the call to map.
            """
            return self._map(fn, iterables, timeout, chunksize, None)

    def shutdown(self, wait=True, *, cancel_futures=False):
        """shutdown(wait=True, *, cancel_futures=False)

        Free the pool's processes and memory once pending futures are done.

        Parameters
        ----------
        wait : bool
            Block until every pending future is done and the workers exited.
        cancel_futures : bool
            Cancel the futures that no worker has started.
        """
        self._pool.shutdown(wait, cancel_futures)

    # The stdlib's private attributes that its own tests and some user code
    # read: the live worker processes by pid, the thread that collects
    # results (None before the first submit) and the reason the pool broke.
    @property
    def _processes(self):
        if self._pool.shutting_down and self._pool.segment is None:   # the stdlib's is None after shutdown too
            return None
        return {w.process.pid: w.process for w in self._pool.workers}

    @property
    def _executor_manager_thread(self):
        return self._pool.thread

    @property
    def _broken(self):
        return self._pool.broken or False

    if sys.version_info >= (3, 14):
        def terminate_workers(self):
            """terminate_workers()

            Shut down at once: cancel what has not started and send SIGTERM
            to every worker. Running futures get BrokenProcessPool.
            """
            self._pool.force_shutdown("terminate")

        def kill_workers(self):
            """kill_workers()

            As `terminate_workers`, with SIGKILL.
            """
            self._pool.force_shutdown("kill")


def _python_exit():
    global _interpreter_exiting
    _interpreter_exiting = True
    pools = list(_live_pools)
    try:
        for pool in pools:
            pool.shutdown(wait=True, cancel_futures=False)
    except BaseException as exc:
        # Interrupted: the pool it waited for has stopped; the others stop too.
        for pool in pools:
            pool.interrupt(exc)
        raise


threading._register_atexit(_python_exit)
