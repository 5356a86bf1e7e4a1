"""What the streaming maps' tests share: calls that leave a file when they start, calls held by gates, and the
check that a buffered map keeps its bound, which the tests of the R pool run too."""

import itertools
import os
import time

# Seconds a map that overran its bound would have to start more calls.
SETTLE = 0.3


def started(folder, value, seconds=0.0):
    """Leave the file folder/value as this call starts, then sleep seconds; return value."""
    open(os.path.join(folder, str(value)), "x").close()
    time.sleep(seconds)
    return value


def calls_started(folder):
    """How many calls of `started` have started in folder."""
    return len(os.listdir(folder))


def gated(folder, value, fail=False, seconds=120):
    """Return value once the file folder/"go-<value>" exists (a gate the test opens), or fail after seconds;
    raise ValueError(value) at once if fail."""
    if fail:
        raise ValueError(value)
    gate = os.path.join(folder, f"go-{value}")
    deadline = time.monotonic() + seconds
    while not os.path.exists(gate):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{gate} did not appear within {seconds} s")
        time.sleep(0.005)
    return value


def open_gate(folder, value):
    open(os.path.join(folder, f"go-{value}"), "x").close()


def started_when_settled(folder, want, timeout=60):
    """How many calls have started in folder, once at least want have and SETTLE has passed without more."""
    deadline = time.monotonic() + timeout
    while calls_started(folder) < want:
        assert time.monotonic() < deadline, f"{want} calls never started, only {calls_started(folder)}"
        time.sleep(0.005)
    time.sleep(SETTLE)
    return calls_started(folder)


def check_bound(ex, fn, folder, ordered, chunksize, n=12, buffersize=3):
    """Consume a buffered map of fn(folder, i) over range(n) step by step, fn leaving a file in folder as it starts:
    after k results, exactly buffersize tasks (chunks) are ahead of the one being consumed, as the stdlib counts
    them: buffersize + ceil(k / chunksize) chunks started."""
    options = {} if ordered else {"ordered": False}
    results = ex.map(fn, itertools.repeat(str(folder)), range(n), chunksize=chunksize, buffersize=buffersize,
                     **options)
    seen = []
    for k in range(n + 1):
        if k in (0, 1, 2, chunksize + 1, n // 2, n):
            want = min(n, (buffersize + -(-k // chunksize)) * chunksize)
            assert started_when_settled(folder, want) == want, f"after {k} results"
        if k < n:
            seen.append(next(results))
    assert next(results, "end") == "end"
    assert seen == list(range(n)) if ordered else sorted(seen) == list(range(n))
