#include "ring.hpp"

namespace mizu {

namespace {
uint32_t slot_size_for(uint32_t max_message) { return uint32_t(round_up(sizeof(Slot) + max_message, kSlotAlign)); }
}  // namespace

std::size_t RingBase::footprint(uint64_t capacity, uint32_t max_message) {
    if (capacity < 2 || capacity > kMaxRingCapacity || !is_power_of_two(capacity))
        throw std::invalid_argument("ring capacity must be a power of two from 2 to " +
                                    std::to_string(kMaxRingCapacity) + ", got " + std::to_string(capacity));
    if (max_message < 1 || max_message > kMaxSlotBytes - sizeof(Slot))
        throw std::invalid_argument("max_message must be from 1 to " + std::to_string(kMaxSlotBytes - sizeof(Slot)) +
                                    " bytes, got " + std::to_string(max_message));
    return sizeof(RingLayout) + capacity * slot_size_for(max_message);
}

RingLayout* RingBase::init(void* mem, std::size_t bytes, RingKind kind, uint64_t capacity, uint32_t max_message,
                           WaitBackend backend) {
    if (footprint(capacity, max_message) > bytes) throw std::invalid_argument("ring does not fit in the memory given");
    auto* r = new (mem) RingLayout;
    r->magic = kRingMagic;
    r->kind = uint32_t(kind);
    r->slot_size = slot_size_for(max_message);
    r->capacity = capacity;
    r->closed.store(0, std::memory_order_relaxed);
    r->tail.store(0, std::memory_order_relaxed);
    r->head.store(0, std::memory_order_relaxed);
    r->tickets.store(0, std::memory_order_relaxed);
    r->claimed_at.store(0, std::memory_order_relaxed);
    r->answered.store(0, std::memory_order_relaxed);
    event_init(r->readable, backend);
    event_init(r->writable, backend);
    // The slots are zero (fresh memory, as init's contract asks): every one
    // is at its first turn, and is not touched here.
    return r;
}

RingLayout* RingBase::check(void* mem, std::size_t bytes, RingKind kind) {
    auto* r = static_cast<RingLayout*>(mem);
    if (bytes < sizeof(RingLayout) || r->magic != kRingMagic)
        throw std::invalid_argument("no mizu ring at this offset of the segment");
    if (r->kind != uint32_t(kind))
        throw std::invalid_argument(std::string("the ring at this offset is ") +
                                    (r->kind == uint32_t(RingKind::spsc) ? "single" : "multi") +
                                    "-producer, not the kind asked for");
    // Bounded as footprint() bounds them, so the product cannot overflow.
    if (r->capacity < 2 || r->capacity > kMaxRingCapacity || !is_power_of_two(r->capacity) ||
        r->slot_size < sizeof(Slot) + 1 || r->slot_size > kMaxSlotBytes || r->slot_size % kSlotAlign != 0 ||
        sizeof(RingLayout) + r->capacity * r->slot_size > bytes)
        throw std::invalid_argument("the ring at this offset is corrupt or larger than the segment");
    return r;
}

}  // namespace mizu
