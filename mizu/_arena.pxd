# The arena's extension types, for other Cython modules of mizu to call at C speed.

cimport cython
from libc.stdint cimport uint32_t, uint64_t
from libcpp.memory cimport shared_ptr

from mizu.includes.arena cimport Arena as CArena
from mizu.includes.array_data cimport ArrayBlock
from mizu.includes.segment cimport Segment as CSegment


@cython.final
cdef class _Mapping:
    cdef shared_ptr[CSegment] seg
    cdef object __weakref__


@cython.final
@cython.no_gc
cdef class Block:
    cdef _Mapping mapping
    cdef char* data
    cdef readonly uint64_t arena_id
    cdef readonly uint64_t offset
    cdef uint64_t length
    cdef readonly uint32_t segment_id
    cdef uint32_t generation
    cdef int holder  # the process whose reference this is
    cdef uint32_t held  # its note in the process's table of held references (hold_in_ring), or 0
    cdef bint counted   # among the blocks this process holds (held_bytes)

    @staticmethod
    cdef Block adopt(_Mapping mapping, uint64_t arena_id, uint32_t segment_id, uint64_t offset, uint64_t length,
                     uint32_t generation)


cdef class Arena:
    # Shared so that an alloc in flight, which holds its own copy with the
    # GIL released, keeps the arena alive through a close() meanwhile.
    cdef shared_ptr[CArena] arena
    cdef uint64_t arena_id
    # The mappings of the shared (not dedicated) segments, kept while the
    # arena is open so that allocating does not map them anew; those of the
    # segments the arena retires are dropped.
    cdef dict segments

    cdef CArena* _live(self) except NULL
    cdef _forget_retired(self, CArena* arena)
    cdef _Mapping _mapping(self, CArena* arena, uint32_t segment_id)
    cdef Block _another_reference(self, ArrayBlock where)


cdef size_t _address(object view) except? 0
cdef size_t held_bytes() noexcept
