"""A map's progress bar: tqdm's when tqdm is installed, else a plain line on stderr; it counts calls, not chunks."""

import logging
import sys
import threading
from collections.abc import Mapping
from time import monotonic as _monotonic

__all__ = ["TICK_SECONDS", "Progress", "total_of", "wanted"]

_TTY_INTERVAL = 0.2     # seconds between redraws of the plain line on a terminal
_LOG_INTERVAL = 10.0    # and between lines written to a file or a pipe
_DELAY = 0.1            # seconds a map runs before its bar appears, unless its options say
TICK_SECONDS = 0.05    # seconds between the ticks of a thread waiting on a map's result


def wanted(option):
    """Whether map's progress argument asks for a bar (False and None do not)."""
    return option is not False and option is not None


def total_of(iterables):
    """The calls a map over iterables makes, if every iterable has a length; else None."""
    try:
        return min((len(iterable) for iterable in iterables), default=0)
    except TypeError:
        return None


class _Line:
    """The bar without tqdm: ``desc: done/total calls (percent), seconds`` on stderr, redrawn now and then."""

    def __init__(self, total, desc, done, started):
        self.total, self.desc = total, desc
        self.done = done
        self.file = sys.stderr
        self.tty = self.file is not None and hasattr(self.file, "isatty") and self.file.isatty()
        self.started = started
        self.shown = None
        self.write()

    def write(self):
        if self.file is None:
            return
        self.shown = now = _monotonic()
        count = f"{self.done}" if self.total is None else f"{self.done}/{self.total}"
        share = f" ({100 * self.done // self.total}%)" if self.total else ""
        text = f"{self.desc + ': ' if self.desc else ''}{count} calls{share}, {now - self.started:.1f} s"
        self.file.write(f"\r{text}" if self.tty else f"{text}\n")
        self.file.flush()

    def update(self, n):
        self.done += n
        if _monotonic() - self.shown >= (_TTY_INTERVAL if self.tty else _LOG_INTERVAL):
            self.write()

    def close(self):
        if self.shown is not None and self.file is not None:
            self.write()
            if self.tty:
                self.file.write("\n")
                self.file.flush()


def _failed():
    logging.getLogger("mizu").exception("A map's progress bar failed; the map goes on without it")


class Progress:
    """Progress(option, total)

    The bar that map's ``progress`` argument asks for, counting `total`
    calls (None: not known). The pool calls `add` as it settles each of the
    map's tasks, in whichever thread collects the result; it only counts
    (and closes the bar at the total). The thread iterating over the map
    calls `tick` before each task's result and every TICK_SECONDS while
    it waits: that makes the bar and hands it the count, so the bar's writes
    happen in that thread, not while the pool collects. A lock keeps counts,
    ticks and closing in one order.

    As tqdm's ``delay`` option does, the bar appears only once the map has
    run for ``delay`` seconds (an option of its own here, _DELAY unless
    given), made then with the calls done so far and the time since the
    map began: a map too short to watch pays nothing for a bar, not even
    making one. It closes when the count reaches the total, or at `close`,
    whichever comes first. A bar that fails (its file closed, say) is logged
    and dropped: the map goes on.
    """

    def __init__(self, option, total):
        if option is True:
            options = {}
        elif isinstance(option, Mapping):
            options = dict(option)
        else:
            raise TypeError(f"progress must be True, False or a dict of tqdm's options, not {type(option).__name__}")
        delay = options.pop("delay", _DELAY)
        if not isinstance(delay, (int, float)) or isinstance(delay, bool) or not delay >= 0:
            raise ValueError(f"progress's delay must be a number of seconds >= 0, not {delay!r}")
        options.setdefault("total", total)
        self.options, self.total, self.delay = options, options["total"], delay
        self.started = _monotonic()
        self.count = self.unshown = 0
        self.bar = None
        self.closed = False
        self.lock = threading.Lock()
        if self.total == 0:
            self.closed = True
        elif delay == 0:
            self.show()

    def show(self):
        """Make the bar, starting from the calls counted so far and the time since the map began."""
        self.unshown = 0
        try:
            from tqdm.auto import tqdm  # type: ignore[import-untyped, import-not-found, unused-ignore]
        except ImportError:
            tqdm = None
        try:
            if tqdm is None:
                self.bar = _Line(self.total, self.options.get("desc"), self.count, self.started)
            else:
                self.bar = tqdm(**{"unit": "call", **self.options, "initial": self.count})
                # tqdm's clock starts when the bar is made; the map's started earlier.
                self.bar.start_t -= _monotonic() - self.started
        except Exception:
            self.bar, self.closed = None, True
            _failed()

    def add(self, calls):
        with self.lock:
            if self.closed:
                return
            self.count += calls
            self.unshown += calls
            if self.total is not None and self.count >= self.total:
                self.end()

    def tick(self):
        with self.lock:
            if self.closed:
                return
            if self.bar is None:
                if _monotonic() - self.started >= self.delay:
                    self.show()
            elif self.unshown:
                try:
                    self.bar.update(self.unshown)
                    self.unshown = 0
                except Exception:
                    self.bar, self.closed = None, True
                    _failed()

    def end(self):
        self.closed = True
        bar, self.bar = self.bar, None
        if bar is None and self.count and _monotonic() - self.started >= self.delay:
            self.show()
            bar, self.bar = self.bar, None
        if bar is not None:
            try:
                if self.unshown:
                    bar.update(self.unshown)
                bar.close()
            except Exception:
                _failed()

    def close(self):
        with self.lock:
            # Once: a bar its count closed is not made and drawn again.
            if not self.closed:
                self.end()
