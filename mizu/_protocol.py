"""Messages between the Executor and its workers, and their framing on the rings.

Every message is one of these tuples, as a wire message (mizu._wire, first
byte WIRE) when every part of it has a native wire encoding, else as a
pickle (protocol 5). The two commonest have a compact form, TASK or RESULT,
then a fixed header (mizu/_messages.pxd) that holds what C code reads, then a
wire message of the rest:

client -> worker, on the worker's own SpscRing:
    (CALL, task_id, fn_ref, args, kwargs)    run fn(*args, **kwargs)
    (BATCH, task_id, fn_ref, units, shape)   run map's units. shape has FLAT when a unit is
                                             one call, else a unit is a list of calls; and
                                             SINGLE when a call's arguments are one bare
                                             value, else they are a tuple. The value is
                                             (values, failures): one value (or list of values)
                                             per unit, None where the unit raised, and
                                             (unit index, exception) for each that did
    fn_ref is an int naming a callable the worker has seen, (int, callable)
    to register one, or the callable itself when it cannot be registered.
    TASK + TaskHeader + args                 CALL of a registered callable, without kwargs

worker -> client, on the pool's shared MpmcRing:
    (worker_index, task_id, OK, value, seconds)
    (worker_index, task_id, RAISED, exception_with_traceback, seconds)
    RESULT + ResultHeader + value            the same with OK
    (worker_index, 0, RETIRING, None, 0.0)   it ran max_tasks_per_child tasks and exits
    (worker_index, 0, RAISED, (stage, traceback), 0.0)
                                             it exits because its initializer (stage INITIALIZER)
                                             or unpickling a task (UNPICKLING) raised; traceback a str

Buffers of INLINE bytes or more that pickle hands out of band (numpy arrays,
PickleBuffer) do not go into the pickle: they live in the shared arena. A
buffer already in an arena block (a mizu.empty array, or a view of one)
travels by reference; any other is copied once into a block of the sender's
arena. Such a message is OOB + sender (2 bytes) + count (2 bytes), then per
buffer its block's reference (Block.share) + offset in the block (8 bytes) +
length (8 bytes) + index of its segment's descriptor (2 bytes), then the
pickle. The descriptors, one per distinct segment, go over the pair's Unix
socket in one sendmsg before the message goes into the ring, so the
receiver can map the blocks even if the sender has exited since. When they
cannot be sent, the buffers go inside the pickle after all.

A message longer than a slot is cut into frames. A whole message starts with
TASK, RESULT, WIRE, OOB or the pickle protocol byte 0x80; a first frame is FIRST + sender
(2 bytes) + total length (8 bytes) + data, and later frames CONTINUED + sender
+ data. The sender lets the client reassemble frames from workers writing at
once.

Malformed input (a message or frame cut short, of no known kind, with
lengths that disagree, or naming blocks that are not there) raises
ValueError here, never reads past what it was given, and never maps memory
other than the blocks named; a pickle that does not load raises what
pickle.loads raises.
"""

import array
import os
import socket
import struct

from mizu._arena import REF_SIZE, arena_block, default_arena, open_block
from mizu._pickler import dumps as _pickle, loads as _unpickle
from mizu._wire import decode, encode_plain

CALL, BATCH = 0, 1
FLAT, SINGLE = 1, 2
OK, RAISED, RETIRING = 0, 1, 2
INITIALIZER, UNPICKLING = 0, 1

FIRST, CONTINUED, OOB, WIRE, PICKLE, TASK, RESULT = 0x01, 0x02, 0x03, 0x57, 0x80, 0x54, 0x52
_FIRST = struct.Struct("<BHQ")
_CONTINUED = struct.Struct("<BH")
_OOB = struct.Struct("<BHH")
_BUFFER = struct.Struct(f"<{REF_SIZE}sQQH")

INLINE = 4096
_MAX_FDS = 250   # descriptors per message (one sendmsg): the kernel takes at most 253
_NO_SIGNAL = getattr(socket, "MSG_NOSIGNAL", 0)


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


def dumps(obj, sender=0, channel=None):
    """The message for obj; with a channel, large buffers go through the arena and their descriptors to channel."""
    data = encode_plain(obj)
    if data is not None:
        return data
    return dumps_pickled(obj, sender, channel)


def dumps_pickled(obj, sender=0, channel=None):
    """dumps for an obj that encode_plain has refused: its pickle message."""
    if channel is None:
        return _pickle(obj)
    buffers = []
    data = _pickle(obj, lambda b: _in_band(b) or buffers.append(b))
    if not buffers:
        return data
    placed = [_place(buffer.raw()) for buffer in buffers]
    fds, slot = [], {}
    for block, _, _ in placed:
        key = block.arena_id, block.segment_id
        if key not in slot:
            slot[key] = len(fds)
            fds.append(block.fd)
    if len(fds) > _MAX_FDS:
        return _pickle(obj)
    # Every buffer has its place: now take the receiver's references.
    refs = [block.share() for block, _, _ in placed]
    try:
        _send_fds(channel, fds)
    except OSError:
        # The peer has exited (its pool breaks as soon as that is seen), or
        # the kernel holds too many descriptors in flight for this user: the
        # buffers go inside the message instead, as the stdlib sends them.
        for (block, _, _), ref in zip(placed, refs):
            open_block(ref, block.fd)   # adopted and dropped: the reference is given back
        return _pickle(obj)
    parts = [_OOB.pack(OOB, sender, len(placed))]
    parts.extend(_BUFFER.pack(ref, offset, nbytes, slot[block.arena_id, block.segment_id])
                 for (block, offset, nbytes), ref in zip(placed, refs))
    parts.append(data)
    return b"".join(parts)


def _place(raw):
    """(block, offset, nbytes) holding the bytes of raw: its own block if it has one this process may share."""
    found = arena_block(raw)
    if found is not None:
        try:
            memoryview(found[0])
            return found
        except BufferError:   # a block inherited through fork: this process holds no reference to share
            pass
    block = default_arena().alloc(raw.nbytes)
    memoryview(block)[:raw.nbytes] = raw
    return block, 0, raw.nbytes


def _send_fds(channel, fds):
    # One byte carries them. No acknowledgement (multiprocessing.reduction
    # waits for one on macOS): the receiver reads them only after the message
    # that follows them is in the ring. MSG_NOSIGNAL: a peer that has exited
    # is an error here, not a SIGPIPE for a process that restored its default.
    channel.sendmsg([b"F"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))], _NO_SIGNAL)


def _receive_fds(channel, count):
    fds = array.array("i")
    # The sender sends the descriptors before the message goes into the ring,
    # so they are waiting by now; a message that claims descriptors nobody
    # sent must fail, not block.
    try:
        data, ancillary, flags, _ = channel.recvmsg(1, socket.CMSG_SPACE(count * fds.itemsize), socket.MSG_DONTWAIT)
    except BlockingIOError:
        raise ConnectionError(f"expected {count} shared-memory descriptors from the peer, and none were waiting") \
            from None
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[:len(payload) - len(payload) % fds.itemsize])
    if data != b"F" or len(fds) != count or flags & socket.MSG_CTRUNC:
        for fd in fds:
            os.close(fd)
        raise ConnectionError(f"expected {count} shared-memory descriptors from the peer, got {len(fds)}")
    return list(fds)


def sender_of(message):
    """The sender named by an OOB message."""
    return _unpack(_OOB, message, 0, "out-of-band message header")[1]


def _unpack(layout, data, offset, what):
    try:
        return layout.unpack_from(data, offset)
    except struct.error:
        raise ValueError(f"a message of {len(data)} bytes ends before its {what} ({layout.size} bytes at byte "
                         f"{offset})") from None


def loads(message, channel=None):
    """loads(message, channel=None)

    The object in a message from `dumps`.

    Parameters
    ----------
    message : bytes
        A whole message (frames joined by a `Reassembler`).
    channel : socket.socket, optional
        The socket the message's descriptors came through; an OOB message
        needs it.

    Raises
    ------
    ValueError
        The message is malformed: empty, of no known kind, a wire message
        that does not decode, an OOB message cut short or without a
        channel, or one whose references name no live block (a block whose
        reference is not opened stays allocated).
    ConnectionError
        An OOB message's descriptors are not waiting on `channel`, or are
        fewer than it names.
    Exception
        Whatever `pickle.loads` raises for a pickle that does not load.
    """
    try:
        kind = message[0]
    except IndexError:
        raise ValueError("an empty message") from None
    if kind == WIRE:
        return decode(message)
    if kind == PICKLE:
        return _unpickle(message)
    if kind != OOB:
        raise ValueError(f"a message of unknown kind 0x{kind:02x}")
    _, _, count = _unpack(_OOB, message, 0, "out-of-band message header")
    if count == 0:
        raise ValueError("an out-of-band message with no buffers")
    entries = [_unpack(_BUFFER, message, _OOB.size + i * _BUFFER.size, "buffer reference") for i in range(count)]
    if channel is None:
        raise ValueError("an out-of-band message needs the socket its descriptors came through")
    fds = _receive_fds(channel, max(entry[3] for entry in entries) + 1)
    try:
        buffers = [_view(open_block(ref, fds[index]), offset, nbytes) for ref, offset, nbytes, index in entries]
    finally:
        for fd in fds:
            os.close(fd)
    return _unpickle(memoryview(message)[_OOB.size + count * _BUFFER.size:], buffers=buffers)


def _view(block, offset, nbytes):
    if offset > len(block) or nbytes > len(block) - offset:
        raise ValueError(f"a buffer of {nbytes} bytes at offset {offset} of a block of {len(block)} bytes")
    return memoryview(block)[offset:offset + nbytes]


def frames(data, sender, limit):
    """Cut data into frames of at most limit bytes (data longer than limit)."""
    view = memoryview(data)
    first = limit - _FIRST.size
    yield _FIRST.pack(FIRST, sender, len(view)) + view[:first]
    step = limit - _CONTINUED.size
    head = _CONTINUED.pack(CONTINUED, sender)
    for start in range(first, len(view), step):
        yield head + view[start:start + step]


class Reassembler:
    """Joins frames back into messages, one partial message per sender."""

    def __init__(self):
        self.partial = {}

    def feed(self, frame):
        """feed(frame)

        The whole message if frame (FIRST or CONTINUED) completes one, else None.

        Raises
        ------
        ValueError
            The frame does not continue its sender's frames: it is cut
            short or of another kind, a CONTINUED frame has no FIRST before
            it, a FIRST comes before the sender's last message is whole, or
            the data runs past the length its FIRST announced. The sender's
            partial message is dropped.
        """
        kind = frame[0] if len(frame) else None
        if kind == FIRST:
            _, sender, total = _unpack(_FIRST, frame, 0, "first frame header")
            if self.partial.pop(sender, None) is not None:
                raise ValueError(f"a first frame from sender {sender} before its last message was whole")
            buf = bytearray(memoryview(frame)[_FIRST.size:])
            if len(buf) < total:
                self.partial[sender] = (buf, total)
                return None
        elif kind == CONTINUED:
            _, sender = _unpack(_CONTINUED, frame, 0, "continued frame header")
            try:
                buf, total = self.partial.pop(sender)
            except KeyError:
                raise ValueError(f"a continued frame from sender {sender} with no first frame before it") from None
            buf += memoryview(frame)[_CONTINUED.size:]
            if len(buf) < total:
                self.partial[sender] = (buf, total)
                return None
        else:
            raise ValueError(f"a frame of {len(frame)} bytes that is neither a first nor a continued frame")
        if len(buf) > total:
            raise ValueError(f"frames from sender {sender} carry {len(buf)} bytes, more than the {total} announced")
        return bytes(buf)

    def forget(self, sender):
        self.partial.pop(sender, None)
