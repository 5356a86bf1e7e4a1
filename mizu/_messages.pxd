# Tasks and results as doc/dev/messages.rst lays them out, for the pool and
# the Python worker to write and read at C speed. One encoder and one
# decoder serve both sides; a Codec says how a kind of worker takes its
# values (pickle or not, arrays in the arena).

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from libc.stdint cimport uint8_t, uint16_t, uint64_t
from libcpp.string cimport string

from mizu._future cimport Cell
from mizu._wire cimport decode_at
from mizu.includes.messages cimport Message, ResultHeader, TaskHeader, kWireBody
from mizu.includes.messages cimport is_chunk as _is_chunk
from mizu.includes.messages cimport Reassembler as CReassembler
from mizu.includes.wire cimport Writer

# The protocol's constants, from csrc/messages.hpp: a task's call as the
# Cell of its future holds it (kind, and a batch's shape); result statuses;
# the stage of an exiting worker's failure.
cdef extern from "messages.hpp" nogil:
    const int CALL "mizu::messages::kCall"
    const int BATCH "mizu::messages::kBatch"
    const int FLAT "mizu::messages::kFlat"
    const int SINGLE "mizu::messages::kSingle"
    const int KEYWORDS "mizu::messages::kKeywords"
    const int CALLABLE "mizu::messages::kCallable"
    const int OK "int(mizu::messages::Status::ok)"
    const int RAISED "int(mizu::messages::Status::raised)"
    const int RETIRING "int(mizu::messages::Status::retiring)"
    const int EXITING "int(mizu::messages::Status::exiting)"
    const int READY "int(mizu::messages::Status::ready)"
    const int INITIALIZER "int(mizu::messages::Stage::initializer)"
    const int DECODING "int(mizu::messages::Stage::decoding)"
    const int STARTING "int(mizu::messages::Stage::starting)"


cdef class Codec:
    """How a kind of worker takes values: the Python worker's (wire or pickle)."""

    cdef readonly str language
    cdef public bint by_value   # pickle what pickle would name by value (mizu._pickler), for the Python worker

    cdef bint registrable(self, fn) except -1
    cdef bytes encode(self, Writer& w, const void* header, Py_ssize_t n, object value, int sender, object channel,
                      list box=*)
    cdef object outcome(self, Cell cell, int status, object value, bint* raised)


cdef class PeerCodec(Codec):
    """A worker in another language's: wire only, arrays in the arena."""


cdef class Reassembler:
    cdef CReassembler chunks
    cdef string joined

    cpdef bytes feed(self, bytes chunk)
    cpdef forget(self, uint16_t sender)


cdef list chunks(const char* data, Py_ssize_t n, int sender, Py_ssize_t limit)
cdef object body_with_buffers(Message& m, bytes message, object channel)


cdef inline bint is_chunk(bytes slot) noexcept:
    return _is_chunk(PyBytes_AS_STRING(slot), PyBytes_GET_SIZE(slot))


cdef inline object body_of(Message& m, bytes message, object channel):
    """The value a message carries; its out-of-band descriptors are taken from channel."""
    if m.buffer_count == 0 and <uint8_t>m.body[0] == kWireBody:
        return decode_at(m.body, m.body_size, None)
    return body_with_buffers(m, message, channel)
