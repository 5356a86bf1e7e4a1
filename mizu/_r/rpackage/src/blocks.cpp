#include "blocks.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <deque>
#include <fcntl.h>
#include <map>
#include <new>
#include <stdexcept>
#include <string>
#include <sys/mman.h>
#include <system_error>
#include <tuple>
#include <unistd.h>
#include <utility>

#include "spin.hpp"

namespace mizu::r {

namespace {

using SegmentKey = std::pair<uint64_t, uint32_t>;  // arena id, segment id

// Never destroyed: R runs the finalizers of views still alive at exit,
// and they reach this through their blocks.
std::map<SegmentKey, std::weak_ptr<Segment>>& segment_cache() {
    static auto* cache = new std::map<SegmentKey, std::weak_ptr<Segment>>;
    return *cache;
}

// The last few ordinary segments opened here stay mapped after their
// blocks are gone, as in mizu's Python modules: block after block from
// one segment then costs one mmap, not one per block. A segment made for
// one large block goes with that block; a kept one goes once no block of
// it was opened for a while (release_idle_segments), so that the memory
// its owner gave back is not held here.
constexpr std::size_t kRecentSegments = 8;

struct Recent {
    std::shared_ptr<Segment> seg;
    int64_t used_ns;  // when a block of it was last opened (now_ns)
};

std::deque<Recent>& recent_segments() {
    static auto* recent = new std::deque<Recent>;
    return *recent;
}

void keep_recent(const std::shared_ptr<Segment>& seg) {
    auto& recent = recent_segments();
    if (seg->size() > 2 * ArenaOptions{}.segment_size) return;
    auto found = std::find_if(recent.begin(), recent.end(), [&](const Recent& r) { return r.seg == seg; });
    if (found != recent.end()) recent.erase(found);
    recent.push_back({seg, now_ns()});
    if (recent.size() > kRecentSegments) recent.pop_front();
}

// R's thread makes and drops every BlockHold.
HoldCounts holds;

// The blocks the BlockHolds hold: a block held twice pins its bytes once.
// Made by the first BlockHold, never destroyed: blocks are released as the
// process exits.
HeldBlocks* pins = nullptr;

std::string hex(uint64_t v) {
    char buf[19];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
    return buf;
}

std::size_t page_size() noexcept {
    long page = sysconf(_SC_PAGESIZE);
    return page > 0 ? std::size_t(page) : 4096;
}

}  // namespace

void release_idle_segments(int64_t idle_ns) {
    auto& recent = recent_segments();
    const int64_t cutoff = now_ns() - idle_ns;
    recent.erase(std::remove_if(recent.begin(), recent.end(), [&](const Recent& r) { return r.used_ns <= cutoff; }),
                 recent.end());
}

std::shared_ptr<Segment> attached_segment(const BlockRef& block, int fd) {
    auto& cache = segment_cache();
    SegmentKey key{block.arena_id, block.segment_id};
    auto found = cache.find(key);
    if (found != cache.end())
        if (std::shared_ptr<Segment> seg = found->second.lock()) {
            keep_recent(seg);
            return seg;
        }
    if (fd < 0 && block.pid <= 0)
        throw std::invalid_argument("no descriptor of segment " + std::to_string(block.segment_id) + " of arena " +
                                    hex(block.arena_id) + " was given, and it is not mapped in this process");
    std::shared_ptr<Segment> seg = fd >= 0 ? attach_arena_segment(fd, block.arena_id, block.segment_id)
                                           : attach_arena_segment(block.pid, block.fd, block.arena_id, block.segment_id);
    for (auto it = cache.begin(); it != cache.end();) it = it->second.expired() ? cache.erase(it) : std::next(it);
    cache[key] = seg;
    keep_recent(seg);
    return seg;
}

BlockHold::BlockHold(const BlockRef& block, int fd)
    : segment_(attached_segment(block, fd)),
      block_(block),
      data_(block_data(*segment_, block.offset, block.length, block.generation)),
      held_(note_held(block.arena_id, block.segment_id, block.offset)),
      pid_(current_pid()),
      counted_(false) {
    ++holds.alive;
    holds.bytes_made += block.length;
    // Uncounted (no memory to count it), the block looks pinned by
    // nothing: R collects later.
    try {
        if (!pins) pins = new HeldBlocks;
        counted_ = pins->add(block.arena_id, block.segment_id, block.offset, block.length);
    } catch (const std::bad_alloc&) {
    }
}

BlockHold::~BlockHold() {
    // A forked child (parallel::mcparallel) inherits the parent's holds but
    // none of their references: the parent releases them.
    if (pid_ != current_pid()) return;
    --holds.alive;
    if (counted_) pins->remove(block_.arena_id, block_.segment_id, block_.offset);
    if (held_) unhold(held_);
    release_block(segment_->base(), block_.offset);
}

HoldCounts block_holds() noexcept {
    HoldCounts counts = holds;
    counts.pinned = pins ? pins->bytes() : 0;
    return counts;
}

MappedBlock::MappedBlock(const BlockSource& source)
    : hold_(source.block, source.fd), start_(source.start), size_(source.nbytes) {
    const BlockRef& block = hold_.block();
    if (source.nbytes == 0 || source.start > block.length || source.nbytes > block.length - source.start)
        throw std::invalid_argument("bytes " + std::to_string(source.start) + " to " +
                                    std::to_string(source.start + source.nbytes) + " are no part of a block of " +
                                    std::to_string(block.length) + " bytes");
}

void MappedBlock::map() {
    std::size_t page = page_size();
    uint64_t first = hold_.block().offset + start_;
    uint64_t map_at = first / page * page;
    std::size_t mapping_size = round_up(first + size_ - map_at, page);
    void* mapping =
        mmap(nullptr, mapping_size, PROT_READ | PROT_WRITE, MAP_PRIVATE, hold_.segment().fd(), off_t(map_at));
    if (mapping == MAP_FAILED)
        throw std::system_error(errno, std::generic_category(),
                                "cannot map " + std::to_string(mapping_size) + " bytes of an arena block privately");
    mapping_ = mapping;
    mapping_size_ = mapping_size;
    data_ = static_cast<char*>(mapping) + (first - map_at);
}

MappedBlock::~MappedBlock() {
    if (mapping_) munmap(mapping_, mapping_size_);
}

bool MappedBlock::written() const noexcept {
    if (!data_) return false;
#if defined(__linux__)
    // One 64-bit entry per page: bit 63 present, 62 swapped, 61 a page of
    // the file (or shared) rather than a private copy.
    std::size_t page = page_size();
    int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return true;
    std::size_t first = reinterpret_cast<uintptr_t>(mapping_) / page;
    std::size_t pages = mapping_size_ / page;
    uint64_t entries[512];
    bool copied = false;
    for (std::size_t done = 0; done < pages && !copied;) {
        std::size_t n = std::min(pages - done, sizeof entries / sizeof entries[0]);
        ssize_t got = pread(fd, entries, n * sizeof(uint64_t), off_t((first + done) * sizeof(uint64_t)));
        if (got != ssize_t(n * sizeof(uint64_t))) {
            copied = true;
            break;
        }
        for (std::size_t i = 0; i < n && !copied; ++i)
            copied = (entries[i] >> 62 & 1) || ((entries[i] >> 63 & 1) && !(entries[i] >> 61 & 1));
        done += n;
    }
    close(fd);
    return copied;
#else
    return true;
#endif
}

std::unique_ptr<MappedBlock> MappedBlock::remap() const {
    const BlockRef& block = hold_.block();
    // The new mapping adopts this reference, taken on behalf of ours.
    retain_block(hold_.segment().base(), block.offset);
    return std::make_unique<MappedBlock>(BlockSource{block, hold_.segment().fd(), start_, size_});
}

BlockTable::BlockTable(const std::vector<messages::BufferRecord>& records, const std::vector<int>& fds) {
    entries_.reserve(records.size());
    for (const messages::BufferRecord& r : records) {
        if (r.descriptor >= fds.size())
            throw std::invalid_argument("a buffer record names descriptor " + std::to_string(r.descriptor) + " of " +
                                        std::to_string(fds.size()));
        entries_.push_back({r, fds[r.descriptor], false});
    }
}

BlockTable::~BlockTable() {
    for (const Entry& e : entries_) {
        if (e.taken) continue;
        try {
            BlockHold dropped(e.record.block, e.fd);
        } catch (const std::exception&) {
            // A reference that cannot be opened holds nothing to give back.
        }
    }
}

BlockSource BlockTable::resolve(uint32_t buffer, uint64_t extent) {
    if (buffer >= entries_.size())
        throw std::invalid_argument("an array in out-of-band buffer " + std::to_string(buffer) + " of a message with " +
                                    std::to_string(entries_.size()));
    Entry& e = entries_[buffer];
    if (e.taken) throw std::invalid_argument("two arrays in out-of-band buffer " + std::to_string(buffer));
    if (extent > e.record.length)
        throw std::invalid_argument("an array of " + std::to_string(extent) + " bytes in out-of-band buffer " +
                                    std::to_string(buffer) + " of " + std::to_string(e.record.length) + " bytes");
    e.taken = true;
    return {e.record.block, e.fd, e.record.offset, e.record.length};
}

}  // namespace mizu::r
