# cython: auto_pickle=False
"""What an R worker answers, as Python sees it: values, RError, RWarning.

An R worker (mizu/_r/rpackage/src/worker.cpp) answers a call that returned
without a warning with its value (status ok), and any other with its whole
outcome, ``list(value =, error =, warnings =)`` in the wire format, which
reads here as a dict (status raised). The value of a map batch is
``list(values, failures)``: one value per unit, NULL where the unit failed,
and ``list(unit index, error record)`` for each failed unit. An error
record is ``list(message =, call =, classes =, traceback =)``; a warning's
is ``list(message =, call =, classes =)``.
"""

from mizu._future cimport Cell
from mizu._messages cimport BATCH, OK, PeerCodec

import warnings
from concurrent.futures.process import _RemoteTraceback

__all__ = ["RCodec", "RError", "RWarning", "error_from_record"]

# The classes of the errors an R worker gives itself: for arguments R cannot
# hold, and for a value Python cannot read.
_WORKER_ERRORS = {"mizuValueError": ValueError, "mizuTypeError": TypeError}


class RError(Exception):
    """RError(message, call=None, classes=(), traceback=())

    An R error raised by the R code of a task.

    Its text is R's message, after the call R names for it, if any. The
    exception's ``__cause__`` holds R's traceback: the calls from the
    task's function to the one that failed, outermost first.

    Attributes
    ----------
    message : str
        The condition's message (``conditionMessage``).
    call : str or None
        The condition's call, deparsed (``conditionCall``).
    classes : tuple of str
        The condition's classes, most specific first, e.g.
        ``("simpleError", "error", "condition")``.
    traceback : tuple of str
        The calls of the frames, outermost first, one line each.
    """

    def __init__(self, message, call=None, classes=(), traceback=()):
        super().__init__(message if call is None else f"in {call}: {message}")
        self.message, self.call = message, call
        self.classes, self.traceback = tuple(classes), tuple(traceback)

    def __reduce__(self):
        return type(self), (self.message, self.call, self.classes, self.traceback)


class RWarning(UserWarning):
    """A warning R gave while running a task; its text is R's message, after R's call if any."""


# Public as mizu.RError and mizu.RWarning, the names their reprs and tracebacks show.
RError.__module__ = RWarning.__module__ = "mizu"


def _strings(value):
    """A character vector as the wire gives it (a str if of length one, else a list), as a tuple."""
    if value is None:
        return ()
    return (value,) if isinstance(value, str) else tuple(value)


def error_from_record(record):
    """error_from_record(record)

    The exception an R error record stands for: RError, its traceback as
    its cause; ValueError for the arguments of a task that R cannot hold,
    TypeError for a value of R's that Python cannot read.
    """
    classes = _strings(record["classes"])
    if classes and classes[0] in _WORKER_ERRORS:
        return _WORKER_ERRORS[classes[0]](record["message"])
    error = RError(record["message"], record["call"], classes, _strings(record["traceback"]))
    lines = "".join(f"  {line}\n" for line in error.traceback)
    error.__cause__ = _RemoteTraceback(f'\n"""\nR traceback, outermost call first:\n{lines}{error}\n"""')
    return error


cdef _warn(list records):
    """Show R's warnings as RWarning, each as R gives it: from the file "R"."""
    for record in records:
        call = record["call"]
        text = record["message"] if call is None else f"In {call}: {record['message']}"
        warnings.warn_explicit(RWarning(text), RWarning, "R", 0, module="R")


cdef class RCodec(PeerCodec):
    """How an R worker takes values (as PeerCodec) and what its answers mean."""

    def __cinit__(self):
        self.language = "R"

    cdef object outcome(self, Cell cell, int status, object value, bint* raised):
        if status != OK:
            raised[0] = True
            try:
                _warn(value["warnings"])
            except Warning as exc:   # warnings are errors (python -W error): the task fails with it
                return exc
            if value["error"] is not None:
                return error_from_record(value["error"])
            value = value["value"]
        raised[0] = False
        if cell.kind == BATCH:
            values, failures = value
            value = (values, [(index, error_from_record(record)) for index, record in failures])
        return value
