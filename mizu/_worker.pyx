"""The worker process: runs tasks popped from its ring and pushes results back."""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from libc.stdint cimport int64_t

from mizu._core cimport PeerWatch, _Ring
from mizu._messages cimport (BATCH, CALLABLE, DECODING, FLAT, INITIALIZER, KEYWORDS, OK, RAISED, READY, RETIRING,
                             SINGLE, STARTING, EXITING, Codec, Reassembler, body_of, chunks, is_chunk)
from mizu.includes.liveness cimport PeerWatch as CPeerWatch
from mizu.includes.messages cimport Message, ResultHeader, Status, kTask, read_message, result_header
from mizu.includes.wire cimport Writer
from mizu.includes.spin cimport now_ns

import logging
import sys
import threading
import time
import traceback

from mizu import _arena, _core

__all__ = ["main"]


_IDLE_SLICE_NS = 250_000_000
# Segments of the arena that have held no array for this long go back to
# the system: numpy's own allocator gives large arrays' memory back as soon
# as they are freed; the arena keeps it this long for the next task's.
_IDLE_MEMORY_SECONDS = 1.0
cdef Codec _codec = Codec()


cdef _send(_Ring ring, const char* data, Py_ssize_t n, bytes message, int index):
    """Push the n bytes at data (message: them as bytes, or None), in chunks if they need more than a slot."""
    if n <= ring.max_msg:
        ring._push(data, n, True, None, None)
        return
    for chunk in chunks(data, n, index, ring.max_msg):
        ring._with_buffer(chunk, True, None, None)


cdef int _answer(_Ring results, object channel, int index, unsigned long long task_id, int status, object value,
                 double seconds, list box=None) except -1:
    """Send a result, or a notice (task_id 0) of this worker.

    box: a list holding the worker's last reference to a task's value, in place of value (Codec.encode).
    """
    cdef Writer w
    cdef ResultHeader head = result_header(index, task_id, <Status>status, seconds)
    data = _codec.encode(w, &head, sizeof(ResultHeader), value, index, channel, box)
    if data is None:
        _send(results, w.data(), w.size(), None, index)
    else:
        _send(results, PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data), data, index)
    return 0


def _with_traceback(exc):
    """exc as the stdlib's workers send it: with its traceback, as text, for the client's _RemoteTraceback."""
    # Imported on a task's first error: a worker whose tasks raise nothing
    # does without concurrent.futures.process and what it imports.
    try:
        from concurrent.futures.process import _ExceptionWithTraceback
    except Exception:
        return exc   # the task's error still reaches its future, without this traceback
    return _ExceptionWithTraceback(exc, exc.__traceback__)


def _give_back_idle_memory():
    while True:
        time.sleep(_IDLE_MEMORY_SECONDS)
        _arena.release_idle_memory(_IDLE_MEMORY_SECONDS)


def _arrays_in_the_arena():
    """From now on large arrays that tasks make lie in shared memory, so that results cross without a copy."""
    try:
        _arena.install_array_handler()
        _arena.keep_large_mappings()
        threading.Thread(target=_give_back_idle_memory, daemon=True, name="mizu-idle-memory").start()
    except Exception:
        # Tasks still run, their arrays in numpy's memory, as before.
        logging.getLogger("mizu").warning("large arrays stay in numpy's memory in this worker", exc_info=True)


def _last_words(results, channel, index, stage, exc):
    """Tell the client why this worker ends (stage: STARTING, INITIALIZER or DECODING), for its BrokenProcessPool."""
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    error = "".join(traceback.format_exception_only(type(exc), exc)).rstrip("\n")
    try:
        _answer(results, channel, index, 0, EXITING, (stage, tb, error), 0.0)
    except BrokenPipeError:   # the pool has broken or shut down already
        pass


def _run_units(fn, list units, int flags):
    cdef bint flat = flags & FLAT, single = flags & SINGLE
    cdef Py_ssize_t index
    values, failures = [], []
    for index in range(len(units)):
        unit = units[index]
        try:
            if flat:
                values.append(fn(unit) if single else fn(*unit))
            else:
                values.append([fn(arg) for arg in unit] if single else [fn(*args) for args in unit])
        except BaseException as exc:
            values.append(None)
            failures.append((index, _with_traceback(exc)))
    return values, failures


def main(tasks, results, channel, index, client_pid, initializer, initargs, max_tasks, by_value=False):
    """Entry point of worker `index`; returns when the client closes its ring or dies.

    by_value: the pool pickles by value what pickle would name (mizu._pickler), and so do its results.
    """
    try:
        _serve(tasks, results, channel, index, client_pid, initializer, initargs, max_tasks, by_value)
    finally:
        # Pools that this worker's tasks started and left running (a nested
        # joblib loop's, say) are shut down now, their queued tasks cancelled,
        # since nobody is left to collect them: multiprocessing joins their
        # processes as the worker ends, before the interpreter's exit would
        # shut them down, and would wait for them forever.
        pools = sys.modules.get("mizu._pool")
        if pools is not None:
            pools._python_exit(cancel_futures=True)


def _serve(_Ring tasks, _Ring results, channel, int index, client_pid, initializer, initargs, max_tasks,
           bint by_value):
    cdef PeerWatch client = _core.PeerWatch(client_pid)
    cdef dict registry = {}
    cdef Py_ssize_t done = 0
    cdef int64_t start
    cdef bytes message
    cdef Message m
    cdef int flags, status
    cdef unsigned long long task_id
    cdef double seconds
    cdef Reassembler partial = Reassembler()
    cdef dict modules = sys.modules
    cdef bint born = False
    cdef bint first = True
    # Hands each result to _answer as the worker's last reference to it
    # (Codec.encode); one list for every task, emptied after each.
    cdef list box = []
    _codec.by_value = by_value
    # A task may run for hours; a thread of the core's ends the worker as
    # soon as the client is gone, whatever the task is doing.
    try:
        CPeerWatch.die_with(client_pid)
    except OSError as exc:
        # No thread left in the system: the pool goes on without this worker (mizu._pool.Pool.leave_out).
        _last_words(results, channel, index, STARTING, exc)
        return
    if initializer is not None:
        try:
            initializer(*initargs)
        except BaseException as exc:
            logging.getLogger("concurrent.futures").critical("Exception in initializer:", exc_info=True)
            _last_words(results, channel, index, INITIALIZER, exc)
            return
    # Tasks wait in the client until a worker says it takes them (see
    # mizu._pool.Pool.pick): a worker still starting holds none up.
    try:
        _answer(results, channel, index, 0, READY, None, 0.0)
    except BrokenPipeError:
        return
    # The watch thread above ends the worker when the client dies, so an idle
    # worker need not wake often; a slice still lets signal handlers run.
    tasks.slice_ns = _IDLE_SLICE_NS
    # The first task is waited for without spinning: the pool may be
    # starting others meanwhile (a fork pool starts every worker at once),
    # and their starts want the CPUs.
    spin_ns = tasks.spin_ns
    tasks.spin_ns = 0
    while True:
        try:
            message = tasks._pop(None, client, True)
        except (EOFError, _core.PeerDiedError):
            return
        if first:
            tasks.spin_ns = spin_ns
            first = False
        if is_chunk(message):
            message = partial.feed(message)
            if message is None:
                continue
        try:
            read_message(PyBytes_AS_STRING(message), PyBytes_GET_SIZE(message), m)
            if m.kind != kTask:
                raise ValueError("the client sent a worker a result")
            call = body_of(m, message, channel)
            flags, task_id = m.task.flags, m.task.task_id
            if flags & CALLABLE:
                fn, call = call
                if m.task.fn_id:
                    registry[m.task.fn_id] = fn
            else:
                fn = registry[m.task.fn_id]
            if flags & KEYWORDS:
                if type(call) is not tuple or len(call) != 2 or type(call[0]) is not tuple:
                    raise ValueError("a call with keywords must be (a tuple of arguments, a dict of keywords)")
            elif not flags & BATCH and type(call) is not tuple:
                raise ValueError(f"a call's arguments must be a tuple, not {type(call).__name__}")
        except BaseException as exc:
            # No future can take this error: the worker ends and the pool
            # breaks, as the stdlib's does.
            _last_words(results, channel, index, DECODING, exc)
            raise
        if not tasks._claim(task_id):
            # The client took the task back to run it on an idle worker
            # (mizu._pool.Pool.rebalance); its callable, registered above,
            # stays this worker's.
            del call, message, fn
            continue
        if not born and "numpy" in modules:
            _arrays_in_the_arena()
            born = True
        start = now_ns()
        try:
            if flags & BATCH:
                value = _run_units(fn, call, flags)
            elif flags & KEYWORDS:
                value = fn(*call[0], **call[1])
            else:
                value = fn(*call)
            status = OK
        except BaseException as exc:
            value = _with_traceback(exc)
            status = RAISED
        seconds = (now_ns() - start) * 1e-9
        # Drop the task's arguments now, not when the next task arrives:
        # their finalizers may be what the client waits on.
        del call, message, fn
        box.append(value)
        del value
        try:
            _answer(results, channel, index, task_id, status, None, seconds, box)
        except BrokenPipeError:
            return
        except BaseException as exc:
            # As the stdlib does: a result that cannot be pickled is replaced
            # by the error that pickling it raised.
            _answer(results, channel, index, task_id, RAISED, _with_traceback(exc), 0.0)
        box.clear()
        done += 1
        if max_tasks is not None and done >= max_tasks:
            _answer(results, channel, index, 0, RETIRING, None, 0.0)
            return
