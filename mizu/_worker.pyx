"""The Python worker: the common worker loop (csrc/worker_loop.hpp) running Python calls."""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.pystate cimport PyThreadState
from cpython.ref cimport PyObject
from libc.stdint cimport uint8_t, uint16_t
from libcpp cimport bool
from libcpp.memory cimport unique_ptr
from cython.operator cimport dereference as deref

from mizu._arena cimport held_bytes as _blocks_held
from mizu._array_data cimport held_bytes as _arrays_held
from mizu._liveness cimport PeerWatch
from mizu._messages cimport (BATCH, CALLABLE, DECODING, FLAT, INITIALIZER, KEYWORDS, OK, RAISED, SINGLE, STARTING,
                             Codec, body_of)
from mizu._rings cimport _Ring
from mizu._sync cimport clear_list
from mizu._wire cimport decode_at
from mizu.includes.liveness cimport PeerWatch as CPeerWatch
from mizu.includes.messages cimport Message, ResultHeader, Status, kWireBody
from mizu.includes.wire cimport Writer
from mizu.includes.worker_loop cimport Stop, WorkerLanguage, WorkerLoop

import logging
import sys
import traceback

from mizu import _arena, _array_data, _core

__all__ = ["main"]


cdef extern from "Python.h":
    PyThreadState* PyEval_SaveThread()
    void PyEval_RestoreThread(PyThreadState* state) nogil
    int PyErr_CheckSignals() except -1


cdef Codec _codec = Codec()


cdef int _answer(WorkerLoop* loop, ResultHeader head, object value, object channel, int index,
                 list box=None) except -1:
    """Send a result, or a notice of this worker (head), with value; 1 if sent, 0 once the client is gone.

    box: a list holding the worker's last reference to a task's value, in place of value (Codec.encode).
    """
    cdef Writer w
    data = _codec.encode(w, &head, sizeof(ResultHeader), value, index, channel, box)
    if data is None:
        return loop.send(w.data(), w.size())
    return loop.send(PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data))


def _with_traceback(exc):
    """exc as the stdlib's workers send it: with its traceback, as text, for the client's _RemoteTraceback."""
    # Imported on a task's first error: a worker whose tasks raise nothing
    # does without concurrent.futures.process and what it imports.
    try:
        from concurrent.futures.process import _ExceptionWithTraceback
    except Exception:
        return exc   # the task's error still reaches its future, without this traceback
    return _ExceptionWithTraceback(exc, exc.__traceback__)


def _arrays_in_the_arena():
    """From now on large arrays that tasks make lie in shared memory, so that results cross without a copy."""
    try:
        _array_data.install_array_handler()
        _arena.keep_large_mappings()
        # Whether the worker waits or works: a long task may have freed them.
        _array_data.watch_idle_memory(forever=True)
    except Exception:
        # Tasks still run, their arrays in numpy's memory, as before.
        logging.getLogger("mizu").warning("large arrays stay in numpy's memory in this worker", exc_info=True)


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


def main(tasks, results, channel, index, client_pid, initializer, initargs, max_tasks, max_memory=None,
         by_value=False):
    """Entry point of worker `index`; returns when the client closes its ring or dies.

    It retires after max_tasks tasks, or after a task that leaves it holding
    more than max_memory bytes (None: no limit).

    by_value: the pool pickles by value what pickle would name (mizu._pickler), and so do its results.
    """
    try:
        _serve(tasks, results, channel, index, client_pid, initializer, initargs, max_tasks, max_memory, by_value)
    finally:
        _arena.hold_in_ring(None)
        # Pools that this worker's tasks started and left running (a nested
        # joblib loop's, say) are shut down now, their queued tasks cancelled,
        # since nobody is left to collect them: multiprocessing joins their
        # processes as the worker ends, before the interpreter's exit would
        # shut them down, and would wait for them forever.
        pools = sys.modules.get("mizu._pool")
        if pools is not None:
            pools._python_exit(cancel_futures=True)


cdef struct Held:
    PyObject* language        # the _Language, borrowed: it outlives its loop
    PyThreadState* released   # this thread's state while a wait has let go of the GIL


cdef class _Language:
    """How the worker loop runs Python calls: the state its functions share, between the loop's calls into them."""

    cdef Held held
    cdef WorkerLanguage table
    cdef unique_ptr[WorkerLoop] loop
    cdef object channel
    cdef int index
    cdef dict registry    # the client's fn_id -> the callable a task brought
    cdef unsigned long long last_fn_id   # the fn_id of the last task, and its callable: a task like the one before
    cdef object last_fn                  # looks nothing up
    cdef dict modules
    cdef Py_ssize_t modules_seen   # how many modules there were when numpy was last looked for among them
    cdef bint born        # the arena holds large arrays (numpy was imported)
    # The task prepared last, until it has run or was taken back.
    cdef object fn
    cdef object call
    cdef int flags
    # Hands each result to _answer as the worker's last reference to it
    # (Codec.encode); one list for every task, emptied after each.
    cdef list box
    cdef object error     # what stopped the loop (Stop.language), for _serve to raise

    def __cinit__(self, channel, int index):
        self.channel = channel
        self.index = index
        self.registry = {}
        self.modules = sys.modules
        self.box = []
        self.held.language = <PyObject*>self
        self.table.self = &self.held
        self.table.prepare = _prepare
        self.table.drop = _drop
        self.table.run = _run
        self.table.idle = _idle
        self.table.release = _release
        self.table.reacquire = _reacquire
        self.table.held_bytes = _held_bytes

    cdef int last_words(self, int stage, exc) except -1:
        """Tell the client why this worker ends (stage: STARTING, INITIALIZER or DECODING), for its BrokenProcessPool."""
        cdef WorkerLoop* loop = self.loop.get()
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        error = "".join(traceback.format_exception_only(type(exc), exc)).rstrip("\n")
        # Sent unless the pool has broken or shut down already, or a signal
        # handler raised while the send waited.
        if not _answer(loop, loop.result_header(Status.exiting), (stage, tb, error), self.channel, self.index):
            self.raise_if_stopped()
        return 0

    cdef int raise_if_stopped(self) except -1:
        """Raise what stopped the loop's last wait (a signal handler's exception, _idle), if that stopped it."""
        if self.loop.get().stop() == Stop.language and self.error is not None:
            raise self.error
        return 0


cdef inline _Language _of(void* held):
    return <_Language>(<Held*>held).language


cdef bool _prepare(void* held, const Message& m, const char* data, size_t size) noexcept:
    """The task's call and callable, registered if it brings one; False, the error kept, if it cannot be read."""
    cdef _Language lang = _of(held)
    cdef Message task = m     # body_of's declaration takes it as mutable
    try:
        if m.buffer_count == 0 and <uint8_t>m.body[0] == kWireBody:
            call = decode_at(m.body, m.body_size, None)
        else:
            call = body_of(task, PyBytes_FromStringAndSize(data, size), lang.channel)
        flags = m.task.flags
        if flags & CALLABLE:
            fn, call = call
            if m.task.fn_id:
                lang.registry[m.task.fn_id] = lang.last_fn = fn
                lang.last_fn_id = m.task.fn_id
        elif m.task.fn_id == lang.last_fn_id and lang.last_fn is not None:
            fn = lang.last_fn
        else:
            fn = lang.last_fn = lang.registry[m.task.fn_id]
            lang.last_fn_id = m.task.fn_id
        if flags & KEYWORDS:
            if type(call) is not tuple or len(call) != 2 or type(call[0]) is not tuple:
                raise ValueError("a call with keywords must be (a tuple of arguments, a dict of keywords)")
        elif not flags & BATCH and type(call) is not tuple:
            raise ValueError(f"a call's arguments must be a tuple, not {type(call).__name__}")
        # Looked for again only once a module was imported (or dropped) since.
        if not lang.born and len(lang.modules) != lang.modules_seen and "numpy" in lang.modules:
            # Before the task's clock starts (at its claim).
            _arrays_in_the_arena()
            lang.born = True
        lang.modules_seen = len(lang.modules)
    except BaseException as exc:
        # No future can take this error: the worker ends and the pool
        # breaks, as the stdlib's does.
        lang.error = exc
        try:
            lang.last_words(DECODING, exc)
        except BaseException as also:
            lang.error = also
        return False
    lang.call, lang.fn, lang.flags = call, fn, flags
    return True


cdef bool _drop(void* held) noexcept:
    # The callable the task brought, registered, stays this worker's.
    cdef _Language lang = _of(held)
    lang.call = lang.fn = None
    return True


cdef bool _run(void* held, WorkerLoop& loop) noexcept:
    """Run the task prepared last and send its outcome; False, the error kept, if that fails."""
    cdef _Language lang = _of(held)
    cdef int flags = lang.flags
    cdef int status
    cdef ResultHeader head
    fn, call = lang.fn, lang.call
    # Drop the task's arguments now, not when the next task arrives: their
    # finalizers may be what the client waits on.
    lang.call = lang.fn = None
    try:
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
        head = loop.result_header(<Status>status)
        del call, fn
        lang.box.append(value)
        del value
        try:
            _answer(&loop, head, None, lang.channel, lang.index, lang.box)
        except BaseException as exc:
            # As the stdlib does: a result that cannot be pickled is replaced
            # by the error that pickling it raised.
            clear_list(lang.box)
            _answer(&loop, loop.result_header(Status.raised), _with_traceback(exc), lang.channel, lang.index)
        clear_list(lang.box)
    except BaseException as exc:
        lang.error = exc
        return False
    # A send that failed because a signal handler raised (_idle) stops the loop.
    return lang.error is None


cdef bool _idle(void* held) noexcept with gil:
    """Each idle slice: run the signal handlers."""
    try:
        PyErr_CheckSignals()
    except BaseException as exc:
        _of(held).error = exc
        return False
    return True


cdef void _release(void* held) noexcept:
    (<Held*>held).released = PyEval_SaveThread()


cdef void _reacquire(void* held) noexcept nogil:
    PyEval_RestoreThread((<Held*>held).released)


cdef size_t _held_bytes(void* held) noexcept:
    """The arena blocks that this worker's objects and arrays hold, for max_worker_memory."""
    return _blocks_held() + _arrays_held()


def _serve(_Ring tasks, _Ring results, channel, int index, client_pid, initializer, initargs, max_tasks, max_memory,
           bint by_value):
    cdef PeerWatch client
    cdef _Language lang
    cdef Stop stop
    try:
        client = _core.PeerWatch(client_pid)
    except ProcessLookupError:
        return   # the client died as this worker started: there is no one to serve, nor to tell
    # The arrays of a task the pool kills go back through the client (mizu._arena.release_held).
    _arena.hold_in_ring(tasks)
    if max_memory is not None:
        _arena.count_held_blocks()
    lang = _Language(channel, index)
    _codec.by_value = by_value
    lang.loop.reset(new WorkerLoop(deref(tasks.ring), deref(tasks.pop_waiter), deref(results.ring),
                                   deref(results.push_waiter), deref(client.watch), <uint16_t>index,
                                   0 if max_tasks is None else max_tasks, 0 if max_memory is None else max_memory,
                                   lang.table))
    # A task may run for hours; a thread of the core's ends the worker as
    # soon as the client is gone, whatever the task is doing.
    try:
        CPeerWatch.die_with(client_pid)
    except OSError as exc:
        # No thread left in the system: the pool goes on without this worker (mizu._pool.Pool.leave_out).
        lang.last_words(STARTING, exc)
        return
    if initializer is not None:
        try:
            initializer(*initargs)
        except BaseException as exc:
            logging.getLogger("concurrent.futures").critical("Exception in initializer:", exc_info=True)
            lang.last_words(INITIALIZER, exc)
            return
    # Tasks wait in the client until a worker says it takes them (see
    # mizu._pool.Pool.pick): a worker still starting holds none up.
    if not lang.loop.get().notice(Status.ready):
        lang.raise_if_stopped()
        return
    try:
        stop = lang.loop.get().serve()
    except BaseException as exc:
        # A message that is not a task the client could have sent.
        lang.last_words(DECODING, exc)
        raise
    if stop == Stop.language:
        raise lang.error
