// libFuzzer target for the rings' slot framing, in two modes chosen by the
// first byte.
//
// Model: a ring of either kind, of a capacity and message limit taken from
// the input, runs a sequence of pushes and pops (copying and by reservation)
// of messages of any length from 0 to max_message + 1, against a deque.
// Every message comes back whole and in order, a full ring refuses a push,
// and an oversize push throws std::length_error and leaves the ring as it
// was. The buffers are exactly as large as they must be, so an overread or
// overflow of a slot shows under AddressSanitizer.
//
// Attach: a well-formed ring whose header fields (magic, kind, slot size,
// capacity) the input then overwrites, attached with at most its own bytes.
// attach either throws std::invalid_argument or accepts a ring whose every
// slot lies inside those bytes and is aligned for its atomics; the target
// reads each slot's first and last byte through the rings' own indexing
// to show it. What a slot
// holds is written by the processes sharing the segment, which trust one
// another, so slot contents are not checked.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <stdexcept>
#include <string>

#include "ring.hpp"

namespace {

using namespace mizu;

void require(bool ok) {
    if (!ok) __builtin_trap();
}

// Exactly `bytes` of heap, aligned for a RingLayout.
struct Memory {
    void* p = nullptr;
    explicit Memory(std::size_t bytes) {
        require(posix_memalign(&p, alignof(RingLayout), bytes) == 0);
        std::memset(p, 0, bytes);
    }
    ~Memory() { std::free(p); }
    Memory(const Memory&) = delete;
    Memory& operator=(const Memory&) = delete;
};

// The slot indexing that both rings share, opened up.
struct SlotProbe : RingBase {
    explicit SlotProbe(RingLayout* r) : RingBase(r) {}
    using RingBase::slot;
};

template <class Ring>
void run_model(FuzzedDataProvider& in, Ring ring) {
    const uint32_t limit = ring.max_message();
    std::deque<std::string> model;
    std::string out(limit, '\0');
    uint32_t counter = 0;
    auto pop_matches = [&](const char* data, std::size_t len) {
        require(!model.empty() && model.front().size() == len && std::memcmp(model.front().data(), data, len) == 0);
        model.pop_front();
    };
    while (in.remaining_bytes() > 0) {
        switch (in.ConsumeIntegralInRange<int>(0, 3)) {
        case 0:
        case 1: {
            uint32_t len;
            switch (in.ConsumeIntegralInRange<int>(0, 3)) {
            case 0: len = 0; break;
            case 1: len = limit; break;
            case 2: len = limit + 1; break;
            default: len = in.ConsumeIntegralInRange<uint32_t>(0, limit + 1);
            }
            std::string msg = in.ConsumeBytesAsString(len);
            while (msg.size() < len) msg.push_back(char(counter++));
            const bool by_reservation = in.ConsumeBool();
            if (len > limit) {
                bool threw = false;
                try {
                    ring.check_length(len);
                    if (!by_reservation) ring.try_push(msg.data(), len);
                } catch (const std::length_error&) {
                    threw = true;
                }
                require(threw);
                break;
            }
            bool pushed;
            if (by_reservation) {
                Reservation res;
                pushed = ring.begin_push(len, res);
                if (pushed) {
                    std::memcpy(res.data(), msg.data(), len);
                    ring.end_push(res);
                }
            } else {
                pushed = ring.try_push(msg.data(), len);
            }
            require(pushed == (model.size() < ring.capacity()));
            if (pushed) model.push_back(std::move(msg));
            break;
        }
        case 2: {
            int64_t got = ring.try_pop(out.data(), out.size());
            if (got < 0)
                require(model.empty());
            else
                pop_matches(out.data(), std::size_t(got));
            break;
        }
        default: {
            Reservation res;
            if (!ring.begin_pop(res)) {
                require(model.empty());
                break;
            }
            pop_matches(res.data(), res.size());
            ring.end_pop(res);
        }
        }
        require(ring.size() == model.size() && ring.readable() == !model.empty());
    }
    for (int64_t got; (got = ring.try_pop(out.data(), out.size())) >= 0;) pop_matches(out.data(), std::size_t(got));
    require(model.empty());
}

template <class Ring>
void model(FuzzedDataProvider& in) {
    const uint64_t capacity = uint64_t(1) << in.ConsumeIntegralInRange<int>(1, 6);
    const uint32_t max_message = in.ConsumeIntegralInRange<uint32_t>(1, 600);
    const std::size_t bytes = RingBase::footprint(capacity, max_message);
    Memory mem(bytes);
    run_model(in, Ring::create(mem.p, bytes, capacity, max_message, WaitBackend::native));
}

template <class Ring>
void attach(FuzzedDataProvider& in) {
    const uint64_t capacity = uint64_t(1) << in.ConsumeIntegralInRange<int>(1, 6);
    const uint32_t max_message = in.ConsumeIntegralInRange<uint32_t>(1, 300);
    const std::size_t footprint = RingBase::footprint(capacity, max_message);
    const std::size_t bytes = footprint - in.ConsumeIntegralInRange<std::size_t>(0, footprint);
    Memory made(footprint);
    Ring::create(made.p, footprint, capacity, max_message, WaitBackend::native);
    // The fields before `closed`: magic, kind, slot_size, capacity.
    const std::size_t header = offsetof(RingLayout, closed);
    while (in.remaining_bytes() > 0) {
        const std::size_t at = in.ConsumeIntegralInRange<std::size_t>(0, header - 1);
        std::string patch = in.ConsumeBytesAsString(in.ConsumeIntegralInRange<std::size_t>(1, header - at));
        std::memcpy(static_cast<char*>(made.p) + at, patch.data(), patch.size());
    }
    Memory mem(bytes ? bytes : 1);
    std::memcpy(mem.p, made.p, bytes);
    try {
        Ring ring = Ring::attach(mem.p, bytes);
        require(ring.max_message() >= 1 && ring.capacity() >= 2);
        SlotProbe probe(ring.layout());
        volatile uint64_t sum = 0;
        for (uint64_t pos = 0; pos < ring.capacity(); ++pos) {
            Slot* s = probe.slot(pos);
            sum = sum + s->seq.load(std::memory_order_relaxed) + uint8_t(s->data()[ring.max_message() - 1]);
        }
    } catch (const std::invalid_argument&) {
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    FuzzedDataProvider in(data, size);
    switch (in.ConsumeIntegralInRange<int>(0, 3)) {
    case 0: model<SpscRing>(in); break;
    case 1: model<MpmcRing>(in); break;
    case 2: attach<SpscRing>(in); break;
    default: attach<MpmcRing>(in);
    }
    return 0;
}
