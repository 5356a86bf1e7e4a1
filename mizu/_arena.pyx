"""The shared arena: blocks of shared memory for large payloads.

An `Arena` belongs to the process that creates it and hands out `Block`
objects: writable buffers in shared memory, so ``numpy.frombuffer(block,
dtype)`` views one without a copy. A block is reference-counted across
processes. ``block.share()`` takes a reference for another process and
describes it in `REF_SIZE` bytes; `open_block` there adopts it. Pickling a
block does the same and sends the segment's descriptor along. Whichever
process drops the last reference, the block goes back to its owner, which
reuses it on its next allocation.

Each process maps an arena segment once, on first use, and unmaps it when
its last block here is gone.
"""

from cpython.buffer cimport PyBuffer_FillInfo
from cpython.memoryview cimport PyMemoryView_GET_BUFFER
from cpython.bytes cimport PyBytes_FromStringAndSize
from libc.stdint cimport uint32_t, uint64_t
from libc.string cimport memcpy
from libcpp.memory cimport shared_ptr
from libcpp.vector cimport vector

from mizu.includes.arena cimport Allocation, ArenaOptions, ArenaStats, BlockRef
from mizu.includes.arena cimport Arena as CArena
from mizu.includes.arena cimport (HeldBlocks, HeldSlot, HeldTable, attach_arena_segment, block_data, block_refs,
                                  current_pid)
from mizu.includes.arena cimport hold_in, kHeldSlots, note_held, release_block, retain_block, take_held, unhold
from mizu.includes.array_data cimport ArrayBlock
from mizu.includes.segment cimport Segment as CSegment
from mizu._rings cimport _Ring

import collections
import operator
import os
import re
import sys
import threading
import time
import weakref
from multiprocessing import reduction

__all__ = ["Arena", "Block", "open_block", "default_arena", "arena_block", "REF_SIZE", "DEFAULT_SEGMENT_SIZE"]

REF_SIZE = sizeof(BlockRef)
DEFAULT_SEGMENT_SIZE = 32 << 20

_INHERITED = "this block was inherited through fork and holds no reference in this process"

_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def _limit_from_env():
    text = os.environ.get("MIZU_ARENA_LIMIT", "").strip()
    if not text:
        return 0
    match = re.fullmatch(r"(\d+)\s*([kmgt]?)i?b?", text, re.IGNORECASE)
    if not match or int(match[1]) == 0:
        raise ValueError(f"MIZU_ARENA_LIMIT must be a positive number of bytes such as 4294967296 or 4G, got {text!r}")
    return int(match[1]) * _UNITS[match[2].lower()]


cdef class _Mapping:
    """This process's mapping of one arena segment; its blocks keep it alive."""

# (arena id, segment id) -> the _Mapping of that segment in this process.
_mappings = weakref.WeakValueDictionary()

# The last few segments of other processes' arenas opened here stay mapped
# after their blocks are gone: a peer that passes block after block from the
# same segment then costs one mmap, not one per block. Segments up to twice
# the default size: ordinary ones, and those of a block of up to 64 MB,
# which a worker's arena keeps as a spare and gives the next such result; a
# larger segment goes with its block. A mapping goes once no block was
# opened from it for a second (release_idle_mappings, from the thread
# mizu-idle-memory, which _open starts), or once the process that shared it
# has exited (forget_exited_peers): the memory its owner gave back is not
# held here.
# (arena id, segment id) -> (its _Mapping, the pid of the process that shared it, when a block of it was last opened)
_recent = collections.OrderedDict()
_RECENT = 8
_RECENT_BYTES = 2 * DEFAULT_SEGMENT_SIZE


# Large segments' mappings are kept too, once keep_large_mappings is
# called (a worker does, and drops those unused for a second), up to 2 GiB
# of them (the newest always): a task given the same large array again and
# again then maps and faults it in once.
_recent_large = collections.OrderedDict()
_RECENT_LARGE_BYTES = 2 << 30
cdef bint _keep_large = False

# The blocks this process's Block objects hold, once count_held_blocks is
# called (a worker under max_worker_memory does): counted with its resident
# memory (held_bytes). Never destroyed: a Block may be dropped after the
# module's statics are.
cdef HeldBlocks* _held_blocks = new HeldBlocks()
cdef bint _counting = False


def count_held_blocks():
    """count_held_blocks()

    From now on count the blocks this process's `Block` objects hold, for
    max_worker_memory; other processes pay nothing for the count.
    """
    global _counting
    _counting = True


cdef size_t held_bytes() noexcept:
    return _held_blocks.bytes()


def _large_bytes():
    return sum((<_Mapping>m).seg.get().size() for m, _ in _recent_large.values())


def keep_large_mappings():
    """keep_large_mappings()

    From now on, keep this process's mappings of other processes' large
    segments after their blocks are gone, until `release_idle_mappings`
    drops them.
    """
    global _keep_large
    _keep_large = True


def release_idle_mappings(seconds):
    """release_idle_mappings(seconds)

    Drop the kept mappings of other processes' segments that no block was
    opened from for `seconds` or more.
    """
    cutoff = time.monotonic() - seconds
    for kept in (_recent_large, _recent):
        for key in list(kept):
            # Looked up afresh at each key: dropping a mapping may run
            # Python code (a weak reference's callback), and another thread
            # may open a block of the next segment meanwhile.
            entry = kept.get(key)
            if entry is not None and entry[-1] <= cutoff:
                kept.pop(key, None)


def keeps_mappings():
    """keeps_mappings()

    Whether this process keeps a mapping of another process's segment for
    the next block of it, which `release_idle_mappings` is to drop once idle.
    """
    return bool(_recent) or bool(_recent_large)


def forget_exited_peers():
    """forget_exited_peers()

    Drop the kept mappings of segments that processes which have exited
    shared here (a pool's workers, once they are gone): what they held goes
    back to the system. A block of such a segment that comes again, through
    another process, is mapped anew.
    """
    for key, (mapping, pid, used) in list(_recent.items()):
        if pid != current_pid() and not _alive(pid):
            _recent.pop(key, None)


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True   # another user's: it exists
    return True


cdef _Mapping _mapped(uint64_t arena_id, uint32_t segment_id, shared_ptr[CSegment] seg):
    cdef _Mapping m = _Mapping.__new__(_Mapping)
    m.seg = seg
    _mappings[arena_id, segment_id] = m
    return m


cdef class Block:
    """A block of shared memory from an `Arena`, holding one reference to it.

    Blocks come from `Arena.alloc` and `open_block`, or from unpickling one.
    A block exports a writable one-dimensional buffer of unsigned bytes, aligned
    to 128 bytes, so ``numpy.frombuffer(block, dtype)`` or ``memoryview(block)``
    views it without a copy; such views keep the block alive. When the block
    object is collected its reference is dropped, and the last reference
    dropped in any process returns the block to its arena.

    A block inherited through ``fork`` holds no reference in the child, and
    refuses to export its buffer there (`BufferError`): the parent may free
    it at any time. That includes a block passed to a ``multiprocessing``
    ``Process`` under the fork start method, which hands the child the
    parent's object rather than a pickled copy. Send the block through a
    ``multiprocessing`` pipe or queue instead, which pickles it, or `share`
    it in the parent and `open_block` the description in the child.

    Attributes
    ----------
    arena_id : int
        The id of the arena the block belongs to.
    segment_id : int
        The id of its segment within that arena.
    offset : int
        Where its data starts in the segment.
    """

    @staticmethod
    cdef Block adopt(_Mapping mapping, uint64_t arena_id, uint32_t segment_id, uint64_t offset, uint64_t length,
                     uint32_t generation):
        cdef char* data = block_data(mapping.seg.get()[0], offset, length, generation)
        cdef Block self = Block.__new__(Block)
        self.mapping = mapping
        self.data = data
        self.arena_id = arena_id
        self.segment_id = segment_id
        self.offset = offset
        self.length = length
        self.generation = generation
        self.holder = current_pid()
        if _counting:
            self.counted = _held_blocks.add(arena_id, segment_id, offset, length)
        return self

    def __init__(self):
        raise TypeError("blocks come from Arena.alloc, open_block or unpickling")

    def __dealloc__(self):
        if self.mapping is not None and self.holder == current_pid():
            if self.held:
                unhold(self.held)
            if self.counted:
                _held_blocks.remove(self.arena_id, self.segment_id, self.offset)
            release_block(self.mapping.seg.get().base(), self.offset)

    def __getbuffer__(self, Py_buffer* buffer, int flags):
        if self.holder != current_pid():
            raise BufferError(_INHERITED + "; its memory may be reused at any time. Pickle it to the child through "
                              "a multiprocessing pipe or queue, or share() it in the parent and open_block() the "
                              "description in the child")
        PyBuffer_FillInfo(buffer, self, self.data, self.length, 0, flags)

    def __len__(self):
        return self.length

    @property
    def nbytes(self):
        """Bytes of data."""
        return self.length

    @property
    def fd(self):
        """The descriptor of the block's segment in this process, for passing it to another."""
        return self.mapping.seg.get().fd()

    @property
    def address(self):
        """The address of the first byte of data in this process, as an int."""
        return <size_t>self.data

    @property
    def refs(self):
        """References to the block held in all processes, at this instant."""
        return block_refs(self.mapping.seg.get().base(), self.offset)

    def share(self):
        """share()

        Take a reference for another process and describe it.

        The reference belongs to whoever passes the description to
        `open_block`, which must happen while this process still holds the
        block (the description names this process's descriptor of the
        segment). A description never opened leaks its block.

        Returns
        -------
        bytes
            `REF_SIZE` bytes: arena id, offset, length, segment id, and the
            pid and descriptor through which the segment can be mapped.

        Raises
        ------
        RuntimeError
            The block was inherited through ``fork`` and holds no reference
            in this process.
        """
        cdef BlockRef ref
        if self.holder != current_pid():
            raise RuntimeError(_INHERITED + "; share it from the process that allocated or opened it")
        retain_block(self.mapping.seg.get().base(), self.offset)
        ref.arena_id = self.arena_id
        ref.offset = self.offset
        ref.length = self.length
        ref.segment_id = self.segment_id
        ref.pid = self.holder
        ref.fd = self.mapping.seg.get().fd()
        ref.generation = self.generation
        return PyBytes_FromStringAndSize(<char*>&ref, sizeof(ref))

    def __reduce__(self):
        return _unpickle_block, (self.share(), reduction.DupFd(self.mapping.seg.get().fd()))

    def __repr__(self):
        return (f"<mizu Block of {self.length} bytes at offset {self.offset} of segment {self.segment_id} "
                f"of arena {self.arena_id:016x}>")


cdef BlockRef _parse(object ref) except *:
    cdef BlockRef r
    cdef const unsigned char[::1] raw = ref
    if raw.shape[0] != sizeof(BlockRef):
        raise ValueError(f"a block reference is {sizeof(BlockRef)} bytes, got {raw.shape[0]}")
    memcpy(&r, &raw[0], sizeof(BlockRef))
    return r


cdef Block _open(object ref, int fd):
    cdef BlockRef r = _parse(ref)
    cdef _Mapping m = _mappings.get((r.arena_id, r.segment_id))
    if m is None:
        if fd >= 0:
            m = _mapped(r.arena_id, r.segment_id, attach_arena_segment(fd, r.arena_id, r.segment_id))
        else:
            m = _mapped(r.arena_id, r.segment_id, attach_arena_segment(r.pid, r.fd, r.arena_id, r.segment_id))
    key = r.arena_id, r.segment_id
    if m.seg.get().size() <= _RECENT_BYTES:
        kept = _recent.pop(key, None)
        _recent[key] = m, r.pid, time.monotonic()
        if len(_recent) > _RECENT:
            _recent.popitem(last=False)
    elif _keep_large:
        kept = _recent_large.pop(key, None)
        _recent_large[key] = m, time.monotonic()
        while len(_recent_large) > 1 and (len(_recent_large) > _RECENT or _large_bytes() > _RECENT_LARGE_BYTES):
            _recent_large.popitem(last=False)
    else:
        kept = True
    cdef Block block
    try:
        block = Block.adopt(m, r.arena_id, r.segment_id, r.offset, r.length, r.generation)
        block.held = note_held(r.arena_id, r.segment_id, r.offset)
    finally:
        # Once the block is made, if it can be (an interrupt in the thread's
        # start then loses nothing), and for the mapping kept even if not.
        if kept is None:
            _watch_idle()
    return block


def hold_in_ring(_Ring ring):
    """hold_in_ring(ring)

    Note every block reference this process adopts from now on in the
    table of `ring`, its task ring, so that its client can release those
    it still holds if it dies (`release_held`). A pool's worker does, as it
    starts, and with None as it ends: the references it holds then are its
    own to release again. Slots run out past 256 references at once; those
    beyond go unnoted, and leak if the process dies holding them.
    """
    if ring is None:
        hold_in(NULL)
    else:
        hold_in(&ring.ring.get().base().layout().held)


def release_held(_Ring ring):
    """release_held(ring)

    Release the block references that the consumer of `ring`, a process
    that has exited, still held (`hold_in_ring`), and free the ring's
    table for the next consumer. A reference to a segment this process no
    longer maps is left: nothing here can reach its block.

    Returns
    -------
    int
        The references released.
    """
    cdef HeldTable* table = &ring.ring.get().base().layout().held
    cdef HeldSlot* slot
    cdef Arena own = _default
    cdef shared_ptr[CArena] arena
    cdef shared_ptr[CSegment] seg
    cdef _Mapping m
    cdef size_t i
    cdef int n = 0
    if own is not None:
        arena = own.arena
    for i in range(kHeldSlots):
        slot = &table.slots[i]
        if not take_held(slot[0]):
            continue
        seg.reset()
        if arena.get() != NULL and own.arena_id == slot.arena_id:
            with nogil:   # as in _forget_retired
                seg = arena.get().segment(slot.segment_id)
        else:
            m = _mappings.get((slot.arena_id, slot.segment_id))
            if m is not None:
                seg = m.seg
        if seg.get() != NULL:
            release_block(seg.get().base(), slot.offset)
            n += 1
    return n


def open_block(ref, fd=None):
    """open_block(ref, fd=None)

    The block a `Block.share` description names, adopting its reference.

    Open each description once. Without `fd`, on Linux, the segment is
    reached through ``/proc/<pid>/fd/<fd>`` of the sharing process, so that
    process must still hold the block; elsewhere, or across users, pass the
    segment's descriptor (`Block.fd` in the sharing process, sent over a Unix
    socket) or pickle the block through multiprocessing, which passes it.

    Parameters
    ----------
    ref : bytes-like
        `REF_SIZE` bytes from `Block.share`.
    fd : int, optional
        A descriptor of the block's segment in this process; it stays the
        caller's.

    Raises
    ------
    ValueError
        `ref` is no block reference or names no block of its segment, or
        its block has no references left (it was opened already, or its
        block was released and perhaps reused).
    OSError
        The segment cannot be reached.
    """
    return _open(ref, -1 if fd is None else operator.index(fd))


def _unpickle_block(ref, dup):
    fd = dup.detach()
    try:
        return _open(ref, fd)
    finally:
        os.close(fd)


cdef class Arena:
    """Arena(*, segment_size=DEFAULT_SEGMENT_SIZE, limit=None, dir=None)

    Shared memory for large payloads, allocated by this process.

    The arena maps pre-faulted segments as it needs them: the first now,
    more when a request fits in none, up to `limit` bytes in all. A request
    larger than a segment gets a segment of its own. Once its block is freed
    that segment stays mapped as a spare for the next large request it fits
    (one needing at least half of it), so passing large arrays again and
    again maps no new memory; spares count against `limit`, give way first
    when a new segment needs room under it, and hold at most a quarter of it
    together, the least recently freed going first. Threads may share an
    arena; a forked child may not allocate from its parent's.

    Parameters
    ----------
    segment_size : int, optional
        Bytes of each segment (rounded up to whole pages), 32 MiB by default:
        about 20 ms to pre-fault on a slow VM, and room for many arrays.
    limit : int, optional
        Bytes of segments the arena may map in all. The default is the
        ``MIZU_ARENA_LIMIT`` environment variable (bytes, or a number with a
        K, M, G or T suffix), else half of the machine's memory, and no more
        than the free space of `dir` when given.
    dir : str or os.PathLike, optional
        A directory (a tmpfs such as ``/dev/shm``) to take the memory from;
        anonymous memory by default. See `mizu._segment.Segment`.

    Raises
    ------
    ValueError
        `segment_size` or `limit` is too small, or ``MIZU_ARENA_LIMIT`` is malformed.
    MemoryError
        The first segment cannot be had.
    """

    def __init__(self, *, segment_size=DEFAULT_SEGMENT_SIZE, limit=None, dir=None):
        cdef ArenaOptions opt
        cdef bytes path = os.fsencode(dir) if dir is not None else None
        opt.segment_size = _positive("segment_size", segment_size)
        opt.limit = _limit_from_env() if limit is None else _positive("limit", limit)
        opt.dir = NULL
        if path is not None:
            opt.dir = path
        with nogil:
            self.arena.reset(new CArena(opt))
        self.arena_id = self.arena.get().id()
        self.segments = {}

    # For calls that keep the GIL, so that close() cannot run under them.
    cdef CArena* _live(self) except NULL:
        if self.arena.get() == NULL:
            raise ValueError("the arena is closed")
        return self.arena.get()

    def alloc(self, nbytes):
        """alloc(nbytes)

        A new block of `nbytes` bytes, its contents undefined.

        Blocks that other processes released are reused first.

        Raises
        ------
        MemoryError
            The arena's limit leaves no room (the message says how much is
            left and how to raise the limit), or no block can be that large.
        ValueError
            `nbytes` is negative, or the arena is closed.
        RuntimeError
            Called in a forked child of the arena's process.
        """
        cdef size_t n = _non_negative("nbytes", nbytes)
        self._live()
        cdef shared_ptr[CArena] arena = self.arena
        cdef Allocation a
        with nogil:
            a = arena.get().alloc(n)
        cdef _Mapping m = self.segments.get(a.segment_id)
        cdef bint new_segment = m is None
        cdef shared_ptr[CSegment] seg
        try:
            if new_segment:
                # A new segment: the arena may have retired others to make room.
                self._forget_retired(arena.get())
                m = self._mapping(arena.get(), a.segment_id)
                if not a.dedicated and self.arena.get() != NULL:
                    self.segments[a.segment_id] = m
            block = Block.adopt(m, self.arena_id, a.segment_id, a.offset, n, a.generation)
        except BaseException:   # an interrupt, or no memory for the mapping's objects: the block goes back
            with nogil:
                seg = arena.get().segment(a.segment_id)
                if seg.get() != NULL:
                    release_block(seg.get().base(), a.offset)
            raise
        # Segment ids are never reused: 0 is the one made with the arena.
        if new_segment and self is _default and (a.dedicated or a.segment_id != 0):
            _watch_idle()
        return block

    cdef _Mapping _mapping(self, CArena* arena, uint32_t segment_id):
        """This process's mapping of a live segment of the arena."""
        cdef _Mapping m = _mappings.get((self.arena_id, segment_id))
        cdef shared_ptr[CSegment] seg
        if m is None:
            with nogil:   # as in _forget_retired
                seg = arena.segment(segment_id)
            m = _mapped(self.arena_id, segment_id, seg)
        return m

    cdef Block _another_reference(self, ArrayBlock where):
        """A new Block holding one more reference to a live block of the arena's."""
        cdef _Mapping m = self._mapping(self._live(), where.segment_id)
        retain_block(m.seg.get().base(), where.offset)
        return Block.adopt(m, self.arena_id, where.segment_id, where.offset, where.length, where.generation)

    cdef _forget_retired(self, CArena* arena):
        cdef vector[uint32_t] ids = list(self.segments)
        cdef vector[uint32_t] gone
        cdef size_t i
        # Without the GIL: another thread may hold the arena's lock while it
        # faults in a new segment.
        with nogil:
            for i in range(ids.size()):
                if arena.segment(ids[i]).get() == NULL:
                    gone.push_back(ids[i])
        for i in range(gone.size()):
            # Another thread's call may have dropped it meanwhile.
            self.segments.pop(gone[i], None)

    def drain(self):
        """drain()

        Reclaim every block whose last reference was dropped, now rather than
        on the next `alloc`.

        Returns
        -------
        int
            The number of blocks reclaimed.
        """
        self._live()
        cdef shared_ptr[CArena] arena = self.arena
        cdef size_t n
        with nogil:   # as in _forget_retired
            n = arena.get().drain()
        return n

    def release_idle(self, seconds):
        """release_idle(seconds)

        Give back to the system the segments that have held no block for
        `seconds` or more: spares, and every ordinary segment but the first.
        Other processes still mapping one keep its memory until they let go.

        Returns
        -------
        int
            Bytes of segments unmapped.
        """
        if not 0 <= seconds < 1e9:
            raise ValueError(f"seconds must be a number from 0 to 1e9, got {seconds!r}")
        cdef uint64_t idle_ns = <uint64_t>(seconds * 1e9)
        self._live()
        cdef shared_ptr[CArena] arena = self.arena
        cdef size_t released
        with nogil:
            released = arena.get().release_idle(idle_ns)
        if released and self.arena.get() != NULL:
            self._forget_retired(arena.get())
        return released

    def stats(self):
        """stats()

        Usage, after reclaiming released blocks.

        Returns
        -------
        dict
            ``in_use`` and ``blocks``: bytes (headers included) and number of
            live blocks; ``free`` and ``free_blocks``: the same for free
            space (``free_blocks == segments`` once every block is freed);
            ``capacity``: bytes of all segments; ``segments``; ``spares``:
            how many of them are freed dedicated segments kept for reuse;
            ``limit``.
        """
        self._live()
        cdef shared_ptr[CArena] arena = self.arena
        cdef ArenaStats s
        with nogil:
            s = arena.get().stats()
        return {"in_use": s.in_use, "blocks": s.blocks, "free": s.free, "free_blocks": s.free_blocks,
                "capacity": s.capacity, "segments": s.segments, "spares": s.spares, "limit": arena.get().limit()}

    @property
    def id(self):
        """A random 64-bit id that names the arena in block references."""
        return self.arena_id

    @property
    def limit(self):
        """Bytes of segments the arena may map."""
        return self._live().limit()

    @property
    def segment_size(self):
        """Bytes of each ordinary segment."""
        return self._live().segment_size()

    @property
    def closed(self):
        """Whether `close` was called."""
        return self.arena.get() == NULL

    def close(self):
        """close()

        Stop allocating. Blocks still held, here or in other processes, stay
        valid; their memory goes when the last of them is released.
        """
        self.arena.reset()
        self.segments = {}

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        if self.arena.get() == NULL:
            return f"<mizu Arena {self.arena_id:016x} closed>"
        return f"<mizu Arena {self.arena_id:016x} limit={self.limit}>"


cdef size_t _non_negative(str what, object value) except? 0:
    value = operator.index(value)
    if value < 0:
        raise ValueError(f"{what} must not be negative, got {value}")
    return value


cdef size_t _positive(str what, object value) except? 0:
    value = operator.index(value)
    if value <= 0:
        raise ValueError(f"{what} must be positive, got {value}")
    return value


_default = None
_default_lock = threading.Lock()


def _forget_parents_arena():
    # An arena allocates only in the process that made it; the child makes
    # its own on first use. A new lock too: another thread of the parent may
    # have held the old one at the fork.
    global _default, _default_lock
    _default = None
    _default_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_parents_arena)


def default_arena():
    """default_arena()

    This process's arena for the arrays that mizu's creation functions make.

    Created on first use with the default `Arena` settings (see
    ``MIZU_ARENA_LIMIT`` there). A forked child does not inherit its
    parent's: it gets one of its own on first use, while the arrays it
    inherited stay valid and shared with the parent. Its segments go back
    to the system once they have held no block for a second, the first one
    excepted (`mizu._array_data.watch_idle_memory`).

    Returns
    -------
    Arena
    """
    global _default
    arena = _default
    if arena is None:
        with _default_lock:
            if _default is None:
                _default = Arena()
            arena = _default
    return arena


cdef _watch_idle():
    """Have the default arena's segments, and kept mappings, given back once unused for a second.

    An allocation does not fail for want of the thread (none can start as
    the interpreter exits, or with the process at its limit of threads):
    the segment then goes back with the next one's, or at a pool's shutdown,
    and a mapping with the next one's, or once its sharer has exited.
    """
    if sys.is_finalizing():
        return
    from mizu._array_data import watch_idle_memory
    try:
        watch_idle_memory()
    except RuntimeError:
        pass


def _ndarray_type():
    # Only an array can lead to a block through numpy, so numpy is consulted
    # only once something has imported it.
    numpy = sys.modules.get("numpy")
    return numpy.ndarray if numpy is not None else None


def _walk_to_block(owner, ndarray):
    """The Block at the end of an object's chain of numpy bases and memoryview owners, or None."""
    while not isinstance(owner, Block):
        if ndarray is not None and isinstance(owner, ndarray):
            owner = owner.base
        elif isinstance(owner, memoryview):
            owner = owner.obj
        else:
            return None
    return owner


def _span(address, shape, strides, itemsize, empty):
    """(lowest address, bytes to one past the highest) that items laid out so cover."""
    low = high = address
    if not empty:
        for n, stride in zip(shape, strides):
            if stride < 0:
                low += (n - 1) * stride
            else:
                high += (n - 1) * stride
        high += itemsize
    return low, high - low


cdef size_t _address(object view) except? 0:
    cdef Py_buffer* buffer = PyMemoryView_GET_BUFFER(view)
    return <size_t>buffer.buf


def arena_block(obj):
    """arena_block(obj)

    Where the memory of a buffer lies in an arena block, if it does.

    Follows numpy's ``.base`` chain and memoryviews' ``.obj`` from `obj` to
    a `Block`, then places `obj`'s bytes within it. This is how an
    arena-backed array, or any view of one, can cross to another process as
    a block reference and a position instead of a copy of its bytes.

    Parameters
    ----------
    obj : object
        A numpy array or a view of one, a memoryview, a
        `pickle.PickleBuffer`, a `Block`, or any object.

    Returns
    -------
    tuple of (Block, int, int) or None
        The block, the offset of the lowest byte `obj` spans within the
        block's data (for a view with negative strides this is not its
        first element), and the number of bytes from there to one past the
        highest byte it spans; gaps of a strided view are included. None if
        `obj` exports no buffer or its memory is not in an arena block.
    """
    ndarray = _ndarray_type()
    if ndarray is not None and isinstance(obj, ndarray):
        block = _walk_to_block(obj, ndarray)
        if block is None:
            return None
        # Any dtype, those that export no buffer (datetime64) too.
        low, nbytes = _span(obj.__array_interface__["data"][0], obj.shape, obj.strides, obj.itemsize,
                            obj.size == 0)
    else:
        try:
            view = memoryview(obj)
        except TypeError:
            return None
        # A PickleBuffer's view leads to what it wraps.
        block = _walk_to_block(obj if isinstance(obj, (memoryview, Block)) else view.obj, ndarray)
        if block is None:
            return None
        low, nbytes = _span(_address(view), view.shape, view.strides, view.itemsize, view.nbytes == 0)
    offset = low - (<Block>block).address
    if offset < 0 or offset + nbytes > (<Block>block).nbytes:
        return None
    return block, offset, nbytes
