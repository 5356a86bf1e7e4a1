# cython: auto_pickle=False
"""Executor.map: its calls cut into batches that travel as one task each, and the iterator of their results.

Units are the stdlib's chunks: an exception stands for its whole unit.
Several units travel as one batch, with no Future per unit; with chunksize 1
a unit is the call itself. A call's arguments are a tuple, or with one
iterable the bare item (a batch task, doc/dev/messages.rst).
"""

from cpython.list cimport PyList_GET_SIZE
from libc.stdint cimport int64_t

from mizu._future cimport Cell, cell_of
from mizu._messages cimport BATCH, FLAT, SINGLE
from mizu._pool cimport Pool
from mizu.includes.spin cimport now_ns

import collections
import itertools
import queue
from concurrent.futures import _base
from time import monotonic as _monotonic

from mizu._progress import TICK_SECONDS, Progress, total_of, wanted


__all__ = ["MapResults", "batch_values", "check_ordered", "map_results", "planned"]

_BATCH_SECONDS = 500e-6
_MAX_BATCH = 1024
_LONGEST_WAIT = 1e9   # seconds: a queue's wait for longer overflows; a longer timeout waits again

cdef object _PENDING = _base.PENDING
cdef object _FINISHED = _base.FINISHED


cdef class MapResults:
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


cdef Py_ssize_t _batch_size(double task_seconds, Py_ssize_t units, Py_ssize_t chunksize, Py_ssize_t workers):
    """Units per batch: enough batches to keep every worker busy to the end, each worth ~_BATCH_SECONDS."""
    by_time = max(1, int(_BATCH_SECONDS / (task_seconds * chunksize)))
    by_balance = max(1, units // (workers * 8))
    return min(by_time, by_balance, _MAX_BATCH)


def _wait_ticking(future, end_time, bar):
    """future's result, waited for in slices that tick the bar between them, until end_time (None: no end).

    A slice waits with exception(), which returns the task's own error
    rather than raise it: a task that failed with TimeoutError (its
    deadline, or its own) is not mistaken for a slice that ran out.
    """
    while True:
        bar.tick()
        left = None if end_time is None else end_time - _monotonic()
        try:
            future.exception(TICK_SECONDS if left is None else min(left, TICK_SECONDS))
        except _base.TimeoutError:
            if left is not None and left <= TICK_SECONDS:
                raise
            continue
        return future.result()


cdef class _Settled:
    """An unordered map's futures in the order they settle, and a bell that rings as each does.

    It is the done-callback of each of them, which the settling thread
    calls from C: no Python frame per future. The bell is the state of a
    future alone (a Cell), for the waiting caller to collect results itself
    until it rings (Pool.wait_until, as a future's result() does), rather
    than wait for the manager thread to collect them.
    """

    cdef object futures   # a SimpleQueue
    cdef Cell bell

    def __cinit__(self):
        self.futures = queue.SimpleQueue()
        self.bell = Cell()

    def __call__(self, future):
        self.futures.put(future)
        self.bell.state = _FINISHED


cdef object _next_settled(Pool pool, _Settled settled, end_time, bar):
    """The next future that settled reaches, waited for until end_time (None: no end), ticking bar (None: none) between slices."""
    cdef Cell bell = settled.bell
    cdef int64_t slice_end
    futures = settled.futures
    while True:
        # Set before the look at the queue: a future that settles after the look rings it.
        bell.state = _PENDING
        if not futures.empty():
            return futures.get(False)
        if end_time is not None and _monotonic() >= end_time:
            raise _base.TimeoutError()
        if bar is not None:
            bar.tick()
        wait = _LONGEST_WAIT if end_time is None else min(end_time - _monotonic(), _LONGEST_WAIT)
        if bar is not None:
            wait = min(wait, TICK_SECONDS)
        slice_end = now_ns() + <int64_t>(max(0.0, wait) * 1e9)
        pool.wait_until(bell, slice_end)
        if bell.state is _PENDING and now_ns() < slice_end:
            # The pool collects no more here (it broke, or every future is
            # done): what settles does elsewhere, into the queue.
            try:
                return futures.get(True, max(0.0, (slice_end - now_ns()) * 1e-9))
            except queue.Empty:
                pass


def check_ordered(ordered):
    """Raise, saying what to pass, unless ordered is a bool."""
    if ordered is not True and ordered is not False:
        raise TypeError(f"ordered must be True (results in the order of the calls) or False (results as they "
                        f"complete), not {ordered!r}")


def planned(Pool pool, fn, iterables, chunksize, buffersize, workers, timeout_ns=-1, ordered=True):
    """The batches of a map's calls, whether a unit is a single call, their count, and the function that submits one.

    (batches, flat, calls, send): send(batch, bar=None) submits a batch to
    pool as one task and returns its future, whose values batch_values
    reads; calls is None with a buffersize, which leaves the iterables to be
    read as the batches are. The arguments are map_results'; bad ones raise
    the stdlib's errors, before any call is submitted. Without a buffersize
    the batches are cut from all the calls at once, each worth about
    _BATCH_SECONDS of the pool's tasks (one unit with a deadline, or for a
    map in completion order); with one, each batch is one unit.
    """
    if chunksize < 1:
        raise ValueError("chunksize must be >= 1.")
    if buffersize is not None:
        if not isinstance(buffersize, int):
            raise TypeError("buffersize must be an integer or None")
        if buffersize < 1:
            raise ValueError("buffersize must be None or > 0")
    check_ordered(ordered)
    flat = chunksize == 1
    single = len(iterables) == 1
    calls = iter(iterables[0]) if single else zip(*iterables)
    units = calls if flat else _chunks(calls, chunksize)
    shape = (FLAT if flat else 0) | (SINGLE if single else 0)
    count = None
    if buffersize is None:
        units = list(units)
        count = len(units) if flat else sum(map(len, units))
        # A deadline is a task's: with one, a task is one chunk, as the caller
        # chose it; so it is in completion order, where a chunk's results come
        # as it completes. So is max_tasks_per_child's count, as the stdlib's.
        timed = timeout_ns > 0 or timeout_ns < 0 and pool.task_timeout_ns
        per_batch = (1 if timed or not ordered or pool.max_tasks is not None
                     else _batch_size(pool.task_seconds, len(units), chunksize, workers))
        # Not a generator expression: that would keep `units` in the
        # closure of results(), for the garbage collector to walk until the end.
        batches = _slices(units, per_batch)
    else:
        batches = _chunks(units, 1)

    def send(batch, bar=None):
        return pool.submit(BATCH, fn, batch, shape, len(batch) if flat else sum(map(len, batch)), bar, timeout_ns)

    return batches, flat, count, send


def batch_values(outcome, bint flat):
    """The values of a batch's task from its future's result, in reverse order for popping, and the exception that
    ends them (or None)."""
    values, failures = outcome
    if failures:
        del values[failures[0][0]:]
    if not flat:
        values = list(itertools.chain.from_iterable(values))
    values.reverse()
    return values, failures[0][1] if failures else None


def map_results(Pool pool, fn, iterables, timeout, chunksize, buffersize, workers, progress=False, timeout_ns=-1,
                ordered=True):
    """Submit the calls of fn over iterables to pool, at most buffersize batches ahead (None: all); their MapResults.

    The arguments are the Executor's; workers: its max_workers; progress:
    False, or the option of a bar (mizu._progress.Progress) that counts the
    calls of each batch as the pool settles it; timeout_ns: each task's
    deadline (mizu._control), -1 for the pool's; ordered: False yields each
    batch's values as it settles, a batch then being one chunk. Bad ones raise
    the stdlib's errors (or Progress's), before any call is submitted.
    """
    end_time = None if timeout is None else timeout + _monotonic()
    batches, flat, count, submit = planned(pool, fn, iterables, chunksize, buffersize, workers, timeout_ns, ordered)
    bar = None
    if wanted(progress):
        bar = Progress(progress, total_of(iterables) if buffersize is not None else count)

    def send(batch):
        return submit(batch, bar)

    try:
        futures = collections.deque(
            map(send, batches if buffersize is None else itertools.islice(batches, buffersize)))
    except BaseException:
        if bar is not None:
            bar.close()
        raise

    def results():
        """Each batch's values, in a list in reverse order, for MapResults to pop."""
        try:
            while futures:
                if buffersize is not None:
                    futures.extend(map(send, itertools.islice(batches, 1)))
                future = futures.popleft()
                try:
                    if bar is None:
                        outcome = future.result(None if end_time is None else end_time - _monotonic())
                    else:
                        outcome = _wait_ticking(future, end_time, bar)
                except _base.TimeoutError:
                    future.cancel()
                    raise
                finally:
                    if bar is not None:
                        pool.bars.counters.pop(cell_of(future), None)
                del future
                values, exc = batch_values(outcome, flat)
                del outcome
                yield values
                if exc is not None:
                    raise exc
        finally:
            _cancel(pool, futures, bar)

    if ordered:
        return MapResults(results())
    settled = _Settled()
    pending = set(futures)
    futures.clear()
    for future in pending:
        future.add_done_callback(settled)

    def completed():
        """Each batch's values as it settles, in a list in reverse order, for MapResults to pop."""
        try:
            while pending:
                future = _next_settled(pool, settled, end_time, bar)
                pending.remove(future)
                if buffersize is not None:
                    for refill in map(send, itertools.islice(batches, 1)):
                        pending.add(refill)
                        refill.add_done_callback(settled)
                if bar is not None:
                    pool.bars.counters.pop(cell_of(future), None)
                values, exc = batch_values(future.result(), flat)
                del future
                yield values
                if exc is not None:
                    raise exc
        finally:
            _cancel(pool, pending, bar)

    return MapResults(completed())


def _cancel(Pool pool, futures, bar):
    """Cancel the futures of a map that ends (those not started), and close its bar (None: none)."""
    for future in futures:
        future.cancel()
    if bar is not None:
        # A batch that never settles (cancelled, or its task could
        # not be sent) leaves no counter behind in the pool.
        for future in futures:
            pool.bars.counters.pop(cell_of(future), None)
        bar.close()
