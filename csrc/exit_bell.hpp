// A pool's word, in its own result ring, that one of its workers has exited.
//
// Whoever waits for results sleeps on the result ring, and would learn of a
// worker's death only when it next looks at the workers' process handles (a
// slice of its wait later). An ExitBell's thread blocks in poll() on those
// handles and, as soon as a worker's process exits, pushes a `gone` notice
// for it into the ring (messages.hpp), which wakes a sleeper like any
// result. Processes without a pollable handle (PeerWatch's kill(pid, 0)
// fallback) are left to the slices.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>
#include <sys/types.h>

#include "any_ring.hpp"
#include "liveness.hpp"

namespace mizu {

class ExitBell {
public:
    // Starts the thread. `results` must outlive the bell. Throws
    // std::system_error when no pipe or thread can be made.
    explicit ExitBell(AnyRing& results);
    // Stops the thread and waits for it.
    ~ExitBell();
    ExitBell(const ExitBell&) = delete;
    ExitBell& operator=(const ExitBell&) = delete;

    // Watches pid, the process of the worker `index`, from now on, in place
    // of the one before it. Throws std::system_error when pid names no
    // process.
    void watch(uint16_t index, pid_t pid);

private:
    struct Watched {
        uint16_t index;
        std::unique_ptr<PeerWatch> peer;
        bool current;  // false once rung, or replaced: the thread drops it
    };

    void run() noexcept;
    void serve();
    void ring(uint16_t index) noexcept;
    void wake() noexcept;

    AnyRing& results_;
    int wake_[2];  // a pipe: a byte written makes the thread read the watched set again
    std::mutex mu_;
    std::vector<Watched> watched_;  // under mu_; only the thread erases
    bool stop_ = false;             // under mu_
    std::thread thread_;
};

}  // namespace mizu
