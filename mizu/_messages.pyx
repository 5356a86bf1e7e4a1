# cython: auto_pickle=False
"""Tasks and results, written and read as doc/dev/messages.rst lays them out.

The envelope is C++ (csrc/messages.hpp): its structs, its checking reader,
its chunks and their reassembly, and the passing of descriptors. Here are
the bodies: a value as a wire message when every part of it has a wire
form (mizu._wire), else, for a Python worker, as a pickle (protocol 5,
through mizu._pickler). A pickle's buffers of 4 KiB or more, and any that
already lie in an arena block, do not go into the pickle: they are placed
in the arena (a buffer already there travels by reference; any other is
copied once into a block of this process's arena) and named by the
message's out-of-band records, whose segments' descriptors are sent over
the peer's socket before the message enters the ring. When they cannot be
sent, the buffers go inside the pickle after all.

A worker of another language takes wire messages only, its arrays in the
arena (`PeerCodec`).

Malformed input raises ValueError, never reads past what it was given, and
never maps memory other than the blocks named; a pickle that does not
load raises what pickle.loads raises.
"""

cimport cython
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from libc.stdint cimport uint8_t, uint16_t, uint32_t
from libc.string cimport memcpy, memset
from libcpp.vector cimport vector

from mizu._future cimport Cell
from mizu._wire cimport decode_at, encode_peer_into, encode_plain_into
from mizu.includes.arena cimport BlockRef
from mizu.includes.messages cimport (BufferRecord, OutOfBandHeader, ResultHeader, Status, TaskHeader, chunk_count,
                                     kMaxDescriptors, kTask, kWireBody, out_of_band_header, read_message,
                                     receive_descriptors, result_header, send_descriptors, task_header, write_chunk)

import os
import types

from mizu._arena import arena_block, default_arena, open_block
from mizu._array_data import born_block, is_born
from mizu._pickler import dumps as _pickle, loads as _unpickle

__all__ = ["BATCH", "CALL", "CALLABLE", "DECODING", "EXITING", "FLAT", "GONE", "INITIALIZER", "KEYWORDS", "OK", "RAISED",
           "READY", "RETIRING", "SINGLE", "STARTING", "Codec", "PeerCodec", "PeerGone", "Reassembler", "chunks_of",
           "decode_message", "encode_result", "encode_task"]

# The .pxd's constants, for the modules of mizu that are Python.
globals().update(BATCH=BATCH, CALL=CALL, CALLABLE=CALLABLE, DECODING=DECODING, EXITING=EXITING, FLAT=FLAT, GONE=GONE,
                 INITIALIZER=INITIALIZER, KEYWORDS=KEYWORDS, OK=OK, RAISED=RAISED, READY=READY, RETIRING=RETIRING,
                 SINGLE=SINGLE, STARTING=STARTING)

INLINE = 4096
# The most buffers one message's records may hold: OutOfBandHeader.buffers is 16 bits.
cdef Py_ssize_t _MAX_BUFFERS = 0xFFFF

cdef object _FunctionType = types.FunctionType
cdef object _BuiltinFunctionType = types.BuiltinFunctionType
cdef object _ModuleType = types.ModuleType


cdef list chunks(const char* data, Py_ssize_t n, int sender, Py_ssize_t limit):
    """The chunks a message of n bytes (more than a slot holds) is cut into, for slots of limit bytes."""
    cdef size_t count = chunk_count(n, limit), i, size
    cdef list out = []
    cdef bytes chunk
    for i in range(count):
        chunk = PyBytes_FromStringAndSize(NULL, limit)
        size = write_chunk(data, n, <uint16_t>sender, limit, i, PyBytes_AS_STRING(chunk))
        out.append(chunk if size == <size_t>limit else chunk[:size])
    return out


@cython.final
cdef class Reassembler:
    """Joins the chunks of each sender's messages."""

    cpdef bytes feed(self, bytes chunk):
        """feed(chunk)

        The whole message if chunk completes one, else None.

        Raises
        ------
        ValueError
            The chunk does not continue its sender's chunks; the sender's
            partial message is dropped.
        """
        if self.chunks.feed(PyBytes_AS_STRING(chunk), PyBytes_GET_SIZE(chunk), self.joined):
            return PyBytes_FromStringAndSize(self.joined.data(), self.joined.size())
        return None

    cpdef forget(self, uint16_t sender):
        """Drop a sender's partial message."""
        self.chunks.forget(sender)

    @property
    def pending(self):
        """How many senders' messages are partial."""
        return self.chunks.pending()


cdef list open_buffers(Message& m, object channel):
    """take_buffers' buffers of a message that has some."""
    cdef size_t i
    cdef BufferRecord record
    cdef vector[int] fds
    if channel is None:
        raise ValueError("an out-of-band message needs the socket its descriptors came through")
    fds = receive_descriptors(channel.fileno(), m.descriptors)
    try:
        buffers = []
        for i in range(m.buffer_count):
            record = m.buffer(i)
            ref = PyBytes_FromStringAndSize(<char*>&record.block, sizeof(BlockRef))
            block = open_block(ref, fds[record.descriptor])
            buffers.append(memoryview(block)[record.offset:record.offset + record.length])
    finally:
        for i in range(fds.size()):
            os.close(fds[i])
    return buffers


cdef object unpickled_body(Message& m, bytes message, list buffers):
    return _unpickle(memoryview(message)[m.body_offset:], buffers=buffers)


def _in_band(buffer):
    """pickle's buffer_callback: true keeps a buffer in the pickle.

    A small buffer stays in the message, unless it lies in an arena block:
    that one is shared by reference at any size, so that writes to it reach
    the other side.
    """
    try:
        raw = buffer.raw()
    except BufferError:   # not contiguous: pickle copies it in band
        return True
    return raw.nbytes < INLINE and arena_block(raw) is None


cdef object _shareable(object found):
    """found (arena_block's answer), or None if it is a block inherited through fork, which this process may not share."""
    if found is not None:
        try:
            memoryview(found[0])
        except BufferError:
            return None
    return found


cdef tuple _copy(object raw):
    """(block, 0, nbytes) of a new block of the default arena holding a copy of raw's bytes."""
    block = default_arena().alloc(raw.nbytes)
    memoryview(block)[:raw.nbytes] = raw
    return block, 0, raw.nbytes


cdef list _place(list buffers, bint* by_reference):
    """(block, offset, nbytes) holding the bytes of each buffer: its own block if it has one this process may share.

    by_reference is set if any buffer has one: its writes reach the receiver's only by reference.
    """
    placed = []
    for buffer in buffers:
        raw = buffer.raw()
        found = _shareable(arena_block(raw))
        if found is None:
            found = _copy(raw)
        else:
            by_reference[0] = True
        placed.append(found)
    return placed


cdef bint _small_part(tuple found) except -1:
    """Whether found's bytes are less than a quarter of its block (found: as arena_block answers)."""
    return found[2] * 4 < found[0].nbytes


cdef list _place_handed(list buffers):
    """_place for each buffer of a value whose sender has let go of it; empties buffers.

    Array data that numpy took from the arena (mizu._array_data.born_block) is
    sent by reference if, once these buffers are dropped too, no array of
    this process holds it any more: then nothing here can write to it after
    the receiver has it, as with a copy. Data still held here is copied, and
    so is a buffer of less than a quarter of its block (a slice of a large
    temporary), which would keep the whole block in the receiver's memory.
    So is such a part of a block that only this process holds (a slice of
    an argument's copy); a block that others hold too goes by reference.
    """
    placed, born = [], []
    for buffer in buffers:
        raw = buffer.raw()
        found = _shareable(arena_block(raw))
        if found is None:
            found = born_block(raw)
            if found is not None and _small_part(found):
                found = None
            if found is not None:
                born.append((len(placed), found[3]))
                found = found[:3]
            else:
                found = _copy(raw)
        elif _small_part(found) and found[0].refs == 1:
            found = _copy(raw)
        placed.append(found)
    buffer = raw = found = None
    buffers.clear()
    for index, address in born:
        if is_born(address):
            block, offset, nbytes = placed[index]
            placed[index] = _copy(memoryview(block)[offset:offset + nbytes])
    return placed


cdef bytes _out_of_band(const void* header, Py_ssize_t n, bytes body, list placed, int sender, object channel,
                        str strict=None):
    """The message wrapping header and body with the records of the buffers placed, or None.

    The blocks' segments' descriptors go to channel first. None, with every
    reference given back, when the records would be too many for the
    header, or the descriptors cannot be sent (the peer has exited, or the
    kernel holds too many descriptors in flight for this user). strict, the
    language of the worker a task goes to, raises instead: ValueError for
    too many, PeerGone once the worker's process has exited, OSError for
    the rest.
    """
    cdef OutOfBandHeader oob
    cdef BufferRecord record
    cdef vector[int] fds
    slot = {}
    for block, _, _ in placed:
        key = block.arena_id, block.segment_id
        if key not in slot:
            slot[key] = len(slot)
            fds.push_back(block.fd)
    if fds.size() > kMaxDescriptors or len(placed) > _MAX_BUFFERS:
        if strict is None:
            return None
        if len(placed) > _MAX_BUFFERS:
            what = f"{len(placed):,} arrays to pass through shared memory, more than the {_MAX_BUFFERS:,}"
        else:
            what = f"arrays in {fds.size():,} segments of shared memory, more than the {kMaxDescriptors:,}"
        raise ValueError(f"a task's arguments hold {what} that one task can pass to a worker: stack them into "
                         f"fewer arrays, or pass them over several tasks")
    # Every buffer has its place: now take the receiver's references.
    refs = [block.share() for block, _, _ in placed]
    try:
        send_descriptors(channel.fileno(), fds.data(), fds.size())
    except OSError as exc:
        for (block, _, _), shared in zip(placed, refs):
            open_block(shared, block.fd)   # adopted and dropped: the reference is given back
        if strict is None:
            return None
        if isinstance(exc, ConnectionError):
            raise PeerGone(f"the {strict} worker's process has exited") from None
        raise OSError(exc.errno, f"the descriptors of a task's arrays could not be sent to its {strict} worker: "
                                 f"{exc.strerror}") from exc
    oob = out_of_band_header(sender, <uint16_t>fds.size(), <uint16_t>len(placed))
    out = bytearray(sizeof(OutOfBandHeader) + len(placed) * sizeof(BufferRecord) + n + len(body))
    cdef char* p = out
    memcpy(p, &oob, sizeof(OutOfBandHeader))
    p += sizeof(OutOfBandHeader)
    for (block, offset, nbytes), shared in zip(placed, refs):
        memset(&record, 0, sizeof(BufferRecord))
        memcpy(&record.block, PyBytes_AS_STRING(shared), sizeof(BlockRef))
        record.offset, record.length = offset, nbytes
        record.descriptor = slot[block.arena_id, block.segment_id]
        memcpy(p, &record, sizeof(BufferRecord))
        p += sizeof(BufferRecord)
    memcpy(p, header, n)
    memcpy(p + n, PyBytes_AS_STRING(body), len(body))
    return bytes(out)


cdef bytes _pickled(const void* header, Py_ssize_t n, object value, int sender, object channel, bint by_value,
                   list box=None):
    """Header and the pickle of value, its large buffers out of band when channel can take their descriptors.

    When they cannot go out of band, they are copied in band, except a
    task's buffers that lie in the arena already: as _out_of_band's strict.
    by_value: functions and classes that pickle would name, it pickles by value (mizu._pickler).
    box: a list holding the sender's last reference to the value, in place of value (a worker's result):
    taken out and dropped once pickled, so that the value's arrays born in the arena can go by reference.
    """
    if box is not None:
        value = box.pop()
    head = PyBytes_FromStringAndSize(<const char*>header, n)
    if channel is None:
        return head + _pickle(value, None, by_value)
    buffers = []
    data = _pickle(value, lambda b: _in_band(b) or buffers.append(b), by_value)
    if not buffers:
        return head + data
    cdef bint by_reference = False
    if box is None:
        placed = _place(buffers, &by_reference)
    else:
        value = None
        placed = _place_handed(buffers)
    buffers = None
    # A copy in band would do for the rest; a task's arrays that go by
    # reference would lose the worker's writes.
    strict = "Python" if by_reference and (<const uint8_t*>header)[0] == kTask else None
    message = _out_of_band(header, n, data, placed, sender, channel, strict)
    if message is not None:
        return message
    if value is None:
        value = _unpickle(data, buffers=[memoryview(block)[offset:offset + nbytes] for block, offset, nbytes in placed])
    placed = None
    return head + _pickle(value, None, by_value)


class PeerGone(ConnectionError):
    """A worker's end of its socket is closed: its process has exited."""


cdef class Codec:
    """How a Python worker takes values: plain ones on the wire, the rest pickled."""

    def __cinit__(self, str language="Python"):
        self.language = language

    cdef bint registrable(self, fn) except -1:
        # Plain functions and module-level builtins pickle by qualified name, so
        # sending one once and then its id is exactly what pickling it every
        # time would do. Anything else (bound methods, partials, instances)
        # carries state that may change between calls, and is pickled each time.
        kind = type(fn)
        return kind is _FunctionType or (kind is _BuiltinFunctionType and isinstance(fn.__self__, _ModuleType))

    cdef bytes encode(self, Writer& w, const void* header, Py_ssize_t n, object value, int sender, object channel,
                      list box=None):
        """Header and the body of value: written in w (returning None) if value is plain, else the message.

        box: a list holding the sender's last reference to the value, in place of value (see _pickled).
        Raises what pickling value raises, and what _pickled does for a task's arrays in the arena.
        """
        if not encode_plain_into(w, header, n, value if box is None else box[0]):
            return None
        w.clear()
        return _pickled(header, n, value, sender, channel, self.by_value, box)

    cdef object outcome(self, Cell cell, int status, object value, bint* raised):
        """What a worker answered for the task of cell: its result, or (raised set) the exception it raised."""
        raised[0] = status != OK
        return value


cdef class PeerCodec(Codec):
    """How a worker of another language takes values: wire messages only, large arrays in the arena.

    Its callables are the worker's own (source text or a name), sent once.
    """

    def __cinit__(self, *args):
        self.unbuilt_fails_task = True

    cdef bint registrable(self, fn) except -1:
        return True

    cdef bytes encode(self, Writer& w, const void* header, Py_ssize_t n, object value, int sender, object channel,
                      list box=None):
        """Raises TypeError for a part with no wire form, ValueError for more arrays or segments than one
        message can name, PeerGone if the worker's process has exited before the arrays' descriptors could
        reach it, OSError if they cannot be sent otherwise."""
        placed = encode_peer_into(w, header, n, value, self.language)
        if not placed:
            return None
        data = PyBytes_FromStringAndSize(w.data() + n, w.size() - n)
        w.clear()
        return _out_of_band(header, n, data, placed, sender, channel, self.language)


# The encoders and the decoder as Python functions: for tests, and for a
# worker of another language checked against this side.

def encode_task(task_id, fn_id, flags, value, channel=None, Codec codec=None):
    """encode_task(task_id, fn_id, flags, value, channel=None, codec=None)

    The task message that carries value, as the pool writes it (codec: a
    Python worker's by default); arrays' descriptors go to channel.
    """
    cdef Writer w
    cdef TaskHeader head = task_header(task_id, fn_id, flags)
    if codec is None:
        codec = _python
    data = codec.encode(w, &head, sizeof(TaskHeader), value, 0, channel)
    return PyBytes_FromStringAndSize(w.data(), w.size()) if data is None else data


def encode_result(sender, task_id, status, seconds, value, channel=None):
    """encode_result(sender, task_id, status, seconds, value, channel=None)

    The result message that carries value, as a Python worker writes it.
    """
    cdef Writer w
    cdef ResultHeader head = result_header(sender, task_id, <Status>status, seconds)
    data = _python.encode(w, &head, sizeof(ResultHeader), value, sender, channel)
    return PyBytes_FromStringAndSize(w.data(), w.size()) if data is None else data


def decode_message(bytes message, channel=None):
    """decode_message(message, channel=None)

    (kind, fields, value) of a whole message: kind "task" or "result", its
    header's and out-of-band header's fields, and the value of its body.

    Raises
    ------
    ValueError
        The message is malformed, or its descriptors are not waiting on
        channel.
    """
    cdef Message m
    read_message(PyBytes_AS_STRING(message), PyBytes_GET_SIZE(message), m)
    fields = {"sender": m.sender, "descriptors": m.descriptors, "buffers": m.buffer_count}
    if m.kind == kTask:
        kind = "task"
        fields.update(flags=m.task.flags, task_id=m.task.task_id, fn_id=m.task.fn_id)
    else:
        kind = "result"
        fields.update(status=m.result.status, task_id=m.result.task_id, seconds=m.result.seconds)
    return kind, fields, body_of(m, message, channel)


def chunks_of(bytes message, sender, limit):
    """chunks_of(message, sender, limit)

    The chunks a message longer than limit bytes is cut into.
    """
    return chunks(PyBytes_AS_STRING(message), PyBytes_GET_SIZE(message), sender, limit)


cdef Codec _python = Codec()
