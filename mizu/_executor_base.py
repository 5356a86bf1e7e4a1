"""What every Executor over mizu's pool shares, whatever its workers: the checks of their common arguments, the pool.

Each public Executor (mizu._executor's for Python workers, mizu._r.executor's
for R workers) checks its arguments, with `checked_workers` and
`check_max_tasks` for those they have in common, makes the launcher of its
kind of worker (mizu._launchers.Launcher) and starts its pool with
`ExecutorBase._start_pool`; `insights` and `shutdown` are the pool's.
"""

import weakref

from mizu._pool import Pool

__all__ = ["ExecutorBase", "check_max_tasks", "checked_workers"]


def checked_workers(max_workers, default):
    """max_workers as the stdlib checks it; default() if it is None."""
    if max_workers is None:
        return default()
    if max_workers <= 0:
        raise ValueError("max_workers must be greater than 0")
    return max_workers


def check_max_tasks(max_tasks_per_child):
    """Raise as the stdlib does unless max_tasks_per_child is None or an int >= 1."""
    if max_tasks_per_child is not None:
        if not isinstance(max_tasks_per_child, int):
            raise TypeError("max_tasks_per_child must be an integer")
        if max_tasks_per_child <= 0:
            raise ValueError("max_tasks_per_child must be >= 1")


class ExecutorBase:
    """The part of an Executor over mizu's pool (mizu._pool.Pool) that does not depend on its kind of worker."""

    def _start_pool(self, max_workers, launcher, max_tasks_per_child):
        self._max_workers = max_workers
        self._pool = Pool(max_workers, launcher, max_tasks_per_child)
        # Collecting the executor shuts the pool down; work already submitted still completes, unless
        # max_tasks_per_child retires every worker first.
        weakref.finalize(self, Pool.collect, self._pool, type(self).__name__)

    def insights(self):
        """insights()

        What the pool has done so far, for a map that is slower than it
        should be: each worker's calls, its time busy running tasks and idle
        beside them, its start-up, and the five slowest tasks. Not in the
        stdlib's Executor.

        Returns
        -------
        Insights
            A snapshot; ``print()`` shows it as a table. After shutdown, the
            workers' figures as of their end.
        """
        return self._pool.insights()

    def shutdown(self, wait=True, *, cancel_futures=False):
        """shutdown(wait=True, *, cancel_futures=False)

        Free the pool's processes and memory once pending futures are done.

        Parameters
        ----------
        wait : bool
            Block until every pending future is done and the workers exited.
        cancel_futures : bool
            Cancel the futures that no worker has started.
        """
        self._pool.shutdown(wait, cancel_futures)
