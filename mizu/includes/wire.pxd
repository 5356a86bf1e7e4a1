from mizu.includes.py_errors cimport raise_py_error
from libc.stdint cimport int64_t, uint8_t, uint32_t, uint64_t

cdef extern from "wire.hpp" namespace "mizu::wire" nogil:
    const int kMaxDepth
    const uint32_t kMaxDims

    cdef enum class Tag(uint8_t):
        none
        false_
        true_
        int64
        float64
        str
        bytes
        tuple
        list
        dict
        ndarray
        frame
        pickle
        masked
        typed

    cdef enum class Typed(uint8_t):
        factor
        ordered
        strings
        datetime
        date
        timedelta

    uint32_t typed_parts(Typed k)

    cdef enum class Storage(uint8_t):
        inline_data
        arena

    cdef cppclass WireError:
        size_t offset()

    cdef struct Span:
        const char* data
        uint64_t size

    cdef struct ArrayHeader:
        char typestr[5]
        uint32_t itemsize
        uint32_t ndim
        uint64_t shape[32]
        int64_t strides[32]
        Storage storage
        Span data
        uint32_t buffer
        uint64_t extent

    cdef struct PickleBlob:
        uint32_t buffers
        Span data

    cdef struct FrameHeader:
        uint32_t ncols
        uint64_t nrows

    cdef cppclass Writer:
        Writer()
        const char* data()
        size_t size()
        void truncate(size_t size)
        void clear()
        char* put_header(size_t n) except +raise_py_error
        void begin_message() except +raise_py_error
        void put_none() except +raise_py_error
        void put_bool(bint v) except +raise_py_error
        void put_int64(int64_t v) except +raise_py_error
        void put_float64(double v) except +raise_py_error
        void put_str(const char* s, uint64_t n) except +raise_py_error
        void put_bytes(const char* s, uint64_t n) except +raise_py_error
        void begin_tuple(uint32_t count) except +raise_py_error
        void begin_list(uint32_t count) except +raise_py_error
        void begin_dict(uint32_t count) except +raise_py_error
        void put_key(const char* s, uint64_t n) except +raise_py_error
        void put_array(const ArrayHeader& a) except +raise_py_error
        void begin_frame(uint32_t ncols, uint64_t nrows) except +raise_py_error
        void begin_masked() except +raise_py_error
        void begin_typed(Typed k) except +raise_py_error
        void put_pickle(const char* s, uint64_t n) except +raise_py_error

    cdef cppclass Reader:
        Reader(const void* data, size_t size) except +raise_py_error
        size_t offset()
        size_t remaining()
        Tag tag() except +raise_py_error
        int64_t int64() except +raise_py_error
        double float64() except +raise_py_error
        Span str() except +raise_py_error
        Span bytes() except +raise_py_error
        Span key() except +raise_py_error
        uint32_t begin(Tag container) except +raise_py_error
        void end()
        void array(ArrayHeader& a) except +raise_py_error
        void masked(ArrayHeader& values, ArrayHeader& mask) except +raise_py_error
        FrameHeader begin_frame() except +raise_py_error
        Typed begin_typed() except +raise_py_error
        PickleBlob pickle() except +raise_py_error
        void finish() except +raise_py_error
