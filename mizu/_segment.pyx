"""A shared-memory segment (csrc/segment.hpp): one anonymous shared mapping that rings live in."""

from libcpp.memory cimport unique_ptr
from libcpp.utility cimport move

from mizu.includes.segment cimport Segment as CSegment
from mizu.includes.waiter cimport WaitBackend

import operator
import os
from multiprocessing import reduction

from mizu._waiter import _BACKEND_NAMES, _backend

__all__ = ["Segment"]


cdef uint64_t _bounded(str what, object value, uint64_t limit) except? 0:
    value = operator.index(value)
    if not 0 < value <= limit:
        raise ValueError(f"{what} must be from 1 to {limit}, got {value}")
    return value


cdef class Segment:
    """Segment(size, *, dir=None, waiter=None)

    A shared-memory segment for one pool, anonymous and pre-faulted.

    Parameters
    ----------
    size : int
        Bytes to reserve. All of it is reserved now, so a machine or tmpfs
        without room fails here rather than with SIGBUS later.
    dir : str or os.PathLike, optional
        A directory (usually a tmpfs such as ``/dev/shm``) to take the memory
        from. The file has no name there, so nothing is left behind. By
        default the memory is anonymous (``memfd_create`` on Linux).
    waiter : {"native", "portable"}, optional
        How processes sleep on this segment's rings: the OS's address wait
        (futex on Linux) or process-shared pthread condition variables. The
        default comes from the ``MIZU_WAITER`` environment variable, else
        ``"native"``.

    Raises
    ------
    ValueError
        `size` is not positive, or `waiter` (without it, ``MIZU_WAITER``)
        is unknown.
    MemoryError
        The memory cannot be reserved.
    """

    def __init__(self, size, *, dir=None, waiter=None):
        cdef size_t nbytes = _bounded("segment size", size, 1 << 62)
        cdef WaitBackend backend = <WaitBackend><int>_backend(waiter)
        cdef bytes path = os.fsencode(dir) if dir is not None else None
        cdef const char* cpath = NULL
        if path is not None:
            cpath = path
        cdef unique_ptr[CSegment] created
        with nogil:
            created = move(CSegment.create(nbytes, cpath, backend))
        self.seg = move(created)

    @staticmethod
    def attach(fd):
        """attach(fd)

        Map the segment behind a file descriptor.

        The descriptor stays the caller's; the segment keeps its own duplicate.

        Raises
        ------
        ValueError
            `fd` does not hold a mizu segment.
        OSError
            `fd` is not an open descriptor.
        """
        cdef Segment self = Segment.__new__(Segment)
        self.seg = move(CSegment.attach(fd))
        return self

    @property
    def fd(self):
        """The segment's file descriptor, owned by this object."""
        return self.seg.get().fd()

    @property
    def size(self):
        """Size in bytes."""
        return self.seg.get().size()

    @property
    def free(self):
        """Bytes not yet allocated to rings or blocks."""
        return self.seg.get().free_bytes()

    @property
    def waiter(self):
        """The wait backend of every ring in this segment."""
        return _BACKEND_NAMES[<int>self.seg.get().waiter_backend()]

    def alloc(self, nbytes):
        """alloc(nbytes)

        Reserve `nbytes` for the life of the segment; return their offset.

        Raises
        ------
        MemoryError
            Not enough of the segment is left.
        """
        return self.seg.get().alloc(_bounded("allocation size", nbytes, 1 << 62))

    def __reduce__(self):
        return _attach_segment, (reduction.DupFd(self.fd),)

    def __repr__(self):
        return f"<mizu Segment fd={self.fd} size={self.size} free={self.free} waiter={self.waiter!r}>"


def _attach_segment(dup):
    fd = dup.detach()
    try:
        return Segment.attach(fd)
    finally:
        os.close(fd)
