"""asyncio over mizu's pool: the awaitable of Executor.asubmit and the async iterator of Executor.amap.

A task's future settles in whichever thread collects its result: the
manager thread, or one waiting in result() (mizu._pool draws where each
stands). An asyncio future must be settled in its loop's thread, and each
wake-up of the loop from another thread (call_soon_threadsafe: a handle, a
lock, a write to the loop's self-pipe) costs more than the task's round
trip. So each loop has one Bridge, and completions reach it in batches:

  settling thread                                    the loop's thread
                                                     asubmit: Bridge.watch; the loop's next
                                                     round (watch_all) collects what the
                                                     pool has answered (collect_now) and
                                                     delivers what is done; a done-callback
                                                     watches the others
    a future settles -> its done-callback:
      bridge.post(receiver)  [bridge.lock]
        batch.append(receiver); the post that
        starts a batch wakes the loop:
        call_soon_threadsafe(drain) ------------->   drain(): takes the batch [bridge.lock],
                                                     collects what has come since (into
                                                     the next batch), then each receiver's
                                                     deliver(): an asubmit's asyncio future
                                                     takes the task's outcome; an amap's
                                                     iterator is woken to yield what has
                                                     settled.

Posts made in the loop's own thread (its own collecting, a cancel) go
through call_soon, which needs no wake-up. A bridge helps only the pool
of its last submit collect; another pool's results come through its
manager thread.
"""

import asyncio
import collections
import itertools
import threading
from concurrent.futures import _base
from time import monotonic as _monotonic

from mizu._amap import AsyncMapResults
from mizu._map import batch_values, planned

__all__ = ["amap_results", "running_bridge", "submit_awaitable"]


class Bridge:
    """Where the futures settling in any thread hand their receivers to one event loop, in batches."""

    __slots__ = ("loop", "thread", "lock", "batch", "pool", "unwatched")

    def __init__(self, loop):
        self.loop = loop
        self.thread = threading.get_ident()
        self.lock = threading.Lock()
        self.batch = []
        self.pool = None   # the pool of the last task submitted through it
        self.unwatched = []   # asubmit's since the loop last ran: the loop's thread alone touches it

    def watch(self, awaited):
        """Deliver awaited once its task's future is done: from the loop's next round on. In the loop's thread."""
        unwatched = self.unwatched
        unwatched.append(awaited)
        if len(unwatched) == 1:
            self.loop.call_soon(self.watch_all)

    def watch_all(self):
        # A future watched by a callback keeps the manager thread collecting
        # beside the loop's thread; those already done by the time the loop
        # runs (a coroutine that submits many, then awaits them) need none.
        unwatched, self.unwatched = self.unwatched, []
        try:
            self.collect()
        finally:
            for awaited in unwatched:
                call = awaited._call
                if call.done():
                    awaited.deliver()
                else:
                    call.add_done_callback(awaited.settled)

    def collect(self):
        """Collect what the pool has answered, unless another thread is: it settles here, without a wake-up."""
        if self.pool is not None:
            self.pool.collect_now()

    def post(self, receiver):
        """Have receiver.deliver() called in the loop's thread, with the rest of its batch; from any thread."""
        with self.lock:
            batch = self.batch
            batch.append(receiver)
            if len(batch) > 1:
                return
        try:
            if threading.get_ident() == self.thread:
                self.loop.call_soon(self.drain)
            else:
                self.loop.call_soon_threadsafe(self.drain)
        except RuntimeError:
            pass   # the loop is closed: nothing awaits what it would deliver

    def drain(self):
        with self.lock:
            batch, self.batch = self.batch, []
        try:
            self.collect()   # into the next batch
        finally:
            for receiver in batch:
                receiver.deliver()


_bridges = threading.local()


def running_bridge():
    """The Bridge of the event loop running in this thread; RuntimeError, saying what to do, if none runs."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        raise RuntimeError("asubmit and amap must be called from a coroutine running in an asyncio event loop; "
                           "outside of one, use submit and map") from None
    bridge = getattr(_bridges, "bridge", None)
    if bridge is None or bridge.loop is not loop:
        # A thread runs one loop at a time: the last one's bridge is let go of with it.
        bridge = _bridges.bridge = Bridge(loop)
    return bridge


def _asyncio_exception(exc):
    """exc as asyncio raises it from an awaited concurrent.futures future (the stdlib's run_in_executor)."""
    cls = type(exc)
    if cls is _base.CancelledError:
        return asyncio.CancelledError(*exc.args)
    if cls is _base.TimeoutError and cls is not asyncio.TimeoutError:   # before Python 3.11
        return asyncio.TimeoutError(*exc.args)
    if cls is _base.InvalidStateError:
        return asyncio.InvalidStateError(*exc.args)
    if isinstance(exc, StopIteration):
        # An asyncio future cannot hold one (it would end the coroutine that awaits it).
        error = RuntimeError(f"the task raised {cls.__name__}")
        error.__cause__ = exc
        return error
    return exc


class Awaited(asyncio.Future):
    """The asyncio future of a task that asubmit submitted: done, in its loop's thread, when the task's future is.

    Cancelling it (as cancelling the task that awaits it does) cancels the
    task if no worker has started it.
    """

    __slots__ = ("_call", "_bridge")

    def cancel(self, msg=None):
        if not super().cancel(msg):
            return False
        self._call.cancel()
        return True

    def settled(self, call):
        """The task's future is done (its callback, in the thread that settled it)."""
        self._bridge.post(self)

    def deliver(self):
        if self.done():
            return   # cancelled
        try:
            result = self._call.result()
        except BaseException as exc:
            if self._call.cancelled():
                super().cancel()
            else:
                self.set_exception(_asyncio_exception(exc))
            return
        self.set_result(result)


def submit_awaitable(bridge, call, pool):
    """The Awaited of the future `call` of pool, delivered through bridge (running_bridge(), taken before the submit)."""
    if bridge.pool is not pool:
        bridge.pool = pool
    awaited = Awaited(loop=bridge.loop)
    awaited._call, awaited._bridge = call, bridge
    bridge.watch(awaited)
    return awaited


class Completions:
    """The futures of an amap's tasks in the order they settle (unless `keep` is False), and the wake-up of its
    iterator."""

    __slots__ = ("bridge", "keep", "lock", "settled", "posted", "waiter")

    def __init__(self, bridge, keep):
        self.bridge = bridge
        self.keep = keep   # an amap in order takes its futures in their order: it needs only the wake-ups
        self.lock = threading.Lock()
        self.settled = []
        self.posted = False
        self.waiter = None

    def add(self, future):
        """A task's future is done (its callback, in the thread that settled it)."""
        with self.lock:
            if self.keep:
                self.settled.append(future)
            if self.posted:
                return
            self.posted = True
        self.bridge.post(self)

    def deliver(self):
        with self.lock:
            self.posted = False
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def take(self):
        """The futures settled since the last take, in the order they settled."""
        with self.lock:
            settled, self.settled = self.settled, []
        return settled

    async def wait(self, end_time):
        """Until a future settles, or end_time (monotonic; None: no end) passes."""
        loop = self.bridge.loop
        with self.lock:
            if self.settled:
                return
            waiter = self.waiter = loop.create_future()
        timer = None
        if end_time is not None:
            timer = loop.call_later(max(0.0, end_time - _monotonic()), _wake, waiter)
        try:
            await waiter
        finally:
            self.waiter = None
            if timer is not None:
                timer.cancel()


def _wake(waiter):
    if not waiter.done():
        waiter.set_result(None)


def amap_results(pool, fn, iterables, ordered, buffersize, chunksize, timeout, workers, timeout_ns=-1):
    """Submit the calls of fn over iterables as map_results does; the async iterator of their values.

    ordered: in the order of the calls, else in the order their tasks end.
    Must be called in a running event loop.
    """
    bridge = running_bridge()
    end_time = None if timeout is None else timeout + _monotonic()
    batches, flat, _, send = planned(pool, fn, iterables, chunksize, buffersize, workers, timeout_ns, ordered)
    completions = Completions(bridge, not ordered)
    add = completions.add
    if bridge.pool is not pool:
        bridge.pool = pool

    def submit(batch):
        future = send(batch)
        future.add_done_callback(add)
        return future

    # In submission order; unordered, a dict's keys, which go in any order.
    futures = (collections.deque if ordered else dict.fromkeys)(
        map(submit, batches if buffersize is None else itertools.islice(batches, buffersize)))
    return AsyncMapResults(_batches(completions, futures, None if buffersize is None else map(submit, batches),
                                    end_time, flat))


async def _batches(completions, futures, more, end_time, flat):
    """Each batch's values, in a list in reverse order for AsyncMapResults to pop, taken from `futures` as they
    settle; `more` submits a batch each.

    No future is kept once its values are yielded: the caller may drop them.
    """
    ordered = type(futures) is collections.deque
    try:
        while futures:
            if ordered:
                future = futures[0]
                while not future.done():
                    _check_time(end_time)
                    await completions.wait(end_time)
                done = [futures.popleft()]
                del future
            else:
                done = completions.take()
                if not done:
                    _check_time(end_time)
                    await completions.wait(end_time)
                    continue
                done.reverse()
            while done:
                future = done.pop()
                if not ordered:
                    del futures[future]
                if more is not None:
                    for fresh in itertools.islice(more, 1):
                        if ordered:
                            futures.append(fresh)
                        else:
                            futures[fresh] = None
                try:
                    result = future.result()
                except BaseException as failure:
                    raise _asyncio_exception(failure)
                values, exc = batch_values(result, flat)
                del future, result
                yield values
                if exc is not None:
                    raise exc
    finally:
        for future in futures:
            future.cancel()


def _check_time(end_time):
    if end_time is not None and _monotonic() >= end_time:
        raise _base.TimeoutError
