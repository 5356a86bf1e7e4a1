// The shared arena: variable-size blocks in shared memory for large payloads
// (array data, pickle-5 buffers), addressed by (segment id, offset) because
// every process maps a segment at its own address.
//
// One process owns an arena and is the only one that allocates from it. Its
// segments are ordinary Segments (anonymous, pre-faulted) holding an
// ArenaSegmentHeader and then a heap of blocks. The arena grows by adding
// segments up to a byte limit; a request larger than a segment's heap gets a
// segment of its own (a dedicated segment). Once its block is freed the
// owner keeps it mapped as a spare, and a later large request that it fits
// without wasting more than half of it takes it again: no new memory to
// reserve, zero and fault in. Spares count against the limit, are released
// first when a new segment needs room under it, and hold at most a quarter
// of the limit together, the least recently freed going beyond that.
//
// Allocation: boundary tags with segregated free lists. Every block starts
// with a BlockHeader holding its size and its left neighbour's size, so a
// freed block merges with both neighbours at once; free blocks sit on
// doubly linked lists in power-of-two bins, and a request takes the first
// fit in its own bin or any block of a larger non-empty bin (a bitmap finds
// it), splitting off the rest. Free space therefore never stays split once
// its blocks are freed. The free lists are the owner's alone, guarded by a
// process-local mutex so that threads can share the arena.
//
// Freeing: each block carries a process-shared reference count. Whoever
// drops the last reference, in whichever process, pushes the block onto its
// segment's remote-free list, a Treiber stack of offsets. The owner takes the
// whole stack with one exchange and frees the blocks on its next allocation,
// so no process but the owner ever touches the free lists, and the stack has
// no ABA problem: nothing is popped one by one. The owner's own drops take
// the same path, so there is one way for a block to be freed.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "layout.hpp"
#include "segment.hpp"

namespace mizu {

constexpr uint64_t kArenaMagic = 0x414e4552415a494dULL;  // "MIZARENA"

// Block data is aligned to this, and so is every header: neighbours' headers
// and data never share a false-sharing range, so reference counting on one
// block does not slow down writers of another.
constexpr std::size_t kBlockAlign = kFalseSharingRange;

// The most data a block can hold: its size, header and rounding included,
// must fit in a size_t, and its length in a Py_ssize_t.
constexpr std::size_t kMaxBlockBytes = std::size_t(PTRDIFF_MAX) - 2 * kBlockAlign;

// Other processes change headers through these, which must therefore work
// without a lock: a lock would live in the memory of one process only.
static_assert(std::atomic<uint64_t>::is_always_lock_free && std::atomic<uint32_t>::is_always_lock_free,
              "cross-process atomics need lock-free 64- and 32-bit atomics");

struct BlockHeader {
    uint64_t size;       // the whole block, header included; 0 never occurs
    uint64_t prev_size;  // size of the block to the left, 0 for the first
    uint64_t next_free;  // free-list links (block offsets, 0 ends the list);
    uint64_t prev_free;  // meaningful only while the block is free
    uint32_t is_free;
    // Which allocation of its heap the block serves, never 0; 0 while the
    // block is free. References carry it, so a stale one is refused.
    std::atomic<uint32_t> generation;
    std::atomic<uint64_t> refs;  // references held anywhere; the only field other processes change
    uint64_t next_remote;        // link in the remote-free stack, written by the pusher
};
static_assert(sizeof(BlockHeader) <= kBlockAlign, "a block header fits in its alignment unit");

struct ArenaSegmentHeader {
    uint64_t magic;
    uint64_t arena_id;
    uint32_t segment_id;
    int32_t owner_pid;
    uint64_t heap_begin;  // offset of the first block
    uint64_t heap_end;    // offset one past the last block
    // Offset of the block on top of the remote-free stack, 0 when empty.
    alignas(kFalseSharingRange) std::atomic<uint64_t> remote_free;
};

// Where every arena segment keeps its ArenaSegmentHeader: the segment's
// first allocation.
constexpr std::size_t kArenaHeaderOffset = round_up(sizeof(SegmentHeader), kFalseSharingRange);
// Bytes of a segment before its heap.
constexpr std::size_t kHeapOffset = kArenaHeaderOffset + round_up(sizeof(ArenaSegmentHeader), kFalseSharingRange);

// The compact description of one reference to a block, for another process:
// which arena and segment, where, and a (pid, fd) that has the segment open.
// Who receives it adopts the reference the sender took for it.
struct BlockRef {
    uint64_t arena_id;
    uint64_t offset;  // of the data, in the segment
    uint64_t length;  // bytes asked for
    uint32_t segment_id;
    int32_t pid;
    int32_t fd;
    uint32_t generation;  // the block's, when the reference was taken
};

// This process's id, cached (and forgotten across fork), since getpid() is a
// system call and blocks check it on every release.
int current_pid() noexcept;

// The arena header of a mapped arena segment. Throws std::invalid_argument if
// the segment is no segment of arena `arena_id` with id `segment_id`.
ArenaSegmentHeader& arena_header(const Segment& seg, uint64_t arena_id, uint32_t segment_id);

// Reference counting, for any process that maps the segment. `offset` is
// the block's data offset. retain_block adds a reference on behalf of one
// the caller holds; release_block drops one, and if it was the last, hands
// the block back to its owner.
void retain_block(char* base, uint64_t offset) noexcept;
void release_block(char* base, uint64_t offset) noexcept;

// The number of references to the block at data offset `offset`, read once.
uint64_t block_refs(const char* base, uint64_t offset) noexcept;

// The distinct blocks one process holds references to, and their bytes: a
// block held twice counts once. Each holder adds its block as it takes its
// reference and removes it as it lets go. Not thread-safe: the holders
// serialize their calls (Python's GIL, R's one thread). A forked child,
// whose inherited holders let go of nothing, counts from nothing.
class HeldBlocks {
public:
    // False when there is no memory to count the block: its holder then
    // does not remove it.
    bool add(uint64_t arena_id, uint32_t segment_id, uint64_t offset, uint64_t bytes) noexcept;
    void remove(uint64_t arena_id, uint32_t segment_id, uint64_t offset) noexcept;
    // The bytes of the blocks this process holds.
    uint64_t bytes() const noexcept;

private:
    struct Count {
        std::size_t holds = 0;
        uint64_t bytes = 0;  // the block's, as its first holder gave them
    };
    std::map<std::tuple<uint64_t, uint32_t, uint64_t>, Count> counts_;
    uint64_t bytes_ = 0;
    int pid_ = 0;  // the process counted
};

// What a process holds of blocks that other processes shared with it, kept
// in shared memory where a survivor reads it once that process has died: a
// pool's worker notes each reference it adopts in the table its task ring
// carries, and the client, once the worker's process has exited, releases
// those still noted (a task killed by its deadline or stop() held its
// arguments). One slot per reference: the holder writes the slot's block,
// then marks it live; it clears the mark before it releases the reference.
// A death in between leaks that one reference and never releases one twice.
struct HeldSlot {
    uint64_t arena_id;
    uint64_t offset;  // of the block's data
    uint32_t segment_id;
    std::atomic<uint32_t> live;
};

constexpr std::size_t kHeldSlots = 256;  // 6 KiB in every ring's header

struct HeldTable {
    HeldSlot slots[kHeldSlots];
};

// Notes this process's references from now on in `table` (all its slots
// free), or in none (nullptr), before the table's memory goes. The table
// noted in so far is cleared: what it noted is the process's own again.
// A forked child notes nothing.
void hold_in(HeldTable* table) noexcept;

// Notes a reference just adopted; a token for unhold, or 0 when there is
// no table or every slot is taken (the reference then goes unnoted).
uint32_t note_held(uint64_t arena_id, uint32_t segment_id, uint64_t offset) noexcept;

// Before the reference noted under `token` (not 0) is released.
void unhold(uint32_t token) noexcept;

// For the survivor, once the holder has died: takes the slot's reference,
// true if it was noted. Whoever takes it releases it; no one else can.
inline bool take_held(HeldSlot& slot) noexcept {
    // acquire: the slot's block, written before the mark, for the reader
    // (the holder is dead; survivors in two threads race only here).
    return slot.live.exchange(0, std::memory_order_acquire) == 1;
}

// The address of the data of the block at `offset` with `length` bytes,
// checked to be a block of the segment's heap with room for `length`, still
// in the allocation `generation` and referenced. Throws
// std::invalid_argument for a garbled or stale reference.
char* block_data(const Segment& seg, uint64_t offset, uint64_t length, uint32_t generation);

// Maps the arena segment behind `fd` (which stays the caller's) and checks
// it is the one named.
std::shared_ptr<Segment> attach_arena_segment(int fd, uint64_t arena_id, uint32_t segment_id);

// Maps the arena segment open as `fd` in process `pid` (through /proc on
// Linux) and checks it is the one named. Throws std::invalid_argument or
// std::system_error naming what failed.
std::shared_ptr<Segment> attach_arena_segment(int pid, int fd, uint64_t arena_id, uint32_t segment_id);

struct ArenaOptions {
    std::size_t segment_size = std::size_t(32) << 20;
    std::size_t limit = 0;       // bytes of segments at most; 0: default_arena_limit(dir)
    const char* dir = nullptr;   // see Segment::create
};

// Half the machine's memory, or for a directory the free space of its
// filesystem if that is less: room for a burst of payloads that still
// leaves the machine working.
std::size_t default_arena_limit(const char* dir);

struct Allocation {
    uint32_t segment_id;
    bool dedicated;   // the block has its segment to itself
    uint64_t offset;  // of the data
    uint32_t generation;
};

struct ArenaStats {
    std::size_t in_use = 0;      // bytes of live blocks, headers included
    std::size_t blocks = 0;      // live blocks
    std::size_t free = 0;        // bytes of free blocks
    std::size_t free_blocks = 0; // free blocks: one per segment once everything is freed
    std::size_t capacity = 0;    // bytes of all segments
    std::size_t segments = 0;
    std::size_t spares = 0;      // dedicated segments kept, empty, for reuse; among `segments`
};

class Heap;

class Arena {
public:
    // Creates the first segment. Throws std::invalid_argument for a segment
    // size too small to hold a block, OutOfSharedMemory if it cannot be had.
    explicit Arena(const ArenaOptions& options);
    ~Arena();
    Arena(const Arena&) = delete;
    Arena& operator=(const Arena&) = delete;

    // A block with `bytes` of data, its one reference the caller's. Frees
    // what other processes returned first. Throws OutOfSharedMemory when the
    // limit leaves no room or `bytes` exceeds kMaxBlockBytes,
    // std::logic_error in a forked child.
    Allocation alloc(std::size_t bytes);

    // Frees every block whose last reference was dropped; returns how many.
    std::size_t drain();

    // Gives back to the system every segment that has held no block for
    // `idle_ns` nanoseconds or more (spares, and ordinary segments but the
    // first); returns the bytes of segments unmapped. Other processes'
    // mappings of them keep the memory until they let go.
    std::size_t release_idle(uint64_t idle_ns);

    ArenaStats stats();

    // The segment with this id, or null if the arena has dropped it.
    std::shared_ptr<Segment> segment(uint32_t id);

    uint64_t id() const noexcept { return id_; }
    std::size_t limit() const noexcept { return limit_; }
    std::size_t segment_size() const noexcept { return segment_size_; }

private:
    void check_owner() const;
    std::size_t drain_locked();
    Heap& grow(std::size_t block_size, std::size_t bytes);
    // The spare with the fewest bytes that has `need` bytes of room and no
    // more than twice that, or null.
    Heap* best_spare(std::size_t need) const;
    // Unmaps the least recently freed spare; false if there is none.
    bool release_oldest_spare();
    Heap& add_segment(std::size_t bytes, bool dedicated);
    // Bytes of a new segment with `need` bytes of room, or 0 if the limit
    // leaves no room for one.
    std::size_t segment_bytes_for(std::size_t need, bool dedicated) const;
    template <class Pred>
    void retire_if(Pred retire);
    [[noreturn]] void throw_full(std::size_t bytes) const;

    std::mutex mu_;
    std::vector<std::unique_ptr<Heap>> heaps_;
    uint64_t id_;
    int pid_;
    std::size_t segment_size_;
    std::size_t limit_;
    std::size_t capacity_ = 0;
    std::size_t spare_cap_;        // bytes of spares at most
    uint64_t spare_clock_ = 0;     // spares freed so far, to order them
    uint32_t next_segment_id_ = 0;
    std::string dir_;
    bool in_dir_;
};

}  // namespace mizu
