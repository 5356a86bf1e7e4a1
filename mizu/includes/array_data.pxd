from libc.stdint cimport uint32_t, uint64_t
from libcpp.memory cimport shared_ptr

from mizu.includes.arena cimport Arena

cdef extern from "array_data.hpp" namespace "mizu" nogil:
    cdef cppclass ArrayBlock:
        uint32_t segment_id
        uint64_t offset
        uint64_t length
        uint32_t generation

    cdef cppclass ArrayData:
        ArrayData(shared_ptr[Arena] arena, size_t threshold, ArrayData* inherited)
        bint find(const void* ptr, ArrayBlock* where)
        size_t threshold()
        size_t live()
        size_t live_bytes()
