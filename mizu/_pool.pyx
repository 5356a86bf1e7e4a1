# cython: auto_pickle=False
"""The pool engine: starts and stops workers, dispatches tasks, collects results, breaks, shuts down.

Data flow (one shared segment per pool; the rings are in it):

  caller threads                                     workers 0..N-1, started by the
                                                     pool's launcher (mizu._launchers):
  submit() / map()                                   Python processes (mizu._worker),
    | a Future, its task in its Cell, joins          or Rscript running the R package's
    | `pending`                                      worker (mizu/_r/rpackage/src/worker.cpp),
    |                                                each driving the one worker loop
    |                                                (csrc/worker_loop.hpp)
    v
  dispatch()  [send_lock]                                      (mizu._dispatch)
    | to the worker with the fewest tasks in flight,
    | at most `depth` each: its `in_flight` <- the future,
    | (once nothing is pending and a worker idles, the
    | tasks queued behind a running one are withdrawn
    | and sent again: rebalance)
    | its task ring <- the task, encoded by the
    | launcher's codec (pickle or wire for Python,
    | wire only for R) ---------------------- SpscRing per worker ---->  pop a task, run it
    | A full ring, or a message longer than a slot:                              |
    | the message, or the pieces of a long one,                                  |
    | waits in the worker's `outbox` (the worker is                              |
    | then in `feeding`); each dispatch pushes what                              |
    | room has come, and so does each collecting slice.                          v
    | submit() then, if tasks still wait and nobody                        push its result
    | collects, collects what is ready (so in-flight room                        |
    | frees) and dispatches again.                                               |
    v                                                                            |
  Future.result() / exception()  [recv_lock]   <------- one MpmcRing shared by all
    collect_until(): the caller pops the result ring itself (spinning while a
    core is to spare beside the busy workers, else sleeping in the waiter),
    settles futures (settle: the one place a future is done, through the
    codec, running callbacks), dispatches whatever waits, and checks the
    workers every 20 ms (mizu._failures).                      (mizu._collect)

  manager thread ("mizu-manager", started by the first submit)  [recv_lock, taken only if free]
    Collects only while no caller does: while a callback, wait() or
    as_completed() waits on a future not done yet (`watched`), it sleeps in
    the result ring's waiter and collects as results come, running the
    callbacks (waking within 2 ms while tasks may be taken back for a
    worker that idles; but naps while a thread submitting a backlog collects);
    otherwise it wakes every 2 ms (0.2 ms while an outbox waits, 100 ms when
    nothing is outstanding) to collect what is ready and check the workers.
    Once the pool is shutting down and nothing is outstanding, it closes the
    task rings (each worker exits when its ring is closed and empty), joins
    the workers, closes the result ring and lets go of the segment.
                                                               (mizu._manager)

Beside its ring, each worker shares a Unix socket pair with the client: the
descriptors of shared-memory segments that a message's arrays live in cross
it, in both directions, just before the message enters a ring (see
mizu._messages). A worker that reaches max_tasks_per_child says it retires;
the pool joins it and launches its successor on the same ring. With fork every
worker starts at the first submit, whose task goes to the first worker up
while the others are forked (Manager.start); with spawn and forkserver one starts
whenever a submit finds none idle, at most one per CPU at a time (the others
put off until one is up; Roster.start_deferred). Tasks wait in `pending` until a
worker's first message says it is up (but for one task sent ahead to a
successor when no worker that is up has room), and go one at a time while
others are still starting or their starts are put off (Dispatcher.pick). The
roster and the starts are mizu._roster's.

A worker that died without retiring breaks the pool as the stdlib's does
(mizu._failures), unless the pool replaces dead workers; a task past its
deadline, or stopped, has its worker ended and replaced, the tasks queued
behind it withdrawn from its ring and sent again (mizu._control). A child
forked from the client lets go of its parent's pools without touching them
(mizu._forked).

The engine is one class per concept, each the base of the next, so that a
call from one to another is a C call: Roster (the workers and the state
they share), Watchdog (deaths, breaking), Collector (collecting,
settling), Controller (deadlines, stopping a task, replacing a worker
ended or dead), Dispatcher (sending), Manager (the manager thread, start and
shutdown), and Pool, which puts them together. What only follows the work
(insights' figures, maps' progress bars, the lambdas and closures each
worker's process keeps, sent by value) is told of it through one hook,
Roster.tell, and kept in mizu._observers; the dispatcher asks the last for
the id to send such a callable under (SentByValue.id_for).
"""

from mizu._manager cimport Manager

from mizu import _forked
from mizu._collect import Future
# Called by a worker as it ends, for the pools its tasks started (mizu._worker).
from mizu._manager import _python_exit

__all__ = ["Future", "Pool"]


cdef class Pool(Manager):
    """Pool(max_workers, launcher, max_tasks)

    The state shared by the Executor, its futures and the manager thread.

    launcher starts each worker (mizu._launchers), and its codec says how
    that kind of worker takes values (mizu._messages); max_tasks: the tasks
    a worker runs before it retires, or None.
    """

    def __init__(self, max_workers, launcher, max_tasks):
        super().__init__(max_workers, launcher, max_tasks)
        _forked.pools.add(self)
