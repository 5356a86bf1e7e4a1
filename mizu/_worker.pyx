"""The worker process: runs tasks popped from its ring and pushes results back."""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from libc.stdint cimport int64_t
from libc.string cimport memset

from mizu._core cimport PeerWatch, _Ring
from mizu._messages cimport ResultHeader, TaskHeader
from mizu._wire cimport decode, decode_after, encode_plain_into
from mizu.includes.wire cimport Writer
from mizu.includes.spin cimport now_ns

import logging
import os
import threading
import traceback

from concurrent.futures.process import _ExceptionWithTraceback

from mizu import _core
from mizu._protocol import (CALL, CONTINUED, FIRST, FLAT, INITIALIZER, OK, RAISED, RESULT, RETIRING, SINGLE, TASK,
                            UNPICKLING, WIRE, Reassembler, dumps, dumps_pickled, frames, loads)

__all__ = ["main"]


_IDLE_SLICE_NS = 250_000_000
cdef unsigned char _FIRST_FRAME = FIRST, _CONTINUED_FRAME = CONTINUED, _WIRE_MESSAGE = WIRE
cdef unsigned char _TASK_MESSAGE = TASK, _RESULT_MESSAGE = RESULT
cdef int _CALL = CALL, _OK = OK, _FLAT = FLAT, _SINGLE = SINGLE


def _exit_with(client):
    client.wait()
    os._exit(1)


cdef _send(_Ring ring, bytes data, int index):
    _send_from(ring, PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data), data, index)


cdef _send_from(_Ring ring, const char* data, Py_ssize_t n, bytes message, int index):
    """Push the n bytes at data (message: them as bytes, or None), in frames if they need more than a slot."""
    if n <= ring.max_msg:
        ring._push(data, n, True, None, None)
        return
    if message is None:
        message = PyBytes_FromStringAndSize(data, n)
    for frame in frames(message, index, ring.max_msg):
        ring._with_buffer(frame, True, None, None)


def _pickling_failed(index, task_id, exc):
    # As the stdlib does: a result that cannot be pickled is replaced by the
    # error that pickling it raised.
    return dumps((index, task_id, RAISED, _ExceptionWithTraceback(exc, exc.__traceback__), 0.0))


def _last_words(results, index, stage, exc):
    """Tell the client why this worker ends (stage: INITIALIZER or UNPICKLING), for its BrokenProcessPool."""
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    try:
        _send(results, dumps((index, 0, RAISED, (stage, tb), 0.0)), index)
    except BrokenPipeError:   # the pool has broken or shut down already
        pass


def _run_units(fn, list units, int shape):
    cdef bint flat = shape & _FLAT, single = shape & _SINGLE
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
            failures.append((index, _ExceptionWithTraceback(exc, exc.__traceback__)))
    return values, failures


def main(_Ring tasks, _Ring results, channel, int index, client_pid, initializer, initargs, max_tasks):
    """Entry point of worker `index`; returns when the client closes its ring or dies."""
    cdef PeerWatch client = _core.PeerWatch(client_pid)
    cdef dict registry = {}
    cdef Py_ssize_t done = 0
    cdef int64_t start
    cdef bytes message, data
    cdef unsigned char first
    cdef int kind, status
    cdef unsigned long long task_id
    cdef double seconds
    cdef TaskHeader task_head
    cdef ResultHeader result_head
    cdef Writer w
    memset(&result_head, 0, sizeof(ResultHeader))
    result_head.tag, result_head.sender = _RESULT_MESSAGE, index
    # A task may run for hours; this thread ends the worker as soon as the
    # client is gone, whatever the task is doing.
    threading.Thread(target=_exit_with, args=(client,), daemon=True, name="mizu-client-watch").start()
    if initializer is not None:
        try:
            initializer(*initargs)
        except BaseException as exc:
            logging.getLogger("concurrent.futures").critical("Exception in initializer:", exc_info=True)
            _last_words(results, index, INITIALIZER, exc)
            return
    # The watch thread above ends the worker when the client dies, so an idle
    # worker need not wake often; a slice still lets signal handlers run.
    tasks.slice_ns = _IDLE_SLICE_NS
    partial = Reassembler()
    while True:
        try:
            message = tasks._pop(None, client, True)
        except (EOFError, _core.PeerDiedError):
            return
        first = message[0]
        if first == _FIRST_FRAME or first == _CONTINUED_FRAME:
            message = partial.feed(message)
            if message is None:
                continue
            first = message[0]
        try:
            if first == _TASK_MESSAGE:
                args = <tuple?>decode_after(&task_head, sizeof(TaskHeader), PyBytes_AS_STRING(message),
                                            PyBytes_GET_SIZE(message), "task")
                kind, task_id, fn_ref, kwargs = _CALL, task_head.task_id, task_head.fn_id, None
            else:
                # (kind, task_id, fn_ref, args, kwargs), or (kind, task_id, fn_ref, units, shape)
                kind, task_id, fn_ref, args, kwargs = <tuple?>(
                    decode(message) if first == _WIRE_MESSAGE else loads(message, channel))
        except BaseException as exc:
            # No future can take this error: the worker ends and the pool
            # breaks, as the stdlib's does.
            _last_words(results, index, UNPICKLING, exc)
            raise
        if type(fn_ref) is int:
            fn = registry[fn_ref]
        elif type(fn_ref) is tuple:
            registry[fn_ref[0]] = fn = fn_ref[1]
        else:
            fn = fn_ref
        start = now_ns()
        try:
            if kind != _CALL:
                value = _run_units(fn, args, kwargs)
            elif kwargs:
                value = fn(*args, **kwargs)
            else:
                value = fn(*args)
            status = _OK
        except BaseException as exc:
            value = _ExceptionWithTraceback(exc, exc.__traceback__)
            status = RAISED
        seconds = (now_ns() - start) * 1e-9
        data = None
        try:
            w.clear()
            result_head.task_id, result_head.seconds = task_id, seconds
            # What is not plain alone is not plain in the whole message either: it is pickled.
            if status != _OK or encode_plain_into(w, &result_head, sizeof(ResultHeader), value):
                data = dumps_pickled((index, task_id, status, value, seconds), index, channel)
        except BaseException as exc:
            data = _pickling_failed(index, task_id, exc)
        # Drop the task's arguments and result now, not when the next task
        # arrives: their finalizers may be what the client waits on.
        del value, args, kwargs, message, fn, fn_ref
        if data is None:
            _send_from(results, w.data(), w.size(), None, index)
        else:
            _send(results, data, index)
        done += 1
        if max_tasks is not None and done >= max_tasks:
            _send(results, dumps((index, 0, RETIRING, None, 0.0)), index)
            return
