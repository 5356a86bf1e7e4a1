"""The child processes of the core's tests: peers of a segment, of rings and of the arena."""

import signal
import time

from children import arena_pattern


def push(ring, payload):
    ring.push(payload, timeout=60)


def hold(seg, ready):
    ready.set()
    signal.pause()


def serve(conn):
    """Attach to rings and run push/pop commands sent over conn."""
    ring = None
    while True:
        cmd, arg = conn.recv()
        if cmd == "attach":
            ring = arg
            conn.send(None)
        elif cmd == "push":
            try:
                conn.send(ring.try_push(arg))
            except ValueError as exc:
                conn.send(exc)
        elif cmd == "pop":
            conn.send(ring.try_pop())
        elif cmd == "claim":
            conn.send(ring.claim(arg))
        elif cmd == "answer":
            conn.send(ring.answer())
        else:
            conn.close()
            return


def echo(inbox, outbox, rounds, spin_ns, slice_ns, report):
    """Send every message back; then report this side's wait counters."""
    for ring in (inbox, outbox):
        ring.spin_ns = spin_ns
        ring.slice_ns = slice_ns
    for _ in range(rounds):
        outbox.push(inbox.pop(timeout=120), timeout=120)
    report.push(repr((inbox.wait_stats(), outbox.wait_stats())).encode(), timeout=120)


def idle_pop(ring, seconds, report):
    """Block on an empty ring for `seconds`; report the CPU seconds that cost."""
    start = time.process_time()
    try:
        ring.pop(timeout=seconds)
    except TimeoutError:
        pass
    report.push(repr(time.process_time() - start).encode(), timeout=60)


def produce(ring, producer, count, max_message):
    for seq in range(count):
        ring.push(numbered(producer, seq, max_message), timeout=120)


def consume(ring, report, spin_ns=None, slice_ns=None):
    """Pop until the ring is closed; report (producer, seq) of every message, checking its bytes."""
    if spin_ns is not None:
        ring.spin_ns = spin_ns
    if slice_ns is not None:
        ring.slice_ns = slice_ns
    seen = []
    bad = 0
    while True:
        try:
            data = ring.pop(timeout=120)
        except EOFError:
            break
        producer, seq = int.from_bytes(data[:4], "little"), int.from_bytes(data[4:12], "little")
        if data != numbered(producer, seq, len(data), exact=True):
            bad += 1
        seen.append((producer, seq))
    report.put((seen, bad, ring.wait_stats()))


def numbered(producer, seq, max_message, exact=False):
    """Message seq of producer: its length and bytes both follow from the pair."""
    n = max_message if exact else 12 + (seq * 7919 + producer) % (max_message - 11)
    head = producer.to_bytes(4, "little") + seq.to_bytes(8, "little")
    return head + bytes((seq + producer + i) % 256 for i in range(12, n))


def sleep_forever():
    while True:
        time.sleep(60)


# -- arena peers -------------------------------------------------------------------------------------------------


def arena_fill(block, tag):
    import numpy as np

    np.frombuffer(block, np.uint8)[:] = arena_pattern(tag, len(block))


def arena_intact(block, tag):
    import numpy as np

    return bool(np.array_equal(np.frombuffer(block, np.uint8), arena_pattern(tag, len(block))))


def arena_peer(conn, segment_size):
    """Hold blocks of other processes and allocate from an arena of its own, on command.

    No block stays in a local variable, so a dropped one is released at once.
    """
    from mizu import _arena

    arena = _arena.Arena(segment_size=segment_size)
    held = {}
    while True:
        cmd, *args = conn.recv()
        if cmd == "open":
            held[args[1]] = _arena.open_block(args[0])
            conn.send(arena_intact(held[args[1]], args[1]))
        elif cmd == "take":
            held[args[1]] = args[0]
            conn.send(arena_intact(held[args[1]], args[1]))
        elif cmd == "check":
            conn.send(arena_intact(held[args[0]], args[0]))
        elif cmd == "drop":
            del held[args[0]]
            conn.send(None)
        elif cmd == "alloc":
            conn.send(arena_shared(arena, *args))
        elif cmd == "stats":
            conn.send(arena.stats())
        elif cmd == "close":
            arena.close()
            conn.send(None)
        else:
            conn.close()
            return
        del args


def arena_shared(arena, n, tag):
    """A reference to a new block of n bytes holding its pattern; this process keeps none."""
    block = arena.alloc(n)
    arena_fill(block, tag)
    return block.share()


def arena_check_sent_block(conn, tag):
    """Receive a block through conn, answer whether it holds its pattern and its reference count; then drop it."""
    block = conn.recv()
    conn.send((arena_intact(block, tag), block.refs))


def arena_view_in_fork(block, report):
    """Report the error viewing a block inherited through fork raises, or None."""
    try:
        memoryview(block)
    except BufferError as exc:
        report.send(str(exc))
    else:
        report.send(None)


def arena_alloc_in_fork(arena, report):
    try:
        arena.alloc(10)
    except RuntimeError as exc:
        report.send(str(exc))
    else:
        report.send(None)


def arena_close_race(trials):
    """Close arenas while another thread is inside alloc, mapping a segment with the GIL released."""
    import threading
    import time

    from mizu import _arena

    for _ in range(trials):
        arena = _arena.Arena(segment_size=1 << 16, limit=1 << 30)
        started = threading.Event()

        def work():
            started.set()
            try:
                while True:
                    arena.alloc(8 << 20)
            except ValueError:
                pass

        thread = threading.Thread(target=work)
        thread.start()
        started.wait()
        time.sleep(0.002)
        arena.close()
        thread.join()
