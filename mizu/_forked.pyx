# cython: auto_pickle=False
"""Letting go after a fork: a child forked from a process with pools cannot use them, and must not touch them."""

from mizu._failures cimport ExitBell
from mizu._future cimport Cell, cell_of, drop_task, set_exception
from mizu._manager cimport Manager
from mizu._observers cimport ABANDONED
from mizu._sync cimport Lock

import os
import threading
import weakref
from concurrent.futures import InvalidStateError
from concurrent.futures.process import BrokenProcessPool

from mizu._manager import _live_pools

__all__ = ["pools"]

pools = weakref.WeakSet()   # every pool this process made
_inherited = []           # in a forked child, what its parent's pools held (_abandon)


cdef _abandon(Manager pool):
    """In a child forked from the pool's process: let go of the pool without touching its rings or processes.

    They are the parent's: a push or pop here would take its tasks and
    results. Every lock may have been held by a thread that the child
    does not have, so none is taken. The futures not done yet fail here,
    and their callbacks (the parent's) do not run.

    A started (or starting) pool's workers, rings, segment and locks are
    kept in _inherited, not freed: freeing them would write to every
    page they lie on, and so copy it, in each worker that a fork pool
    forks. The child's mapping of the segment, and its copies of the
    workers' descriptors, last until it exits. A pool not started yet
    lets go of them, so that its segment is freed once its own process
    frees it.
    """
    cdef Cell cell
    pool.broken = (f"This pool belongs to process {pool.owner}; a process forked from it cannot use it: create "
                   f"a new ProcessPoolExecutor in the child")
    futures = pool.take_futures()
    pool.tell(ABANDONED, -1, None, 0.0)
    if pool.started or pool.launching:
        _inherited.append((pool.workers, pool.roster, pool.results, pool.segment, pool.send_lock,
                           pool.recv_lock, pool.state_lock, pool.kicked))
    pool.workers, pool.roster, pool.results, pool.segment = [], [], None, None
    if pool.bell is not None:
        (<ExitBell>pool.bell).abandon()
        pool.bell = None
    pool.send_lock, pool.recv_lock, pool.state_lock = Lock(), Lock(), threading.RLock()
    pool.kicked = threading.Event()
    pool.recv_owner = 0
    pool.collecting = 0
    for future in futures:
        cell = cell_of(future)
        cell.observed = False
        cell.condition = cell.waiters = cell.callbacks = None
        drop_task(cell)
        try:
            set_exception(future, cell, BrokenProcessPool(pool.broken))
        except InvalidStateError:
            pass   # cancelled while it waited: it stays so



def _abandon_inherited_pools():
    _live_pools.clear()
    for pool in list(pools):
        _abandon(pool)


os.register_at_fork(after_in_child=_abandon_inherited_pools)
