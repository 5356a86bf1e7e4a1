"""The worker process: runs tasks popped from its ring and pushes results back."""

import logging
import os
import threading
import time

from concurrent.futures.process import _ExceptionWithTraceback

from mizu import _core
from mizu._protocol import CALL, OK, RAISED, RETIRING, Reassembler, dumps, frames, is_frame, loads


_IDLE_SLICE_NS = 250_000_000


def _exit_with(client):
    client.wait()
    os._exit(1)


def _send(ring, data, index):
    if len(data) <= ring.max_message:
        ring.push(data)
    else:
        for frame in frames(data, index, ring.max_message):
            ring.push(frame)


def _pickling_failed(index, task_id, exc):
    # As the stdlib does: a result that cannot be pickled is replaced by the
    # error that pickling it raised.
    return dumps((index, task_id, RAISED, _ExceptionWithTraceback(exc, exc.__traceback__), 0.0))


def _run_units(fn, units, flat):
    values, failures = [], []
    for index, unit in enumerate(units):
        try:
            values.append(fn(*unit) if flat else [fn(*args) for args in unit])
        except BaseException as exc:
            values.append(None)
            failures.append((index, _ExceptionWithTraceback(exc, exc.__traceback__)))
    return values, failures


def main(tasks, results, channel, index, client_pid, initializer, initargs, max_tasks):
    """Entry point of worker `index`; returns when the client closes its ring or dies."""
    client = _core.PeerWatch(client_pid)
    # A task may run for hours; this thread ends the worker as soon as the
    # client is gone, whatever the task is doing.
    threading.Thread(target=_exit_with, args=(client,), daemon=True, name="mizu-client-watch").start()
    if initializer is not None:
        try:
            initializer(*initargs)
        except BaseException:
            logging.getLogger("concurrent.futures").critical("Exception in initializer:", exc_info=True)
            return
    # The watch thread above ends the worker when the client dies, so an idle
    # worker need not wake often; a slice still lets signal handlers run.
    tasks.slice_ns = _IDLE_SLICE_NS
    registry = {}
    partial = Reassembler()
    done = 0
    clock = time.perf_counter
    pop = tasks.pop
    while True:
        try:
            message = pop(peer=client)
        except (EOFError, _core.PeerDiedError):
            return
        if is_frame(message[0]):
            message = partial.feed(message)
            if message is None:
                continue
        kind, task_id, fn_ref, *payload = loads(message, channel)
        if type(fn_ref) is int:
            fn = registry[fn_ref]
        elif type(fn_ref) is tuple:
            registry[fn_ref[0]] = fn = fn_ref[1]
        else:
            fn = fn_ref
        start = clock()
        try:
            value = fn(*payload[0], **payload[1]) if kind == CALL else _run_units(fn, *payload)
            status = OK
        except BaseException as exc:
            value = _ExceptionWithTraceback(exc, exc.__traceback__)
            status = RAISED
        try:
            data = dumps((index, task_id, status, value, clock() - start), index, channel)
        except BaseException as exc:
            data = _pickling_failed(index, task_id, exc)
        # Drop the task's arguments and result now, not when the next task
        # arrives: their finalizers may be what the client waits on.
        del value, payload, message
        _send(results, data, index)
        done += 1
        if max_tasks is not None and done >= max_tasks:
            _send(results, dumps((index, 0, RETIRING, None, 0.0)), index)
            return
