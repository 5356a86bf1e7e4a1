# The pool engine's classes, for the Executor and map to call at C speed.

from libc.stdint cimport int64_t

from mizu._core cimport _Ring
from mizu._future cimport Cell
from mizu._messages cimport Codec, Reassembler
from mizu._sync cimport Fifo, Lock
from mizu.includes.wire cimport Writer


cdef class Worker:
    cdef readonly Py_ssize_t index
    cdef readonly _Ring ring          # None once the pool has let go of its segment
    cdef readonly object outbox
    cdef readonly Fifo in_flight
    cdef readonly dict registered
    cdef readonly dict unnamed         # of registered, the callables sent by value, oldest first
    cdef object last_fn                # the callable of the last task sent, and its id: registered[last_fn]
    cdef unsigned long long last_fn_id
    cdef public object process, watch, channel, failure
    cdef public Py_ssize_t started_tasks
    cdef unsigned long long head_seen # the id of its oldest task in flight when Pool.rebalance last looked,
    cdef int64_t head_seen_at         # and when it first saw that task there (now_ns)
    cdef bint held                    # tasks were taken back from behind its oldest: none joins them until it ends
    cdef public unsigned long long popped_at_start   # the ring's count of popped messages when the process started
    cdef public bint up               # its process said it takes tasks (see Pool.pick)
    cdef public bint starting         # its first process is starting, counted in Pool.coming
    # For Pool.insights: when its first process started and said it takes
    # tasks (monotonic seconds, 0 until then), the calls its tasks made and
    # the seconds they ran, over all its processes.
    cdef readonly double launched_at, up_at, busy
    cdef double counted_until          # when its start stops counting against a paced pool's (see starting_now)
    cdef readonly Py_ssize_t calls_done

    cdef release(self)


cdef class Pool:
    cdef readonly object launcher, max_tasks, segment
    cdef readonly _Ring results
    cdef readonly list roster, workers
    cdef readonly Py_ssize_t collecting   # callers collecting results in wait_until
    cdef readonly bint on_demand
    cdef bint paced                     # on demand, starts a few at a time (see start_deferred)
    cdef readonly object idle, state_lock, kicked, ref
    cdef readonly Codec codec
    cdef readonly Reassembler reassembler
    cdef readonly Fifo pending
    cdef readonly Lock send_lock, recv_lock
    cdef readonly set feeding
    cdef bint unbalanced                # a worker may idle while tasks wait behind a running one (see rebalance)
    cdef readonly unsigned long recv_owner
    cdef unsigned long send_owner       # the thread in dispatch, holding send_lock
    cdef bint launching                 # start() is starting the workers
    cdef bint short_told                # warned that the system gave no more processes (grow_no_more)
    cdef public object broken, manager
    cdef public bint shutting_down, started
    cdef readonly object collected       # its Executor's class name once it was garbage collected, else None
    cdef public bint forced              # force_shutdown began: no retiring worker is replaced
    cdef readonly Py_ssize_t watched   # futures observed (see observe) that have not settled
    cdef size_t backlogged             # submits that left tasks waiting in `pending`, so far
    cdef public double task_seconds
    cdef public Py_ssize_t depth
    cdef Py_ssize_t cores               # the CPUs this process may use
    cdef Py_ssize_t coming              # workers started that are not up yet
    cdef Py_ssize_t deferred            # starts that submits asked for, put off (see adjust)
    cdef Py_ssize_t reserved            # pending's first tasks, running: for workers coming (see dispatch)
    cdef unsigned long long last_task_id, last_fn_id     # under send_lock
    cdef int owner                      # the process that made the pool
    cdef readonly dict counters         # cell -> what counts its calls when it settles (a map's progress bar)
    cdef list slowest                   # Pool.insights' slowest tasks: (seconds, worker, task_repr), longest first
    cdef double slow_floor              # the seconds a task must exceed to join them
    cdef object stopped_at              # monotonic seconds when the workers were let go, or None
    cdef object final_workers           # the workers' figures then (worker_figures)
    cdef object __weakref__

    cdef start_manager(self)
    cdef bint give_back(self) except -1
    cdef grow(self)
    cdef bint grow_while_possible(self) except -1
    cdef grow_no_more(self, str reason)
    cdef Py_ssize_t running(self)
    cdef bint leave_out(self, Worker worker) except -1
    cdef adjust(self, bint put_off=*)
    cdef str start_deferred(self)
    cdef start_put_off(self)
    cdef Py_ssize_t starting_now(self)
    cdef launch(self, Worker worker)
    cdef bint sending(self)
    cdef outstanding(self)
    cdef close_workers(self, kill=*)
    cdef release(self)
    cpdef submit(self, int kind, fn, first, second, Py_ssize_t calls, counter=*)
    cdef int refuse_if_closed(self) except -1
    cdef void learn(self, double seconds) noexcept
    cdef dispatch(self)
    cdef reserve(self)
    cdef bytes task_message(self, Worker worker, Cell cell, Writer& w)
    cdef Worker pick(self, Py_ssize_t depth)
    cdef bint rebalance(self) except -1
    cdef bint queued_behind(self) noexcept
    cdef send(self, Worker worker, const char* data, Py_ssize_t n, bytes message)
    cdef flush(self, Worker worker)
    cdef bint take_recv(self, int64_t deadline_ns) except -1
    cdef give_recv(self)
    cdef wait_until(self, Cell cell, int64_t deadline_ns)
    cdef collect_until(self, Cell cell, int64_t deadline_ns)
    cdef bint core_to_spare(self)
    cdef collect_ready(self)
    cdef collect_if_free(self)
    cdef handle(self, bytes slot)
    cdef settle(self, bytes slot)
    cdef note_slow(self, Worker worker, Cell cell, double seconds)
    cdef replace(self, Worker worker)
    cdef check_workers(self)
    cdef str obituary_of(self, Worker worker)
    cdef terminate_broken(self, detail, remote=*, pool_text=*, future_text=*)
    cdef abandon(self)
