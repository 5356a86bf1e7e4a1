// Clock and CPU hints shared by every busy-wait in the core.
#pragma once

#include <cstdint>
#include <ctime>
#if defined(__linux__)
#include <sched.h>
#endif

namespace mizu {

// Monotonic nanoseconds; spin budgets are measured in time, not iterations,
// because the cost of one `pause` varies tenfold across x86 generations.
inline int64_t now_ns() noexcept {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

constexpr int64_t kForever = INT64_MAX;

// The CPU this thread runs on, or -1 where that cannot be known cheaply.
// glibc answers from the thread's rseq area, without a system call.
inline int current_cpu() noexcept {
#if defined(__linux__)
    return sched_getcpu();
#else
    return -1;
#endif
}

// Tells the core this is a spin-wait loop: it frees the sibling hyper-thread
// and avoids the memory-order mis-speculation penalty on loop exit.
inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    // isb stalls for about as long as x86's pause; `yield` is nearly a no-op.
    asm volatile("isb" ::: "memory");
#else
    asm volatile("" ::: "memory");
#endif
}

}  // namespace mizu
