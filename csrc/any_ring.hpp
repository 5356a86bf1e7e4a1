// A ring of either kind behind one interface, the kind read from the ring
// itself, for bindings that cannot be templates. The branch on the kind is
// perfectly predicted, so it costs nothing measurable.
#pragma once

#include <memory>
#include <optional>

#include "ring.hpp"

namespace mizu {

class AnyRing {
public:
    static std::unique_ptr<AnyRing> create(RingKind kind, void* mem, std::size_t bytes, uint64_t capacity,
                                           uint32_t max_message, WaitBackend backend) {
        if (kind == RingKind::spsc)
            return std::unique_ptr<AnyRing>(new AnyRing(SpscRing::create(mem, bytes, capacity, max_message, backend)));
        return std::unique_ptr<AnyRing>(new AnyRing(MpmcRing::create(mem, bytes, capacity, max_message, backend)));
    }
    static std::unique_ptr<AnyRing> attach(RingKind kind, void* mem, std::size_t bytes) {
        if (kind == RingKind::spsc) return std::unique_ptr<AnyRing>(new AnyRing(SpscRing::attach(mem, bytes)));
        return std::unique_ptr<AnyRing>(new AnyRing(MpmcRing::attach(mem, bytes)));
    }

    const RingBase& base() const noexcept { return spsc_ ? static_cast<const RingBase&>(*spsc_) : *mpmc_; }
    RingBase& base() noexcept { return spsc_ ? static_cast<RingBase&>(*spsc_) : *mpmc_; }

    bool begin_push(uint32_t len, Reservation& res) noexcept {
        return spsc_ ? spsc_->begin_push(len, res) : mpmc_->begin_push(len, res);
    }
    void end_push(const Reservation& res) noexcept { spsc_ ? spsc_->end_push(res) : mpmc_->end_push(res); }
    bool begin_pop(Reservation& res) noexcept { return spsc_ ? spsc_->begin_pop(res) : mpmc_->begin_pop(res); }
    void end_pop(const Reservation& res) noexcept { spsc_ ? spsc_->end_pop(res) : mpmc_->end_pop(res); }
    WaitStatus wait_push(uint32_t len, Reservation& res, Waiter& w, const WaitOptions& opt) {
        return spsc_ ? spsc_->wait_push(len, res, w, opt) : mpmc_->wait_push(len, res, w, opt);
    }
    WaitStatus wait_pop(Reservation& res, Waiter& w, const WaitOptions& opt) {
        return spsc_ ? spsc_->wait_pop(res, w, opt) : mpmc_->wait_pop(res, w, opt);
    }
    WaitStatus wait_readable(Waiter& w, const WaitOptions& opt) {
        return spsc_ ? spsc_->wait_readable(w, opt) : mpmc_->wait_readable(w, opt);
    }
    // MpmcRing's; a ring with one producer needs no name for it.
    void set_owner(uint32_t owner) noexcept {
        if (mpmc_) mpmc_->set_owner(owner);
    }
    std::size_t void_abandoned(uint32_t owner) noexcept { return mpmc_ ? mpmc_->void_abandoned(owner) : 0; }

private:
    explicit AnyRing(SpscRing r) : spsc_(r) {}
    explicit AnyRing(MpmcRing r) : mpmc_(r) {}
    std::optional<SpscRing> spsc_;
    std::optional<MpmcRing> mpmc_;
};

}  // namespace mizu
