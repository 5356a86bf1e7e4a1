"""What a broken pool says: the stdlib's BrokenProcessPool texts, a dead worker's obituary, short reprs of calls."""

import errno
import reprlib
import signal
import traceback
from concurrent.futures.process import BrokenProcessPool, _RemoteTraceback

from mizu._messages import CALL, DECODING, FLAT, INITIALIZER, SINGLE, STARTING
from mizu._r.texts import function_label

BROKEN = "A child process terminated abruptly, the process pool is not usable anymore"
BROKEN_FUTURE = "A process in the process pool was terminated abruptly while the future was running or pending."
# {executor}: the collected Executor's class name.
COLLECTED = ("The {executor} was garbage collected with work pending after its last worker process exited upon "
             "reaching max_tasks_per_child")
COLLECTED_FUTURE = COLLECTED + "; the pending work can never be run."
FORCED = "A worker process exited while the pool was being forcefully shut down"
FORCED_FUTURE = f"{FORCED}; work that was still enqueued will not be run."
NOT_REPLACED = ("A replacement worker process could not be started, leaving the pool without workers to run the "
                "remaining work")
NOT_REPLACED_FUTURE = f"{NOT_REPLACED}."
NOT_STARTED = "The pool could not start its workers"
NOT_STARTED_FUTURE = "The pool could not start a worker to run the future."
TERMINATED = "The process pool was terminated, it is not usable anymore"
TERMINATED_FUTURE = "The process pool was terminated while the future was running or pending."
# {error}: what starting a process or a thread raised.
SHORT_OF_PROCESSES = ("the system gives no more processes ({error}): ask for fewer workers (max_workers), or raise "
                      "the limit on processes (`ulimit -u`, or the pids.max of the container's cgroup)")

_TASK_REPR = 200      # characters of a task's call in an error message


class _BriefRepr(reprlib.Repr):
    """reprlib's short reprs, also for bytes: a task's argument may be a large buffer."""

    def repr_bytes(self, obj, level):
        text = repr(obj[:self.maxstring])
        return text if len(obj) <= self.maxstring else f"{text[:-1]}...{text[-1]} ({len(obj)} bytes)"

    repr_bytearray = repr_bytes


brief = _BriefRepr()
brief.maxstring, brief.maxother = 60, 100


_OUTLINED = (type(None), bool, float, complex)
_SHORT_INT_BITS = 64


def outline_repr(value):
    """A short repr of value made in bounded time, whatever value is, that never raises.

    Scalars, and str and bytes (cut short), show as brief.repr shows them;
    anything else only by its type, so that no user's __repr__ runs and no
    container is walked.
    """
    kind = type(value)
    try:
        if kind in _OUTLINED or (kind is int and value.bit_length() <= _SHORT_INT_BITS):
            return repr(value)
        if kind is int:
            return f"<int of {value.bit_length()} bits>"
        if kind in (str, bytes, bytearray):
            return brief.repr(value)
    except Exception:
        pass
    return f"<{getattr(kind, '__qualname__', 'object')}>"


def call_repr(fn, args, kwargs, arg_repr=brief.repr):
    """fn(*args, **kwargs) as a short string: the function's qualified name, the arguments' reprs by arg_repr.

    An R function (a str) shows as mizu._r.texts.function_label makes it.
    """
    if isinstance(fn, str):
        label = function_label(fn, brief.repr)
    else:
        module, name = getattr(fn, "__module__", None), getattr(fn, "__qualname__", None)
        label = f"{module}.{name}" if module and name else brief.repr(fn)
    parts = [arg_repr(arg) for arg in args]
    if kwargs:   # a dict, or None for none
        parts.extend(f"{key}={arg_repr(value)}" for key, value in kwargs.items())
    text = f"{label}({', '.join(parts)})"
    return text if len(text) <= _TASK_REPR else text[:_TASK_REPR - 3] + "..."


def task_repr(kind, fn, first, second, calls, arg_repr=brief.repr):
    """The call a task stands for, or the first of its map batch: its parts as its message has them (mizu._messages).

    Each argument shows as arg_repr makes it.
    """
    if kind == CALL:
        return call_repr(fn, first, second, arg_repr)
    units, shape = first, second
    args = units[0] if shape & FLAT else units[0][0]
    return (f"a map batch of {calls} call{'s' if calls != 1 else ''}, the first "
            f"{call_repr(fn, (args,) if shape & SINGLE else args, {}, arg_repr)}")


def error_of(tb):
    """The error an R worker's traceback text ends with, all its lines from its "RError: " line on; else its last line."""
    lines = tb.rstrip("\n").splitlines()
    start = max((i for i, line in enumerate(lines) if line.startswith("RError: ")), default=len(lines) - 1)
    return "\n".join(lines[start:])


def short_of_processes(exc):
    """Whether exc is what starting a process or a thread raises once the system gives no more of them."""
    return (isinstance(exc, OSError) and exc.errno in (errno.EAGAIN, errno.ENOMEM)
            or isinstance(exc, RuntimeError) and str(exc) == "can't start new thread")


class WorkerDied(BrokenProcessPool):
    """WorkerDied(message, pid, exitcode, signal, task)

    The worker running a task died (a crash, ``os._exit``, the OOM killer,
    a kill) in a pool made with ``worker_death="replace"``: only that task
    fails, and the pool replaces the worker. A subclass of
    `BrokenProcessPool`, so that handlers of the stdlib's error catch it.

    Attributes
    ----------
    pid : int
        The process that died.
    exitcode : int or None
        Its exit status, if it exited; None if a signal ended it.
    signal : int or None
        The signal that ended it, if one did.
    task : str or None
        The call it was running, shortened.
    """

    def __init__(self, message, pid, exitcode, signal, task):
        super().__init__(message)
        self.pid, self.exitcode, self.signal, self.task = pid, exitcode, signal, task

    def __reduce__(self):
        return type(self), (self.args[0], self.pid, self.exitcode, self.signal, self.task)


def obituary(process, failure, took_a_task, task, starting_hint, setup_name="initializer"):
    """A sentence on a worker that died without retiring: its pid, exit code or signal, its task, its error.

    failure: (stage, traceback, error) if it could not start a thread, or
    its initializer (setup_name: what its launcher calls it) or the
    unpickling of a task raised (a Python
    worker's error is its exception's own lines; an R worker sends no
    error, which its traceback's text ends with), else None.
    took_a_task: whether it took one from its ring. task: task_repr() of the
    task it was running, or None. starting_hint: why a worker of its
    launcher may die before its first task, or "".
    """
    code = process.exitcode
    stage, tb, *error = failure if failure is not None else (None, None)
    error = error[0] if error else None if tb is None else error_of(tb)
    if stage == INITIALIZER:
        # A full stop after it, unless it has one, or lines of its own (an R parse error's caret).
        end = "" if "\n" in error or error.endswith(".") else "."
        return f"Process {process.pid} ({process.name}) stopped before its first task: its {setup_name} raised " \
               f"{error}{end}"
    if stage == STARTING:
        return (f"Process {process.pid} ({process.name}) stopped before its first task: "
                f"{SHORT_OF_PROCESSES.format(error=error)}.")
    # The stdlib's words (3.15), and the signal's name.
    text = f"Process {process.pid} ({process.name}) terminated abruptly with exit code {code}"
    if code is not None and code < 0:
        try:
            text += f" ({signal.Signals(-code).name})"
        except ValueError:
            pass
    if not took_a_task:
        text = f"{text} while starting, before it took a task"
        if starting_hint:
            text += f" ({starting_hint})"
        return text + "."
    if task is not None:
        text = f"{text} while running {task}"
    if stage == DECODING:
        text = f"{text}: unpickling the task raised {tb.splitlines()[-1]}"
    return text + "."


_BY_VALUE_HINT = ("mizu pickles functions by name, as the stdlib's pool does, and a worker cannot find a lambda or "
                  "a nested function by its name: make the pool with by_value=True (it needs cloudpickle) to send "
                  "them by value, or define the function at the top level of a module.")


def fail_unpicklable(future, exc):
    """Fail the future of a task that could not be pickled as the stdlib's queue feeder does: exc, remote traceback.

    An error about a lambda or a nested function gets a note (3.11+) on by_value.
    """
    text = str(exc)
    if hasattr(exc, "add_note") and ("<lambda>" in text or "<locals>" in text or "local object" in text):
        exc.add_note(_BY_VALUE_HINT)
    tb = traceback.format_exception(type(exc), exc, exc.__traceback__)
    exc.__cause__ = _RemoteTraceback('\n"""\n{}"""'.format("".join(tb)))
    future.set_exception(exc)
