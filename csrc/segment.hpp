// The shared segment: one mapping per pool holding its control block, rings
// and arena. It is anonymous from birth (memfd on Linux, a POSIX shm object
// unlinked at once on macOS, an O_TMPFILE or unlinked file in a chosen
// directory), so it disappears with the last process that maps it, however
// that process ends. Peers attach through an inherited or passed descriptor.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

#include "layout.hpp"
#include "waiter.hpp"

namespace mizu {

constexpr uint64_t kSegmentMagic = 0x54474553555a494dULL;  // "MIZUSEGT"
constexpr uint32_t kSegmentVersion = 1;

// Raised when shared memory cannot be had: maps to MemoryError.
class OutOfSharedMemory : public std::runtime_error {
    using std::runtime_error::runtime_error;
};

struct SegmentHeader {
    uint64_t magic;
    uint32_t version;
    uint32_t waiter_backend;  // WaitBackend of every EventWord in this segment
    uint64_t size;
    std::atomic<uint64_t> used;  // bump allocator: offset of the first free byte
    alignas(kFalseSharingRange) SpinGate spin_gate;
};

class Segment {
public:
    // Creates and pre-faults a segment of `size` bytes. dir == nullptr makes
    // it anonymous; otherwise it is an unnamed file in that directory (a
    // tmpfs such as /dev/shm). Throws OutOfSharedMemory when the memory
    // cannot be reserved, std::invalid_argument for a bad size.
    static std::unique_ptr<Segment> create(std::size_t size, const char* dir, WaitBackend backend);

    // Maps the segment behind fd (a duplicate is kept; fd stays the
    // caller's). Throws std::invalid_argument if fd holds no mizu segment.
    // Errors name the segment `name` if given, else "fd <fd>".
    static std::unique_ptr<Segment> attach(int fd, const std::string& name = {});

    ~Segment();
    Segment(const Segment&) = delete;
    Segment& operator=(const Segment&) = delete;

    int fd() const noexcept { return fd_; }
    std::size_t size() const noexcept { return size_; }
    char* base() const noexcept { return base_; }
    SegmentHeader& header() const noexcept { return *reinterpret_cast<SegmentHeader*>(base_); }
    WaitBackend waiter_backend() const noexcept { return WaitBackend(header().waiter_backend); }
    std::size_t free_bytes() const noexcept;

    // Reserves `bytes` at an offset aligned to kFalseSharingRange, for the
    // life of the segment. Throws OutOfSharedMemory when it does not fit.
    std::size_t alloc(std::size_t bytes);

    // The address of [offset, offset + bytes), checked to lie inside the
    // segment's allocated part.
    char* at(std::size_t offset, std::size_t bytes) const;

private:
    Segment(int fd, char* base, std::size_t size) noexcept : fd_(fd), base_(base), size_(size) {}
    int fd_;
    char* base_;
    std::size_t size_;
};

}  // namespace mizu
