// The waiter: how a process with nothing to do waits for another process.
//
// An eventcount (Vyukov's, as in folly::EventCount) on a 32-bit epoch word in
// shared memory. A consumer spins for an adaptive, time-bounded budget, then
// announces itself in `sleepers`, re-checks its condition and sleeps on the
// epoch. A producer publishes and makes a syscall only when `sleepers` is
// non-zero, so no syscall is paid while the peer is awake.
#pragma once

#include <atomic>
#include <cstdint>
#include <pthread.h>

#include "address_wait.hpp"
#include "layout.hpp"
#include "liveness.hpp"
#include "spin.hpp"

#if defined(__SANITIZE_THREAD__)
#define MIZU_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define MIZU_TSAN 1
#endif
#endif
#ifndef MIZU_TSAN
#define MIZU_TSAN 0
#endif

namespace mizu {

enum class WaitBackend : uint32_t {
    native = 1,    // futex / os_sync / ulock
    portable = 2,  // process-shared pthread mutex and condition variable
};

// One per condition, in shared memory; initialised once by its creator.
struct alignas(kFalseSharingRange) EventWord {
    std::atomic<uint32_t> epoch;
    std::atomic<uint32_t> sleepers;
    // The CPU the last notifier ran on, -1 if unknown: a waiter on that CPU
    // sleeps at once, as its spin would only keep the peer off the CPU.
    std::atomic<int32_t> notifier_cpu;
    uint32_t backend;
    pthread_mutex_t mutex;  // portable backend only
    pthread_cond_t cond;    // portable backend only
};

void event_init(EventWord& ev, WaitBackend backend);

// Producer side: call after publishing. Wakes one sleeper, or all of them.
inline void notify(EventWord& ev, bool all = false);

// Caps how many processes of a pool spin at once, so that spinners never
// take the cores of the processes doing the work. Lives in shared memory.
struct alignas(kFalseSharingRange) SpinGate {
    std::atomic<uint32_t> spinning;
    uint32_t limit;

    bool try_enter() noexcept {
        // relaxed: the gate only bounds CPU use; it orders no data.
        if (spinning.fetch_add(1, std::memory_order_relaxed) < limit) return true;
        spinning.fetch_sub(1, std::memory_order_relaxed);
        return false;
    }
    void leave() noexcept { spinning.fetch_sub(1, std::memory_order_relaxed); }
};

enum class WaitStatus : int { ready = 0, timed_out = 1, peer_died = 2, stopped = 3, closed = 4 };

// Called with ctx each time a sleep slice expires without the condition
// becoming true; returning false ends the wait with WaitStatus::stopped.
// Python uses it to run signal handlers.
struct SliceHook {
    bool (*fn)(void* ctx) = nullptr;
    void* ctx = nullptr;
};

struct WaitOptions {
    int64_t deadline_ns = kForever;     // absolute, on the now_ns() clock
    const PeerWatch* peer = nullptr;    // end the wait if this process dies
    SliceHook hook;
    // false: poll a few times, then sleep, leaving the spin budget as it is.
    // For a waiter that knows every core is taken by a process doing work.
    bool spin = true;
    // A worker waiting for its client's next task: found on the CPU the
    // client last notified from, it moves to another CPU it may run on
    // (leave_cpu), at most once per Waiter::kMoveGapNs, unless told not to
    // spin (every core has work), and even while this process's spins are
    // stopped (contended_until_ns): a spin the scheduler interrupted on a
    // CPU shared with the client is what the move ends. Otherwise the two
    // stay there together: neither spins where the other runs, so each
    // sleeps and wakes the other, and the scheduler, seeing one of them
    // runnable at a time, never parts them (a round trip then costs two
    // wake-ups).
    bool leave_peer_cpu = false;
};

struct WaitStats {
    uint64_t spin_wins = 0;      // waits that ended while spinning
    uint64_t sleeps = 0;         // blocking calls made
    uint64_t late_wakeups = 0;   // slices that expired with the condition already true
    uint64_t moves = 0;          // moves off the CPU of the peer (WaitOptions::leave_peer_cpu)
};

// The process-local half of a waiting side: the adaptive spin budget and
// counters. Not shared between threads.
class Waiter {
public:
    static constexpr int64_t kDefaultSpinLimitNs = 50000;
    static constexpr int64_t kMinSpinNs = 1000;
    static constexpr int64_t kDefaultSliceNs = 20000000;
    static constexpr int kPreludePolls = 16;
    static constexpr int64_t kMaxSpinNs = 1000000000;
    static constexpr int64_t kMoveGapNs = 50000000;

    explicit Waiter(SpinGate* gate = nullptr) noexcept : gate_(gate) {}

    // Upper bound of the adaptive spin, 0 to always sleep at once.
    void set_spin_limit_ns(int64_t ns) noexcept {
        spin_limit_ns_ = ns < 0 ? 0 : ns > kMaxSpinNs ? kMaxSpinNs : ns;
        budget_ns_ = spin_limit_ns_;
    }
    int64_t spin_limit_ns() const noexcept { return spin_limit_ns_; }
    // The spin the next wait may make: the limit, or less after waits that outlasted it.
    int64_t budget_ns() const noexcept { return budget_ns_; }
    // Longest single sleep: the period of liveness checks and hooks.
    void set_slice_ns(int64_t ns) noexcept { slice_ns_ = ns < 1000000 ? 1000000 : ns; }
    int64_t slice_ns() const noexcept { return slice_ns_; }

    const WaitStats& stats() const noexcept { return stats_; }

    // Waits until ready() is true. ready must be cheap and free of side effects.
    template <class Ready>
    WaitStatus wait(EventWord& ev, Ready&& ready, const WaitOptions& opt);

private:
    template <class Ready>
    bool spin(Ready& ready, int64_t start, int64_t deadline);
    void adapt(int64_t waited_ns, bool spun_out) noexcept;

    SpinGate* gate_;
    int64_t spin_limit_ns_ = kDefaultSpinLimitNs;
    int64_t budget_ns_ = kDefaultSpinLimitNs;
    int64_t slice_ns_ = kDefaultSliceNs;
    int64_t next_move_ns_ = 0;
    WaitStats stats_;
};

// Moves the calling thread off `cpu` onto another CPU of its affinity mask
// (the kernel's pick), then sets the mask it read back: the thread stays
// where it landed until the scheduler moves it. The mask read is of online
// CPUs, so a CPU brought online later is not added to it. False where it
// cannot (one CPU allowed, not Linux).
bool leave_cpu(int cpu) noexcept;

// The blocking half of the protocol, one backend call.
AddressWait event_sleep(EventWord& ev, uint32_t key, int64_t timeout_ns) noexcept;
void event_wake(EventWord& ev, bool all) noexcept;

// The announce-then-re-check handshake is a Dekker pair: the waiter
// announces itself in `sleepers` and then re-checks its condition; the
// producer publishes and then reads `sleepers`. A sequentially consistent
// fence between each side's write and read orders the two fences: if the
// producer's comes first, the waiter's re-check sees what was published;
// if the waiter's does, the producer sees the sleeper and wakes it. The
// producer only reads the word, so while nobody sleeps it writes no line
// of the EventWord, and the line stays in both sides' caches: a message
// moves no cache line beyond its slot's.
inline void handshake_fence(std::atomic<uint32_t>& sleepers) noexcept {
#if MIZU_TSAN
    // ThreadSanitizer does not model fences: an RMW on the word orders the
    // pair instead, as it would on its own.
    sleepers.fetch_add(0, std::memory_order_seq_cst);
#else
    (void)sleepers;
    std::atomic_thread_fence(std::memory_order_seq_cst);
#endif
}

inline uint32_t prepare_wait(EventWord& ev) noexcept {
    ev.sleepers.fetch_add(1, std::memory_order_relaxed);
    handshake_fence(ev.sleepers);
    // acquire pairs with the release bump in notify(): a waiter that reads the
    // new epoch also sees the data published before it.
    return ev.epoch.load(std::memory_order_acquire);
}

inline void finish_wait(EventWord& ev) noexcept { ev.sleepers.fetch_sub(1, std::memory_order_relaxed); }

inline void notify(EventWord& ev, bool all) {
    // relaxed: a hint for the waiter's choice to spin, ordering nothing;
    // written only when it changes, so that the line stays shared.
    int cpu = current_cpu();
    if (ev.notifier_cpu.load(std::memory_order_relaxed) != cpu) ev.notifier_cpu.store(cpu, std::memory_order_relaxed);
    // The producer's half of the handshake in prepare_wait(): while nobody
    // sleeps, a fence and a load, and no syscall.
    handshake_fence(ev.sleepers);
    if (ev.sleepers.load(std::memory_order_relaxed) == 0) return;
    ev.epoch.fetch_add(1, std::memory_order_release);
    event_wake(ev, all);
}

// A spin that the scheduler interrupts is worse than a sleep: the spinner
// loses its CPU for a whole time slice, and notices the peer's message only
// when it gets it back, where a sleeper would have been woken at once. So
// once a spin of this process sees such a gap in its clock (another task
// wants the CPU), its waits sleep without spinning for a while. A slice is
// 0.75 ms or more; an idle VM's own hiccups stay under the threshold.
constexpr int64_t kPreemptedGapNs = 500000;
constexpr int64_t kContendedNs = 100000000;

// The end of the current no-spin period, on the now_ns() clock.
extern std::atomic<int64_t> contended_until_ns;

template <class Ready>
bool Waiter::spin(Ready& ready, int64_t start, int64_t deadline) {
    if (budget_ns_ <= 0 || start >= deadline || (gate_ && !gate_->try_enter())) return false;
    bool won = false;
    int64_t end = deadline - start > budget_ns_ ? start + budget_ns_ : deadline;
    int64_t last = start, now;
    do {
        for (int i = 0; i < 32 && !won; ++i) {
            if (ready())
                won = true;
            else
                cpu_relax();
        }
        now = now_ns();
        if (now - last > kPreemptedGapNs) {
            // relaxed: a hint for this process's later spins, ordering nothing.
            contended_until_ns.store(now + kContendedNs, std::memory_order_relaxed);
            break;
        }
        last = now;
    } while (!won && now < end);
    if (gate_) gate_->leave();
    return won;
}

template <class Ready>
WaitStatus Waiter::wait(EventWord& ev, Ready&& ready, const WaitOptions& opt) {
    if (ready()) return WaitStatus::ready;
    // A peer that answers within a few hundred nanoseconds is caught here,
    // before the clock and the shared spin gate are touched.
    for (int i = 0; budget_ns_ > 0 && i < kPreludePolls; ++i) {
        cpu_relax();
        if (ready()) {
            ++stats_.spin_wins;
            return WaitStatus::ready;
        }
    }
    int64_t start = now_ns();
    // A peer that last ran on this CPU is likely queued behind this thread
    // there (the scheduler put both on one CPU): it runs only once this
    // thread sleeps.
    int cpu = ev.notifier_cpu.load(std::memory_order_relaxed);
    bool shared = cpu >= 0 && cpu == current_cpu();
    if (opt.spin && shared && opt.leave_peer_cpu && start >= next_move_ns_) {
        next_move_ns_ = start + kMoveGapNs;
        shared = !leave_cpu(cpu);
        if (!shared) ++stats_.moves;
    }
    bool spins = opt.spin && !shared && start >= contended_until_ns.load(std::memory_order_relaxed);
    if (spins && spin(ready, start, opt.deadline_ns)) {
        ++stats_.spin_wins;
        adapt(now_ns() - start, false);
        return WaitStatus::ready;
    }
    int64_t last_check = start;
    for (;;) {
        uint32_t key = prepare_wait(ev);
        if (ready()) {
            finish_wait(ev);
            break;
        }
        int64_t now = now_ns();
        if (now >= opt.deadline_ns) {
            finish_wait(ev);
            return WaitStatus::timed_out;
        }
        int64_t left = opt.deadline_ns - now;
        AddressWait r = event_sleep(ev, key, left < slice_ns_ ? left : slice_ns_);
        finish_wait(ev);
        ++stats_.sleeps;
        if (ready()) {
            if (r == AddressWait::timed_out) ++stats_.late_wakeups;
            break;
        }
        // Peer and hook run after every slice that was not a wake-up, and at
        // least once a slice even on a ring so busy that this waiter is woken
        // again and again but always loses the message to another consumer.
        now = now_ns();
        if (r == AddressWait::woken && now - last_check < slice_ns_) continue;
        last_check = now;
        if (opt.peer && !opt.peer->alive()) return ready() ? WaitStatus::ready : WaitStatus::peer_died;
        if (opt.hook.fn && !opt.hook.fn(opt.hook.ctx)) return WaitStatus::stopped;
    }
    if (spins) adapt(now_ns() - start, true);
    return WaitStatus::ready;
}

}  // namespace mizu
