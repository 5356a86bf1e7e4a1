# cython: auto_pickle=False
"""What follows the pool's work without being part of it: insights' figures, maps' progress bars, the callables sent by value.

The engine tells each observer what happens through one hook, notify, and
knows nothing of what they keep.
"""

from mizu._future cimport Cell

from time import monotonic as _monotonic

from mizu._errors import outline_repr, task_repr

__all__ = ["Observer", "ProgressBars", "SentByValue", "WorkFigures"]

_SLOWEST = 5          # the slowest tasks that insights() reports
_UNNAMED_KEPT = 64    # callables sent by value that a worker keeps registered (see SentByValue)


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


cdef class SentByValue(Observer):
    """SentByValue(max_workers)

    The lambdas and closures that each worker's process keeps, sent by
    value (by_value): at most _UNNAMED_KEPT, the newest, a new one taking
    the id of the oldest (the worker's registry lets go of it then), or a
    loop making closures would keep every one alive in both processes.
    A process keeps none when it starts; the pool keeps none once it lets
    go of its workers.
    """

    def __init__(self, Py_ssize_t max_workers):
        self.kept = [{} for _ in range(max_workers)]

    cdef unsigned long long id_for(self, Py_ssize_t index, object fn, dict registered,
                                   unsigned long long* last_id) except 0:
        """The id under which worker index's process is to keep fn, about to be sent to it by value.

        A new one, one more than *last_id (which it becomes), while the
        process keeps fewer than _UNNAMED_KEPT; else the id of the oldest,
        which is dropped from registered (the callables the process knows,
        by id). Counted as sent before it is: should fn fail to pickle, the
        process still keeps the oldest under that id, unknown to the pool
        (sent by value again if it is sent again), and fn goes under that
        id when it is next sent.
        """
        cdef dict kept = self.kept[index]
        fn_id = kept.pop(fn, None)
        if fn_id is None:
            if len(kept) >= _UNNAMED_KEPT:
                evicted = next(iter(kept))
                fn_id = kept.pop(evicted)
                registered.pop(evicted, None)
            else:
                last_id[0] += 1
                fn_id = last_id[0]
        kept[fn] = fn_id
        return fn_id

    cdef int notify(self, Event event, Py_ssize_t index, Cell cell, double seconds) except -1:
        if event == LAUNCHED or event == REPLACED:
            self.kept[index].clear()
        elif event == RELEASED:
            for kept in self.kept:
                kept.clear()
        return 0
