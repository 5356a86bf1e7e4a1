#include "array_data.hpp"

#include <exception>
#include <sys/mman.h>
#include <unordered_set>
#include <utility>

namespace mizu {

ArrayData::ArrayData(std::shared_ptr<Arena> arena, std::size_t threshold, ArrayData* inherited)
    : arena_(std::move(arena)), inherited_(inherited), threshold_(threshold ? threshold : 1), pid_(current_pid()) {}

ArrayData::~ArrayData() {
    if (current_pid() != pid_) return;
    for (auto& [ptr, entry] : live_) release_block(entry.segment->base(), entry.where.offset);
}

void* ArrayData::allocate(std::size_t bytes) noexcept {
    if (bytes < threshold_ || current_pid() != pid_) return nullptr;
    Allocation a;
    try {
        a = arena_->alloc(bytes);
    } catch (const std::exception&) {
        return nullptr;  // the arena is full: numpy's own allocator takes the request
    }
    std::shared_ptr<Segment> segment = arena_->segment(a.segment_id);
    char* data = segment->base() + a.offset;
    try {
        std::lock_guard<std::mutex> lock(mu_);
        live_.emplace(data, Entry{{a.segment_id, a.offset, bytes, a.generation}, segment});
        live_bytes_ += bytes;
    } catch (const std::exception&) {
        release_block(segment->base(), a.offset);
        return nullptr;
    }
    return data;
}

bool ArrayData::free(void* ptr) noexcept {
    std::shared_ptr<Segment> segment;
    uint64_t offset;
    {
        std::lock_guard<std::mutex> lock(mu_);
        auto it = live_.find(ptr);
        if (it == live_.end()) return inherited_ != nullptr && inherited_->free(ptr);
        segment = std::move(it->second.segment);
        offset = it->second.where.offset;
        live_bytes_ -= it->second.where.length;
        live_.erase(it);
    }
    if (current_pid() == pid_) release_block(segment->base(), offset);
    return true;
}

bool ArrayData::find(const void* ptr, ArrayBlock* where) noexcept {
    if (current_pid() != pid_) return false;  // the parent's block, no reference here
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.find(ptr);
    if (it == live_.end()) return false;
    *where = it->second.where;
    return true;
}

bool ArrayData::holds(const void* ptr, std::size_t* length) noexcept {
    {
        std::lock_guard<std::mutex> lock(mu_);
        auto it = live_.find(ptr);
        if (it != live_.end()) {
            *length = it->second.where.length;
            return true;
        }
    }
    return inherited_ != nullptr && inherited_->holds(ptr, length);
}

void ArrayData::prepare_fork() noexcept {
    // The same order as free's, this one's lock and then the inherited one's.
    mu_.lock();
    if (inherited_) inherited_->prepare_fork();
}

void ArrayData::after_fork_parent() noexcept {
    if (inherited_) inherited_->after_fork_parent();
    mu_.unlock();
}

void ArrayData::after_fork_child() noexcept {
    // Only this one's segments are shared in the parent: the inherited
    // ones' were made private when the parent itself was forked.
    std::unordered_set<const Segment*> done;
    for (auto& [ptr, entry] : live_) {
        const Segment* seg = entry.segment.get();
        if (!done.insert(seg).second) continue;
        // Same address, same file: every pointer stays valid. On failure
        // the segment stays shared, as before this step.
        mmap(seg->base(), seg->size(), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_FIXED, seg->fd(), 0);
    }
    if (inherited_) inherited_->after_fork_parent();
    mu_.unlock();
}

std::size_t ArrayData::live() noexcept {
    std::lock_guard<std::mutex> lock(mu_);
    return live_.size();
}

std::size_t ArrayData::live_bytes() noexcept {
    std::lock_guard<std::mutex> lock(mu_);
    return live_bytes_;
}

}  // namespace mizu
