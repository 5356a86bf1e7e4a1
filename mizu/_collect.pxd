# Collecting the workers' results and settling their futures, for the engine's other modules to call at C speed.

from libc.stdint cimport int64_t

from mizu._failures cimport Watchdog
from mizu._future cimport Cell
from mizu._messages cimport Codec, Reassembler
from mizu._roster cimport Worker
from mizu._sync cimport Lock
from mizu.includes.messages cimport Message

cdef enum:
    SLICE_NS = 20_000_000   # a collecting caller checks the workers at least this often
    REPLACING_SLICE_NS = 1_000_000   # and this often in a pool that replaces dead workers
    FEED_NS = 200_000       # and comes back this often to feed an outbox or rebalance


cdef class Collector(Watchdog):
    cdef readonly Codec codec
    cdef readonly Lock recv_lock
    cdef readonly unsigned long recv_owner
    cdef readonly Py_ssize_t collecting   # callers collecting results in wait_until
    cdef readonly Reassembler reassembler
    cdef readonly Py_ssize_t watched   # futures observed (see Manager.observe) that have not settled
    cdef bint unbalanced                # a worker may idle while tasks wait behind a running one (see rebalance)
    cdef public double task_seconds
    cdef public Py_ssize_t depth
    cdef object interrupted   # what a signal raised while settle() read or settled a result, raised after it (handle)

    cdef dispatch(self)
    cdef bint take_recv(self, int64_t deadline_ns) except -1
    cdef give_recv(self)
    cdef wait_until(self, Cell cell, int64_t deadline_ns)
    cdef collect_until(self, Cell cell, int64_t deadline_ns)
    cdef bint core_to_spare(self)
    cdef bint queued_behind(self) noexcept
    cdef collect_if_free(self)
    cdef start_put_off(self)
    cdef handle(self, bytes slot)
    cdef settle(self, bytes slot)
    cdef tuple read_again(self, BaseException exc, Message& m, bytes message, list buffers, unsigned long long task_id)
    cdef void learn(self, double seconds) noexcept
    cdef replace(self, Worker worker, bint exited=*)
    cdef succeed(self, Worker worker)
