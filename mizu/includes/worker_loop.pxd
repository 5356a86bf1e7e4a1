from libc.stdint cimport int64_t, uint16_t
from libcpp cimport bool

from mizu.includes.any_ring cimport AnyRing
from mizu.includes.liveness cimport PeerWatch
from mizu.includes.messages cimport Message, ResultHeader, Status, TaskHeader
from mizu.includes.py_errors cimport raise_py_error
from mizu.includes.waiter cimport Waiter

cdef extern from "worker_loop.hpp" namespace "mizu":
    cdef cppclass WorkerLoop

    cdef cppclass WorkerLanguage:
        void* self
        bool (*prepare)(void* self, const Message& m, const char* data, size_t size) noexcept
        bool (*drop)(void* self) noexcept
        bool (*run)(void* self, WorkerLoop& loop) noexcept
        bool (*idle)(void* self) noexcept nogil
        void (*release)(void* self) noexcept
        void (*reacquire)(void* self) noexcept nogil
        size_t (*held_bytes)(void* self) noexcept

    cdef enum class Stop "mizu::WorkerLoop::Stop"(int):
        client_gone
        retired
        language

    cdef cppclass WorkerLoop:
        WorkerLoop(AnyRing& tasks, Waiter& task_waiter, AnyRing& results, Waiter& result_waiter,
                   const PeerWatch& client, uint16_t index, long max_tasks, int64_t max_memory,
                   const WorkerLanguage& language) except +raise_py_error
        Stop serve() except +raise_py_error
        ResultHeader result_header(Status status)
        bool send(const char* data, size_t size) except +raise_py_error
        bool notice(Status status) except +raise_py_error
        void task_done() except +raise_py_error
        const TaskHeader* running()
        Stop stop()
        bool retired()
