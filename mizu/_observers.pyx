# cython: auto_pickle=False
"""What follows the pool's work without being part of it: insights' figures and maps' progress bars.

The engine tells each observer what happens through one hook, notify, and
knows nothing of what they keep.
"""

from mizu._future cimport Cell

from time import monotonic as _monotonic

from mizu._errors import outline_repr, task_repr

__all__ = ["Observer", "ProgressBars", "WorkFigures"]

_SLOWEST = 5          # the slowest tasks that insights() reports


cdef class Observer:
    """What follows the pool's work: told of each Event, with the worker's index, the task's cell and its seconds."""

    cdef int notify(self, Event event, Py_ssize_t index, Cell cell, double seconds) except -1:
        return 0


cdef class WorkFigures(Observer):
    """WorkFigures(roster)

    Each worker's calls, busy seconds and start-up, and the slowest tasks:
    what Pool.insights reports.
    """

    def __init__(self, list roster):
        self.roster = roster
        self.launched_at.resize(len(roster))
        self.up_at.resize(len(roster))
        self.busy.resize(len(roster))
        self.calls.resize(len(roster))
        self.slowest = []

    cdef int notify(self, Event event, Py_ssize_t index, Cell cell, double seconds) except -1:
        if event == SETTLED:
            self.calls[index] += cell.calls
            self.busy[index] += seconds
            if seconds > self.slow_floor:
                self.note_slow(index, cell, seconds)
        elif event == UP:
            if not self.up_at[index]:
                self.up_at[index] = _monotonic()
        elif event == LAUNCHED:
            self.launched_at[index] = _monotonic()
        elif event == RELEASED:
            self.final = self.workers()
            self.stopped_at = _monotonic()
        elif event == ABANDONED:
            self.roster = []
        return 0

    cdef note_slow(self, Py_ssize_t index, Cell cell, double seconds):
        """Count the task of cell among the slowest (a new list: insights() may read the old one meanwhile).

        Its arguments are described by outline_repr, in bounded time; a
        callable whose name cannot be read is described by its type.
        """
        try:
            text = task_repr(cell.kind, cell.fn, cell.first, cell.second, cell.calls, outline_repr)
        except Exception:
            text = f"a task of {outline_repr(cell.fn)}"
        slowest = sorted(self.slowest + [(seconds, index, text)], key=lambda entry: -entry[0])[:_SLOWEST]
        if len(slowest) == _SLOWEST:
            self.slow_floor = slowest[-1][0]
        self.slowest = slowest

    def workers(self):
        """(index, pid or None, calls, busy, up_at, launched_at) of each worker, as of now or of its release."""
        if self.final is not None:
            return self.final
        return [(worker.index, None if worker.process is None else worker.process.pid, self.calls[worker.index],
                 self.busy[worker.index], self.up_at[worker.index], self.launched_at[worker.index])
                for worker in list(self.roster)]

    def insights(self):
        """Insights: each worker's calls, busy and idle time, and the slowest tasks so far."""
        # Imported here: dataclasses costs milliseconds that a pool not asked for insights need not pay.
        from mizu._insights import Insights, SlowTask, WorkerInsights

        end = _monotonic() if self.stopped_at is None else self.stopped_at
        workers = tuple(
            WorkerInsights(index=index, pid=pid, calls=calls, busy=busy,
                           idle=max(0.0, end - up_at - busy) if up_at else 0.0,
                           startup=up_at - launched_at if up_at else None)
            for index, pid, calls, busy, up_at, launched_at in self.workers())
        return Insights(workers=workers,
                        slowest=tuple(SlowTask(seconds, index, task) for seconds, index, task in self.slowest))


cdef class ProgressBars(Observer):
    """The progress bars of maps, each counting the calls of its tasks as they settle."""

    def __init__(self):
        self.counters = {}

    cdef int notify(self, Event event, Py_ssize_t index, Cell cell, double seconds) except -1:
        if event == SETTLED:
            if self.counters:
                counter = self.counters.pop(cell, None)
                if counter is not None:
                    counter.add(cell.calls)
        elif event == RELEASED:
            # The bars of maps whose tasks never settled (cancelled at
            # shutdown, unpicklable, lost with a broken pool) end here.
            counters, self.counters = list(self.counters.values()), {}
            for counter in set(counters):
                counter.close()
        elif event == ABANDONED:
            self.counters.clear()
        return 0
