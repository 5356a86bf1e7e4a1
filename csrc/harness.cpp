#include "harness.hpp"

#include <csignal>
#include <sched.h>
#include <cstring>
#include <sys/wait.h>
#include <system_error>
#include <unistd.h>
#include <vector>

#include "ring.hpp"
#include "segment.hpp"

namespace mizu {

namespace {

// Runs body in a forked child that leaves with _exit, never returning into
// the caller's runtime.
template <class Body>
pid_t spawn(Body&& body) {
    pid_t pid = fork();
    if (pid < 0) throw std::system_error(errno, std::generic_category(), "fork");
    if (pid == 0) {
        int status = 1;
        try {
            status = body() ? 0 : 1;
        } catch (...) {
        }
        _exit(status);
    }
    return pid;
}

bool reap(pid_t pid) {
    int status = 0;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) return false;
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

constexpr int64_t kPeerTimeoutNs = 60LL * 1000000000;

WaitOptions peer_options(const PeerWatch* peer) {
    WaitOptions opt;
    opt.deadline_ns = now_ns() + kPeerTimeoutNs;
    opt.peer = peer;
    return opt;
}

// The byte pattern of message (producer, seq): its length and contents are
// both derived from the pair, so any mix-up shows.
uint32_t message_length(uint32_t producer, uint64_t seq, uint32_t max_message) {
    uint64_t h = (seq + 1) * 0x9E3779B97F4A7C15ULL ^ producer;
    return 12 + uint32_t(h % (max_message - 11));
}

void fill(char* p, uint32_t len, uint32_t producer, uint64_t seq) {
    std::memcpy(p, &producer, 4);
    std::memcpy(p + 4, &seq, 8);
    for (uint32_t i = 12; i < len; ++i) p[i] = char(seq * 31 + producer * 7 + i);
}

bool intact(const char* p, uint32_t len, uint32_t producers, uint64_t per_producer, uint32_t max_message,
            uint32_t& producer, uint64_t& seq) {
    if (len < 12) return false;
    std::memcpy(&producer, p, 4);
    std::memcpy(&seq, p + 4, 8);
    if (producer >= producers || seq >= per_producer || len != message_length(producer, seq, max_message))
        return false;
    for (uint32_t i = 12; i < len; ++i)
        if (p[i] != char(seq * 31 + producer * 7 + i)) return false;
    return true;
}

}  // namespace

bool pin_to_cpu(int cpu) {
#if defined(__linux__)
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return sched_setaffinity(0, sizeof set, &set) == 0;
#else
    (void)cpu;
    return false;
#endif
}

namespace {

// Runs parent_side here and child_side in a forked child, each on its own CPU
// when pin is set; returns nanoseconds per round of parent_side.
template <class Parent, class Child>
double ping_pong(uint64_t rounds, bool pin, Parent&& parent_side, Child&& child_side) {
#if defined(__linux__)
    cpu_set_t saved;
    bool restore = pin && sched_getaffinity(0, sizeof saved, &saved) == 0 && CPU_COUNT(&saved) >= 2;
    int cpus[2] = {-1, -1};
    for (int cpu = 0, n = 0; restore && n < 2 && cpu < CPU_SETSIZE; ++cpu)
        if (CPU_ISSET(cpu, &saved)) cpus[n++] = cpu;
#else
    bool restore = false;
    int cpus[2] = {-1, -1};
#endif
    pid_t parent = getpid();
    pid_t child = spawn([&] {
        if (restore) pin_to_cpu(cpus[1]);
        PeerWatch watch(parent);
        return child_side(watch);
    });
    if (restore) pin_to_cpu(cpus[0]);
    bool ok;
    int64_t elapsed;
    {
        PeerWatch watch(child);
        int64_t start = now_ns();
        ok = parent_side(watch);
        elapsed = now_ns() - start;
    }
#if defined(__linux__)
    if (restore) sched_setaffinity(0, sizeof saved, &saved);
#endif
    if (!reap(child) || !ok) throw std::runtime_error("ping-pong child failed");
    return double(elapsed) / double(rounds);
}

}  // namespace

double pingpong_floor_ns(uint64_t rounds, bool one_line, bool pin) {
    auto seg = Segment::create(4096, nullptr, WaitBackend::native);
    auto* there = new (seg->base() + seg->alloc(sizeof(std::atomic<uint64_t>))) std::atomic<uint64_t>(0);
    auto* back = one_line ? there : new (seg->base() + seg->alloc(sizeof(std::atomic<uint64_t>))) std::atomic<uint64_t>(0);
    // On one line the two directions take turns: odd values go there, even ones come back.
    uint64_t step = one_line ? 2 : 1, echo = one_line ? 1 : 0;
    // acquire/release: the least ordering a hand-off of data needs.
    return ping_pong(
        rounds, pin,
        [&](const PeerWatch&) {
            for (uint64_t i = 0; i < rounds; ++i) {
                there->store(step * i + 1, std::memory_order_release);
                while (back->load(std::memory_order_acquire) != step * i + 1 + echo) cpu_relax();
            }
            return true;
        },
        [&](const PeerWatch&) {
            for (uint64_t i = 0; i < rounds; ++i) {
                while (there->load(std::memory_order_acquire) != step * i + 1) cpu_relax();
                back->store(step * i + 1 + echo, std::memory_order_release);
            }
            return true;
        });
}

double pingpong_ring_ns(uint64_t rounds, uint32_t msg_size, int64_t spin_limit_ns, WaitBackend backend, bool pin) {
    std::size_t ring_bytes = RingBase::footprint(64, msg_size);
    auto seg = Segment::create(4096 + 2 * round_up(ring_bytes, kFalseSharingRange), nullptr, backend);
    std::size_t off_a = seg->alloc(ring_bytes), off_b = seg->alloc(ring_bytes);
    SpscRing::create(seg->base() + off_a, ring_bytes, 64, msg_size, backend);
    SpscRing::create(seg->base() + off_b, ring_bytes, 64, msg_size, backend);
    std::vector<char> buf(msg_size, 'x');

    auto bounce = [&](SpscRing& in, SpscRing& out, const PeerWatch& peer, bool first) {
        Waiter pop_waiter(&seg->header().spin_gate), push_waiter(&seg->header().spin_gate);
        pop_waiter.set_spin_limit_ns(spin_limit_ns);
        push_waiter.set_spin_limit_ns(spin_limit_ns);
        WaitOptions opt = peer_options(&peer);
        Reservation res;
        auto receive = [&] {
            if (in.wait_pop(res, pop_waiter, opt) != WaitStatus::ready) return false;
            std::memcpy(buf.data(), res.data(), res.size());
            in.end_pop(res);
            return true;
        };
        for (uint64_t i = 0; i < rounds; ++i) {
            if (!first && !receive()) return false;
            if (out.wait_push(msg_size, res, push_waiter, opt) != WaitStatus::ready) return false;
            std::memcpy(res.data(), buf.data(), msg_size);
            out.end_push(res);
            if (first && !receive()) return false;
        }
        return true;
    };

    auto attach = [&](std::size_t off) { return SpscRing::attach(seg->base() + off, ring_bytes); };
    return ping_pong(
        rounds, pin,
        [&](const PeerWatch& peer) {
            SpscRing a = attach(off_a), b = attach(off_b);
            return bounce(b, a, peer, true);
        },
        [&](const PeerWatch& peer) {
            SpscRing a = attach(off_a), b = attach(off_b);
            return bounce(a, b, peer, false);
        });
}

StressResult stress_mpmc(int producers, int consumers, uint64_t per_producer, uint64_t capacity,
                         uint32_t max_message, WaitBackend backend) {
    if (producers < 1 || consumers < 1 || max_message < 16)
        throw std::invalid_argument("stress_mpmc needs a producer, a consumer and max_message >= 16");
    std::size_t ring_bytes = RingBase::footprint(capacity, max_message);
    uint64_t total = uint64_t(producers) * per_producer;
    std::size_t seen_bytes = total * sizeof(std::atomic<uint8_t>);
    std::size_t counter_bytes = 3 * sizeof(std::atomic<uint64_t>);
    auto seg = Segment::create(4096 + round_up(ring_bytes, kFalseSharingRange) + round_up(seen_bytes, kFalseSharingRange) +
                                   round_up(counter_bytes, kFalseSharingRange),
                               nullptr, backend);
    std::size_t ring_off = seg->alloc(ring_bytes);
    auto* seen = reinterpret_cast<std::atomic<uint8_t>*>(seg->base() + seg->alloc(seen_bytes));
    auto* counters = reinterpret_cast<std::atomic<uint64_t>*>(seg->base() + seg->alloc(counter_bytes));
    MpmcRing::create(seg->base() + ring_off, ring_bytes, capacity, max_message, backend);
    pid_t parent = getpid();

    std::vector<pid_t> children;
    for (int p = 0; p < producers; ++p)
        children.push_back(spawn([&, p] {
            PeerWatch watch(parent);
            MpmcRing ring = MpmcRing::attach(seg->base() + ring_off, ring_bytes);
            Waiter w(&seg->header().spin_gate);
            Reservation res;
            for (uint64_t seq = 0; seq < per_producer; ++seq) {
                uint32_t len = message_length(uint32_t(p), seq, max_message);
                if (ring.wait_push(len, res, w, peer_options(&watch)) != WaitStatus::ready) return false;
                fill(res.data(), len, uint32_t(p), seq);
                ring.end_push(res);
            }
            return true;
        }));
    std::vector<pid_t> consumer_pids;
    for (int c = 0; c < consumers; ++c)
        consumer_pids.push_back(spawn([&] {
            PeerWatch watch(parent);
            MpmcRing ring = MpmcRing::attach(seg->base() + ring_off, ring_bytes);
            Waiter w(&seg->header().spin_gate);
            Reservation res;
            uint64_t received = 0, duplicates = 0, corrupt = 0;
            for (;;) {
                WaitStatus st = ring.wait_pop(res, w, peer_options(&watch));
                if (st == WaitStatus::closed) break;
                if (st != WaitStatus::ready) return false;
                uint32_t producer;
                uint64_t seq;
                ++received;
                if (!intact(res.data(), res.size(), uint32_t(producers), per_producer, max_message, producer, seq))
                    ++corrupt;
                // relaxed: the counters are read only after every child is reaped.
                else if (seen[producer * per_producer + seq].fetch_add(1, std::memory_order_relaxed) != 0)
                    ++duplicates;
                ring.end_pop(res);
            }
            counters[0].fetch_add(received, std::memory_order_relaxed);
            counters[1].fetch_add(duplicates, std::memory_order_relaxed);
            counters[2].fetch_add(corrupt, std::memory_order_relaxed);
            return true;
        }));
    StressResult result{};
    for (pid_t pid : children) result.failed_children += reap(pid) ? 0 : 1;
    MpmcRing::attach(seg->base() + ring_off, ring_bytes).close();
    for (pid_t pid : consumer_pids) result.failed_children += reap(pid) ? 0 : 1;
    result.received = counters[0].load(std::memory_order_relaxed);
    result.duplicates = counters[1].load(std::memory_order_relaxed);
    result.corrupt = counters[2].load(std::memory_order_relaxed);
    for (uint64_t i = 0; i < total; ++i) result.missing += seen[i].load(std::memory_order_relaxed) == 0 ? 1 : 0;
    return result;
}

}  // namespace mizu
