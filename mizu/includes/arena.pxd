from mizu.includes.py_errors cimport raise_py_error
from libc.stdint cimport int32_t, uint32_t, uint64_t
from libcpp.memory cimport shared_ptr

from mizu.includes.segment cimport Segment

cdef extern from "arena.hpp" namespace "mizu" nogil:
    cdef cppclass BlockRef:
        uint64_t arena_id
        uint64_t offset
        uint64_t length
        uint32_t segment_id
        int32_t pid
        int32_t fd
        uint32_t generation

    int current_pid()
    char* block_data(const Segment& seg, uint64_t offset, uint64_t length,
                     uint32_t generation) except +raise_py_error
    void retain_block(char* base, uint64_t offset)
    void release_block(char* base, uint64_t offset)
    uint64_t block_refs(const char* base, uint64_t offset)
    shared_ptr[Segment] attach_arena_segment(int fd, uint64_t arena_id, uint32_t segment_id) except +raise_py_error
    shared_ptr[Segment] attach_arena_segment(int pid, int fd, uint64_t arena_id,
                                             uint32_t segment_id) except +raise_py_error
    size_t default_arena_limit(const char* dir)

    cdef cppclass HeldBlocks:
        bint add(uint64_t arena_id, uint32_t segment_id, uint64_t offset, uint64_t bytes)
        void remove(uint64_t arena_id, uint32_t segment_id, uint64_t offset)
        uint64_t bytes()

    cdef cppclass HeldSlot:
        uint64_t arena_id
        uint64_t offset
        uint32_t segment_id
        uint32_t live   # an atomic: the survivor takes it with take_held

    const size_t kHeldSlots

    cdef cppclass HeldTable:
        HeldSlot* slots   # kHeldSlots of them

    void hold_in(HeldTable* table)
    uint32_t note_held(uint64_t arena_id, uint32_t segment_id, uint64_t offset)
    void unhold(uint32_t token)
    bint take_held(HeldSlot& slot)

    cdef cppclass ArenaOptions:
        size_t segment_size
        size_t limit
        const char* dir

    cdef cppclass Allocation:
        uint32_t segment_id
        bint dedicated
        uint64_t offset
        uint32_t generation

    cdef cppclass ArenaStats:
        size_t in_use
        size_t blocks
        size_t free
        size_t free_blocks
        size_t capacity
        size_t segments
        size_t spares

    cdef cppclass Arena:
        Arena(const ArenaOptions& options) except +raise_py_error
        Allocation alloc(size_t bytes) except +raise_py_error
        size_t drain() except +raise_py_error
        size_t release_idle(uint64_t idle_ns) except +raise_py_error
        ArenaStats stats() except +raise_py_error
        shared_ptr[Segment] segment(uint32_t id)
        uint64_t id()
        size_t limit()
        size_t segment_size()
