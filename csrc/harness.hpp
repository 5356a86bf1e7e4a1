// Whole-process harnesses over the core, for benchmarks and stress tests:
// each forks its peers, runs only C++ in them and reaps them before
// returning.
#pragma once

#include <cstdint>

#include "waiter.hpp"

namespace mizu {

// The ping-pongs below run this process against one forked child. With
// pin, the two are bound to different CPUs (where the OS allows it), which
// takes the scheduler's placement out of the measurement; this process's
// affinity is restored before returning.

// Nanoseconds per round trip of the floor: a counter sent to the child on
// one cache line and echoed back on another, busy-polling, the least any
// request/reply channel pair between two processes can cost. With
// one_line, both directions share one line (the hardware's cache-line
// round trip, which no pair of channels can reach).
double pingpong_floor_ns(uint64_t rounds, bool one_line, bool pin);

// Nanoseconds per round trip of a msg_size-byte message sent to the child
// through one SpscRing and back through another, waiting with the core's
// Waiter (spin_limit_ns == 0 forces every wait through the sleep path).
double pingpong_ring_ns(uint64_t rounds, uint32_t msg_size, int64_t spin_limit_ns, WaitBackend backend, bool pin);

// Binds the calling process to one CPU; returns false where the OS cannot.
bool pin_to_cpu(int cpu);

struct StressResult {
    uint64_t received;    // messages popped
    uint64_t duplicates;  // messages popped more than once
    uint64_t corrupt;     // messages whose bytes were not the ones pushed
    uint64_t missing;     // messages pushed and never popped
    int failed_children;  // peers that did not exit with status 0
};

// producers x per_producer messages of 1..max_message bytes through one
// MpmcRing of `capacity` slots, popped by `consumers` processes.
StressResult stress_mpmc(int producers, int consumers, uint64_t per_producer, uint64_t capacity,
                         uint32_t max_message, WaitBackend backend);

}  // namespace mizu
