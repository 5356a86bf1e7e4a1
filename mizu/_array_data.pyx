"""Array data born in the arena (csrc/array_data.hpp, mizu/array_handler.hpp): numpy's memory handler."""

from mizu.includes.arena cimport current_pid
from mizu.includes.array_data cimport ArrayBlock, ArrayData
from mizu._arena cimport Arena, Block, _address

import os
import sys
import threading
import time

from mizu import _arena
from mizu._arena import _ndarray_type, _span, keeps_mappings, release_idle_mappings

__all__ = ["ARRAY_THRESHOLD", "IDLE_MEMORY_SECONDS", "install_array_handler", "array_arena", "release_idle_memory",
           "watch_idle_memory", "born_block", "is_born"]

# Array data born in the arena (csrc/array_data.hpp): in a worker, numpy
# takes every array's data of ARRAY_THRESHOLD bytes or more from an arena
# kept for array data (array_arena), so that a large result it returns crosses to the client by
# reference. Smaller arrays keep numpy's allocator, which is faster for them
# and whose data the pickle carries in band anyway below mizu._messages'
# INLINE.
ARRAY_THRESHOLD = 1 << 16
_ARRAY_SEGMENT_SIZE = 8 << 20

cdef extern from "array_handler.hpp":
    int _set_array_handler "mizu::install_array_handler"(ArrayData* owner) except -1

cdef ArrayData* _array_data = NULL
cdef Arena _array_arena = None
cdef int _array_pid = 0


def install_array_handler():
    """install_array_handler()

    Make numpy take the data of arrays of `ARRAY_THRESHOLD` bytes or more
    from an arena of this process (`array_arena`), in this thread's context and
    those copied from it; a no-op after the first call in a process. The
    worker calls it once numpy is imported. Arrays made before keep their
    allocator; a forked child's new arrays go to numpy's own allocator until
    it calls this itself.

    Raises
    ------
    RuntimeError
        numpy is not imported.
    """
    global _array_data, _array_arena, _array_pid
    if _array_data != NULL and _array_pid == current_pid():
        return
    if sys.modules.get("numpy") is None:
        raise RuntimeError("install_array_handler needs numpy imported first")
    # An arena of their own: a forked child maps its segments privately
    # (csrc/array_data.hpp), which must not touch the default arena's
    # blocks, shared with forked children by design.
    arena = Arena(segment_size=_ARRAY_SEGMENT_SIZE)
    cdef ArrayData* data = new ArrayData((<Arena>arena).arena, ARRAY_THRESHOLD, _array_data)
    try:
        _set_array_handler(data)
    except BaseException:
        del data
        raise
    _array_data, _array_arena, _array_pid = data, arena, current_pid()


cdef size_t held_bytes() noexcept:
    """The bytes of the array data that this process's arrays hold in its arena."""
    if _array_data == NULL or _array_pid != current_pid():
        return 0
    return _array_data.live_bytes()


def array_arena():
    """array_arena()

    The arena that `install_array_handler` made in this process, or None.
    """
    return _array_arena if _array_data != NULL and _array_pid == current_pid() else None


def release_idle_memory(seconds):
    """release_idle_memory(seconds)

    Give back the segments of this process's arenas (the default one and
    `array_arena`) that have held no block for `seconds`, and drop the
    kept mappings of other processes' segments unused as long
    (`release_idle_mappings`).
    """
    for arena in (_arena._default, array_arena()):
        if arena is not None and not arena.closed:
            arena.release_idle(seconds)
    release_idle_mappings(seconds)


# Segments of an arena that have held no block for this long go back to the
# system: numpy's own allocator gives large arrays' memory back as soon as
# they are freed; the arena keeps it this long for the next arrays.
IDLE_MEMORY_SECONDS = 1.0

_watch_lock = threading.Lock()
_watcher = None     # the thread mizu-idle-memory, while it runs
_watch_forever = False
_poked = False      # a segment was mapped since the thread last looked


def _forget_parents_watcher():
    # The thread is not the child's: it starts its own once it has memory to give back.
    global _watch_lock, _watcher, _watch_forever, _poked
    _watch_lock, _watcher, _watch_forever, _poked = threading.Lock(), None, False, False


os.register_at_fork(after_in_child=_forget_parents_watcher)


def watch_idle_memory(forever=False):
    """watch_idle_memory(forever=False)

    Have the thread ``mizu-idle-memory`` run `release_idle_memory`
    (`IDLE_MEMORY_SECONDS`) once every `IDLE_MEMORY_SECONDS`, until this
    process's arenas are down to their first segment each and it keeps no
    mapping of another process's segment; with `forever`,
    for as long as the process lives (a worker's arrays take segments
    through numpy, not through `Arena.alloc`, which calls this).

    Raises
    ------
    RuntimeError
        The thread cannot start (the interpreter is exiting, or the process
        has as many threads as it may).
    """
    global _watcher, _watch_forever, _poked
    while True:
        thread = threading.Thread(target=_watch, daemon=True, name="mizu-idle-memory") if _watcher is None else None
        # Nothing under the lock allocates: a collection there could run a
        # finalizer that allocates an array and comes back here.
        with _watch_lock:
            _poked = True
            _watch_forever = _watch_forever or bool(forever)
            if _watcher is not None:
                return
            if thread is not None:
                _watcher = thread
                break
        # It ended between the look and the lock: another one starts.
    try:
        thread.start()
    except BaseException:
        if thread.ident is None:   # not started (an interrupt may come once it has)
            with _watch_lock:
                _watcher = None
        raise


def _watch():
    global _watcher, _poked
    try:
        while True:
            time.sleep(IDLE_MEMORY_SECONDS)
            with _watch_lock:
                _poked = False
            release_idle_memory(IDLE_MEMORY_SECONDS)
            busy = (_watch_forever or _beyond_first(_arena._default) or _beyond_first(array_arena())
                    or keeps_mappings())
            with _watch_lock:
                if not busy and not _poked:
                    _watcher = None
                    return
    except BaseException:
        with _watch_lock:
            if _watcher is threading.current_thread():
                _watcher = None
        raise


def _beyond_first(arena):
    """Whether arena holds more than one ordinary segment: another one, or a dedicated one (larger)."""
    try:
        if arena is None:
            return False
        stats = arena.stats()
        return stats["segments"] > 1 or stats["capacity"] > arena.segment_size
    except ValueError:   # closed
        return False


def born_block(obj):
    """born_block(obj)

    Where the memory of a buffer lies, if numpy took it from the arena under
    `install_array_handler`.

    Parameters
    ----------
    obj : memoryview
        A view of a numpy array's memory, such as ``PickleBuffer.raw()``.

    Returns
    -------
    tuple of (Block, int, int, int) or None
        A new `Block` holding a reference of its own to the array data's
        block, the offset and length of `obj`'s bytes in it, and the address
        of the array data, for `is_born`. None if `obj`'s memory was not
        born in the arena of this process.
    """
    if _array_data == NULL or _array_data.live() == 0:
        return None
    ndarray = _ndarray_type()
    view = memoryview(obj)
    owner = view.obj
    while isinstance(owner, ndarray) and owner.base is not None:
        owner = owner.base
    if not isinstance(owner, ndarray):
        return None
    address = owner.__array_interface__["data"][0]
    cdef ArrayBlock where
    if not _array_data.find(<void*><size_t>address, &where) or _array_arena.closed:
        return None
    block = _array_arena._another_reference(where)
    low, nbytes = _span(_address(view), view.shape, view.strides, view.itemsize, view.nbytes == 0)
    offset = low - (<Block>block).address
    if offset < 0 or offset + nbytes > (<Block>block).nbytes:
        return None
    return block, offset, nbytes, address


def is_born(address):
    """is_born(address)

    Whether the array data at `address` (from `born_block`) is still live in
    this process: some array here still holds it.
    """
    cdef ArrayBlock where
    return _array_data != NULL and _array_data.find(<void*><size_t>address, &where)
