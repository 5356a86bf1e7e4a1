// The core's own tests, run under AddressSanitizer and ThreadSanitizer.
// Threads stand in for processes: the sanitizers see across threads only,
// and the memory orders are the same whether the peer is a thread or a
// process mapping the same pages.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <system_error>
#include <thread>
#include <unistd.h>
#include <vector>

#include "harness.hpp"
#include "ring.hpp"
#include "segment.hpp"

using namespace mizu;

#define CHECK(cond)                                                                  \
    do {                                                                             \
        if (!(cond)) {                                                               \
            std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
            std::exit(1);                                                            \
        }                                                                            \
    } while (0)

template <class Exc, class F>
bool throws(F&& f) {
    try {
        f();
    } catch (const Exc&) {
        return true;
    }
    return false;
}

struct Fixture {
    std::unique_ptr<Segment> seg;
    std::size_t off, bytes;
    Fixture(uint64_t capacity, uint32_t max_message, RingKind kind, WaitBackend backend) {
        bytes = RingBase::footprint(capacity, max_message);
        seg = Segment::create(bytes + 4096, nullptr, backend);
        off = seg->alloc(bytes);
        if (kind == RingKind::spsc)
            SpscRing::create(seg->base() + off, bytes, capacity, max_message, backend);
        else
            MpmcRing::create(seg->base() + off, bytes, capacity, max_message, backend);
    }
    template <class R>
    R ring() {
        return R::attach(seg->base() + off, bytes);
    }
};

uint32_t length_of(uint64_t n, uint32_t max_message) { return 8 + uint32_t((n * 2654435761u) % (max_message - 7)); }

// Every message arrives once, in order per producer, with its bytes intact.
// With sleep_only, every wait goes through the sleep path with slices so long
// that a lost wake-up shows as a late wake-up.
template <class R>
void stream(RingKind kind, int producers, int consumers, uint64_t per_producer, WaitBackend backend,
            bool sleep_only = false) {
    const uint32_t max_message = 100;
    Fixture f(64, max_message, kind, backend);
    std::vector<std::atomic<uint8_t>> seen(producers * per_producer);
    std::vector<std::thread> threads;
    std::atomic<int> done_producers{0};
    std::atomic<uint64_t> errors{0}, late{0};
    auto make_waiter = [&] {
        Waiter w(&f.seg->header().spin_gate);
        if (sleep_only) {
            w.set_spin_limit_ns(0);
            w.set_slice_ns(60LL * 1000000000);
        }
        return w;
    };
    for (int p = 0; p < producers; ++p)
        threads.emplace_back([&, p] {
            R ring = f.ring<R>();
            Waiter w = make_waiter();
            Reservation res;
            for (uint64_t i = 0; i < per_producer; ++i) {
                uint64_t id = uint64_t(p) * per_producer + i;
                uint32_t len = length_of(id, max_message);
                CHECK(ring.wait_push(len, res, w, WaitOptions{}) == WaitStatus::ready);
                std::memcpy(res.data(), &id, 8);
                std::memset(res.data() + 8, int(id & 0xff), len - 8);
                ring.end_push(res);
            }
            late.fetch_add(w.stats().late_wakeups);
            if (done_producers.fetch_add(1) + 1 == producers) ring.close();
        });
    for (int c = 0; c < consumers; ++c)
        threads.emplace_back([&] {
            R ring = f.ring<R>();
            Waiter w = make_waiter();
            Reservation res;
            std::vector<uint64_t> last(producers, 0);
            while (ring.wait_pop(res, w, WaitOptions{}) == WaitStatus::ready) {
                uint64_t id;
                std::memcpy(&id, res.data(), 8);
                bool ok = id < seen.size() && res.size() == length_of(id, max_message);
                for (uint32_t i = 8; ok && i < res.size(); ++i) ok = uint8_t(res.data()[i]) == uint8_t(id & 0xff);
                if (!ok || seen[id].fetch_add(1) != 0) errors.fetch_add(1);
                uint64_t p = id / per_producer;
                if (consumers == 1 && ok) {
                    if (id < last[p]) errors.fetch_add(1);
                    last[p] = id;
                }
                ring.end_pop(res);
            }
            late.fetch_add(w.stats().late_wakeups);
        });
    for (auto& t : threads) t.join();
    CHECK(errors.load() == 0);
    CHECK(late.load() == 0);
    for (auto& s : seen) CHECK(s.load() == 1);
}

// A sleeper is always woken: a ping-pong in which every wait goes through
// the sleep path, with slices so long that a lost wake-up would show as a
// late wake-up rather than be covered by a timeout.
void wake_storm(WaitBackend backend, uint64_t rounds) {
    Fixture a(2, 8, RingKind::spsc, backend), b(2, 8, RingKind::spsc, backend);
    auto side = [&](Fixture& in_f, Fixture& out_f, bool first, WaitStats& stats) {
        SpscRing in = in_f.ring<SpscRing>(), out = out_f.ring<SpscRing>();
        Waiter pop_w, push_w;
        pop_w.set_spin_limit_ns(0);
        push_w.set_spin_limit_ns(0);
        pop_w.set_slice_ns(60LL * 1000000000);
        Reservation res;
        for (uint64_t i = 0; i < rounds; ++i) {
            if (!first) {
                CHECK(in.wait_pop(res, pop_w, WaitOptions{}) == WaitStatus::ready);
                in.end_pop(res);
            }
            CHECK(out.wait_push(8, res, push_w, WaitOptions{}) == WaitStatus::ready);
            out.end_push(res);
            if (first) {
                CHECK(in.wait_pop(res, pop_w, WaitOptions{}) == WaitStatus::ready);
                in.end_pop(res);
            }
        }
        stats = pop_w.stats();
    };
    WaitStats s1, s2;
    std::thread t([&] { side(a, b, false, s2); });
    side(b, a, true, s1);
    t.join();
    CHECK(s1.late_wakeups == 0 && s2.late_wakeups == 0);
    CHECK(s1.sleeps + s2.sleeps > 0);
}

// Two producers finish out of order while two consumers sleep: the wake-up
// for position 1 reaches a consumer that finds position 0 unready and sleeps
// again; the consumer that then takes position 0 must wake the other one.
void out_of_order_publication(WaitBackend backend) {
    Fixture f(8, 16, RingKind::mpmc, backend);
    MpmcRing ring = f.ring<MpmcRing>();
    std::atomic<uint64_t> late{0}, received{0};
    std::vector<std::thread> consumers;
    for (int c = 0; c < 2; ++c)
        consumers.emplace_back([&] {
            MpmcRing mine = f.ring<MpmcRing>();
            Waiter w;
            w.set_spin_limit_ns(0);
            w.set_slice_ns(2000000000);
            Reservation res;
            CHECK(mine.wait_pop(res, w, WaitOptions{}) == WaitStatus::ready);
            mine.end_pop(res);
            received.fetch_add(1);
            late.fetch_add(w.stats().late_wakeups);
        });
    while (ring.layout()->readable.sleepers.load() < 2) std::this_thread::yield();
    Reservation first, second;
    CHECK(ring.begin_push(4, first) && ring.begin_push(4, second));
    ring.end_push(second);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ring.end_push(first);
    for (auto& t : consumers) t.join();
    CHECK(received.load() == 2);
    CHECK(late.load() == 0);
}

void timeouts_and_close(WaitBackend backend) {
    Fixture f(4, 16, RingKind::mpmc, backend);
    MpmcRing ring = f.ring<MpmcRing>();
    Waiter w;
    Reservation res;
    WaitOptions opt;
    opt.deadline_ns = now_ns() + 20000000;
    CHECK(ring.wait_pop(res, w, opt) == WaitStatus::timed_out);
    char big[64] = {};
    CHECK(ring.max_message() == 48);
    CHECK(throws<std::length_error>([&] { ring.try_push(big, 49); }));
    for (int i = 0; i < 4; ++i) CHECK(ring.try_push("abcd", 4));
    CHECK(!ring.try_push("abcd", 4));
    std::thread closer([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        f.ring<MpmcRing>().close();
    });
    CHECK(ring.wait_push(4, res, w, WaitOptions{}) == WaitStatus::closed);
    closer.join();
    char buf[48];
    for (int i = 0; i < 4; ++i) CHECK(ring.try_pop(buf, sizeof buf) == 4);
    CHECK(ring.wait_pop(res, w, WaitOptions{}) == WaitStatus::closed);
}

void segments() {
    CHECK(throws<std::invalid_argument>([] { Segment::create(0, nullptr, WaitBackend::native); }));
    CHECK(throws<OutOfSharedMemory>([] { Segment::create(std::size_t(1) << 60, nullptr, WaitBackend::native); }));
    auto seg = Segment::create(1 << 16, nullptr, WaitBackend::native);
    auto peer = Segment::attach(seg->fd());
    std::size_t off = seg->alloc(100);
    std::memcpy(seg->base() + off, "hello", 6);
    CHECK(std::strcmp(peer->at(off, 6), "hello") == 0);
    CHECK(throws<std::invalid_argument>([&] { peer->at(seg->size() - 8, 64); }));
    CHECK(throws<OutOfSharedMemory>([&] { seg->alloc(1 << 17); }));
    int devnull = open("/dev/null", O_RDONLY);
    CHECK(throws<std::invalid_argument>([&] { Segment::attach(devnull); }));
    close(devnull);
    CHECK(throws<std::system_error>([] { Segment::attach(12345); }));
    CHECK(throws<std::invalid_argument>([&] { SpscRing::attach(seg->base() + off, 4096); }));
}

int main() {
    segments();
    for (WaitBackend backend : {WaitBackend::native, WaitBackend::portable}) {
        stream<SpscRing>(RingKind::spsc, 1, 1, 200000, backend);
        stream<MpmcRing>(RingKind::mpmc, 3, 3, 50000, backend);
        stream<MpmcRing>(RingKind::mpmc, 1, 1, 100000, backend);
        stream<MpmcRing>(RingKind::mpmc, 3, 3, 3000, backend, true);
        wake_storm(backend, 2000);
        out_of_order_publication(backend);
        timeouts_and_close(backend);
    }
    StressResult r = stress_mpmc(2, 2, 20000, 64, 64, WaitBackend::native);
    CHECK(r.received == 40000 && r.duplicates == 0 && r.corrupt == 0 && r.missing == 0 && r.failed_children == 0);
    CHECK(pingpong_floor_ns(1000, false, true) > 0 && pingpong_floor_ns(1000, true, false) > 0);
    CHECK(pingpong_ring_ns(1000, 8, 0, WaitBackend::portable, true) > 0);
    std::puts("core_test: all passed");
    return 0;
}
