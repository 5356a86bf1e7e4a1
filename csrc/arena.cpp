#include "arena.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <fcntl.h>
#include <new>
#include <pthread.h>
#include <random>
#include <string>
#include <sys/statvfs.h>
#include <system_error>
#include <unistd.h>

namespace mizu {

namespace {

constexpr int kBins = 64;
// A split leaves a free block only if it can hold some data.
constexpr uint64_t kMinSplit = 2 * kBlockAlign;

int bin_of(uint64_t size) noexcept { return 63 - __builtin_clzll(size); }

std::size_t page_size() noexcept {
    long page = sysconf(_SC_PAGESIZE);
    return page > 0 ? std::size_t(page) : 4096;
}

std::string hex(uint64_t v) {
    char buf[19];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
    return buf;
}

uint64_t steady_ns() noexcept {
    return uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                        std::chrono::steady_clock::now().time_since_epoch())
                        .count());
}

BlockHeader& header_of(char* base, uint64_t block) noexcept { return *reinterpret_cast<BlockHeader*>(base + block); }

std::atomic<int> cached_pid{0};

void forget_pid() noexcept { cached_pid.store(0, std::memory_order_relaxed); }

uint64_t random_id() {
    std::random_device rd;
    uint64_t id = 0;
    while (id == 0) id = (uint64_t(rd()) << 32) ^ rd();
    return id;
}

// attach_arena_segment, its errors naming the segment `name`.
std::shared_ptr<Segment> attach_named(int fd, const std::string& name, uint64_t arena_id, uint32_t segment_id) {
    std::shared_ptr<Segment> seg = Segment::attach(fd, name);
    arena_header(*seg, arena_id, segment_id);
    return seg;
}

}  // namespace

int current_pid() noexcept {
    // relaxed: every thread of a process computes the same value; the cache
    // only saves the system call.
    int pid = cached_pid.load(std::memory_order_relaxed);
    if (pid == 0) {
        static const int registered = pthread_atfork(nullptr, nullptr, forget_pid);
        (void)registered;
        pid = int(getpid());
        cached_pid.store(pid, std::memory_order_relaxed);
    }
    return pid;
}

ArenaSegmentHeader& arena_header(const Segment& seg, uint64_t arena_id, uint32_t segment_id) {
    auto* a = reinterpret_cast<ArenaSegmentHeader*>(seg.at(kArenaHeaderOffset, sizeof(ArenaSegmentHeader)));
    if (a->magic != kArenaMagic || a->arena_id != arena_id || a->segment_id != segment_id)
        throw std::invalid_argument("the shared segment found is not segment " + std::to_string(segment_id) +
                                    " of arena " + hex(arena_id));
    return *a;
}

char* block_data(const Segment& seg, uint64_t offset, uint64_t length, uint32_t generation) {
    const auto* a = reinterpret_cast<const ArenaSegmentHeader*>(seg.at(kArenaHeaderOffset, sizeof(ArenaSegmentHeader)));
    auto invalid = [&] {
        return std::invalid_argument("the block reference is invalid: offset " + std::to_string(offset) +
                                     " and length " + std::to_string(length) + " name no block of segment " +
                                     std::to_string(a->segment_id) + " of arena " + hex(a->arena_id));
    };
    // Lengths are compared with what is left, never added to an offset.
    if (offset % kBlockAlign != 0 || offset < a->heap_begin + kBlockAlign || offset > a->heap_end ||
        length > a->heap_end - offset)
        throw invalid();
    char* base = seg.base();
    const BlockHeader& blk = header_of(base, offset - kBlockAlign);
    // relaxed: a reference adopted rightly was published, by whatever carried
    // it, after its block's generation was set; a stale one reads another
    // generation, or 0 for a free block.
    if (generation == 0 || blk.generation.load(std::memory_order_relaxed) != generation ||
        block_refs(base, offset) == 0)
        throw std::invalid_argument("the block at offset " + std::to_string(offset) +
                                    " has no references left: a block reference was opened twice or after its release");
    // The reference keeps the block, so its size stays put.
    if (length > blk.size - kBlockAlign) throw invalid();
    return base + offset;
}

namespace {

// The table this process notes its references in (hold_in), the slots it
// has free there, and whose they are: a forked child notes nothing.
struct Holdings {
    std::mutex mu;
    // Read without the lock first (noting), so that a process that notes
    // nothing (a pool's client, a worker's forked child) takes no lock per
    // block; acquire pairs with hold_in's release of the table it set up.
    std::atomic<HeldTable*> table{nullptr};
    std::atomic<int> pid{0};
    std::vector<uint32_t> free;  // slot indices
};

Holdings& holdings() {
    // Never destroyed: blocks are released as the process exits.
    static auto* h = new Holdings;
    return *h;
}

bool noting(const Holdings& h) noexcept {
    // relaxed: pid is set with the table, which the acquire orders.
    return h.table.load(std::memory_order_acquire) && h.pid.load(std::memory_order_relaxed) == current_pid();
}

}  // namespace

void hold_in(HeldTable* table) noexcept {
    Holdings& h = holdings();
    std::lock_guard<std::mutex> lock(h.mu);
    // A table left behind notes nothing: its references stay this
    // process's to release, and the survivor must not release them too.
    if (noting(h))
        for (HeldSlot& slot : h.table.load(std::memory_order_relaxed)->slots)
            slot.live.store(0, std::memory_order_relaxed);
    h.free.clear();
    if (table) {
        h.free.reserve(kHeldSlots);
        for (std::size_t i = kHeldSlots; i-- > 0;) h.free.push_back(uint32_t(i));
    }
    h.pid.store(current_pid(), std::memory_order_relaxed);
    h.table.store(table, std::memory_order_release);
}

uint32_t note_held(uint64_t arena_id, uint32_t segment_id, uint64_t offset) noexcept {
    Holdings& h = holdings();
    if (!noting(h)) return 0;
    std::lock_guard<std::mutex> lock(h.mu);
    // relaxed here and in unhold: the lock orders hold_in's stores.
    HeldTable* table = h.table.load(std::memory_order_relaxed);
    if (!table || h.free.empty()) return 0;
    uint32_t i = h.free.back();
    h.free.pop_back();
    HeldSlot& slot = table->slots[i];
    slot.arena_id = arena_id;
    slot.offset = offset;
    slot.segment_id = segment_id;
    // release: the block is written before the mark, for a reader after
    // this process's death. The survivor reads only then, so no other
    // ordering is needed.
    slot.live.store(1, std::memory_order_release);
    return i + 1;
}

void unhold(uint32_t token) noexcept {
    Holdings& h = holdings();
    if (!noting(h)) return;
    std::lock_guard<std::mutex> lock(h.mu);
    HeldTable* table = h.table.load(std::memory_order_relaxed);
    if (!table) return;
    // relaxed: the release of the reference that follows is an acq_rel
    // RMW, whose release half keeps this store before it.
    table->slots[token - 1].live.store(0, std::memory_order_relaxed);
    h.free.push_back(token - 1);
}

bool HeldBlocks::add(uint64_t arena_id, uint32_t segment_id, uint64_t offset, uint64_t bytes) noexcept {
    if (pid_ != current_pid()) {
        counts_.clear();
        bytes_ = 0;
        pid_ = current_pid();
    }
    try {
        Count& count = counts_[{arena_id, segment_id, offset}];
        if (count.holds++ == 0) {
            count.bytes = bytes;
            bytes_ += bytes;
        }
        return true;
    } catch (const std::bad_alloc&) {
        return false;
    }
}

void HeldBlocks::remove(uint64_t arena_id, uint32_t segment_id, uint64_t offset) noexcept {
    if (pid_ != current_pid()) return;
    auto found = counts_.find({arena_id, segment_id, offset});
    if (found == counts_.end() || --found->second.holds != 0) return;
    bytes_ -= found->second.bytes;
    counts_.erase(found);
}

uint64_t HeldBlocks::bytes() const noexcept { return pid_ == current_pid() ? bytes_ : 0; }

void retain_block(char* base, uint64_t offset) noexcept {
    // relaxed: the caller holds a reference, so the block cannot be freed
    // meanwhile; whatever carries the new reference to its holder publishes it.
    header_of(base, offset - kBlockAlign).refs.fetch_add(1, std::memory_order_relaxed);
}

void release_block(char* base, uint64_t offset) noexcept {
    uint64_t block = offset - kBlockAlign;
    BlockHeader& blk = header_of(base, block);
    // acq_rel: the release half orders this holder's use of the data before
    // its drop; the acquire half, in the last holder, orders every other
    // holder's use before the block goes back to its owner.
    if (blk.refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
    auto& top = reinterpret_cast<ArenaSegmentHeader*>(base + kArenaHeaderOffset)->remote_free;
    uint64_t head = top.load(std::memory_order_relaxed);
    do {
        blk.next_remote = head;
        // release: next_remote and every use of the block before the owner
        // takes the stack; relaxed on failure, which only retries.
    } while (!top.compare_exchange_weak(head, block, std::memory_order_release, std::memory_order_relaxed));
}

uint64_t block_refs(const char* base, uint64_t offset) noexcept {
    // relaxed: a snapshot for sanity checks and tests.
    return reinterpret_cast<const BlockHeader*>(base + offset - kBlockAlign)->refs.load(std::memory_order_relaxed);
}

std::shared_ptr<Segment> attach_arena_segment(int fd, uint64_t arena_id, uint32_t segment_id) {
    return attach_named(fd, {}, arena_id, segment_id);
}

std::shared_ptr<Segment> attach_arena_segment(int pid, int fd, uint64_t arena_id, uint32_t segment_id) {
    std::string what = "segment " + std::to_string(segment_id) + " of arena " + hex(arena_id);
#if defined(__linux__)
    std::string path = "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd);
    int own = open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (own < 0)
        throw std::system_error(errno, std::generic_category(),
                                "cannot open " + path + " to map " + what +
                                    ": the process that shared the block must keep it until the reference is opened; "
                                    "or pickle the block through multiprocessing, which passes the descriptor");
    try {
        std::shared_ptr<Segment> seg = attach_named(own, path, arena_id, segment_id);
        close(own);
        return seg;
    } catch (...) {
        close(own);
        throw;
    }
#else
    (void)pid;
    (void)fd;
    throw std::system_error(ENOTSUP, std::generic_category(),
                            "cannot map " + what + " by process and descriptor on this platform: pickle the block "
                            "through multiprocessing, which passes the descriptor");
#endif
}

std::size_t default_arena_limit(const char* dir) {
    long pages = sysconf(_SC_PHYS_PAGES);
    std::size_t limit = pages > 0 ? std::size_t(pages) * page_size() / 2 : std::size_t(1) << 32;
    struct statvfs st;
    if (dir && statvfs(dir, &st) == 0) limit = std::min(limit, std::size_t(st.f_bavail) * std::size_t(st.f_frsize));
    return limit;
}

// One segment's blocks, seen by the owner. Not thread-safe: Arena locks.
class Heap {
public:
    Heap(std::shared_ptr<Segment> seg, uint64_t arena_id, uint32_t id, bool dedicated)
        : seg_(std::move(seg)), base_(seg_->base()), id_(id), dedicated_(dedicated) {
        std::size_t at = seg_->alloc(sizeof(ArenaSegmentHeader));
        std::size_t begin = seg_->alloc(seg_->free_bytes());
        if (at != kArenaHeaderOffset || begin != kHeapOffset) throw std::logic_error("unexpected arena segment layout");
        auto* a = new (base_ + at) ArenaSegmentHeader;
        a->magic = kArenaMagic;
        a->arena_id = arena_id;
        a->segment_id = id;
        a->owner_pid = current_pid();
        a->heap_begin = begin;
        a->heap_end = end_ = seg_->size();
        a->remote_free.store(0, std::memory_order_relaxed);
        top_ = &a->remote_free;
        begin_ = begin;
        make_header(begin, end_ - begin, 0);
        insert(begin);
    }

    uint32_t id() const noexcept { return id_; }
    bool dedicated() const noexcept { return dedicated_; }
    // A dedicated segment whose block is freed, kept for the next large request.
    bool spare() const noexcept { return dedicated_ && blocks_ == 0; }
    // When the heap last became a spare, by the arena's count.
    uint64_t spare_since() const noexcept { return spare_since_; }
    void mark_spare(uint64_t when) noexcept { spare_since_ = when; }
    // When the heap's last block was last freed, in steady-clock nanoseconds.
    uint64_t empty_since_ns() const noexcept { return empty_since_ns_; }
    void mark_empty(uint64_t ns) noexcept { empty_since_ns_ = ns; }
    const std::shared_ptr<Segment>& segment() const noexcept { return seg_; }
    std::size_t in_use() const noexcept { return in_use_; }
    std::size_t blocks() const noexcept { return blocks_; }
    std::size_t free_bytes() const noexcept { return free_bytes_; }
    std::size_t free_blocks() const noexcept { return free_blocks_; }

    std::size_t largest_free() const noexcept {
        if (!nonempty_) return 0;
        uint64_t largest = 0;
        for (uint64_t b = bins_[bin_of(nonempty_)]; b; b = at(b).next_free) largest = std::max(largest, at(b).size);
        return largest;
    }

    // A block of `size` bytes (header included, a multiple of kBlockAlign):
    // its offset, or 0 if no free block is large enough.
    uint64_t alloc(uint64_t size) noexcept {
        int bin = bin_of(size);
        uint64_t found = 0;
        for (uint64_t b = bins_[bin]; b && !found; b = at(b).next_free)
            if (at(b).size >= size) found = b;
        if (!found) {
            uint64_t larger = bin + 1 < kBins ? nonempty_ & (~uint64_t(0) << (bin + 1)) : 0;
            if (!larger) return 0;
            found = bins_[__builtin_ctzll(larger)];
        }
        unlink(found);
        BlockHeader& blk = at(found);
        uint64_t rest = blk.size - size;
        if (rest >= kMinSplit) {
            blk.size = size;
            make_header(found + size, rest, size);
            set_prev_size(found + size + rest, rest);
            insert(found + size);
        }
        blk.is_free = 0;
        if (++generation_ == 0) ++generation_;
        // relaxed: the block reaches other threads and processes only through
        // a later release operation (a ring push, a pipe) that publishes these.
        blk.generation.store(generation_, std::memory_order_relaxed);
        blk.refs.store(1, std::memory_order_relaxed);
        in_use_ += blk.size;
        ++blocks_;
        return found;
    }

    // The generation of the block at `block`, allocated by this thread.
    uint32_t generation(uint64_t block) const noexcept {
        // relaxed: this thread stored it.
        return at(block).generation.load(std::memory_order_relaxed);
    }

    // Frees every block on the remote-free stack; returns how many. An
    // entry that is no live block (a release through a garbled reference)
    // is skipped, and one outside the heap ends the walk, its link being
    // unreadable; at most as many entries as the heap has room for blocks
    // are taken, so a cycle ends too.
    std::size_t drain() noexcept {
        // relaxed: a hint; a push this misses is taken on the next call.
        if (top_->load(std::memory_order_relaxed) == 0) return 0;
        // acquire: pairs with the pushers' release; their links and their
        // last uses of the blocks happen before the blocks are reused.
        uint64_t block = top_->exchange(0, std::memory_order_acquire);
        std::size_t n = 0;
        for (uint64_t left = (end_ - begin_) / kBlockAlign; block && left; --left) {
            if (block < begin_ || block >= end_ || block % kBlockAlign != 0) break;
            BlockHeader& blk = at(block);
            uint64_t next = blk.next_remote;
            // relaxed: the exchange above synchronized with the last release.
            if (!blk.is_free && blk.refs.load(std::memory_order_relaxed) == 0) {
                free(block);
                ++n;
            }
            block = next;
        }
        return n;
    }

private:
    BlockHeader& at(uint64_t block) const noexcept { return header_of(base_, block); }

    void make_header(uint64_t block, uint64_t size, uint64_t prev_size) noexcept {
        BlockHeader& h = *new (base_ + block) BlockHeader;
        h.size = size;
        h.prev_size = prev_size;
        h.is_free = 0;
        // relaxed: no reference names the new header yet; one comes through a
        // release operation that publishes the header with it.
        h.generation.store(0, std::memory_order_relaxed);
        h.refs.store(0, std::memory_order_relaxed);
    }

    void set_prev_size(uint64_t block, uint64_t prev_size) noexcept {
        if (block < end_) at(block).prev_size = prev_size;
    }

    // Merges the block with its free neighbours and files the result.
    void free(uint64_t block) noexcept {
        // Marked free at once, so that the header, should its left neighbour
        // absorb it, still refuses references and a second free.
        at(block).is_free = 1;
        // relaxed: only stale references read it now, and refs, already 0,
        // refuses them whichever value they see.
        at(block).generation.store(0, std::memory_order_relaxed);
        uint64_t size = at(block).size;
        in_use_ -= size;
        --blocks_;
        uint64_t next = block + size;
        if (next < end_ && at(next).is_free) {
            unlink(next);
            size += at(next).size;
        }
        uint64_t prev_size = at(block).prev_size;
        if (prev_size && at(block - prev_size).is_free) {
            block -= prev_size;
            unlink(block);
            size += prev_size;
        }
        at(block).size = size;
        set_prev_size(block + size, size);
        insert(block);
    }

    void insert(uint64_t block) noexcept {
        BlockHeader& h = at(block);
        int bin = bin_of(h.size);
        h.is_free = 1;
        h.prev_free = 0;
        h.next_free = bins_[bin];
        if (h.next_free) at(h.next_free).prev_free = block;
        bins_[bin] = block;
        nonempty_ |= uint64_t(1) << bin;
        free_bytes_ += h.size;
        ++free_blocks_;
    }

    void unlink(uint64_t block) noexcept {
        BlockHeader& h = at(block);
        int bin = bin_of(h.size);
        if (h.prev_free)
            at(h.prev_free).next_free = h.next_free;
        else
            bins_[bin] = h.next_free;
        if (h.next_free) at(h.next_free).prev_free = h.prev_free;
        if (!bins_[bin]) nonempty_ &= ~(uint64_t(1) << bin);
        free_bytes_ -= h.size;
        --free_blocks_;
    }

    std::shared_ptr<Segment> seg_;
    char* base_;
    std::atomic<uint64_t>* top_;
    uint64_t begin_;
    uint64_t end_;
    uint32_t id_;
    bool dedicated_;
    uint64_t spare_since_ = 0;
    uint64_t empty_since_ns_ = 0;
    uint32_t generation_ = 0;  // of the last allocation
    uint64_t bins_[kBins] = {};
    uint64_t nonempty_ = 0;  // bit b set when bins_[b] is non-empty
    std::size_t in_use_ = 0, blocks_ = 0, free_bytes_ = 0, free_blocks_ = 0;
};

Arena::Arena(const ArenaOptions& options)
    : id_(random_id()),
      pid_(current_pid()),
      limit_(options.limit ? options.limit : default_arena_limit(options.dir)),
      dir_(options.dir ? options.dir : ""),
      in_dir_(options.dir != nullptr) {
    std::size_t page = page_size();
    segment_size_ = std::min(round_up(options.segment_size, page), limit_ / page * page);
    spare_cap_ = limit_ / 4;
    if (segment_size_ < kHeapOffset + kMinSplit)
        throw std::invalid_argument("an arena needs a segment size and a limit of at least " +
                                    std::to_string(kHeapOffset + kMinSplit) + " bytes, got " +
                                    std::to_string(options.segment_size) + " and " + std::to_string(limit_));
    add_segment(segment_size_, false);
}

Arena::~Arena() = default;

void Arena::check_owner() const {
    if (current_pid() != pid_)
        throw std::logic_error("this arena belongs to process " + std::to_string(pid_) +
                               "; a forked child must create an arena of its own");
}

Heap& Arena::add_segment(std::size_t bytes, bool dedicated) {
    heaps_.push_back(std::make_unique<Heap>(Segment::create(bytes, in_dir_ ? dir_.c_str() : nullptr, WaitBackend::native),
                                            id_, next_segment_id_, dedicated));
    ++next_segment_id_;
    capacity_ += bytes;
    return *heaps_.back();
}

Allocation Arena::alloc(std::size_t bytes) {
    check_owner();
    if (bytes > kMaxBlockBytes)
        throw OutOfSharedMemory("the shared arena cannot allocate " + std::to_string(bytes) +
                                " bytes: no block can hold more than " + std::to_string(kMaxBlockBytes) + " bytes");
    std::lock_guard<std::mutex> lock(mu_);
    drain_locked();
    if (bytes > limit_) throw_full(bytes);
    uint64_t size = round_up(bytes, kBlockAlign) + kBlockAlign;
    for (auto& heap : heaps_)
        if (!heap->dedicated())
            if (uint64_t block = heap->alloc(size))
                return {heap->id(), false, block + kBlockAlign, heap->generation(block)};
    Heap& heap = grow(size, bytes);
    uint64_t block = heap.alloc(size);
    return {heap.id(), heap.dedicated(), block + kBlockAlign, heap.generation(block)};
}

Heap& Arena::grow(std::size_t block_size, std::size_t bytes) {
    std::size_t need = kHeapOffset + block_size;
    bool dedicated = need > segment_size_;
    if (dedicated)
        if (Heap* spare = best_spare(need)) return *spare;
    std::size_t seg_bytes = segment_bytes_for(need, dedicated);
    // Unused segments make way for one the request fits, spares first and
    // the least recently freed of them first: rare, since it takes the limit
    // being reached.
    while (!seg_bytes && release_oldest_spare()) seg_bytes = segment_bytes_for(need, dedicated);
    if (!seg_bytes) {
        retire_if([](const Heap& heap) { return heap.blocks() == 0; });
        seg_bytes = segment_bytes_for(need, dedicated);
        if (!seg_bytes) throw_full(bytes);
    }
    try {
        return add_segment(seg_bytes, dedicated);
    } catch (const OutOfSharedMemory& e) {
        throw OutOfSharedMemory("the shared arena cannot grow by " + std::to_string(seg_bytes) + " bytes for a block of " +
                                std::to_string(bytes) + " bytes: " + e.what() +
                                "; lower the arena's limit (Arena(limit=...) or MIZU_ARENA_LIMIT) to fail earlier");
    }
}

std::size_t Arena::segment_bytes_for(std::size_t need, bool dedicated) const {
    std::size_t page = page_size();
    std::size_t room = limit_ > capacity_ ? (limit_ - capacity_) / page * page : 0;
    std::size_t bytes = dedicated ? round_up(need, page) : std::min(segment_size_, room);
    return bytes >= need && bytes <= room ? bytes : 0;
}

Heap* Arena::best_spare(std::size_t need) const {
    Heap* best = nullptr;
    for (auto& heap : heaps_) {
        std::size_t size = heap->segment()->size();
        if (heap->spare() && size >= need && size - need <= need && (!best || size < best->segment()->size()))
            best = heap.get();
    }
    return best;
}

bool Arena::release_oldest_spare() {
    const Heap* oldest = nullptr;
    for (auto& heap : heaps_)
        if (heap->spare() && (!oldest || heap->spare_since() < oldest->spare_since())) oldest = heap.get();
    if (oldest) retire_if([&](const Heap& heap) { return &heap == oldest; });
    return oldest != nullptr;
}

template <class Pred>
void Arena::retire_if(Pred retire) {
    auto kept = std::remove_if(heaps_.begin(), heaps_.end(), [&](const std::unique_ptr<Heap>& heap) {
        if (!retire(*heap)) return false;
        capacity_ -= heap->segment()->size();
        return true;
    });
    heaps_.erase(kept, heaps_.end());
}

void Arena::throw_full(std::size_t bytes) const {
    std::size_t free = 0, largest = 0;
    for (auto& heap : heaps_) {
        free += heap->free_bytes();
        largest = std::max(largest, heap->largest_free());
    }
    std::size_t unmapped = limit_ > capacity_ ? limit_ - capacity_ : 0;
    throw OutOfSharedMemory(
        "the shared arena cannot allocate " + std::to_string(bytes) + " bytes: " + std::to_string(free + unmapped) +
        " bytes are left (" + std::to_string(free) + " free in its " + std::to_string(heaps_.size()) +
        " segments, the largest free block " + std::to_string(largest) + " bytes, and " + std::to_string(unmapped) +
        " more it may map under its limit of " + std::to_string(limit_) +
        " bytes); release blocks, or raise the limit with Arena(limit=...) or the MIZU_ARENA_LIMIT environment "
        "variable");
}

std::size_t Arena::drain_locked() {
    std::size_t n = 0;
    bool new_spare = false;
    uint64_t now = 0;
    for (auto& heap : heaps_) {
        std::size_t freed = heap->drain();
        if (freed && heap->blocks() == 0) {
            if (!now) now = steady_ns();
            heap->mark_empty(now);
        }
        if (freed && heap->spare()) {
            heap->mark_spare(++spare_clock_);
            new_spare = true;
        }
        n += freed;
    }
    if (!new_spare) return n;
    // A released spare's memory goes back to the system once every process
    // that mapped it lets go.
    for (;;) {
        std::size_t spare_bytes = 0;
        for (auto& heap : heaps_)
            if (heap->spare()) spare_bytes += heap->segment()->size();
        if (spare_bytes <= spare_cap_) return n;
        release_oldest_spare();
    }
}

std::size_t Arena::release_idle(uint64_t idle_ns) {
    check_owner();
    std::lock_guard<std::mutex> lock(mu_);
    drain_locked();
    uint64_t now = steady_ns();
    const Heap* kept = nullptr;  // the first ordinary segment stays, for the next small request
    for (auto& heap : heaps_)
        if (!heap->dedicated()) {
            kept = heap.get();
            break;
        }
    std::size_t before = capacity_;
    retire_if([&](const Heap& heap) {
        return &heap != kept && heap.blocks() == 0 && now - heap.empty_since_ns() >= idle_ns;
    });
    return before - capacity_;
}

std::size_t Arena::drain() {
    check_owner();
    std::lock_guard<std::mutex> lock(mu_);
    return drain_locked();
}

ArenaStats Arena::stats() {
    check_owner();
    std::lock_guard<std::mutex> lock(mu_);
    drain_locked();
    ArenaStats s;
    for (auto& heap : heaps_) {
        s.in_use += heap->in_use();
        s.blocks += heap->blocks();
        s.free += heap->free_bytes();
        s.free_blocks += heap->free_blocks();
        s.capacity += heap->segment()->size();
        s.spares += heap->spare();
    }
    s.segments = heaps_.size();
    return s;
}

std::shared_ptr<Segment> Arena::segment(uint32_t id) {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& heap : heaps_)
        if (heap->id() == id) return heap->segment();
    return nullptr;
}

}  // namespace mizu
