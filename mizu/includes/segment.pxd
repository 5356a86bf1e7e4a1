from mizu.includes.py_errors cimport raise_py_error
from libc.stdint cimport uint32_t, uint64_t
from libcpp.memory cimport unique_ptr

from mizu.includes.waiter cimport SpinGate, WaitBackend

cdef extern from "segment.hpp" namespace "mizu" nogil:
    cdef cppclass SegmentHeader:
        uint64_t size
        SpinGate spin_gate

    cdef cppclass Segment:
        @staticmethod
        unique_ptr[Segment] create(size_t size, const char* dir, WaitBackend backend) except +raise_py_error
        @staticmethod
        unique_ptr[Segment] attach(int fd) except +raise_py_error
        int fd()
        size_t size()
        char* base()
        SegmentHeader& header()
        WaitBackend waiter_backend()
        size_t free_bytes()
        size_t alloc(size_t bytes) except +raise_py_error
        char* at(size_t offset, size_t bytes) except +raise_py_error
