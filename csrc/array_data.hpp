// Array data born in the arena: the allocator behind the numpy data handler
// that a worker installs, so that a large array a task creates lies in
// shared memory from the start and its result crosses back by reference.
//
// ArrayData hands out blocks of one Arena as plain pointers and remembers
// each of them until it is freed: a freed pointer that it does not know
// belongs to someone else (numpy's own allocator, below the threshold or when
// the arena is full). Each live pointer holds one reference to its block, as
// a Block object does; dropping it is the same release_block, so the block
// returns to the arena only once every other process that was sent it has
// let go too.
//
// The arena belongs to the process that made it. In a forked child every
// inherited pointer is the parent's: the child allocates nothing from the
// arena, and freeing such a pointer forgets it without touching the
// parent's reference count. A child that wants arrays in an arena of its
// own makes an ArrayData over it that inherits the parent's, which then
// still takes back the parent's pointers.
//
// fork gives a child copies of its parent's arrays, not views: around a
// fork (prepare_fork, then after_fork_parent or after_fork_child) the
// child maps each segment holding live pointers privately, copy-on-write
// over the segment's memory as it is at the fork. Unlike an anonymous
// page, a page that neither writes stays a view of the file until one does;
// what the parent writes to it later may show in the child. The arena
// should hold array data only: any other block in those segments becomes
// the child's own too.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "arena.hpp"
#include "segment.hpp"

namespace mizu {

// Where a pointer from ArrayData::allocate lies.
struct ArrayBlock {
    uint32_t segment_id;
    uint64_t offset;  // of the data, in the segment
    uint64_t length;  // bytes asked for
    uint32_t generation;
};

class ArrayData {
public:
    // Requests of at least `threshold` bytes go to `arena`. `inherited`
    // (may be null, never destroyed before this) is the one a forked child
    // had from its parent.
    ArrayData(std::shared_ptr<Arena> arena, std::size_t threshold, ArrayData* inherited = nullptr);
    ~ArrayData();
    ArrayData(const ArrayData&) = delete;
    ArrayData& operator=(const ArrayData&) = delete;

    // `bytes` of data from the arena, or null when the request is under the
    // threshold, the arena has no room, or this is a forked child: then the
    // caller allocates elsewhere.
    void* allocate(std::size_t bytes) noexcept;

    // True if `ptr` came from allocate, here or in the inherited ones: its
    // reference is dropped (not in a forked child) and it is forgotten.
    // False leaves it to its allocator.
    bool free(void* ptr) noexcept;

    // True, with *length set to the bytes asked for, if `ptr` came from
    // allocate here or in the inherited ones and is not freed.
    bool holds(const void* ptr, std::size_t* length) noexcept;

    // True, with *where filled in, while `ptr` (as allocate returned it) is
    // live here; false in a forked child.
    bool find(const void* ptr, ArrayBlock* where) noexcept;

    // pthread_atfork's three steps: the locks are held across the fork so
    // that no thread's half-done change reaches the child.
    void prepare_fork() noexcept;
    void after_fork_parent() noexcept;
    void after_fork_child() noexcept;

    std::size_t threshold() const noexcept { return threshold_; }
    std::size_t live() noexcept;
    // The bytes asked for of the pointers live here.
    std::size_t live_bytes() noexcept;
    const std::shared_ptr<Arena>& arena() const noexcept { return arena_; }

private:
    struct Entry {
        ArrayBlock where;
        std::shared_ptr<Segment> segment;
    };

    std::shared_ptr<Arena> arena_;
    ArrayData* inherited_;
    std::size_t threshold_;
    int pid_;
    std::mutex mu_;
    std::unordered_map<const void*, Entry> live_;
    std::size_t live_bytes_ = 0;
};

}  // namespace mizu
