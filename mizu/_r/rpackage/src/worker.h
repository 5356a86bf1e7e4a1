// The R worker's loop (worker.cpp): what an Rscript of an R pool runs.
#pragma once

#include <cstdint>
#include <sys/types.h>

#include "r_api.h"

namespace mizu::r {

// Where the worker finds the pool: descriptors it inherited, offsets of its
// rings in the segment, its index and its client.
struct WorkerOptions {
    int segment_fd;
    uint64_t task_ring;    // offset of the worker's own SpscRing of tasks
    uint64_t result_ring;  // offset of the pool's MpmcRing of results
    int socket_fd;         // its end of the socket pair arena descriptors cross
    int index;
    pid_t client_pid;
    long max_tasks;        // 0: no limit
    int64_t max_memory;    // bytes resident after a task before the worker retires; 0: no limit
};

// Evaluates `setup` (an expression, or NULL) in the global environment,
// then answers tasks until the client closes the ring or exits, or
// max_tasks are done. An error in setup is sent to the client as the
// worker's last notice, and the loop does not start. Throws what the core
// throws for a broken segment, ring or message; calls R only inside r_call
// or R_tryEvalSilent.
void run_worker(const WorkerOptions& options, SEXP setup);

// The body of the .Call each of run_worker's sessions makes: the worker
// loop, for the worker `handle` points to.
SEXP serve_worker(SEXP handle);

}  // namespace mizu::r
