// Clock and CPU hints shared by every busy-wait in the core.
#pragma once

#include <cstdint>
#include <ctime>

namespace mizu {

// Monotonic nanoseconds; spin budgets are measured in time, not iterations,
// because the cost of one `pause` varies tenfold across x86 generations.
inline int64_t now_ns() noexcept {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

constexpr int64_t kForever = INT64_MAX;

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
