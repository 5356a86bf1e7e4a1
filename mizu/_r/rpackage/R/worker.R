# The loop of an R pool's worker process (src/worker.cpp). The pool starts
# Rscript with the descriptors of its segment and socket inherited, and
# these arguments; `setup` is R source run once, in the global
# environment, before the first task. The worker retires after max_tasks
# tasks, or after a task that leaves it holding more than max_memory bytes
# (0: no limit).
worker <- function(segment_fd, task_ring, result_ring, socket_fd, index, client_pid, max_tasks = 0, max_memory = 0,
                   setup = NULL) {
    script <- if (is.null(setup)) NULL else bquote(eval(parse(text = .(setup), keep.source = FALSE), envir = globalenv()))
    invisible(.Call(C_worker, as.integer(segment_fd), as.double(task_ring), as.double(result_ring),
                    as.integer(socket_fd), as.integer(index), as.integer(client_pid), as.double(max_tasks),
                    as.double(max_memory), script))
}

# A spare of an R pool: started ahead of need, it waits for the index of the
# worker it is to be (which the pool writes to its socket), then is that
# worker; task_rings holds the offsets of every worker's task ring. It
# returns, doing nothing, once the client shuts its socket down or exits.
spare <- function(segment_fd, task_rings, result_ring, socket_fd, client_pid, max_tasks = 0, max_memory = 0,
                  setup = NULL) {
    index <- .Call(C_wait_for_index, as.integer(socket_fd), as.integer(client_pid))
    if (index < 0L || index >= length(task_rings)) return(invisible(NULL))
    worker(segment_fd, task_rings[index + 1L], result_ring, socket_fd, index, client_pid, max_tasks, max_memory, setup)
}

# The text an exiting worker sends when its setup script fails: R's
# traceback, then a last line as a Python traceback ends, for the message
# of the pool that breaks.
setup_failure_text <- function(record) {
    last <- if (is.null(record$call)) record$message else sprintf("in %s: %s", record$call, record$message)
    paste(c("R traceback of the setup script, outermost call first:", paste0("  ", record$traceback),
            paste0("RError: ", last)), collapse = "\n")
}
