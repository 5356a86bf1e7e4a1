#include "waiter.hpp"

#include <cerrno>
#if defined(__linux__)
#include <sched.h>
#endif
#include <ctime>
#include <stdexcept>

// glibc and the BSDs have robust mutexes (PTHREAD_MUTEX_ROBUST is an enum
// there, not a macro, so it cannot be tested for); macOS does not.
#if defined(__APPLE__)
#define MIZU_ROBUST_MUTEX 0
#else
#define MIZU_ROBUST_MUTEX 1
#endif

namespace mizu {

std::atomic<int64_t> contended_until_ns{0};

bool leave_cpu(int cpu) noexcept {
#if defined(__linux__)
    cpu_set_t allowed;
    if (cpu < 0 || cpu >= CPU_SETSIZE || sched_getaffinity(0, sizeof allowed, &allowed) != 0) return false;
    if (!CPU_ISSET(cpu, &allowed) || CPU_COUNT(&allowed) < 2) return false;
    cpu_set_t elsewhere = allowed;
    CPU_CLR(cpu, &elsewhere);
    // The kernel moves the thread before the call returns.
    if (sched_setaffinity(0, sizeof elsewhere, &elsewhere) != 0) return false;
    sched_setaffinity(0, sizeof allowed, &allowed);
    return true;
#else
    (void)cpu;
    return false;
#endif
}

namespace {

// A process that died holding the mutex leaves it EOWNERDEAD; the state it
// guards is only the epoch, which is always consistent, so take it over.
void lock_recovering(pthread_mutex_t* m) noexcept {
#if MIZU_ROBUST_MUTEX
    if (pthread_mutex_lock(m) == EOWNERDEAD) pthread_mutex_consistent(m);
#else
    pthread_mutex_lock(m);
#endif
}

AddressWait portable_sleep(EventWord& ev, uint32_t key, int64_t timeout_ns) noexcept {
    int rc = 0;
    lock_recovering(&ev.mutex);
    // Checked under the mutex that notify's wake takes, so a bump between this
    // check and the wait cannot be missed.
    if (ev.epoch.load(std::memory_order_acquire) == key) {
#if defined(__APPLE__)
        timespec rel{time_t(timeout_ns / 1000000000), long(timeout_ns % 1000000000)};
        rc = pthread_cond_timedwait_relative_np(&ev.cond, &ev.mutex, &rel);
#else
        timespec abs;
        clock_gettime(CLOCK_MONOTONIC, &abs);
        int64_t ns = abs.tv_nsec + timeout_ns % 1000000000;
        abs.tv_sec += time_t(timeout_ns / 1000000000 + ns / 1000000000);
        abs.tv_nsec = long(ns % 1000000000);
        rc = pthread_cond_timedwait(&ev.cond, &ev.mutex, &abs);
#if MIZU_ROBUST_MUTEX
        if (rc == EOWNERDEAD) {
            pthread_mutex_consistent(&ev.mutex);
            rc = 0;
        }
#endif
#endif
    }
    pthread_mutex_unlock(&ev.mutex);
    return rc == ETIMEDOUT ? AddressWait::timed_out : AddressWait::woken;
}

}  // namespace

void event_init(EventWord& ev, WaitBackend backend) {
    ev.epoch.store(0, std::memory_order_relaxed);
    ev.sleepers.store(0, std::memory_order_relaxed);
    ev.notifier_cpu.store(-1, std::memory_order_relaxed);
    ev.backend = uint32_t(backend);
    if (backend == WaitBackend::native) return;
    if (backend != WaitBackend::portable) throw std::invalid_argument("unknown waiter backend");
    pthread_mutexattr_t ma;
    pthread_mutexattr_init(&ma);
    int rc = pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED);
#if MIZU_ROBUST_MUTEX
    if (rc == 0) rc = pthread_mutexattr_setrobust(&ma, PTHREAD_MUTEX_ROBUST);
#endif
    if (rc == 0) rc = pthread_mutex_init(&ev.mutex, &ma);
    pthread_mutexattr_destroy(&ma);
    if (rc != 0) throw std::runtime_error("cannot create a process-shared mutex");
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    rc = pthread_condattr_setpshared(&ca, PTHREAD_PROCESS_SHARED);
#if !defined(__APPLE__)
    if (rc == 0) rc = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
#endif
    if (rc == 0) rc = pthread_cond_init(&ev.cond, &ca);
    pthread_condattr_destroy(&ca);
    if (rc != 0) throw std::runtime_error("cannot create a process-shared condition variable");
}

AddressWait event_sleep(EventWord& ev, uint32_t key, int64_t timeout_ns) noexcept {
    if (ev.backend == uint32_t(WaitBackend::portable)) return portable_sleep(ev, key, timeout_ns);
    return address_wait(&ev.epoch, key, timeout_ns);
}

void event_wake(EventWord& ev, bool all) noexcept {
    if (ev.backend == uint32_t(WaitBackend::portable)) {
        lock_recovering(&ev.mutex);
        if (all)
            pthread_cond_broadcast(&ev.cond);
        else
            pthread_cond_signal(&ev.cond);
        pthread_mutex_unlock(&ev.mutex);
        return;
    }
    address_wake(&ev.epoch, all);
}

void Waiter::adapt(int64_t waited_ns, bool spun_out) noexcept {
    // Spin the whole limit while the peer answers within it: one sleep and
    // wake-up costs more than the longest spin. After a wait longer than the
    // limit (the peer went idle), halve the budget, so that a process with
    // nothing to do goes to sleep almost at once.
    if (!spun_out || waited_ns < spin_limit_ns_) {
        budget_ns_ = spin_limit_ns_;
        return;
    }
    int64_t half = budget_ns_ / 2;
    budget_ns_ = half < kMinSpinNs ? (kMinSpinNs < spin_limit_ns_ ? kMinSpinNs : spin_limit_ns_) : half;
}

}  // namespace mizu
