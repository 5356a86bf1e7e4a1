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

# The protocol's constants under the names the pool and the worker use:
# a task's call as the Cell of its future holds it (kind, and a batch's
# shape); result statuses; the stage of an exiting worker's failure. They
# are declared once, from csrc/messages.hpp, in mizu.includes.messages: a
# module that cimports one of them and defines it again does not compile.
from mizu.includes.messages cimport kBatch as BATCH
from mizu.includes.messages cimport kCall as CALL
from mizu.includes.messages cimport kCallable as CALLABLE
from mizu.includes.messages cimport kDecoding as DECODING
from mizu.includes.messages cimport kExiting as EXITING
from mizu.includes.messages cimport kFlat as FLAT
from mizu.includes.messages cimport kGone as GONE
from mizu.includes.messages cimport kInitializer as INITIALIZER
from mizu.includes.messages cimport kKeywords as KEYWORDS
from mizu.includes.messages cimport kOk as OK
from mizu.includes.messages cimport kRaised as RAISED
from mizu.includes.messages cimport kReady as READY
from mizu.includes.messages cimport kRetiring as RETIRING
from mizu.includes.messages cimport kSingle as SINGLE
from mizu.includes.messages cimport kStarting as STARTING
from mizu.includes.messages cimport kTimed as TIMED


cdef class Codec:
    """How a kind of worker takes values: the Python worker's (wire or pickle)."""

    cdef readonly str language
    cdef public bint by_value   # pickle what pickle would name by value (mizu._pickler), for the Python worker
    # A result whose value the client cannot build fails its task (a peer's
    # wire values); else it breaks the pool, as the stdlib's unpickling does.
    cdef readonly bint unbuilt_fails_task

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
cdef list open_buffers(Message& m, object channel)
cdef object unpickled_body(Message& m, bytes message, list buffers)


cdef inline bint is_chunk(bytes slot) noexcept:
    return _is_chunk(PyBytes_AS_STRING(slot), PyBytes_GET_SIZE(slot))


cdef inline list take_buffers(Message& m, object channel):
    """The out-of-band buffers of m, its descriptors taken from channel; None if it has none. Runs no Python code."""
    return open_buffers(m, channel) if m.buffer_count else None


cdef inline object body_with(Message& m, bytes message, list buffers):
    """The value a message carries, its out-of-band buffers taken already (take_buffers): read again if need be."""
    if <uint8_t>m.body[0] == kWireBody:
        return decode_at(m.body, m.body_size, buffers)
    return unpickled_body(m, message, buffers)


cdef inline object body_of(Message& m, bytes message, object channel):
    """The value a message carries; its out-of-band descriptors are taken from channel."""
    return body_with(m, message, take_buffers(m, channel))
