"""The child programs of several layers' tests: tasks that workers of every kind of pool run, and what client
programs share.

Each layer's own child programs are a module of its folder (executor_children.py beside the executor's tests,
and so on); helpers.IMPORT_PATH says how every process finds them by name.
"""

import os
import time


def pid():
    return os.getpid()


def pid_after(_):
    """This process's pid, whatever the argument: a map's call."""
    return os.getpid()


def nap_then_pid(seconds):
    time.sleep(seconds)
    return os.getpid()


def double(x):
    return 2 * x


def add(a, b=0, *, c=0):
    return a + b + c


def nap(seconds):
    time.sleep(seconds)
    return seconds


def die(code=3):
    os._exit(code)


def echo_value(value):
    return value


def fail_at(x, bad=7):
    """x, unless x is bad: then it raises ValueError."""
    if x == bad:
        raise ValueError(f"{x} is bad")
    return x


_initialized = []


def remember(value):
    _initialized.append(value)


def initialized():
    return list(_initialized)


def announce(path):
    """Write this process's pid to path at once: a test that sees the file knows who runs the task."""
    part = f"{path}.{os.getpid()}"
    with open(part, "w") as f:
        f.write(str(os.getpid()))
    os.replace(part, path)


def announce_then_nap(path, seconds):
    announce(path)
    time.sleep(seconds)
    return seconds


def wait_for_file(path, seconds=120):
    """Sleep until path exists (a gate the test opens); return this worker's pid."""
    deadline = time.monotonic() + seconds
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear within {seconds} s")
        time.sleep(0.01)
    return os.getpid()


def arena_pattern(tag, n):
    """The bytes block `tag` of n bytes holds: another block written over it, or shifted, differs."""
    import numpy as np

    period = ((np.arange(251) * 7 + tag * 131) % 251).astype(np.uint8)
    return np.resize(period, n)


def in_arena(array):
    """Whether array's memory lies in an arena block (shared memory), not in this process's own."""
    from mizu import arena_block

    return arena_block(array) is not None


# -- what client programs share ----------------------------------------------------------------------------------


def report(**fields):
    """Print fields as a line of JSON: how a client program tells its test what it saw."""
    import json

    print(json.dumps(fields), flush=True)


def end_tasks_given_an_array(ex, hold, total, how, directory, rounds, deadline):
    """In the pool ex, `rounds` tasks hold(path, x, 60), x a 24 MB array, each ended once it has started (created
    path): past `deadline` seconds, or by stop(). Then one more task, total(x). Reports the outcomes (exception
    names) and the total."""
    import numpy as np

    x = np.ones(3 << 20)
    outcomes = []
    with ex:
        for i in range(rounds):
            path = os.path.join(directory, f"started-{i}")
            if how == "deadline":
                future = ex.options(task_timeout=deadline).submit(hold, path, x, 60)
            else:
                future = ex.submit(hold, path, x, 60)
                while not os.path.exists(path) and not future.done():
                    time.sleep(0.01)
                ex.stop(future)
            try:
                future.result(timeout=60)
                outcomes.append("ok")
            except BaseException as exc:
                outcomes.append(type(exc).__name__)
        after = ex.submit(total, x).result(timeout=60)
    report(outcomes=outcomes, after=after)


def block_until_interrupted(ex, fn, where, gate, started=None):
    """Submit fn(gate) four times to the pool ex, call started(ex) if given, then block in result(), map or
    shutdown(wait=True) (where) until the tasks end or Ctrl-C; print which."""
    futures = [ex.submit(fn, gate) for _ in range(4)]
    if started is not None:
        started(ex)
    try:
        # Inside the try: a Ctrl-C the test sends once it has read this line
        # (and seen the client block) is the one caught below.
        print("waiting", flush=True)
        if where == "result":
            futures[-1].result()
        elif where == "map":
            for _ in ex.map(fn, [gate] * 4):
                pass
        else:
            ex.shutdown(wait=True)
        print("finished", flush=True)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
