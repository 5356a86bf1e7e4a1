"""The client programs of the R pool's fault tests: run by `python -c`, they report on stdout."""

import os
import signal
import time

from children import block_until_interrupted, end_tasks_given_an_array, report


R_MARK_AND_SLEEP = ("function(directory, data) { file.create(file.path(directory, Sys.getpid())); Sys.sleep(600); "
                    "length(data) }")
R_WAIT_FOR_FILE = "function(path) { while (!file.exists(path)) Sys.sleep(0.01); Sys.getpid() }"
# R_WAIT_FOR_FILE, once it has created path.<pid>: this worker runs a task (executor_children's
# announce_then_wait_for_file in R).
R_ANNOUNCE_THEN_WAIT_FOR_FILE = ("function(path) { file.create(paste0(path, '.', Sys.getpid())); "
                                 "while (!file.exists(path)) Sys.sleep(0.01); Sys.getpid() }")

# Appends "value pid" to path as it starts (helpers.tallies counts the lines), then sleeps: executor_children's
# tally_then_nap in R. The line is one string, so that it is one write: the workers append to the same file.
R_TALLY_THEN_NAP = ('function(path, value, seconds) { cat(paste0(value, " ", Sys.getpid(), "\\n"), file = path, '
                    'append = TRUE); Sys.sleep(seconds); value }')
R_ANNOUNCE_BESIDE = "function(path, x, seconds) { cat(Sys.getpid(), file = path); Sys.sleep(seconds); x[[1]] }"
R_HOARD = "function(n) { assign('hoard', rep(1, n / 8), envir = globalenv()); Sys.getpid() }"


def _r_workers(ex):
    return sorted(w.process.pid for w in ex._pool.workers)


def client_with_busy_r_pool(directory):
    """Keep both R workers of a pool busy and four tasks queued, each with a shared array; wait to be killed."""
    import mizu

    ex = mizu.RExecutor(2)
    data = mizu.zeros(1 << 20)
    for _ in range(6):
        ex.submit(R_MARK_AND_SLEEP, directory, data)
    while len(os.listdir(directory)) < 2:
        time.sleep(0.01)
    report(workers=_r_workers(ex))
    while True:
        signal.pause()


def client_ending_r_tasks_given_an_array(how, directory, rounds):
    """end_tasks_given_an_array in an R pool that replaces the workers it ends."""
    import mizu

    ex = mizu.RExecutor(1, worker_death="replace")
    end_tasks_given_an_array(ex, R_ANNOUNCE_BESIDE, "function(x) sum(x)", how, directory, rounds, 0.5)


def client_interrupted_r(where, gate):
    """Block in result(), map or shutdown(wait=True) on R tasks that wait for gate, until Ctrl-C; exit normally.

    Each task announces its worker (R_ANNOUNCE_THEN_WAIT_FOR_FILE).
    """
    import mizu

    block_until_interrupted(mizu.RExecutor(2), R_ANNOUNCE_THEN_WAIT_FOR_FILE, where, gate,
                            lambda ex: report(workers=_r_workers(ex)))


def client_leaving_an_r_pool(gate):
    """Submit R tasks and leave without shutdown: the exit waits for them, as the stdlib's does."""
    import mizu

    ex = mizu.RExecutor(2)
    futures = [ex.submit("function(x) x * 2L", i) for i in range(10)]
    slow = ex.submit(R_WAIT_FOR_FILE, gate)
    report(workers=_r_workers(ex), values=[f.result() for f in futures])
    slow.add_done_callback(lambda f: print("slow done", flush=True))
