from mizu.includes.py_errors cimport raise_py_error
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t
from libcpp.string cimport string
from libcpp.vector cimport vector

from mizu.includes.arena cimport BlockRef

cdef extern from "messages.hpp" namespace "mizu::messages" nogil:
    const uint8_t kFirstChunk
    const uint8_t kNextChunk
    const uint8_t kOutOfBand
    const uint8_t kResult
    const uint8_t kTask
    const uint8_t kWireBody
    const uint8_t kPickleBody

    const uint8_t kCall
    const uint8_t kBatch
    const uint8_t kFlat
    const uint8_t kSingle
    const uint8_t kKeywords
    const uint8_t kCallable
    const uint8_t kTimed

    cdef enum class Status(uint8_t):
        ok
        raised
        retiring
        exiting
        ready

    cdef enum class Stage(uint8_t):
        initializer
        decoding
        starting

    # Status and Stage as the byte of a header that holds them.
    const uint8_t kOk "uint8_t(mizu::messages::Status::ok)"
    const uint8_t kRaised "uint8_t(mizu::messages::Status::raised)"
    const uint8_t kRetiring "uint8_t(mizu::messages::Status::retiring)"
    const uint8_t kExiting "uint8_t(mizu::messages::Status::exiting)"
    const uint8_t kReady "uint8_t(mizu::messages::Status::ready)"
    const uint8_t kGone "uint8_t(mizu::messages::Status::gone)"
    const uint8_t kInitializer "uint8_t(mizu::messages::Stage::initializer)"
    const uint8_t kDecoding "uint8_t(mizu::messages::Stage::decoding)"
    const uint8_t kStarting "uint8_t(mizu::messages::Stage::starting)"

    cdef struct TaskHeader:
        uint8_t kind
        uint8_t flags
        uint64_t task_id
        uint64_t fn_id

    cdef struct ResultHeader:
        uint8_t kind
        uint8_t status
        uint16_t sender
        uint64_t task_id
        double seconds

    cdef struct OutOfBandHeader:
        uint8_t kind
        uint16_t sender
        uint16_t descriptors
        uint16_t buffers

    cdef struct BufferRecord:
        BlockRef block
        uint64_t offset
        uint64_t length
        uint16_t descriptor

    cdef cppclass Message:
        uint8_t kind
        TaskHeader task
        ResultHeader result
        uint16_t sender
        uint16_t descriptors
        uint16_t buffer_count
        const char* body
        size_t body_size
        size_t body_offset
        BufferRecord buffer(size_t i)

    void read_message(const char* data, size_t size, Message& m) except +raise_py_error
    TaskHeader task_header(uint64_t task_id, uint64_t fn_id, uint8_t flags)
    ResultHeader result_header(uint16_t sender, uint64_t task_id, Status status, double seconds)
    OutOfBandHeader out_of_band_header(uint16_t sender, uint16_t descriptors, uint16_t buffers)
    bint is_chunk(const char* data, size_t size)
    size_t chunk_count(size_t size, size_t limit) except +raise_py_error
    size_t write_chunk(const char* message, size_t size, uint16_t sender, size_t limit, size_t index, char* out)
    const size_t kMaxDescriptors
    void send_descriptors(int socket, const int* fds, size_t count) except +raise_py_error
    vector[int] receive_descriptors(int socket, size_t count) except +raise_py_error

    cdef cppclass Reassembler:
        bint feed(const char* chunk, size_t size, string& out) except +raise_py_error
        void forget(uint16_t sender)
        size_t pending()
