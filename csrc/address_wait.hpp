// The operating system's "sleep while this 32-bit word holds a value" call,
// in its cross-process form: Linux futex without FUTEX_PRIVATE_FLAG, macOS
// os_sync_wait_on_address (14.4+) or __ulock with the SHARED operations.
#pragma once

#include <atomic>
#include <cstdint>

namespace mizu {

enum class AddressWait { woken, timed_out, interrupted };

// Sleeps while *word == expected, at most timeout_ns. Spurious returns are
// allowed; callers re-check their condition.
AddressWait address_wait(std::atomic<uint32_t>* word, uint32_t expected, int64_t timeout_ns) noexcept;

// Wakes one sleeper on word, or all of them.
void address_wake(std::atomic<uint32_t>* word, bool all) noexcept;

}  // namespace mizu
