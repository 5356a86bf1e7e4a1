"""The message envelope (doc/dev/messages.rst): Python's encoders against the C++ reader, and both against the spec.

The layouts below are written from the spec. Tasks and results that Python
encodes read back, through csrc/messages.hpp's reader, with every field and
the value they carried; messages built here byte by byte read as the spec
says; malformed ones are ValueError, never a crash, a hang or a value read
from the wrong memory. Chunks of interleaved senders reassemble, and
arrays travel out of band through real arena blocks and a real socket pair.
"""

import gc
import os
import pickle
import socket
import struct

import numpy as np
import pytest
from hypothesis import given, strategies as st

from mizu import _arena, _wire
from mizu._messages import (BATCH, CALLABLE, EXITING, FLAT, GONE, KEYWORDS, OK, RAISED, READY, RETIRING, SINGLE,
                            PeerCodec, PeerGone, Reassembler, chunks_of, decode_message, encode_result, encode_task)

TASK = struct.Struct("<BBHIQQ")              # 'T', flags, reserved, reserved, task id, fn id
RESULT = struct.Struct("<BBHIQd")            # 'R', status, sender, reserved, task id, seconds
OUT_OF_BAND = struct.Struct("<BBHHH")        # 'O', reserved, sender, descriptors, buffers
RECORD = struct.Struct("<40sQQH6x")          # block reference, offset, length, descriptor
BLOCK_REF = struct.Struct("<QQQIiiI")        # arena, offset, length, segment, pid, fd, generation
FIRST_CHUNK = struct.Struct("<BBHIQ")        # 0x01, reserved, sender, reserved, total
NEXT_CHUNK = struct.Struct("<BBHI")          # 0x02, reserved, sender, reserved

plain = st.recursive(
    st.none() | st.booleans() | st.integers(-2**63, 2**63 - 1) | st.floats(allow_nan=False) | st.text() | st.binary(),
    lambda inner: st.lists(inner, max_size=4) | st.lists(inner, max_size=4).map(tuple)
    | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)
task_flags = st.sampled_from([0, KEYWORDS, BATCH, BATCH | FLAT, BATCH | SINGLE, BATCH | FLAT | SINGLE]).flatmap(
    lambda flags: st.sampled_from([flags, flags | CALLABLE]))


def test_the_layouts_are_the_arena_s():
    assert _arena.REF_SIZE == BLOCK_REF.size == 40 and RECORD.size == 64


@given(task_id=st.integers(1, 2**64 - 1), fn_id=st.integers(1, 2**64 - 1), flags=task_flags, value=plain)
def test_a_task_reads_back_with_its_fields_and_value(task_id, fn_id, flags, value):
    message = encode_task(task_id, fn_id, flags, value)
    assert message[:TASK.size] == TASK.pack(0x54, flags, 0, 0, task_id, fn_id)
    kind, fields, got = decode_message(message)
    assert kind == "task" and (fields["flags"], fields["task_id"], fields["fn_id"]) == (flags, task_id, fn_id)
    assert got == value and fields["buffers"] == 0


@given(sender=st.integers(0, 2**16 - 1), task_id=st.integers(1, 2**64 - 1), status=st.sampled_from([OK, RAISED]),
       seconds=st.floats(), value=plain)
def test_a_result_reads_back_with_its_fields_and_value(sender, task_id, status, seconds, value):
    message = encode_result(sender, task_id, status, seconds, value)
    assert message[:RESULT.size] == RESULT.pack(0x52, status, sender, 0, task_id, seconds)
    kind, fields, got = decode_message(message)
    assert kind == "result" and (fields["sender"], fields["status"], fields["task_id"]) == (sender, status, task_id)
    assert fields["seconds"] == seconds or (seconds != seconds and fields["seconds"] != fields["seconds"])
    assert got == value


@given(value=plain, pickled=st.booleans(), sender=st.integers(0, 9), task_id=st.integers(1, 2**64 - 1))
def test_messages_built_from_the_spec_read_as_it_says(value, pickled, sender, task_id):
    body = pickle.dumps(value, 5) if pickled else _wire.encode(value)
    kind, fields, got = decode_message(TASK.pack(0x54, KEYWORDS, 0, 0, task_id, 3) + body)
    assert (kind, fields["flags"], fields["task_id"], fields["fn_id"], got) == ("task", KEYWORDS, task_id, 3, value)
    kind, fields, got = decode_message(RESULT.pack(0x52, OK, sender, 0, task_id, 0.5) + body)
    assert (kind, fields["sender"], fields["seconds"], got) == ("result", sender, 0.5, value)


@pytest.mark.parametrize("status", [RETIRING, EXITING, READY, GONE])
def test_a_notice_names_no_task(status):
    kind, fields, got = decode_message(encode_result(2, 0, status, 0.0, (0, "why")))
    assert (fields["status"], fields["task_id"], got) == (status, 0, (0, "why"))
    with pytest.raises(ValueError, match="a notice naming a task"):
        decode_message(RESULT.pack(0x52, status, 2, 0, 5, 0.0) + _wire.encode(None))


W_NONE = _wire.encode(None)


@pytest.mark.parametrize("message, match", [
    (b"", "an empty message"),
    (b"\x01" + bytes(20), "a chunk, not a whole message"),
    (b"X", "a message of unknown kind 88"),
    (b"T" + bytes(10), "a task of 11 bytes, shorter than its header"),
    (TASK.pack(0x54, 0, 1, 0, 1, 1) + W_NONE, "a task header with reserved bits set"),
    (TASK.pack(0x54, 0x40, 0, 0, 1, 1) + W_NONE, "a task with unknown flags 64"),
    (TASK.pack(0x54, FLAT, 0, 0, 1, 1) + W_NONE, "a call's flags say how to run a batch"),
    (TASK.pack(0x54, BATCH | KEYWORDS, 0, 0, 1, 1) + W_NONE, "a batch with keyword arguments"),
    (TASK.pack(0x54, 0, 0, 0, 0, 1) + W_NONE, "a task with id 0"),
    (TASK.pack(0x54, 0, 0, 0, 1, 0) + W_NONE, "a task that names no callable"),
    (TASK.pack(0x54, 0, 0, 0, 1, 1), "a message without a body"),
    (TASK.pack(0x54, 0, 0, 0, 1, 1) + b"junk", "a body that is neither a wire message nor a pickle"),
    (RESULT.pack(0x52, GONE + 1, 0, 0, 1, 0.0) + W_NONE, f"a result of unknown status {GONE + 1}"),
    (RESULT.pack(0x52, OK, 0, 0, 0, 0.0) + W_NONE, "a result with task id 0"),
    (RESULT.pack(0x52, OK, 0, 1, 1, 0.0) + W_NONE, "a result header with reserved bits set"),
    (OUT_OF_BAND.pack(0x4F, 0, 0, 1, 0) + RESULT.pack(0x52, OK, 0, 0, 1, 0.0) + W_NONE,
     "an out-of-band message with no buffers"),
    (OUT_OF_BAND.pack(0x4F, 0, 0, 1, 2) + bytes(64), "2 buffer records, and 64 bytes left"),
    (OUT_OF_BAND.pack(0x4F, 0, 0, 1, 1) + RECORD.pack(BLOCK_REF.pack(1, 0, 8, 0, 0, 0, 1), 0, 8, 1),
     "a buffer in descriptor 1 of 1"),
    (OUT_OF_BAND.pack(0x4F, 0, 0, 1, 1) + RECORD.pack(BLOCK_REF.pack(1, 0, 8, 0, 0, 0, 1), 4, 8, 0),
     "a buffer of 8 bytes at offset 4 of a block of 8"),
    (OUT_OF_BAND.pack(0x4F, 0, 0, 1, 1) + RECORD.pack(BLOCK_REF.pack(1, 0, 8, 0, 0, 0, 1), 0, 8, 0),
     "an out-of-band message with nothing inside"),
    (OUT_OF_BAND.pack(0x4F, 0, 0, 1, 1) + RECORD.pack(BLOCK_REF.pack(1, 0, 8, 0, 0, 0, 1), 0, 8, 0) + b"O",
     "an out-of-band message inside another"),
])
def test_malformed_messages_are_value_errors_that_name_the_fault(message, match):
    with pytest.raises(ValueError, match=match):
        decode_message(message)


HEADERS = [TASK.pack(0x54, 0, 0, 0, 1, 1), RESULT.pack(0x52, OK, 0, 0, 1, 0.0)]


@given(st.binary(max_size=200) | st.binary(max_size=120).map(lambda b: b"T" + b) | st.binary(max_size=120).map(
    lambda b: b"R" + b) | st.binary(max_size=200).map(lambda b: b"O" + b)
    | st.tuples(st.sampled_from(HEADERS), st.sampled_from([b"W", b"\x80"]), st.binary(max_size=100)).map(b"".join))
def test_arbitrary_bytes_are_a_message_or_a_value_error(data):
    """Anything but a pickle body fails as ValueError itself (no subclass: UnicodeDecodeError is one). A pickle body
    is trusted to be a Python peer's, and raises what pickle.loads raises on it."""
    sender, receiver = socket.socketpair()
    with sender, receiver:
        try:
            decode_message(data, receiver)
            return
        except Exception as exc:
            raised = exc
    if type(raised) is ValueError:
        return
    assert data[:1] in (b"T", b"R") and data[TASK.size:TASK.size + 1] == b"\x80", \
        f"{raised!r} from a message whose body is no pickle"
    with pytest.raises(type(raised)) as loads:
        pickle.loads(data[TASK.size:])
    assert str(loads.value) == str(raised)


def _open_fds():
    return len(os.listdir("/proc/self/fd" if os.path.isdir("/proc/self/fd") else "/dev/fd"))


class Link:
    """A socket pair like a worker's, and an arena of the sender's for the arrays it sends."""

    def __init__(self):
        self.arena = _arena.Arena(segment_size=1 << 20)
        self.fds = _open_fds()
        self.sender, self.receiver = socket.socketpair()

    def array(self, size, seed):
        values = np.frombuffer(self.arena.alloc(size * 8), np.int64)
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


def test_arrays_travel_out_of_band_by_reference_and_give_their_references_back():
    with Link() as link:
        arrays = [link.array(1000, 0), link.array(3000, 5)]
        value = {"a": arrays[0], "b": [arrays[1], "text"], "view": arrays[1][10:2010]}
        message = encode_result(4, 7, OK, 0.0, value, link.sender)
        kind, fields, got = decode_message(message, link.receiver)
        assert (fields["sender"], fields["buffers"], fields["descriptors"]) == (4, 3, 1)
        np.testing.assert_array_equal(got["a"], arrays[0])
        np.testing.assert_array_equal(got["view"], arrays[1][10:2010])
        assert got["b"][1] == "text" and np.shares_memory(got["a"], arrays[0])
        del got
        assert [a.base.refs for a in arrays] == [1, 1]


def test_a_peer_s_arrays_are_arena_arrays_named_by_their_records():
    with Link() as link:
        big = link.array(2000, 3)
        message = encode_task(1, 1, 0, (big, np.arange(4), 2.5), link.sender, PeerCodec("R"))
        kind, fields, got = decode_message(message, link.receiver)
        assert fields["buffers"] == 1 and message[:1] == b"O"
        assert np.shares_memory(got[0], big) and got[1].tolist() == [0, 1, 2, 3] and got[2] == 2.5
        with pytest.raises(TypeError, match="has no form in R"):
            encode_task(1, 1, 0, (object(),), link.sender, PeerCodec("R"))


def test_a_peer_s_arrays_for_a_closed_socket_say_its_process_is_gone_and_keep_no_reference():
    with Link() as link:
        big = link.array(2000, 3)
        link.receiver.close()
        with pytest.raises(PeerGone, match="the R worker's process has exited"):
            encode_task(1, 1, 0, (big,), link.sender, PeerCodec("R"))
        assert big.base.refs == 1


def test_more_arrays_than_a_message_names_go_in_band_unless_a_task_would_lose_its_writes():
    """A message names at most 65,535 buffers. Past that a result's arrays are copied in band; a task's that lie
    in the arena are refused, for the worker's writes to them would reach only a copy."""
    with Link() as link:
        shared = link.array(65_536, 0)
        views = [shared[k:k + 1] for k in range(65_536)]
        message = encode_result(0, 1, OK, 0.0, views, link.sender)
        kind, fields, got = decode_message(message, link.receiver)
        assert fields["buffers"] == 0 and [int(v[0]) for v in got] == list(range(65_536))
        assert not np.shares_memory(got[7], shared)
        for codec in (None, PeerCodec("R")):
            with pytest.raises(ValueError, match="hold 65,536 arrays to pass through shared memory, more than the "
                                                 "65,535 that one task can pass to a worker: stack them into fewer"):
                encode_task(1, 1, 0, (views,), link.sender, codec)
        message = encode_task(1, 1, 0, (views[1:],), link.sender)
        kind, fields, got = decode_message(message, link.receiver)
        assert fields["buffers"] == 65_535 and np.shares_memory(got[0][-1], shared)
        del got
        assert shared.base.refs == 1


def test_descriptors_that_never_came_fail_at_once():
    """The receiver does not block: a sender sends them before its message exists."""
    with Link() as link:
        message = encode_result(0, 1, OK, 0.0, (link.array(1000, 0),), link.sender)
        for _, _, data in link.receiver.recvmsg(1, socket.CMSG_SPACE(16))[1]:   # someone took them
            for fd in struct.unpack(f"{len(data) // 4}i", data):
                os.close(fd)
        fds = _open_fds()
        with pytest.raises(ValueError, match="expected 1 shared-memory descriptors from the peer, got 0"):
            decode_message(message, link.receiver)
        assert _open_fds() <= fds


def test_a_message_naming_hundreds_of_segments_shares_every_one():
    """Their descriptors go in batches: more than one sendmsg passes."""
    link = Link()
    try:
        arrays = [link.array(100_000, k) for k in range(600)]   # 800 kB each: a 1 MB segment apiece
        message = encode_result(0, 1, OK, 0.0, arrays, link.sender)
        kind, fields, got = decode_message(message, link.receiver)
        assert fields["descriptors"] == 600 and fields["buffers"] == 600
        for mine, theirs in zip(arrays, got):
            assert np.shares_memory(mine, theirs)
            np.testing.assert_array_equal(mine, theirs)
        del got, arrays
    finally:
        link.sender.close()
        link.receiver.close()
        link.arena.close()
    # The receiver keeps its last few segments mapped (mizu._arena._RECENT), its own arena's too.
    assert _open_fds() <= link.fds + _arena._RECENT


def test_descriptors_marked_void_are_closed_and_the_next_message_s_taken():
    """A sender whose later batch failed marks the batches it sent before void (X); the receiver drops them."""
    with Link() as link:
        strays = [os.dup(0) for _ in range(3)]
        socket.send_fds(link.sender, [b"f"], strays)
        socket.send_fds(link.sender, [b"X"], [])
        for fd in strays:
            os.close(fd)
        message = encode_result(0, 1, OK, 0.0, (link.array(1000, 7),), link.sender)
        fds = _open_fds()
        kind, fields, got = decode_message(message, link.receiver)
        assert got[0].tolist() == list(range(7, 1007))
        del got
        assert _open_fds() <= fds


@given(field=st.sampled_from(["generation", "offset", "length", "ref offset", "segment"]),
       value=st.integers(0, 2**32 - 1))
def test_a_garbled_record_is_refused_or_reads_the_right_memory(field, value):
    with Link() as link:
        array = link.array(1000, 0)
        message = bytearray(encode_result(0, 1, OK, 0.0, (array,), link.sender))
        ref, offset, length, descriptor = RECORD.unpack_from(message, OUT_OF_BAND.size)
        parts = list(BLOCK_REF.unpack(ref))
        if field == "offset":
            offset = value
        elif field == "length":
            length = value
        else:
            index = {"ref offset": 1, "segment": 3, "generation": 6}[field]
            parts[index] = value
        RECORD.pack_into(message, OUT_OF_BAND.size, BLOCK_REF.pack(*parts), offset, length, descriptor)
        failed = False
        try:
            _, _, got = decode_message(bytes(message), link.receiver)
        except ValueError:
            failed = True
        else:
            np.testing.assert_array_equal(got[0], array)
            del got
        gc.collect()
        if failed and array.base.refs > 1:   # a reference never opened keeps its block (documented): drop it
            _arena.open_block(ref)
        assert array.base.refs == 1


def _split(message, sender, limit):
    parts = chunks_of(message, sender, limit)
    assert all(len(part) <= limit for part in parts) and all(len(part) == limit for part in parts[:-1])
    assert b"".join([parts[0][FIRST_CHUNK.size:]] + [p[NEXT_CHUNK.size:] for p in parts[1:]]) == message
    assert FIRST_CHUNK.unpack_from(parts[0]) == (1, 0, sender, 0, len(message))
    return parts


@given(st.data())
def test_chunks_of_interleaved_senders_reassemble(data):
    limit = data.draw(st.integers(FIRST_CHUNK.size + 1, 80), label="limit")
    senders = data.draw(st.lists(st.integers(0, 2**16 - 1), min_size=1, max_size=4, unique=True), label="senders")
    sent = {s: data.draw(st.lists(st.binary(min_size=limit + 1, max_size=4 * limit), max_size=3)) for s in senders}
    queues = {s: [c for message in messages for c in _split(message, s, limit)] for s, messages in sent.items()}
    joined = Reassembler()
    got = {s: [] for s in senders}
    while any(queues.values()):
        s = data.draw(st.sampled_from([s for s in senders if queues[s]]))
        message = joined.feed(queues[s].pop(0))
        if message is not None:
            got[s].append(message)
    assert got == sent and joined.pending == 0


@pytest.mark.parametrize("sequence, match", [
    ([b""], "an empty chunk"),
    ([b"T" + bytes(30)], "neither a first nor a next chunk"),
    ([bytes([1, 0, 3, 0])], "a first chunk of 4 bytes, shorter than its header"),
    ([NEXT_CHUNK.pack(2, 0, 3, 0) + b"abc"], "a next chunk from sender 3 with no first chunk before it"),
    ([FIRST_CHUNK.pack(1, 0, 3, 0, 10) + b"abc"] * 2, "a first chunk from sender 3 before its last message was whole"),
    ([FIRST_CHUNK.pack(1, 0, 3, 0, 3) + b"abc"], "a first chunk of 3 bytes of a message of 3: it needs no chunks"),
    ([FIRST_CHUNK.pack(1, 0, 3, 0, 4) + b"abc", NEXT_CHUNK.pack(2, 0, 3, 0) + b"de"],
     "chunks from sender 3 carry more than the 4 bytes announced"),
    ([FIRST_CHUNK.pack(1, 0, 3, 0, 4) + b"abc", NEXT_CHUNK.pack(2, 0, 3, 0)], "or an empty chunk"),
    ([FIRST_CHUNK.pack(1, 1, 3, 0, 4) + b"abc"], "a chunk header with reserved bits set"),
])
def test_malformed_chunks_are_value_errors_and_drop_the_partial_message(sequence, match):
    joined = Reassembler()
    for chunk in sequence[:-1]:
        assert joined.feed(chunk) is None
    with pytest.raises(ValueError, match=match):
        joined.feed(sequence[-1])
    assert joined.pending == 0
    assert [m for m in map(joined.feed, _split(b"x" * 30, 3, 20)) if m] == [b"x" * 30]


def test_a_sender_cut_short_is_forgotten():
    joined = Reassembler()
    head, other = _split(b"a" * 50, 4, 20), _split(b"b" * 50, 5, 20)
    assert joined.feed(head[0]) is None and joined.feed(other[0]) is None
    joined.forget(4)
    with pytest.raises(ValueError, match="no first chunk"):
        joined.feed(head[1])
    assert [m for m in map(joined.feed, other[1:]) if m] == [b"b" * 50]


def chunk_streams():
    """Chunks of a few senders with headers and lengths right, wrong or cut, duplicated and out of order."""
    senders = st.integers(0, 2)
    first = st.builds(lambda s, total, data: FIRST_CHUNK.pack(1, 0, s, 0, total) + data,
                      senders, st.integers(0, 12) | st.integers(0, 2**64 - 1), st.binary(max_size=8))
    later = st.builds(lambda s, data: NEXT_CHUNK.pack(2, 0, s, 0) + data, senders, st.binary(max_size=8))
    cut = (first | later).flatmap(lambda c: st.integers(0, len(c)).map(lambda n: c[:n]))
    one = first | later | cut | st.binary(max_size=12)
    return st.lists(one, min_size=1, max_size=12).flatmap(lambda cs: st.lists(st.sampled_from(cs), max_size=40))


@given(chunk_streams())
def test_arbitrary_chunks_give_whole_messages_or_value_errors(sequence):
    """A message comes out only as its sender's first chunk's data and the later chunks', exactly as announced."""
    joined = Reassembler()
    pending = {}
    for chunk in sequence:
        try:
            message = joined.feed(chunk)
        except ValueError:
            header = {1: FIRST_CHUNK, 2: NEXT_CHUNK}.get(chunk[0] if chunk else None)
            if header is not None and len(chunk) >= header.size:
                pending.pop(header.unpack_from(chunk)[2], None)
            continue
        if chunk[0] == 1:
            _, _, sender, _, total = FIRST_CHUNK.unpack_from(chunk)
            pending[sender] = (chunk[FIRST_CHUNK.size:], total)
        else:
            _, _, sender, _ = NEXT_CHUNK.unpack_from(chunk)
            data, total = pending[sender]
            pending[sender] = (data + chunk[NEXT_CHUNK.size:], total)
        data, total = pending[sender]
        if message is None:
            assert len(data) < total
        else:
            assert message == data and len(message) == total
            del pending[sender]
    assert joined.pending == len(pending)
