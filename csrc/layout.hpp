// Sizes that decide how shared structures are laid out.
#pragma once

#include <cstddef>

namespace mizu {

// The range in which two writers on different cores slow each other down.
// x86 prefetches cache lines in adjacent pairs and Apple silicon's line is
// 128 bytes, so 128 everywhere.
constexpr std::size_t kFalseSharingRange = 128;

constexpr std::size_t round_up(std::size_t n, std::size_t align) { return (n + align - 1) / align * align; }

constexpr bool is_power_of_two(unsigned long long n) { return n != 0 && (n & (n - 1)) == 0; }

}  // namespace mizu
