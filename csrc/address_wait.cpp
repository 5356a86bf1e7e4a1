#include "address_wait.hpp"

#include <cerrno>
#include <climits>
#include <ctime>

#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#elif defined(__APPLE__)
#include <AvailabilityMacros.h>
#if __has_include(<os/os_sync_wait_on_address.h>)
#include <os/os_sync_wait_on_address.h>
#include <os/clock.h>
#define MIZU_HAVE_OS_SYNC 1
#endif
extern "C" int __ulock_wait(uint32_t operation, void* addr, uint64_t value, uint32_t timeout_us);
extern "C" int __ulock_wake(uint32_t operation, void* addr, uint64_t wake_value);
#else
#error "mizu needs futex (Linux) or ulock (macOS)"
#endif

static_assert(sizeof(std::atomic<uint32_t>) == 4 && std::atomic<uint32_t>::is_always_lock_free,
              "the wait word must be a plain lock-free 32-bit word shared between processes");

namespace mizu {

#if defined(__linux__)

AddressWait address_wait(std::atomic<uint32_t>* word, uint32_t expected, int64_t timeout_ns) noexcept {
    timespec ts{time_t(timeout_ns / 1000000000), long(timeout_ns % 1000000000)};
    // FUTEX_WAIT without FUTEX_PRIVATE_FLAG: the kernel keys the wait on the
    // shared page, so a wake from another process reaches us.
    long r = syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
    if (r == 0 || errno == EAGAIN) return AddressWait::woken;
    if (errno == ETIMEDOUT) return AddressWait::timed_out;
    return AddressWait::interrupted;
}

void address_wake(std::atomic<uint32_t>* word, bool all) noexcept {
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, all ? INT_MAX : 1, nullptr, nullptr, 0);
}

#elif defined(__APPLE__)

namespace {
constexpr uint32_t kUlCompareAndWaitShared = 3;
constexpr uint32_t kUlfWakeAll = 0x00000100;
constexpr uint32_t kUlfNoErrno = 0x01000000;
}  // namespace

AddressWait address_wait(std::atomic<uint32_t>* word, uint32_t expected, int64_t timeout_ns) noexcept {
#ifdef MIZU_HAVE_OS_SYNC
    if (__builtin_available(macOS 14.4, *)) {
        int r = os_sync_wait_on_address_with_timeout(word, expected, 4, OS_SYNC_WAIT_ON_ADDRESS_SHARED,
                                                     OS_CLOCK_MACH_ABSOLUTE_TIME, uint64_t(timeout_ns));
        if (r >= 0) return AddressWait::woken;
        return errno == ETIMEDOUT ? AddressWait::timed_out : AddressWait::interrupted;
    }
#endif
    int64_t us = timeout_ns / 1000;
    uint32_t timeout_us = us <= 0 ? 1 : us > UINT32_MAX ? UINT32_MAX : uint32_t(us);
    int r = __ulock_wait(kUlCompareAndWaitShared | kUlfNoErrno, word, expected, timeout_us);
    if (r >= 0) return AddressWait::woken;
    return r == -ETIMEDOUT ? AddressWait::timed_out : AddressWait::interrupted;
}

void address_wake(std::atomic<uint32_t>* word, bool all) noexcept {
#ifdef MIZU_HAVE_OS_SYNC
    if (__builtin_available(macOS 14.4, *)) {
        if (all)
            os_sync_wake_by_address_all(word, 4, OS_SYNC_WAKE_BY_ADDRESS_SHARED);
        else
            os_sync_wake_by_address_any(word, 4, OS_SYNC_WAKE_BY_ADDRESS_SHARED);
        return;
    }
#endif
    __ulock_wake(kUlCompareAndWaitShared | kUlfNoErrno | (all ? kUlfWakeAll : 0), word, 0);
}

#endif

}  // namespace mizu
