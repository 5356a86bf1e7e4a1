# The pool's workers and the state every part of the engine shares, for its other modules at C speed.

from libc.stdint cimport int64_t

from mizu._future cimport Cell
from mizu._observers cimport SETTLED, Event, ProgressBars, SentByValue, WorkFigures
from mizu._rings cimport _Ring
from mizu._sync cimport Fifo, Lock

cdef enum:
    MAX_DEPTH = 48     # the most tasks a worker has in flight (see Dispatcher.learn)


cdef class Worker:
    cdef readonly Py_ssize_t index
    cdef readonly _Ring ring          # None once the pool has let go of its segment
    cdef readonly object outbox
    cdef readonly Fifo in_flight
    cdef readonly dict registered
    cdef object last_fn                # the callable of the last task sent, and its id: registered[last_fn]
    cdef unsigned long long last_fn_id
    cdef public object process, watch, channel, failure
    cdef public Py_ssize_t started_tasks
    cdef unsigned long long head_seen # the id of its oldest task in flight when Dispatcher.rebalance last looked,
    cdef int64_t head_seen_at         # and when it first saw that task there (now_ns)
    cdef bint held                    # tasks were taken back from behind its oldest: none joins them until it ends
    cdef public unsigned long long popped_at_start   # the ring's count of popped messages when the process started
    cdef public bint up               # its process said it takes tasks (see Dispatcher.pick)
    cdef public bint starting         # its first process is starting, counted in Roster.coming
    cdef public bint ending           # the pool ends its process (a deadline, stop): it takes no task, then is replaced
    cdef int64_t kill_at              # while ending: when it gets SIGKILL unless it has exited (now_ns), or 0 once sent
    cdef double counted_until          # when its start stops counting against a paced pool's (see starting_now)

    cdef release(self)


cdef class Roster:
    cdef readonly object launcher, max_tasks, segment
    cdef readonly _Ring results
    cdef readonly list roster, workers
    cdef readonly bint on_demand
    cdef bint paced                     # on demand, starts a few at a time (see start_deferred)
    cdef readonly object idle, state_lock
    cdef readonly object kicked         # set to wake the manager thread (mizu._manager)
    cdef readonly Fifo pending
    cdef readonly Lock send_lock
    cdef readonly set feeding           # workers whose outbox is not empty
    cdef Py_ssize_t reserved            # pending's first tasks, running: for workers coming (see Dispatcher.dispatch)
    cdef bint short_told                # warned that the system gave no more processes (grow_no_more)
    cdef public object broken
    cdef public bint shutting_down, started
    cdef readonly object collected       # its Executor's class name once it was garbage collected, else None
    cdef public bint forced              # force_shutdown began: no retiring worker is replaced
    cdef Py_ssize_t cores               # the CPUs this process may use
    cdef Py_ssize_t coming              # workers started that are not up yet
    cdef Py_ssize_t deferred            # starts that submits asked for, put off (see adjust)
    cdef readonly int64_t task_timeout_ns   # a task's deadline unless submitted with its own, in ns; 0: none
    cdef readonly bint replace_dead     # a worker that dies fails its own task only, and is replaced
    cdef int64_t next_check_ns          # when a task's deadline may pass or an ending worker is due (Watchdog.check_deadlines)
    cdef int64_t checked_ns             # when the workers were last looked at for a death (Watchdog.check_workers)
    cdef readonly WorkFigures figures   # observers of the work (see tell)
    cdef readonly ProgressBars bars
    cdef SentByValue sent_by_value
    cdef object __weakref__

    cdef inline int tell(self, Event event, Py_ssize_t index, Cell cell, double seconds) except -1:
        """Tell the observers of the pool's work (insights' figures, maps' progress bars, the callables sent by value) what happened."""
        self.figures.notify(event, index, cell, seconds)
        if event != SETTLED:   # what a process keeps changes as processes start and end, not as tasks settle
            self.sent_by_value.notify(event, index, cell, seconds)
        return self.bars.notify(event, index, cell, seconds)

    cdef grow(self)
    cdef bint grow_while_possible(self) except -1
    cdef grow_no_more(self, str reason)
    cdef Py_ssize_t running(self)
    cdef bint leave_out(self, Worker worker) except -1
    cdef adjust(self, bint put_off=*)
    cdef str start_deferred(self)
    cdef Py_ssize_t starting_now(self)
    cdef launch(self, Worker worker)
    cdef bint wants_spare(self)
    cdef watch_exit(self, Worker worker)
    cdef outstanding(self)
    cdef Py_ssize_t requeue(self, Worker worker, Py_ssize_t keep) except -1
    cdef take_back(self, Worker worker)
    cdef void arm(self, int64_t at_ns) noexcept
    cdef list take_futures(self)
    cdef close_workers(self, kill=*)


cdef signal_process(object proc, str operation)
