"""Messages between the Executor and its workers, and their framing on the rings.

Every message is one pickle (protocol 5) of a tuple:

client -> worker, on the worker's own SpscRing:
    (CALL, task_id, fn_ref, args, kwargs)    run fn(*args, **kwargs)
    (BATCH, task_id, fn_ref, units)          run map's units, each a list of argument
                                             tuples; the value is one (OK, [results])
                                             or (RAISED, exception) per unit
    fn_ref is an int naming a callable the worker has seen, (int, callable)
    to register one, or the callable itself when it cannot be registered.

worker -> client, on the pool's shared MpmcRing:
    (worker_index, task_id, OK, value, seconds)
    (worker_index, task_id, RAISED, exception_with_traceback, seconds)
    (worker_index, 0, RETIRING, None, 0.0)   it ran max_tasks_per_child tasks and exits

A message longer than a slot is cut into frames. A whole message starts with
the pickle protocol byte 0x80; a first frame is FIRST + sender (2 bytes) +
total length (8 bytes) + data, and later frames CONTINUED + sender + data.
The sender lets the client reassemble frames from workers writing at once.
"""

import pickle
import struct

CALL, BATCH = 0, 1
OK, RAISED, RETIRING = 0, 1, 2

FIRST, CONTINUED, PICKLE = 0x01, 0x02, 0x80
_FIRST = struct.Struct("<BHQ")
_CONTINUED = struct.Struct("<BH")

dumps = pickle.dumps
loads = pickle.loads
PROTOCOL = 5


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
        """The whole message if frame completes one, else None."""
        kind = frame[0]
        if kind == FIRST:
            _, sender, total = _FIRST.unpack_from(frame)
            buf = bytearray(frame[_FIRST.size:])
            if len(buf) >= total:
                return bytes(buf)
            self.partial[sender] = (buf, total)
            return None
        if kind == CONTINUED:
            _, sender = _CONTINUED.unpack_from(frame)
            buf, total = self.partial[sender]
            buf += memoryview(frame)[_CONTINUED.size:]
            if len(buf) < total:
                return None
            del self.partial[sender]
            return bytes(buf)
        return frame

    def forget(self, sender):
        self.partial.pop(sender, None)
