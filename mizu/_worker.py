"""The worker process: runs tasks popped from its ring and pushes results back."""

import logging
import os
import threading
import time

from concurrent.futures.process import _ExceptionWithTraceback

from mizu import _core
from mizu._protocol import CALL, OK, PROTOCOL, RAISED, RETIRING, Reassembler, dumps, frames, loads


def _exit_with(client):
    client.wait()
    os._exit(1)


def _send(ring, data, index):
    if len(data) <= ring.max_message:
        ring.push(data)
    else:
        for frame in frames(data, index, ring.max_message):
            ring.push(frame)


def _pickled_result(index, task_id, status, value, seconds):
    try:
        return dumps((index, task_id, status, value, seconds), PROTOCOL)
    except BaseException as exc:
        # As the stdlib does: a result that cannot be pickled is replaced by
        # the error that pickling it raised.
        return dumps((index, task_id, RAISED, _ExceptionWithTraceback(exc, exc.__traceback__), seconds), PROTOCOL)


def main(tasks, results, index, client_pid, initializer, initargs, max_tasks):
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
    registry = {}
    partial = Reassembler()
    done = 0
    clock = time.perf_counter
    while True:
        try:
            message = partial.feed(tasks.pop(peer=client))
        except (EOFError, _core.PeerDiedError):
            return
        if message is None:
            continue
        kind, task_id, fn_ref, *payload = loads(message)
        if type(fn_ref) is int:
            fn = registry[fn_ref]
        elif type(fn_ref) is tuple:
            registry[fn_ref[0]] = fn = fn_ref[1]
        else:
            fn = fn_ref
        start = clock()
        try:
            if kind == CALL:
                value = fn(*payload[0], **payload[1])
            else:
                value = [fn(*args) for args in payload[0]]
            status = OK
        except BaseException as exc:
            value = _ExceptionWithTraceback(exc, exc.__traceback__)
            status = RAISED
        data = _pickled_result(index, task_id, status, value, clock() - start)
        del value
        _send(results, data, index)
        done += 1
        if max_tasks is not None and done >= max_tasks:
            _send(results, dumps((index, 0, RETIRING, None, 0.0), PROTOCOL), index)
            return
