"""Messages and frames between the pool's processes (mizu._protocol) against
arbitrary and garbled input.

Well-formed messages and frame sequences round trip; a malformed one is a
ValueError (or, for descriptors that never came, a ConnectionError), never
a crash, a hang, another exception type, or a value read from the wrong
memory. The layouts below are written from the module's documentation."""

import os
import pickle
import socket
import struct

import numpy as np
import pytest
from hypothesis import given, strategies as st

from mizu import _arena
from mizu._protocol import CONTINUED, FIRST, OOB, PICKLE, WIRE, Reassembler, dumps, frames, loads, sender_of

OOB_HEADER = struct.Struct("<BHH")               # OOB, sender, count
OOB_ENTRY = struct.Struct("<40sQQH")             # block reference, offset in the block, length, descriptor index
BLOCK_REF = struct.Struct("<QQQIiiI")            # arena, offset, length, segment, pid, fd, generation
FIRST_HEADER = struct.Struct("<BHQ")             # FIRST, sender, total length
CONTINUED_HEADER = struct.Struct("<BH")          # CONTINUED, sender


def test_layouts_match_the_arena():
    assert _arena.REF_SIZE == BLOCK_REF.size == 40


def _open_fds():
    return len(os.listdir("/proc/self/fd" if os.path.isdir("/proc/self/fd") else "/dev/fd"))


@pytest.mark.parametrize("kind, raised", [(WIRE, ValueError), (PICKLE, Exception)], ids=["wire", "pickle"])
@given(data=st.binary())
def test_arbitrary_messages_raise_only_their_kinds_errors(kind, raised, data):
    """A wire message's errors are ValueError; a pickle is trusted to be the peer's, and garbage in it
    raises whatever the unpickler raises, and nothing worse."""
    try:
        loads(bytes([kind]) + data)
    except raised:
        pass


@pytest.mark.parametrize(
    "message, match",
    [
        (b"", "an empty message"),
        (bytes([FIRST]) + b"\x00" * 20, "unknown kind 0x01"),
        (bytes([CONTINUED, 0, 0]), "unknown kind 0x02"),
        (b"\x00", "unknown kind 0x00"),
        (b"\xff\x05", "unknown kind 0xff"),
        (bytes([OOB, 1]), r"a message of 2 bytes ends before its out-of-band message header \(5 bytes at byte 0\)"),
        (OOB_HEADER.pack(OOB, 1, 0) + b"\x80\x05N.", "an out-of-band message with no buffers"),
        (OOB_HEADER.pack(OOB, 1, 2) + b"\x00" * 60, r"ends before its buffer reference \(58 bytes at byte 63\)"),
        (OOB_HEADER.pack(OOB, 1, 1) + b"\x00" * 58 + b"\x80\x05N.", "needs the socket its descriptors came through"),
    ],
)
def test_malformed_messages_are_value_errors(message, match):
    with pytest.raises(ValueError, match=match):
        loads(message)


def test_sender_of_a_short_message_is_a_value_error():
    assert sender_of(OOB_HEADER.pack(OOB, 513, 1)) == 513
    with pytest.raises(ValueError, match="ends before its out-of-band message header"):
        sender_of(bytes([OOB, 1]))


@given(count=st.integers(1, 3), table=st.data(), tail=st.binary(max_size=20))
def test_an_oob_message_whose_descriptors_never_came_fails_at_once(count, table, tail):
    """Without them the receiver must not block: the sender sends them before the message exists."""
    entries = table.draw(st.binary(min_size=count * OOB_ENTRY.size, max_size=count * OOB_ENTRY.size))
    message = OOB_HEADER.pack(OOB, 0, count) + entries + tail
    fds = _open_fds()
    sender, receiver = socket.socketpair()
    with sender, receiver:
        with pytest.raises(ConnectionError, match="none were waiting"):
            loads(message, receiver)
    assert _open_fds() == fds


class Link:
    """A socket pair like a worker's, and an arena of the sender's for the arrays it sends."""

    def __init__(self):
        self.arena = _arena.Arena(segment_size=1 << 20)
        self.fds = _open_fds()
        self.sender, self.receiver = socket.socketpair()

    def array(self, size, seed):
        block = self.arena.alloc(size * 8)
        values = np.frombuffer(block, np.int64)
        values[:] = np.arange(seed, seed + size)
        return values

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.sender.close()
        self.receiver.close()
        # Fewer is fine: opening a block may push an earlier arena's segment
        # out of the cache of recently mapped ones.
        assert _open_fds() <= self.fds
        self.arena.close()


def assert_same_arrays(got, arrays):
    assert type(got) is tuple and len(got) == len(arrays)
    for back, sent in zip(got, arrays):
        assert back.dtype == sent.dtype and np.array_equal(back, sent)


def drop_unopened(blocks, refs, shared):
    """Open and drop the references a failed load left unopened; every block then has its references of before."""
    for block, before, ref in zip(blocks, refs, shared):
        if block.refs > before:
            _arena.open_block(ref)
        assert block.refs == before


GARBLED = ["sender", "count", "arena", "ref offset", "ref length", "segment", "pid", "fd", "generation",
           "offset", "nbytes", "index", "truncate"]


def garble(message, field, entry, value):
    """message with one field of its header or of buffer entry `entry` set to value (cut to the field's width)."""
    data = bytearray(message)
    kind, sender, count = OOB_HEADER.unpack_from(data)
    if field == "truncate":
        return bytes(data[:value % len(data)])
    if field in ("sender", "count"):
        fields = {"sender": sender, "count": count, field: value % 2**16}
        OOB_HEADER.pack_into(data, 0, kind, fields["sender"], fields["count"])
        return bytes(data)
    at = OOB_HEADER.size + entry * OOB_ENTRY.size
    ref, offset, nbytes, index = OOB_ENTRY.unpack_from(data, at)
    if field in ("offset", "nbytes", "index"):
        fields = {"offset": offset, "nbytes": nbytes, "index": index}
        fields[field] = value % 2 ** (16 if field == "index" else 64)
        OOB_ENTRY.pack_into(data, at, ref, fields["offset"], fields["nbytes"], fields["index"])
        return bytes(data)
    names = ["arena", "ref offset", "ref length", "segment", "pid", "fd", "generation"]
    widths = [64, 64, 64, 32, 32, 32, 32]
    parts = list(BLOCK_REF.unpack(ref))
    i = names.index(field)
    parts[i] = value % 2 ** widths[i]
    if field in ("pid", "fd"):
        parts[i] -= 2**31 if parts[i] >= 2**31 else 0
    OOB_ENTRY.pack_into(data, at, BLOCK_REF.pack(*parts), offset, nbytes, index)
    return bytes(data)


@given(
    sizes=st.lists(st.integers(512, 5000), min_size=1, max_size=3),   # 4 KiB and more: out of band
    field=st.sampled_from(GARBLED),
    entry=st.integers(0, 2),
    value=st.integers(0, 2**64 - 1) | st.integers(0, 300),
)
def test_a_garbled_oob_message_is_refused_or_reads_the_right_memory(sizes, field, entry, value):
    """One field of the header or of a buffer entry set to anything.

    The message carries arrays in arena blocks by reference. Loading it
    either raises a documented error or gives the arrays sent: never other
    bytes. Every descriptor received is closed. A reference that was not
    opened keeps its block (documented); the test then drops it itself, and
    checks the arena is empty at the end.
    """
    with Link() as link:
        arrays = [link.array(n, 1000 * i) for i, n in enumerate(sizes)]
        blocks = [a.base for a in arrays]
        refs = [block.refs for block in blocks]
        message = dumps(tuple(arrays), 7, link.sender)
        assert message[0] == OOB and sender_of(message) == 7
        shared = [OOB_ENTRY.unpack_from(message, OOB_HEADER.size + i * OOB_ENTRY.size)[0] for i in range(len(arrays))]
        garbled = garble(message, field, entry % len(arrays), value)
        try:
            got = loads(garbled, link.receiver)
        except (ValueError, ConnectionError, pickle.UnpicklingError):
            pass
        except Exception:
            # Fewer entries than were sent: the pickle starts inside the
            # table, and a pickle that does not load raises what it raises.
            assert field == "count" and 0 < value % 2**16 < len(arrays)
        else:
            if garbled[:OOB_HEADER.size] == message[:OOB_HEADER.size] or field == "sender":
                assert_same_arrays(got, arrays)
            del got
        drop_unopened(blocks, refs, shared)
        del arrays, blocks
        stats = link.arena.stats()
        assert (stats["blocks"], stats["free_blocks"]) == (0, stats["segments"]), stats


def test_an_oob_message_round_trips_and_gives_back_its_references():
    with Link() as link:
        arrays = [link.array(1000, 0), link.array(3000, 5)]
        value = {"a": arrays[0], "b": [arrays[1], "text"], "view": arrays[1][10:2010]}
        message = dumps(value, 2, link.sender)
        got = loads(message, link.receiver)
        np.testing.assert_array_equal(got["a"], arrays[0])
        np.testing.assert_array_equal(got["b"][0], arrays[1])
        np.testing.assert_array_equal(got["view"], arrays[1][10:2010])
        assert got["b"][1] == "text"
        assert np.shares_memory(got["a"], arrays[0])
        del got
        assert [a.base.refs for a in arrays] == [1, 1]


def test_a_buffer_beyond_its_block_is_refused():
    with Link() as link:
        array = link.array(1000, 0)
        message = dumps((array,), 0, link.sender)
        for offset, nbytes in ((8, 8000), (0, 8001), (8001, 0), (2**64 - 1, 2)):
            with pytest.raises(ValueError, match=f"a buffer of {nbytes} bytes at offset {offset} of a block of 8000"):
                loads(garble(garble(message, "offset", 0, offset), "nbytes", 0, nbytes), link.receiver)
            assert array.base.refs == 1
            message = dumps((array,), 0, link.sender)
        np.testing.assert_array_equal(loads(message, link.receiver)[0], array)


# Frames.

def split(data, sender, limit):
    parts = list(frames(data, sender, limit))
    assert all(len(part) <= limit for part in parts)
    assert b"".join([parts[0][FIRST_HEADER.size:]] + [p[CONTINUED_HEADER.size:] for p in parts[1:]]) == data
    return parts


def feed_all(reassembler, parts):
    """The messages that feeding parts in order completes."""
    return [m for m in map(reassembler.feed, parts) if m is not None]


@given(st.data())
def test_frames_of_interleaved_senders_reassemble(data):
    limit = data.draw(st.integers(FIRST_HEADER.size + 1, 80), label="limit")
    senders = data.draw(st.lists(st.integers(0, 2**16 - 1), min_size=1, max_size=4, unique=True), label="senders")
    sent = {s: data.draw(st.lists(st.binary(min_size=limit + 1, max_size=4 * limit), max_size=3)) for s in senders}
    queues = {s: [f for message in messages for f in split(message, s, limit)] for s, messages in sent.items()}
    reassembler = Reassembler()
    got = {s: [] for s in senders}
    while any(queues.values()):
        s = data.draw(st.sampled_from([s for s in senders if queues[s]]))
        message = reassembler.feed(queues[s].pop(0))
        if message is not None:
            got[s].append(message)
    assert got == sent
    assert reassembler.partial == {}


@pytest.mark.parametrize(
    "sequence, match",
    [
        ([b""], "a frame of 0 bytes that is neither"),
        ([b"\x57\x01N"], "a frame of 3 bytes that is neither"),
        ([bytes([FIRST, 0, 0, 5])], r"a message of 4 bytes ends before its first frame header \(11 bytes"),
        ([bytes([CONTINUED, 0])], r"a message of 2 bytes ends before its continued frame header \(3 bytes"),
        ([CONTINUED_HEADER.pack(CONTINUED, 3) + b"abc"], "a continued frame from sender 3 with no first frame"),
        ([FIRST_HEADER.pack(FIRST, 3, 10) + b"abc"] * 2, "a first frame from sender 3 before its last message was whole"),
        ([FIRST_HEADER.pack(FIRST, 3, 2) + b"abc"], "frames from sender 3 carry 3 bytes, more than the 2 announced"),
        ([FIRST_HEADER.pack(FIRST, 3, 4) + b"abc", CONTINUED_HEADER.pack(CONTINUED, 3) + b"de"],
         "frames from sender 3 carry 5 bytes, more than the 4 announced"),
    ],
)
def test_malformed_frames_are_value_errors_and_drop_the_partial_message(sequence, match):
    reassembler = Reassembler()
    for frame in sequence[:-1]:
        assert reassembler.feed(frame) is None
    with pytest.raises(ValueError, match=match):
        reassembler.feed(sequence[-1])
    assert reassembler.partial == {}
    # The sender's next message reassembles.
    assert feed_all(reassembler, split(b"x" * 30, 3, 16)) == [b"x" * 30]


def test_a_stream_cut_short_is_forgotten():
    reassembler = Reassembler()
    head = split(b"a" * 50, 4, 20)
    other = split(b"b" * 50, 5, 20)
    assert reassembler.feed(head[0]) is None
    assert reassembler.feed(other[0]) is None
    reassembler.forget(4)
    with pytest.raises(ValueError, match="no first frame"):
        reassembler.feed(head[1])
    assert feed_all(reassembler, other[1:]) == [b"b" * 50]
    assert feed_all(reassembler, split(b"c" * 50, 4, 20)) == [b"c" * 50]


def frame_streams():
    """Frames of a few senders with headers and lengths right, wrong or cut, duplicated and out of order."""
    senders = st.integers(0, 2)
    first = st.builds(lambda s, total, data: FIRST_HEADER.pack(FIRST, s, total) + data,
                      senders, st.integers(0, 12) | st.integers(0, 2**64 - 1), st.binary(max_size=8))
    continued = st.builds(lambda s, data: CONTINUED_HEADER.pack(CONTINUED, s) + data, senders, st.binary(max_size=8))
    cut = (first | continued).flatmap(lambda f: st.integers(0, len(f)).map(lambda n: f[:n]))
    one = first | continued | cut | st.binary(max_size=12)
    return st.lists(one, min_size=1, max_size=12).flatmap(lambda fs: st.lists(st.sampled_from(fs), max_size=40))


@given(frame_streams())
def test_arbitrary_frame_sequences_give_whole_messages_or_value_errors(sequence):
    """A message comes out only as its sender's FIRST data and the CONTINUED data after it, exactly as long as announced."""
    reassembler = Reassembler()
    pending = {}
    for frame in sequence:
        kind = frame[:1]
        try:
            message = reassembler.feed(frame)
        except ValueError:
            # Once its header is read, the sender's partial message is dropped.
            header = {bytes([FIRST]): FIRST_HEADER, bytes([CONTINUED]): CONTINUED_HEADER}.get(kind)
            if header is not None and len(frame) >= header.size:
                pending.pop(header.unpack_from(frame)[1], None)
            continue
        if kind == bytes([FIRST]):
            _, sender, total = FIRST_HEADER.unpack_from(frame)
            pending[sender] = (frame[FIRST_HEADER.size:], total)
        else:
            _, sender = CONTINUED_HEADER.unpack_from(frame)
            data, total = pending[sender]
            pending[sender] = (data + frame[CONTINUED_HEADER.size:], total)
        data, total = pending[sender]
        if message is None:
            assert len(data) < total
        else:
            assert message == data and len(message) == total
            del pending[sender]
    assert set(reassembler.partial) == set(pending)
