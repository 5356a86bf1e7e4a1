// A mutex between the threads of one process that an uncontended take and
// give settle with one atomic operation each, without a system call.
#pragma once

#include <atomic>
#include <cstdint>

#include "address_wait.hpp"

namespace mizu {

class ThreadLock {
public:
    // Takes the lock if it is free.
    bool try_take() noexcept {
        uint32_t expected = kFree;
        // acquire: what the last holder wrote before its give() is seen by the new holder.
        // relaxed on failure: nothing is read under a lock not taken.
        return state_.compare_exchange_strong(expected, kHeld, std::memory_order_acquire,
                                              std::memory_order_relaxed);
    }

    // Takes the lock, or else sleeps until a give() (or for at most
    // timeout_ns, or less) and tries once more; whether it took it.
    bool take_or_sleep(int64_t timeout_ns) noexcept {
        // acquire: as in try_take. A lock taken here stays marked contended,
        // so that its give() wakes whoever else may sleep on it.
        if (state_.exchange(kContended, std::memory_order_acquire) == kFree) return true;
        address_wait(&state_, kContended, timeout_ns);
        // acquire: as in try_take.
        return state_.exchange(kContended, std::memory_order_acquire) == kFree;
    }

    void give() noexcept {
        // release: pairs with the acquire of the next take, so that it sees what was written under the lock.
        if (state_.exchange(kFree, std::memory_order_release) == kContended) address_wake(&state_, false);
    }

private:
    static constexpr uint32_t kFree = 0, kHeld = 1, kContended = 2;
    std::atomic<uint32_t> state_{kFree};
};

}  // namespace mizu
