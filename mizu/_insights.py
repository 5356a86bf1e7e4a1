"""What a pool reports of its work when asked: calls done, time busy and idle per worker, the slowest tasks."""

from dataclasses import dataclass

__all__ = ["Insights", "SlowTask", "WorkerInsights"]


@dataclass(frozen=True)
class WorkerInsights:
    """One worker's share of a pool's work.

    Attributes
    ----------
    index : int
        The worker's place in the pool, from 0.
    pid : int or None
        The process serving it now (its last, once the pool has shut
        down); None before one has started.
    calls : int
        Calls its tasks made: a map task of 100 calls counts 100.
    busy : float
        Seconds its tasks ran, timed in the worker, counted when each ends:
        a task still running counts as idle time until it does.
    idle : float
        Seconds since it first took tasks (until the pool shut down) that
        it spent not running one: waiting for work, passing arguments and
        results, and starting the successors of processes that retired
        (``max_tasks_per_child``).
    startup : float or None
        Seconds from starting its first process to that process taking
        tasks; None while it is starting, or before it has started (with
        spawn and forkserver a worker starts when a task needs it).
    """

    index: int
    pid: int | None
    calls: int
    busy: float
    idle: float
    startup: float | None


@dataclass(frozen=True)
class SlowTask:
    """One of the longest tasks a pool has run.

    Attributes
    ----------
    seconds : float
        How long it ran, timed in the worker.
    worker : int
        The index of the worker that ran it.
    task : str
        The call, in brief (``module.fn(arg, ...)``); for a task of map, its
        number of calls and the first of them. Numbers and the start of
        strings and bytes show as their repr (so they are visible to whoever
        reads the insights), other arguments only by their type.
    """

    seconds: float
    worker: int
    task: str


@dataclass(frozen=True)
class Insights:
    """Insights(workers, slowest)

    What a pool has done so far, from `ProcessPoolExecutor.insights`;
    ``print(insights)`` shows it as a table.

    Attributes
    ----------
    workers : tuple of WorkerInsights
        Each worker's calls and time, by index.
    slowest : tuple of SlowTask
        The longest tasks so far, longest first (at most five).
    """

    workers: tuple[WorkerInsights, ...]
    slowest: tuple[SlowTask, ...]

    def __str__(self):
        lines = [f"{'worker':>6} {'pid':>8} {'calls':>10} {'busy s':>10} {'idle s':>10} {'busy':>6} {'start s':>8}"]
        for w in self.workers:
            share = w.busy / (w.busy + w.idle) if w.busy + w.idle > 0 else 0.0
            startup = "-" if w.startup is None else f"{w.startup:.3f}"
            lines.append(f"{w.index:>6} {w.pid if w.pid is not None else '-':>8} {w.calls:>10} {w.busy:>10.3f} "
                         f"{w.idle:>10.3f} {share:>6.0%} {startup:>8}")
        if self.slowest:
            lines.append("slowest tasks:")
            lines.extend(f"  {task.seconds:.6f} s on worker {task.worker}: {task.task}" for task in self.slowest)
        return "\n".join(lines)
