// This process's hold on blocks of other processes' arenas (csrc/arena.hpp):
// references adopted from messages, and the blocks' bytes as R vectors see
// them: shared to read, mapped privately to write.
//
// Nothing here calls R, so these objects may live where R calls are not
// (see unwind.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "arena.hpp"
#include "messages.hpp"

namespace mizu::r {

// One block reference a message carries for this process, and the bytes of
// the block an array uses.
struct BlockSource {
    BlockRef block;   // as Block.share() describes it: pid and fd are the sharer's
    int fd;           // a descriptor of the block's segment open here, or -1 to
                      // reach it through /proc/<pid>/fd/<fd> (Linux)
    uint64_t start;   // offset of the array's bytes in the block's data
    uint64_t nbytes;
};

// Maps the out-of-band buffers a wire array names (by index) to the block
// references that came with its message (csrc/messages.hpp). Each is handed
// out once: whoever receives it adopts it. Implementations must not call R.
class BlockResolver {
public:
    // The bytes of buffer `buffer`, which must hold `extent` bytes. Throws
    // std::invalid_argument when the message has no such buffer, it is too
    // short, or another array took it.
    virtual BlockSource resolve(uint32_t buffer, uint64_t extent) = 0;

protected:
    ~BlockResolver() = default;
};

// The segment of `block`, mapped shared once per process while any block of
// it is held here: from `fd` (which stays the caller's) if it is not -1,
// else through the sharer's /proc/<pid>/fd/<fd>.
std::shared_ptr<Segment> attached_segment(const BlockRef& block, int fd);

// Drops the mappings attached_segment keeps of segments no block was
// opened from for idle_ns, once their blocks here are gone too.
void release_idle_segments(int64_t idle_ns);

// The BlockHolds of this process: references to blocks that their owners
// cannot reuse until they are dropped.
struct HoldCounts {
    std::size_t alive = 0;
    uint64_t pinned = 0;      // the bytes of the distinct blocks they hold
    uint64_t bytes_made = 0;  // the blocks' bytes, of every BlockHold ever made
};
HoldCounts block_holds() noexcept;

// One adopted reference to a block, dropped when destroyed: the last
// reference dropped anywhere returns the block to its owner.
class BlockHold {
public:
    // Adopts block's reference after block_data has checked it names a live
    // block of that allocation; fd as for attached_segment. Throws
    // std::invalid_argument, or std::system_error when the segment cannot
    // be mapped.
    BlockHold(const BlockRef& block, int fd);
    ~BlockHold();
    BlockHold(const BlockHold&) = delete;
    BlockHold& operator=(const BlockHold&) = delete;

    // The block's bytes, shared with every process that maps them.
    const char* shared_data() const noexcept { return data_; }
    const BlockRef& block() const noexcept { return block_; }
    const Segment& segment() const noexcept { return *segment_; }
    std::shared_ptr<Segment> segment_ptr() const noexcept { return segment_; }

private:
    std::shared_ptr<Segment> segment_;
    BlockRef block_;
    const char* data_;
    uint32_t held_;  // its note in the worker's table of held references (note_held), or 0
    int pid_;        // the process that adopted the reference
    bool counted_;   // in block_holds().pinned (false only if there was no memory to count it)
};

// The pages holding some bytes of a block, mapped MAP_PRIVATE and writable
// for one R vector: R may write to the vector in place, and the kernel then
// copies the page written to, so no write reaches the shared bytes. Pages
// never written show the block's bytes, which its sender leaves alone while
// any reference to it is held. The mapping is not pre-faulted: for a read
// of every page, the kernel's fault-around costs less than populating
// first, and MAP_POPULATE would copy every page of a writable private
// mapping.
//
// The private pages are mapped only when data() is first called: until
// then bytes() are the block's shared bytes, in this process's mapping of
// its segment, whose pages stay mapped from one block to the next. A vector
// that R only reads then costs no mapping, no page faults and no unmapping.
class MappedBlock {
public:
    // Takes `source`'s reference (see BlockHold) for the bytes
    // [start, start + nbytes), which must lie in the block and must not be
    // empty.
    explicit MappedBlock(const BlockSource& source);
    ~MappedBlock();
    MappedBlock(const MappedBlock&) = delete;
    MappedBlock& operator=(const MappedBlock&) = delete;

    // The bytes to read: the private pages once they are mapped, before
    // that the block's shared bytes, which must not be written.
    const char* bytes() const noexcept { return data_ ? data_ : hold_.shared_data() + start_; }
    // The bytes to write, mapping the private pages on the first call.
    // Throws std::system_error when they cannot be mapped.
    char* data() {
        if (!data_) map();
        return data_;
    }
    // The private pages, null before they are mapped.
    char* mapped() const noexcept { return data_; }
    uint64_t size() const noexcept { return size_; }
    uint64_t start() const noexcept { return start_; }
    const BlockRef& block() const noexcept { return hold_.block(); }
    std::shared_ptr<Segment> segment() const noexcept { return hold_.segment_ptr(); }

    // Whether anything was written through this mapping: whether the
    // kernel copied any of its pages (Linux's /proc/self/pagemap tells);
    // true where that cannot be known.
    bool written() const noexcept;

    // Another mapping of the same bytes, with a reference of its own; it
    // shows the block's bytes, not what was written here.
    std::unique_ptr<MappedBlock> remap() const;

private:
    void map();

    BlockHold hold_;
    void* mapping_ = nullptr;
    std::size_t mapping_size_ = 0;
    char* data_ = nullptr;  // null until mapped
    uint64_t start_;
    uint64_t size_;
};

// A resolver over a message's out-of-band records and the descriptors
// that came with it, open in this process. References it never handed out
// are dropped when it is destroyed.
class BlockTable final : public BlockResolver {
public:
    // fds[d] is the segment of the records whose descriptor is d, or -1 (see
    // BlockSource::fd). Throws std::invalid_argument for a record naming a
    // descriptor fds does not have.
    BlockTable(const std::vector<messages::BufferRecord>& records, const std::vector<int>& fds);
    ~BlockTable();
    BlockTable(const BlockTable&) = delete;
    BlockTable& operator=(const BlockTable&) = delete;

    BlockSource resolve(uint32_t buffer, uint64_t extent) override;

private:
    struct Entry {
        messages::BufferRecord record;
        int fd;
        bool taken;
    };
    std::vector<Entry> entries_;
};

}  // namespace mizu::r
