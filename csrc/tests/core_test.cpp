// The core's own tests, run under AddressSanitizer and ThreadSanitizer.
// Threads stand in for processes: the sanitizers see across threads only,
// and the memory orders are the same whether the peer is a thread or a
// process mapping the same pages.
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <deque>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <map>
#include <poll.h>
#include <random>
#include <random>
#include <string>
#include <system_error>
#include <thread>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#include "arena.hpp"
#include "any_ring.hpp"
#include "array_data.hpp"
#include "exit_bell.hpp"
#include "harness.hpp"
#include "liveness.hpp"
#include "messages.hpp"
#include "ring.hpp"
#include "segment.hpp"
#include "wire.hpp"
#include "worker_loop.hpp"

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

// Tickets under races: a producer withdraws the tickets queued behind the
// one the consumer works on while the consumer claims them, and marks
// every third answered; each ticket is claimed or withdrawn, never both,
// and the consumer skips exactly the withdrawn ones. Outcomes travel back
// on a second ring, as results do.
// Returns how many tasks were taken back: how many the race lets the client
// win depends on the threads' timing.
uint64_t tickets_race(uint64_t tickets, WaitBackend backend) {
    Fixture tf(64, 16, RingKind::spsc, backend), of(64, 16, RingKind::spsc, backend);
    std::vector<uint8_t> claimed(tickets + 1), skipped(tickets + 1), withdrawn(tickets + 1);
    std::thread consumer([&] {
        SpscRing tasks = tf.ring<SpscRing>(), outcomes = of.ring<SpscRing>();
        Waiter w(&tf.seg->header().spin_gate), ow(&of.seg->header().spin_gate);
        std::minstd_rand rng(11);
        Reservation res;
        while (tasks.wait_pop(res, w, WaitOptions{}) == WaitStatus::ready) {
            uint64_t t;
            std::memcpy(&t, res.data(), 8);
            tasks.end_pop(res);
            if (!tasks.claim(t)) {
                skipped[t] = 1;
                continue;
            }
            claimed[t] = 1;
            for (uint32_t spin = rng() % 2000; spin; --spin) std::atomic_signal_fence(std::memory_order_seq_cst);
            // Now and then a long run, behind which the producer has time to
            // withdraw however the two are scheduled.
            if (t % 97 == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
            if (t % 3 == 0) tasks.answer();
            CHECK(outcomes.wait_push(8, res, ow, WaitOptions{}) == WaitStatus::ready);
            std::memcpy(res.data(), &t, 8);
            outcomes.end_push(res);
        }
    });
    SpscRing tasks = tf.ring<SpscRing>(), outcomes = of.ring<SpscRing>();
    std::deque<uint64_t> awaited;
    std::minstd_rand rng(7);
    uint64_t next = 1, out;
    std::vector<char> buf(outcomes.max_message());
    while (next <= tickets || !awaited.empty()) {
        while (next <= tickets && awaited.size() < 48 && rng() % 4) {
            if (!tasks.try_push(&next, 8)) break;
            awaited.push_back(next++);
        }
        if (next > tickets && !tasks.closed()) tasks.close();
        while (outcomes.try_pop(buf.data(), buf.size()) == 8) {
            std::memcpy(&out, buf.data(), 8);
            CHECK(!awaited.empty() && awaited.front() == out);
            awaited.pop_front();
        }
        if (awaited.size() >= 2 && rng() % 3 == 0 && tasks.withdraw(awaited.front(), awaited.back(), rng() % 2)) {
            for (std::size_t i = 1; i < awaited.size(); ++i) withdrawn[awaited[i]] = 1;
            awaited.resize(1);
        }
    }
    consumer.join();
    uint64_t taken_back = 0;
    for (uint64_t t = 1; t <= tickets; ++t) {
        CHECK(claimed[t] + withdrawn[t] == 1);
        CHECK(skipped[t] == withdrawn[t]);
        taken_back += withdrawn[t];
    }
    CHECK(taken_back < tickets);
    return taken_back;
}

// A worker loop in a thread, its language echoing each task's payload, and
// a client that sends tasks of every size (chunked past a slot) and reads
// every result, each carrying its task's payload. Every 50th task waits in
// its run for the client, which then takes back the tasks queued behind it:
// the loop drops each of them, and runs every other task once. With
// max_tasks the loop retires after that many, its notice sent.
struct EchoLanguage {
    std::string body;
    uint64_t task = 0;
    uint64_t dropped = 0;
    bool holds = false;
    std::atomic<uint64_t> holding{0}, released{0};

    WorkerLanguage table() {
        WorkerLanguage l;
        l.self = this;
        l.prepare = [](void* self, const messages::Message& m, const char*, std::size_t) {
            auto* echo = static_cast<EchoLanguage*>(self);
            echo->body.assign(m.body, m.body_size);
            echo->task = m.task.task_id;
            return true;
        };
        l.drop = [](void* self) {
            ++static_cast<EchoLanguage*>(self)->dropped;
            return true;
        };
        l.run = [](void* self, WorkerLoop& loop) {
            auto* echo = static_cast<EchoLanguage*>(self);
            CHECK(loop.running() && loop.running()->task_id == echo->task);
            if (echo->holds && echo->task % 50 == 0) {
                echo->holding.store(echo->task, std::memory_order_release);
                while (echo->released.load(std::memory_order_acquire) != echo->task) std::this_thread::yield();
            }
            messages::ResultHeader h = loop.result_header(messages::Status::ok);
            std::string message(reinterpret_cast<const char*>(&h), sizeof h);
            message += echo->body;
            return loop.send(message.data(), message.size());
        };
        return l;
    }
};

std::string payload_of(uint64_t task) { return std::string(std::size_t(task * 37 % 700), char('a' + task % 26)); }

void worker_loop_serves(uint64_t tasks_n, long max_tasks, WaitBackend backend) {
    // Rings with room for every task and result the client has in flight (a
    // task of 700 bytes takes 9 slots): it blocks on neither.
    Fixture tf(64, 96, RingKind::spsc, backend), rf(128, 96, RingKind::mpmc, backend);
    std::unique_ptr<AnyRing> task_ring = AnyRing::attach(RingKind::spsc, tf.seg->base() + tf.off, tf.bytes);
    std::unique_ptr<AnyRing> result_ring = AnyRing::attach(RingKind::mpmc, rf.seg->base() + rf.off, rf.bytes);
    EchoLanguage language;
    language.holds = max_tasks == 0;
    WorkerLoop::Stop stop = WorkerLoop::Stop::language;
    std::thread worker([&] {
        Waiter tw(&tf.seg->header().spin_gate), rw(&rf.seg->header().spin_gate);
        PeerWatch client(getpid());
        WorkerLoop loop(*task_ring, tw, *result_ring, rw, client, 3, max_tasks, 0, language.table());
        CHECK(loop.notice(messages::Status::ready));
        stop = loop.serve();
    });
    SpscRing tasks = tf.ring<SpscRing>();
    MpmcRing results = rf.ring<MpmcRing>();
    Waiter tw(&tf.seg->header().spin_gate);
    messages::Reassembler chunks;
    std::vector<uint8_t> answered(tasks_n + 1), withdrawn(tasks_n + 1);
    std::deque<uint64_t> awaited;
    std::minstd_rand rng(5);
    uint64_t next = 1, notices = 0, retiring = 0;
    std::vector<char> slot(results.max_message());
    std::string whole, chunk(tasks.max_message(), '\0');
    auto send = [&](const std::string& message) {
        Reservation res;
        auto push = [&](const char* data, std::size_t size) {
            CHECK(tasks.wait_push(uint32_t(size), res, tw, WaitOptions{}) == WaitStatus::ready);
            std::memcpy(res.data(), data, size);
            tasks.end_push(res);
        };
        if (message.size() <= tasks.max_message()) return push(message.data(), message.size());
        for (std::size_t i = 0, n = messages::chunk_count(message.size(), tasks.max_message()); i < n; ++i)
            push(chunk.data(), messages::write_chunk(message.data(), message.size(), 0, tasks.max_message(), i,
                                                     &chunk[0]));
    };
    auto receive = [&]() {
        int64_t n = results.try_pop(slot.data(), slot.size());
        if (n < 0) return false;
        const char* data = slot.data();
        std::size_t size = std::size_t(n);
        if (messages::is_chunk(data, size)) {
            if (!chunks.feed(data, size, whole)) return true;
            data = whole.data();
            size = whole.size();
        }
        messages::Message m = messages::read_message(data, size);
        CHECK(m.kind == messages::kResult && m.sender == 3);
        if (m.result.task_id == 0) {
            ++notices;
            retiring += m.result.status == uint8_t(messages::Status::retiring);
            return true;
        }
        uint64_t t = m.result.task_id;
        CHECK(t <= tasks_n && !answered[t] && !withdrawn[t]);
        wire::Writer expected;
        expected.begin_message();
        std::string payload = payload_of(t);
        expected.put_bytes(payload.data(), payload.size());
        CHECK(std::string(m.body, m.body_size) == std::string(expected.data(), expected.size()));
        answered[t] = 1;
        CHECK(!awaited.empty() && awaited.front() == t);
        awaited.pop_front();
        return true;
    };
    uint64_t limit = max_tasks > 0 ? uint64_t(max_tasks) : tasks_n;
    while (next <= limit || !awaited.empty()) {
        while (next <= limit && awaited.size() < 6 && rng() % 3) {
            messages::TaskHeader h = messages::task_header(next, 1, messages::kCall);
            wire::Writer w;
            std::memcpy(w.put_header(sizeof h), &h, sizeof h);
            w.begin_message();
            std::string payload = payload_of(next);
            w.put_bytes(payload.data(), payload.size());
            send(std::string(w.data(), w.size()));
            awaited.push_back(next++);
        }
        while (receive()) {}
        uint64_t held = language.holding.load(std::memory_order_acquire);
        if (held != 0 && !awaited.empty() && awaited.front() == held && (awaited.size() >= 2 || next > limit)) {
            if (awaited.size() >= 2) {
                // The worker runs `held`: every task behind it is still unclaimed.
                CHECK(tasks.withdraw(held, awaited.back()));
                for (std::size_t i = 1; i < awaited.size(); ++i) withdrawn[awaited[i]] = 1;
                awaited.resize(1);
            }
            language.holding.store(0, std::memory_order_relaxed);
            language.released.store(held, std::memory_order_release);
        }
    }
    tasks.close();
    worker.join();
    while (receive()) {}
    uint64_t ran = 0, taken_back = 0;
    for (uint64_t t = 1; t <= tasks_n; ++t) {
        ran += answered[t];
        taken_back += withdrawn[t];
        CHECK(answered[t] + withdrawn[t] == (t <= limit));
    }
    if (max_tasks > 0) {
        CHECK(stop == WorkerLoop::Stop::retired && retiring == 1 && notices == 2 && ran == limit);
        return;
    }
    CHECK(stop == WorkerLoop::Stop::client_gone && notices == 1 && retiring == 0);
    CHECK(taken_back == language.dropped && taken_back > 0);
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

// A producer that dies between claiming a slot and completing it: once it is
// voided, consumers get an empty message there and what others pushed after
// it. A claim's time is read back with its ticket. A consumer's replacement
// finds the ring emptied of what the dead one left unread, and claims anew.
void dead_peers() {
    Fixture f(8, 16, RingKind::mpmc, WaitBackend::native);
    MpmcRing dead = f.ring<MpmcRing>(), live = f.ring<MpmcRing>(), consumer = f.ring<MpmcRing>();
    dead.set_owner(111);
    live.set_owner(222);
    Reservation abandoned, res;
    CHECK(dead.begin_push(4, abandoned));
    CHECK(live.try_push("late", 4));
    CHECK(live.begin_push(4, res));   // claimed, not yet completed, by a producer that lives
    char out[64];
    CHECK(consumer.try_pop(out, sizeof out) == -1);
    CHECK(consumer.void_abandoned(333) == 0 && consumer.void_abandoned(111) == 1);
    CHECK(consumer.try_pop(out, sizeof out) == 0);
    CHECK(consumer.try_pop(out, sizeof out) == 4 && std::memcmp(out, "late", 4) == 0);
    std::memcpy(res.data(), "next", 4);
    live.end_push(res);
    CHECK(consumer.try_pop(out, sizeof out) == 4 && std::memcmp(out, "next", 4) == 0);

    Fixture g(8, 16, RingKind::spsc, WaitBackend::native);
    SpscRing producer = g.ring<SpscRing>(), gone = g.ring<SpscRing>();
    for (int i = 0; i < 3; ++i) CHECK(producer.try_push("task", 4));
    CHECK(gone.begin_pop(res) && gone.claim(5, 1234));
    int64_t at = 0;
    CHECK(producer.last_claim(at) == 5 && at == 1234);
    producer.reset_consumer();   // it died holding the slot
    SpscRing successor = g.ring<SpscRing>();
    CHECK(successor.try_pop(out, sizeof out) == -1 && producer.last_claim(at) == 0);
    CHECK(producer.try_push("new!", 4) && successor.try_pop(out, sizeof out) == 4 && successor.claim(6, 99));
}

// A consumer that marks the ticket it acts on answered: nothing behind it
// is withdrawn any more, until it claims the next; marked after a
// withdrawal, the withdrawal holds.
void answered_tickets() {
    Fixture f(8, 16, RingKind::spsc, WaitBackend::native);
    SpscRing producer = f.ring<SpscRing>(), consumer = f.ring<SpscRing>();
    int64_t at = 0;
    CHECK(consumer.claim(5, 10));
    consumer.answer();
    consumer.answer();
    CHECK(producer.last_claim(at) == (5 | kAnswered) && at == 10);
    CHECK(!producer.withdraw(5, 9));
    CHECK(consumer.claim(6, 20) && producer.withdraw(6, 9));
    consumer.answer();
    CHECK(producer.last_claim(at) == (kWithdrawn | kAnswered | 9) && !producer.withdraw(6, 12));
    CHECK(!consumer.claim(9, 30) && consumer.claim(10, 40) && producer.last_claim(at) == 10 && at == 40);
    // Behind an answered ticket, asked to: the answer stays marked.
    consumer.answer();
    CHECK(!producer.withdraw(10, 13) && producer.withdraw(10, 13, true));
    CHECK(producer.last_claim(at) == (kWithdrawn | kAnswered | 13) && !producer.withdraw(10, 15));
    CHECK(producer.withdraw(10, 15, true) && producer.last_claim(at) == (kWithdrawn | kAnswered | 15));
    CHECK(!consumer.claim(11, 50) && !consumer.claim(15, 50) && consumer.claim(16, 60));
    CHECK(producer.last_claim(at) == 16 && at == 60 && !producer.withdraw(10, 20, true));
    // The noted answer is a hint beside the word, which it leaves alone.
    CHECK(producer.answered() == 0);
    consumer.note_answered(16);
    CHECK(producer.answered() == 16 && producer.last_claim(at) == 16 && producer.withdraw(16, 20));
    producer.reset_consumer();
    CHECK(producer.answered() == 0 && producer.last_claim(at) == 0);
}

// The producer pushes a message `delay` after `after()`; returns the
// waiter's stats for the wait, with spin or not. For a wait expected to
// sleep (`sleeps`), the delay counts from the waiter's announcing itself a
// sleeper, or from a second on at the latest: however late this thread
// comes to wait, the message is not there already (a wait that finds it
// there neither spins nor sleeps), and a waiter that spins instead, for up
// to its 2 s budget, still finds it while spinning.
template <class Before>
WaitStats wait_for_late_message(SpscRing& ring, Before after, bool spin = true,
                                std::chrono::milliseconds delay = std::chrono::milliseconds(20),
                                bool sleeps = false, bool leave = false) {
    Waiter w;
    w.set_spin_limit_ns(2000000000);
    w.set_slice_ns(60LL * 1000000000);
    std::thread producer([&] {
        auto latest = std::chrono::steady_clock::now() + std::chrono::seconds(1);
        // relaxed: when to push, no more; the ring orders the message itself.
        while (sleeps && ring.layout()->readable.sleepers.load(std::memory_order_relaxed) == 0 &&
               std::chrono::steady_clock::now() < latest)
            std::this_thread::yield();
        std::this_thread::sleep_for(delay);
        Reservation res;
        CHECK(ring.begin_push(4, res));
        ring.end_push(res);
    });
    after();
    WaitOptions opt;
    opt.spin = spin;
    opt.leave_peer_cpu = leave;
    Reservation res;
    CHECK(ring.wait_pop(res, w, opt) == WaitStatus::ready);
    ring.end_pop(res);
    producer.join();
    return w.stats();
}

// A wait that spins through a short delay, tried again if the scheduler
// interrupted the spin (a busy machine): its wait then sleeps by design.
bool spins_through(SpscRing& ring) {
    for (int attempt = 0; attempt < 5; ++attempt) {
        ring.layout()->readable.notifier_cpu.store(-1);
        WaitStats st = wait_for_late_message(ring, [] { contended_until_ns.store(0); }, true,
                                             std::chrono::milliseconds(2));
        if (st.spin_wins == 1 && st.sleeps == 0) return true;
    }
    return false;
}

// A waiter told not to spin sleeps at once however long its spin budget;
// told nothing, the same wait ends while spinning.
void waits_without_spinning(WaitBackend backend) {
    Fixture f(4, 16, RingKind::spsc, backend);
    SpscRing ring = f.ring<SpscRing>();
    WaitStats st = wait_for_late_message(ring, [] { contended_until_ns.store(0); }, false,
                                         std::chrono::milliseconds(20), true);
    CHECK(st.sleeps >= 1 && st.spin_wins == 0);
    CHECK(spins_through(ring));
}

// A waiter sleeps at once, whatever its budget, when its peer last ran on
// its own CPU, and for a while after a spin of its process was preempted.
void waits_give_way(WaitBackend backend) {
    Fixture f(4, 16, RingKind::spsc, backend);
    SpscRing ring = f.ring<SpscRing>();
    std::thread peer([&] {
        pin_to_cpu(0);
        Reservation res;
        CHECK(ring.begin_push(4, res));
        ring.end_push(res);   // notes CPU 0 as the notifier's
    });
    peer.join();
    Reservation res;
    CHECK(ring.begin_pop(res));
    ring.end_pop(res);
    std::thread same_cpu([&] {
        pin_to_cpu(0);
        contended_until_ns.store(0);
        // The late producer runs elsewhere, but the wait decides by the last notifier.
        WaitStats st = wait_for_late_message(ring, [] {}, true, std::chrono::milliseconds(20), true);
        CHECK(st.spin_wins == 0 && st.sleeps >= 1);
    });
    same_cpu.join();
    // Now the notifier's CPU is the late producer's, whichever: forget it.
    ring.layout()->readable.notifier_cpu.store(-1);
    // A no-spin period far longer than kContendedNs: it must not end before this thread, however late, waits.
    WaitStats st = wait_for_late_message(ring, [] { contended_until_ns.store(now_ns() + 600 * kContendedNs); }, true,
                                         std::chrono::milliseconds(20), true);
    CHECK(st.spin_wins == 0 && st.sleeps >= 1);
    CHECK(spins_through(ring));
}

// A waiter that may leave its peer's CPU (a worker's) moves off it, keeps
// its affinity mask, and spins where it would have slept at once.
void waits_leave_the_peers_cpu(WaitBackend backend) {
#if defined(__linux__)
    cpu_set_t all;
    CHECK(sched_getaffinity(0, sizeof all, &all) == 0);
    int first = 0;
    while (!CPU_ISSET(first, &all)) ++first;
    if (CPU_COUNT(&all) < 2) {
        CHECK(!leave_cpu(first));
        return;
    }
    Fixture f(4, 16, RingKind::spsc, backend);
    SpscRing ring = f.ring<SpscRing>();
    std::thread moving([&] {
        CHECK(pin_to_cpu(first));
        CHECK(!leave_cpu(first));   // its only CPU
        CHECK(sched_setaffinity(0, sizeof all, &all) == 0);
        CHECK(leave_cpu(first) && current_cpu() != first);
        cpu_set_t after;
        CHECK(sched_getaffinity(0, sizeof after, &after) == 0 && CPU_EQUAL(&after, &all));
        // A wait on `first`, which the ring notes as the notifier's CPU, with
        // this process's spins stopped until `contended` (0: not stopped);
        // tried again until it ends as `expected` says, as a loaded machine
        // may move the thread before the wait or interrupt its spin (which
        // then sleeps by design, as in spins_through).
        auto waits_on_first = [&](int64_t contended, auto expected) {
            for (int attempt = 0; attempt < 20; ++attempt) {
                CHECK(pin_to_cpu(first));
                Reservation res;
                CHECK(ring.begin_push(4, res));
                ring.end_push(res);
                CHECK(ring.begin_pop(res));
                ring.end_pop(res);
                CHECK(sched_setaffinity(0, sizeof all, &all) == 0);
                WaitStats st = wait_for_late_message(ring, [=] { contended_until_ns.store(contended); }, true,
                                                     std::chrono::milliseconds(2), false, true);
                if (expected(st)) return true;
            }
            return false;
        };
        // It leaves, then spins where it would have slept.
        CHECK(waits_on_first(0, [](const WaitStats& st) {
            return st.moves == 1 && st.spin_wins == 1 && st.sleeps == 0;
        }));
        // With its spins stopped, it still leaves, and sleeps.
        CHECK(waits_on_first(now_ns() + 10000000000LL, [](const WaitStats& st) {
            return st.moves == 1 && st.spin_wins == 0 && st.sleeps >= 1;
        }));
        contended_until_ns.store(0);
    });
    moving.join();
#else
    (void)backend;
    CHECK(!leave_cpu(0));
#endif
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

// A ring header whose capacity or slot size no ring has is refused, even
// where the slots it implies would seem to fit (the fuzzer's findings: a
// capacity of 1, a slot size that misaligns the slots, and a capacity times
// slot size that overflows to almost nothing).
void ring_headers() {
    Fixture f(8, 40, RingKind::mpmc, WaitBackend::native);
    auto* r = reinterpret_cast<RingLayout*>(f.seg->base() + f.off);
    const uint64_t capacity = r->capacity;
    const uint32_t slot_size = r->slot_size;
    auto refused = [&](uint64_t new_capacity, uint32_t new_slot_size) {
        r->capacity = new_capacity;
        r->slot_size = new_slot_size;
        bool threw = throws<std::invalid_argument>([&] { f.ring<MpmcRing>(); });
        r->capacity = capacity;
        r->slot_size = slot_size;
        return threw;
    };
    CHECK(!refused(capacity, slot_size));
    CHECK(!refused(2, slot_size));
    CHECK(refused(1, slot_size));
    CHECK(refused(capacity, slot_size + 4));
    CHECK(refused(capacity, 16));
    CHECK(refused(uint64_t(1) << 63, slot_size));
    CHECK(refused(uint64_t(1) << 58, kMaxSlotBytes));
    CHECK(refused(2, kMaxSlotBytes + kSlotAlign));
}


// The table of held references: a note per reference, cleared before its
// release; full, a note is refused; a survivor takes a note once; a table
// left behind is cleared.
void arena_held() {
    auto table = std::make_unique<HeldTable>();
    auto live = [&] {
        std::size_t n = 0;
        for (const HeldSlot& slot : table->slots) n += slot.live.load(std::memory_order_relaxed);
        return n;
    };
    CHECK(note_held(7, 1, 256) == 0);
    hold_in(table.get());
    uint32_t a = note_held(7, 1, 256), b = note_held(7, 1, 512), c = note_held(9, 2, 256);
    CHECK(a && b && c && a != b && b != c && a != c);
    const HeldSlot& noted = table->slots[b - 1];
    CHECK(noted.arena_id == 7 && noted.segment_id == 1 && noted.offset == 512);
    unhold(b);
    CHECK(live() == 2 && !noted.live.load(std::memory_order_relaxed));
    std::vector<uint32_t> tokens;
    for (uint32_t t; (t = note_held(7, 3, 128 * (tokens.size() + 1))) != 0;) tokens.push_back(t);
    CHECK(tokens.size() == kHeldSlots - 2 && live() == kHeldSlots);
    for (uint32_t t : tokens) unhold(t);
    CHECK(live() == 2);
    HeldSlot& first = table->slots[a - 1];
    CHECK(take_held(first) && !take_held(first) && live() == 1);
    first.live.store(1, std::memory_order_relaxed);
    hold_in(nullptr);
    CHECK(live() == 0 && note_held(7, 1, 256) == 0);
    unhold(a);
    CHECK(live() == 0);
}

// The blocks a process holds: a block held twice counts once, until its
// last holder lets go; a forked child counts only what it takes itself.
void arena_held_blocks() {
    HeldBlocks held;
    CHECK(held.add(7, 1, 256, 1000) && held.add(7, 1, 256, 1000) && held.add(7, 2, 256, 50));
    CHECK(held.bytes() == 1050);
    held.remove(7, 1, 256);
    CHECK(held.bytes() == 1050);
    held.remove(7, 1, 256);
    held.remove(9, 9, 9);  // never added: nothing changes
    CHECK(held.bytes() == 50);
    pid_t child = fork();
    CHECK(child >= 0);
    if (child == 0) {
        bool inherited_none = held.bytes() == 0;
        held.remove(7, 2, 256);
        bool fresh = held.add(8, 1, 64, 30) && held.bytes() == 30;
        _exit(inherited_none && fresh ? 0 : 1);
    }
    int status = 0;
    CHECK(waitpid(child, &status, 0) == child && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK(held.bytes() == 50);
    held.remove(7, 2, 256);
    CHECK(held.bytes() == 0);
}

// Arena blocks: a block's bytes follow from its id, so overlap or reuse
// before release shows as corruption.
struct ArenaBlock {
    uint32_t segment_id;
    uint64_t offset, length, id;
    uint32_t generation;
};

// The bytes of block `id`: word i holds id * 2**32 + i, so a block written
// over by another, or shifted, no longer matches.
uint64_t pattern(uint64_t id, uint64_t i) { return id << 32 | i; }

char* data_of(Arena& arena, const ArenaBlock& b) { return arena.segment(b.segment_id)->base() + b.offset; }

void drop(Arena& arena, uint32_t segment_id, uint64_t offset) { release_block(arena.segment(segment_id)->base(), offset); }

ArenaBlock fill(Arena& arena, std::size_t length, uint64_t id) {
    Allocation a = arena.alloc(length);
    ArenaBlock b{a.segment_id, a.offset, length, id, a.generation};
    char* data = data_of(arena, b);
    CHECK(reinterpret_cast<uintptr_t>(data) % kBlockAlign == 0);
    for (uint64_t i = 0; i < length / 8; ++i) reinterpret_cast<uint64_t*>(data)[i] = pattern(id, i);
    std::memset(data + length / 8 * 8, int(id & 0xff), length % 8);
    return b;
}

bool intact(const char* data, const ArenaBlock& b) {
    for (uint64_t i = 0; i < b.length / 8; ++i)
        if (reinterpret_cast<const uint64_t*>(data)[i] != pattern(b.id, i)) return false;
    for (uint64_t i = b.length / 8 * 8; i < b.length; ++i)
        if (uint8_t(data[i]) != uint8_t(b.id & 0xff)) return false;
    return true;
}

// Everything freed: no byte in use, and each segment one free block again.
void check_empty(Arena& arena) {
    ArenaStats s = arena.stats();
    CHECK(s.in_use == 0 && s.blocks == 0);
    CHECK(s.free_blocks == s.segments && s.free + s.segments * kHeapOffset == s.capacity);
}

// Random allocations and frees in one thread against a map of live ranges:
// no two blocks overlap, every byte survives, and the arena ends empty
// without having grown past what the peak of live bytes needs.
void arena_model() {
    ArenaOptions opt;
    opt.segment_size = 1 << 20;
    opt.limit = 64 << 20;
    Arena arena(opt);
    std::mt19937_64 rng(7);
    std::vector<ArenaBlock> live;
    std::map<std::pair<uint32_t, uint64_t>, uint64_t> ranges;  // (segment, offset) -> end
    for (uint64_t id = 0; id < 40000; ++id) {
        if (!live.empty() && (live.size() > 300 || rng() % 2)) {
            std::size_t i = rng() % live.size();
            ArenaBlock b = live[i];
            CHECK(intact(data_of(arena, b), b));
            ranges.erase({b.segment_id, b.offset});
            drop(arena, b.segment_id, b.offset);
            live[i] = live.back();
            live.pop_back();
            continue;
        }
        std::size_t length = rng() % 64 == 0 ? rng() % (3 << 20) : rng() % 5000;
        ArenaBlock b = fill(arena, length, id);
        auto next = ranges.lower_bound({b.segment_id, b.offset});
        CHECK(next == ranges.end() || next->first.first != b.segment_id || next->first.second >= b.offset + b.length);
        if (next != ranges.begin()) {
            auto prev = std::prev(next);
            CHECK(prev->first.first != b.segment_id || prev->second <= b.offset);
        }
        ranges[{b.segment_id, b.offset}] = b.offset + b.length;
        live.push_back(b);
    }
    for (const ArenaBlock& b : live) {
        CHECK(intact(data_of(arena, b), b));
        drop(arena, b.segment_id, b.offset);
    }
    check_empty(arena);
}

// A million allocations of varied size with a few alive at a time reuse
// the first segment and never map another.
void arena_churn() {
    ArenaOptions opt;
    opt.segment_size = 1 << 20;
    Arena arena(opt);
    std::size_t capacity = arena.stats().capacity;
    std::mt19937_64 rng(11);
    Allocation held[16] = {};
    char* base = arena.segment(0)->base();
    for (int i = 0; i < 1000000; ++i) {
        Allocation& slot = held[rng() % 16];
        if (slot.offset) release_block(base, slot.offset);
        slot = arena.alloc(rng() % 30000);
        CHECK(slot.segment_id == 0);
    }
    for (Allocation& a : held) release_block(base, a.offset);
    CHECK(arena.stats().capacity == capacity);
    check_empty(arena);
}

// Limits: a clear error naming the remedy, a working arena after frees, and
// a segment of its own for a request larger than a segment.
void arena_limits() {
    CHECK(throws<std::invalid_argument>([] {
        ArenaOptions opt;
        opt.segment_size = 64;
        opt.limit = 200;
        Arena arena(opt);
    }));
    ArenaOptions opt;
    opt.segment_size = 1 << 16;
    opt.limit = 1 << 18;
    Arena arena(opt);
    std::vector<Allocation> held;
    std::string message;
    try {
        for (;;) held.push_back(arena.alloc(10000));
    } catch (const OutOfSharedMemory& e) {
        message = e.what();
    }
    CHECK(message.find("cannot allocate 10000 bytes") != std::string::npos);
    CHECK(message.find("MIZU_ARENA_LIMIT") != std::string::npos);
    CHECK(arena.stats().segments == 4 && held.size() > 20);
    for (Allocation& a : held) drop(arena, a.segment_id, a.offset);
    // The limit is all mapped: the empty segments make way for the large block's own.
    Allocation big = arena.alloc(100000);
    CHECK(arena.stats().segments == 1);
    std::memset(arena.segment(big.segment_id)->base() + big.offset, 1, 100000);
    drop(arena, big.segment_id, big.offset);
    arena.drain();
    CHECK(arena.segment(big.segment_id) == nullptr && arena.stats().segments == 0);
    Allocation small = arena.alloc(10);
    drop(arena, small.segment_id, small.offset);
    CHECK(throws<OutOfSharedMemory>([&] { arena.alloc(std::size_t(1) << 40); }));
    check_empty(arena);
}

// A freed dedicated segment stays mapped as a spare and serves the next
// large request it fits, under a new generation; a spare more than twice a
// request's need is left alone; spares beyond a quarter of the limit go,
// the least recently freed first, and so do all of them, oldest first, when
// a new segment needs their room under the limit.
void arena_spares() {
    ArenaOptions opt;
    opt.segment_size = 1 << 16;
    opt.limit = 4 << 20;  // spares hold 1 MiB at most
    Arena arena(opt);
    Allocation a = arena.alloc(300000);
    CHECK(a.dedicated);
    std::shared_ptr<Segment> seg = arena.segment(a.segment_id);
    std::size_t capacity = arena.stats().capacity;
    drop(arena, a.segment_id, a.offset);
    ArenaStats s = arena.stats();
    CHECK(s.spares == 1 && s.segments == 2 && s.capacity == capacity);
    for (std::size_t i = 0; i < 100; ++i) {
        Allocation b = arena.alloc(250000 + i * 100);
        CHECK(b.dedicated && b.segment_id == a.segment_id && b.generation != a.generation);
        CHECK(arena.segment(b.segment_id) == seg);
        std::memset(seg->base() + b.offset, int(i), 250000 + i * 100);
        CHECK(throws<std::invalid_argument>([&] { block_data(*seg, a.offset, 10, a.generation); }));
        drop(arena, b.segment_id, b.offset);
    }
    s = arena.stats();
    CHECK(s.capacity == capacity && s.spares == 1);
    Allocation c = arena.alloc(100000);  // the spare is more than twice its need
    CHECK(c.dedicated && c.segment_id != a.segment_id);
    drop(arena, c.segment_id, c.offset);
    Allocation d = arena.alloc(700000);  // no spare is large enough
    CHECK(d.segment_id != a.segment_id && d.segment_id != c.segment_id);
    drop(arena, d.segment_id, d.offset);
    arena.drain();
    // Three spares hold more than 1 MiB: the one freed first goes.
    s = arena.stats();
    CHECK(s.spares == 2 && arena.segment(a.segment_id) == nullptr && arena.segment(c.segment_id) != nullptr);
    // The limit leaves room for this one only once both spares are gone.
    Allocation e = arena.alloc(3500000);
    s = arena.stats();
    CHECK(s.spares == 0 && s.segments == 2 && s.capacity <= opt.limit);
    std::string message;
    try {
        arena.alloc(1 << 20);
    } catch (const OutOfSharedMemory& err) {
        message = err.what();
    }
    CHECK(message.find("cannot allocate 1048576 bytes") != std::string::npos);
    drop(arena, e.segment_id, e.offset);
    check_empty(arena);
}

// Another mapping of a segment sees the blocks and can release them; a
// mapping of the wrong segment or a stale offset is refused.
void arena_attach() {
    ArenaOptions opt;
    opt.segment_size = 1 << 16;
    Arena arena(opt);
    ArenaBlock b = fill(arena, 3000, 42);
    auto seg = arena.segment(b.segment_id);
    auto peer = attach_arena_segment(current_pid(), seg->fd(), arena.id(), b.segment_id);
    CHECK(peer->base() != seg->base());
    CHECK(intact(block_data(*peer, b.offset, b.length, b.generation), b));
    CHECK(throws<std::invalid_argument>([&] { attach_arena_segment(seg->fd(), arena.id() + 1, b.segment_id); }));
    CHECK(throws<std::invalid_argument>([&] { attach_arena_segment(seg->fd(), arena.id(), b.segment_id + 1); }));
    CHECK(throws<std::system_error>([&] { attach_arena_segment(current_pid(), 12345, arena.id(), 0); }));
    CHECK(throws<std::invalid_argument>([&] { block_data(*peer, b.offset + 64, 10, b.generation); }));
    retain_block(peer->base(), b.offset);
    release_block(seg->base(), b.offset);
    CHECK(block_refs(peer->base(), b.offset) == 1);
    release_block(peer->base(), b.offset);
    CHECK(throws<std::invalid_argument>([&] { block_data(*peer, b.offset, b.length, b.generation); }));
    check_empty(arena);
}

// Stale and garbled references are refused, so are requests no block can
// hold, and bad entries on a remote-free stack leave the free lists whole.
void arena_bad_references() {
    ArenaOptions opt;
    opt.segment_size = 1 << 16;
    Arena arena(opt);
    auto seg = arena.segment(0);
    char* base = seg->base();
    auto refused = [&](uint64_t offset, uint64_t length, uint32_t generation) {
        return throws<std::invalid_argument>([&] { block_data(*seg, offset, length, generation); });
    };
    auto header = [&](uint64_t offset) { return reinterpret_cast<BlockHeader*>(base + offset - kBlockAlign); };

    // A free block's header starts with no references, whatever bytes it replaced.
    ArenaBlock big = fill(arena, 4096, 1);
    drop(arena, big.segment_id, big.offset);
    ArenaBlock b = fill(arena, 100, 2);  // room for 128 bytes; the rest is one free block
    uint64_t rest = b.offset + 128 + kBlockAlign;
    CHECK(rest < big.offset + big.length && block_refs(base, rest) == 0);
    CHECK(refused(rest, 10, 0) && refused(rest, 10, b.generation));

    CHECK(block_data(*seg, b.offset, 128, b.generation) == base + b.offset);
    for (uint64_t length : {uint64_t(129), uint64_t(60000), UINT64_MAX, UINT64_MAX - 100, uint64_t(1) << 63})
        CHECK(refused(b.offset, length, b.generation));
    for (uint64_t offset : {b.offset + 64, b.offset - kBlockAlign, uint64_t(1) << 40, UINT64_MAX - 127})
        CHECK(refused(offset, 10, b.generation));
    CHECK(refused(b.offset, 10, 0) && refused(b.offset, 10, b.generation + 1));
    std::string message;
    try {
        block_data(*seg, b.offset, 60000, b.generation);
    } catch (const std::invalid_argument& e) {
        message = e.what();
    }
    CHECK(message.find("the block reference is invalid") == 0);

    // Released and reused at the same offset: the old reference is stale.
    drop(arena, b.segment_id, b.offset);
    ArenaBlock c = fill(arena, 100, 3);
    CHECK(c.offset == b.offset && c.generation != b.generation);
    CHECK(refused(b.offset, b.length, b.generation));
    CHECK(intact(block_data(*seg, c.offset, c.length, c.generation), c));

    // A free block pushed again, an offset outside the heap, and a cycle.
    drop(arena, c.segment_id, c.offset);
    CHECK(arena.drain() == 1);
    header(c.offset)->refs.store(1);
    release_block(base, c.offset);
    CHECK(arena.drain() == 0);
    auto& top = arena_header(*seg, arena.id(), 0).remote_free;
    top.store(uint64_t(1) << 40);
    CHECK(arena.drain() == 0);
    ArenaBlock x = fill(arena, 1000, 4), y = fill(arena, 1000, 5);
    drop(arena, x.segment_id, x.offset);
    drop(arena, y.segment_id, y.offset);
    header(x.offset)->next_remote = y.offset - kBlockAlign;
    CHECK(arena.drain() == 2);
    check_empty(arena);

    ArenaOptions unlimited;
    unlimited.segment_size = 1 << 16;
    unlimited.limit = SIZE_MAX;
    Arena huge(unlimited);
    for (std::size_t bytes : {SIZE_MAX, SIZE_MAX - 127, std::size_t(1) << 63}) {
        message.clear();
        try {
            huge.alloc(bytes);
        } catch (const OutOfSharedMemory& e) {
            message = e.what();
        }
        CHECK(message.find("cannot allocate " + std::to_string(bytes) + " bytes: no block can hold more than") !=
              std::string::npos);
    }
    check_empty(huge);

#if defined(__linux__)
    int devnull = open("/dev/null", O_RDONLY);
    message.clear();
    try {
        attach_arena_segment(current_pid(), devnull, arena.id(), 0);
    } catch (const std::invalid_argument& e) {
        message = e.what();
    }
    close(devnull);
    CHECK(message == "/proc/" + std::to_string(current_pid()) + "/fd/" + std::to_string(devnull) +
                         " is not a mizu shared segment");
#endif
}

// Threads allocate from one arena and hand each block to a releaser thread
// through a ring; the last of the two references, whichever side drops it,
// returns the block. Every byte arrives intact and nothing leaks.
void arena_remote_free(int owners, uint64_t per_owner) {
    ArenaOptions opt;
    opt.segment_size = 1 << 20;
    opt.limit = 256 << 20;
    Arena arena(opt);
    std::vector<std::unique_ptr<Fixture>> rings;
    for (int t = 0; t < owners; ++t)
        rings.push_back(std::make_unique<Fixture>(64, sizeof(ArenaBlock), RingKind::spsc, WaitBackend::native));
    std::atomic<uint64_t> corrupt{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < owners; ++t) {
        threads.emplace_back([&, t] {
            SpscRing ring = rings[t]->ring<SpscRing>();
            Waiter w;
            std::mt19937_64 rng(t);
            std::vector<ArenaBlock> mine;
            for (uint64_t i = 0; i < per_owner; ++i) {
                std::size_t length = rng() % 500 == 0 ? (1 << 20) + rng() % 100000 : rng() % 20000;
                ArenaBlock b = fill(arena, length, uint64_t(t) * per_owner + i);
                retain_block(arena.segment(b.segment_id)->base(), b.offset);
                Reservation res;
                CHECK(ring.wait_push(sizeof b, res, w, WaitOptions{}) == WaitStatus::ready);
                std::memcpy(res.data(), &b, sizeof b);
                ring.end_push(res);
                mine.push_back(b);
                if (mine.size() > 8 || rng() % 3 == 0) {
                    std::size_t k = rng() % mine.size();
                    drop(arena, mine[k].segment_id, mine[k].offset);
                    mine[k] = mine.back();
                    mine.pop_back();
                }
            }
            for (const ArenaBlock& b : mine) drop(arena, b.segment_id, b.offset);
            ring.close();
        });
        threads.emplace_back([&, t] {
            SpscRing ring = rings[t]->ring<SpscRing>();
            Waiter w;
            Reservation res;
            while (ring.wait_pop(res, w, WaitOptions{}) == WaitStatus::ready) {
                ArenaBlock b;
                std::memcpy(&b, res.data(), sizeof b);
                ring.end_pop(res);
                // The owner's mapping, not one of its own as a process would
                // have: ThreadSanitizer tracks synchronisation by address, so
                // a second mapping of the same pages would hide it.
                auto seg = arena.segment(b.segment_id);
                char* data = block_data(*seg, b.offset, b.length, b.generation);
                if (!intact(data, b)) corrupt.fetch_add(1);
                std::memset(data, 0xee, b.length);
                release_block(seg->base(), b.offset);
            }
        });
    }
    for (auto& t : threads) t.join();
    CHECK(corrupt.load() == 0);
    check_empty(arena);
}

// Renders a message as text, visiting every value: what the wire tests compare.
struct Render {
    std::string out;
    void none() { out += "None "; }
    void boolean(bool b) { out += b ? "True " : "False "; }
    void int64(int64_t v) { out += std::to_string(v) + " "; }
    void float64(double v) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.17g ", v);
        out += buf;
    }
    void str(wire::Span s) { out += "'" + std::string(s.data, s.size) + "' "; }
    void bytes(wire::Span s) { out += "b'" + std::string(s.data, s.size) + "' "; }
    void key(wire::Span s) { out += std::string(s.data, s.size) + ": "; }
    void begin(wire::Tag t, uint32_t n) { out += char(t) + std::to_string(n) + "( "; }
    void typed(wire::Typed k) { out += std::string("K") + char(k) + "( "; }
    void end(wire::Tag) { out += ") "; }
    void array(const wire::ArrayHeader& a) {
        out += std::string("a") + a.typestr + "[";
        for (uint32_t k = 0; k < a.ndim; ++k) out += std::to_string(a.shape[k]) + "/" + std::to_string(a.strides[k]) + ",";
        if (a.storage == wire::Storage::inline_data)
            out += "]=" + std::string(a.data.data, a.data.size) + " ";
        else
            out += "]@" + std::to_string(a.buffer) + ":" + std::to_string(a.extent) + " ";
    }
    void masked(const wire::ArrayHeader& values, const wire::ArrayHeader& mask) {
        out += "M ";
        array(values);
        array(mask);
    }
    void pickle(const wire::PickleBlob& p) { out += "P" + std::string(p.data.data, p.data.size) + " "; }
};

std::string render(const std::string& msg) {
    Render r;
    wire::read_message(msg.data(), msg.size(), r);
    return r.out;
}

std::string message_of(const wire::Writer& w) { return std::string(w.data(), w.size()); }

// The byte offset the Reader names for msg, or SIZE_MAX if msg is well-formed.
std::size_t error_offset(const std::string& msg) {
    try {
        render(msg);
    } catch (const wire::WireError& e) {
        return e.offset();
    }
    return SIZE_MAX;
}

wire::ArrayHeader array_2x3(const char* data) {
    wire::ArrayHeader a{};
    std::strcpy(a.typestr, "|u1");
    a.itemsize = 1;
    a.ndim = 2;
    a.shape[0] = 2, a.shape[1] = 3;
    a.strides[0] = 3, a.strides[1] = 1;
    a.storage = wire::Storage::inline_data;
    a.data = {data, 6};
    return a;
}

std::string sample_message() {
    wire::Writer w;
    w.begin_message();
    w.begin_tuple(9);
    w.put_none();
    w.put_bool(true);
    w.put_int64(INT64_MIN);
    w.put_float64(-0.5);
    w.put_str("h\xc3\xa9", 3);
    w.put_bytes("\0x", 2);
    w.begin_list(0);
    w.begin_dict(2);
    w.put_key("k", 1);
    w.put_pickle("pk", 2);
    w.put_key("", 0);
    w.put_array(array_2x3("abcdef"));
    w.begin_frame(2, 2);
    w.put_none();
    w.put_key("s", 1);
    w.begin_typed(wire::Typed::strings);
    w.begin_list(2);
    w.put_str("x", 1);
    w.put_none();
    w.put_key("c", 1);
    wire::ArrayHeader col{};
    std::strcpy(col.typestr, "<f8");
    col.itemsize = 8;
    col.ndim = 1;
    col.shape[0] = 2;
    col.strides[0] = 8;
    col.storage = wire::Storage::arena;
    col.buffer = 7;
    w.put_array(col);
    return message_of(w);
}

void wire_round_trips() {
    std::string msg = sample_message();
    CHECK(uint8_t(msg[0]) == wire::kMagic && msg[1] == wire::kVersion);
    CHECK(render(msg) == "t9( None True -9223372036854775808 -0.5 'h\xc3\xa9' b'" + std::string("\0x", 2) +
                             "' l0( ) m2( k: Ppk : a|u1[2/3,3/1,]=abcdef ) D2( None s: Ks( l2( 'x' None ) ) c: a<f8[2/8,]@7:16 ) ) ");
    // Growing past the writer's inline buffer keeps what was written.
    wire::Writer w;
    w.begin_message();
    std::string big(100000, 'x');
    w.begin_list(3);
    w.put_str(big.data(), big.size());
    w.put_bytes(big.data(), 10);
    w.put_float64(1e300);
    CHECK(render(message_of(w)) == "l3( '" + big + "' b'xxxxxxxxxx' 1.0000000000000001e+300 ) ");
    std::size_t mark = w.size();
    w.put_none();
    w.truncate(mark);
    CHECK(render(message_of(w)) == "l3( '" + big + "' b'xxxxxxxxxx' 1.0000000000000001e+300 ) ");
}

std::string nested_lists(int depth) {
    wire::Writer w;
    w.begin_message();
    for (int i = 0; i < depth; ++i) w.begin_list(i + 1 < depth ? 1 : 0);
    return message_of(w);
}

std::string one_value(void (*put)(wire::Writer&)) {
    wire::Writer w;
    w.begin_message();
    put(w);
    return message_of(w);
}

void wire_rejects_malformed() {
    std::string msg = sample_message();
    for (std::size_t n = 0; n < msg.size(); ++n) CHECK(error_offset(msg.substr(0, n)) <= n);
    CHECK(error_offset(msg + "N") == msg.size());
    CHECK(error_offset("X\x01N") == 0);
    CHECK(error_offset(std::string("W\x02N")) == 1);
    CHECK(error_offset(std::string("W\x01?")) == 2);
    CHECK(error_offset(nested_lists(wire::kMaxDepth)) == SIZE_MAX);
    CHECK(error_offset(nested_lists(wire::kMaxDepth + 1)) != SIZE_MAX);
    // A count larger than the bytes left could hold fails before any allocation.
    CHECK(error_offset(std::string("W\x01l\xff\xff\xff\xff", 7)) == 3);
    for (const char* bad : {"\xed\xa0\x80", "\xc0\x80", "\xf5\x80\x80\x80", "\xe2\x82", "\x80"}) {
        wire::Writer w;
        w.begin_message();
        w.put_str(bad, std::strlen(bad));
        CHECK(error_offset(message_of(w)) == 11);
    }
    CHECK(error_offset(one_value([](wire::Writer& w) { w.put_str("\xf4\x8f\xbf\xbf", 4); })) == SIZE_MAX);
    auto array_with = [](void (*edit)(wire::ArrayHeader&)) {
        wire::Writer w;
        w.begin_message();
        wire::ArrayHeader a = array_2x3("abcdef");
        edit(a);
        w.put_array(a);
        return message_of(w);
    };
    CHECK(error_offset(array_with([](wire::ArrayHeader&) {})) == SIZE_MAX);
    CHECK(error_offset(array_with([](wire::ArrayHeader& a) { a.strides[0] = -3; })) != SIZE_MAX);
    CHECK(error_offset(array_with([](wire::ArrayHeader& a) { a.strides[0] = 4; })) != SIZE_MAX);
    CHECK(error_offset(array_with([](wire::ArrayHeader& a) { a.data.size = 5; })) != SIZE_MAX);
    CHECK(error_offset(array_with([](wire::ArrayHeader& a) { a.shape[1] = 1ULL << 63; })) != SIZE_MAX);
    CHECK(error_offset(array_with([](wire::ArrayHeader& a) { std::strcpy(a.typestr, "|O8"); })) != SIZE_MAX);
    CHECK(error_offset(array_with([](wire::ArrayHeader& a) { std::strcpy(a.typestr, "<u1"); })) != SIZE_MAX);
    CHECK(error_offset(array_with([](wire::ArrayHeader& a) { a.itemsize = 2; })) != SIZE_MAX);
    CHECK(throws<std::invalid_argument>([&] { array_with([](wire::ArrayHeader& a) { a.ndim = 33; }); }));
    std::string too_many_dims = array_with([](wire::ArrayHeader&) {});
    too_many_dims[11] = 33;
    CHECK(error_offset(too_many_dims) == 11);
    // Zero-size arrays may carry any non-negative strides.
    CHECK(error_offset(array_with([](wire::ArrayHeader& a) {
              a.shape[0] = 0;
              a.strides[1] = 1000;
              a.data.size = 0;
          })) == SIZE_MAX);
    std::string pickle = one_value([](wire::Writer& w) { w.put_pickle("p", 1); });
    pickle[3] = 1;
    CHECK(error_offset(pickle) == 3);
}

// Random and mutated bytes: the Reader either walks them or throws WireError,
// and never reads outside them (the sanitizers watch).
void wire_survives_garbage(uint64_t rounds) {
    std::mt19937_64 rng(12345);
    std::vector<std::string> seeds = {sample_message(), nested_lists(wire::kMaxDepth), std::string("W\x01", 2)};
    uint64_t accepted = 0;
    for (uint64_t i = 0; i < rounds; ++i) {
        std::string msg = seeds[i % seeds.size()];
        if (i % 7 == 0) {
            msg.resize(2 + rng() % 64);
            for (std::size_t k = 2; k < msg.size(); ++k) msg[k] = char(rng());
        }
        for (uint64_t edits = 1 + rng() % 4; edits; --edits) {
            std::size_t at = msg.empty() ? 0 : rng() % msg.size();
            switch (rng() % 4) {
            case 0: if (!msg.empty()) msg[at] = char(rng()); break;
            case 1: if (!msg.empty()) msg[at] ^= char(1u << (rng() % 8)); break;
            case 2: msg.insert(at, 1, "NFTidsbtlmaDP\xff\x00"[rng() % 15]); break;
            default: msg.resize(at); break;
            }
        }
        // A heap copy of exactly the message's size, so an overread is caught.
        std::vector<char> exact(msg.begin(), msg.end());
        Render r;
        try {
            wire::read_message(exact.data(), exact.size(), r);
            ++accepted;
        } catch (const wire::WireError&) {
        }
    }
    CHECK(accepted > 0);
}

// The allocator behind numpy's data handler: threads allocate, write, check
// and free through one ArrayData (numpy calls it from any thread); pointers
// below the threshold or past the arena's limit are refused, to go to
// malloc; a reference taken elsewhere keeps a freed pointer's block alive.
void array_data(int threads_n, int rounds) {
    ArenaOptions opt;
    opt.segment_size = 1 << 20;
    opt.limit = 64 << 20;
    auto arena = std::make_shared<Arena>(opt);
    ArrayData data(arena, 4096);
    CHECK(data.allocate(4095) == nullptr);
    CHECK(data.allocate(std::size_t(65) << 20) == nullptr);
    std::atomic<uint64_t> corrupt{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < threads_n; ++t) {
        threads.emplace_back([&, t] {
            std::mt19937_64 rng(t + 100);
            std::vector<std::pair<unsigned char*, std::size_t>> mine;
            for (int i = 0; i < rounds; ++i) {
                std::size_t n = 4096 + rng() % (rng() % 50 == 0 ? (3 << 20) : 60000);
                auto* p = static_cast<unsigned char*>(data.allocate(n));
                if (p == nullptr) continue;  // the limit: the handler would use malloc
                ArrayBlock where;
                if (!data.find(p, &where) || where.length != n) corrupt.fetch_add(1);
                std::memset(p, t + 1, n);
                mine.emplace_back(p, n);
                if (mine.size() > 6 || rng() % 2 == 0) {
                    std::size_t k = rng() % mine.size();
                    auto [q, m] = mine[k];
                    for (std::size_t j = 0; j < m; j += 509)
                        if (q[j] != t + 1) corrupt.fetch_add(1);
                    if (!data.free(q)) corrupt.fetch_add(1);
                    mine[k] = mine.back();
                    mine.pop_back();
                }
            }
            for (auto [q, m] : mine) CHECK(data.free(q));
        });
    }
    for (auto& th : threads) th.join();
    CHECK(corrupt.load() == 0);
    CHECK(data.live() == 0);
    int other = 0;
    CHECK(!data.free(&other));
    // A reference the pointer's receiver holds outlives the free.
    auto* p = static_cast<char*>(data.allocate(100000));
    ArrayBlock where;
    CHECK(p != nullptr && data.find(p, &where));
    char* base = arena->segment(where.segment_id)->base();
    retain_block(base, where.offset);
    CHECK(data.free(p) && !data.find(p, &where) && !data.free(p));
    CHECK(arena->stats().blocks == 1);
    release_block(base, where.offset);
    CHECK(arena->stats().blocks == 0);
    // fork's steps: the child's writes to an inherited pointer stay its own.
    auto* q = static_cast<char*>(data.allocate(100000));
    CHECK(q != nullptr);
    std::memset(q, 1, 100000);
    data.prepare_fork();
    pid_t child = fork();
    CHECK(child >= 0);
    if (child == 0) {
        data.after_fork_child();
        std::memset(q, 9, 100000);
        _exit(q[0] == 9 && data.allocate(100000) == nullptr && data.free(q) ? 0 : 1);
    }
    data.after_fork_parent();
    int status = 0;
    CHECK(waitpid(child, &status, 0) == child && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK(q[0] == 1 && q[99999] == 1 && data.free(q));
}

// Segments that held no block for a while go back to the system: spares
// and ordinary segments but the first, once idle for the time asked.
void arena_release_idle() {
    ArenaOptions opt;
    opt.segment_size = 1 << 16;
    opt.limit = 16 << 20;
    Arena arena(opt);
    Allocation big = arena.alloc(300000);
    std::vector<Allocation> small;
    for (int i = 0; i < 3; ++i) small.push_back(arena.alloc(40000));  // a second and third ordinary segment
    CHECK(arena.stats().segments == 4);
    CHECK(arena.release_idle(0) == 0);  // everything holds a block
    drop(arena, big.segment_id, big.offset);
    for (const Allocation& a : small) drop(arena, a.segment_id, a.offset);
    CHECK(arena.release_idle(uint64_t(3600) * 1000000000) == 0);
    CHECK(arena.stats().segments == 4);
    CHECK(arena.release_idle(0) > 0);
    ArenaStats s = arena.stats();
    CHECK(s.segments == 1 && s.spares == 0 && s.blocks == 0 && s.capacity == opt.segment_size);
    Allocation again = arena.alloc(300000);
    CHECK(again.dedicated);
    drop(arena, again.segment_id, again.offset);
}

// One poll over many watches: false while every child runs, true once one
// has exited (a zombie counts, as with a pidfd or kqueue), whatever its
// place in the list.
void peers_exit() {
    pid_t running = fork();
    if (running == 0) {
        pause();
        _exit(0);
    }
    pid_t quitting = fork();
    if (quitting == 0) _exit(3);
    PeerWatch a(running), b(quitting), self(getpid());
    const PeerWatch* alive[] = {&a, &self};
    CHECK(!PeerWatch::any_exited(alive, 2) && !PeerWatch::any_exited(alive, 0));
    CHECK(b.wait_exit(10'000'000'000LL));
    const PeerWatch* one_gone[] = {&self, &a, &b};
    CHECK(PeerWatch::any_exited(one_gone, 3) && !PeerWatch::any_exited(one_gone, 2));
    int status = 0;
    CHECK(waitpid(quitting, &status, 0) == quitting && WEXITSTATUS(status) == 3);
    CHECK(PeerWatch::any_exited(one_gone, 3));
    kill(running, SIGKILL);
    CHECK(waitpid(running, &status, 0) == running);
}

// The bell pushes one `gone` notice for each watched process that exits,
// naming its worker, and none for a process it no longer watches; a
// waiting consumer wakes for it.
void exit_bells() {
    Fixture f(8, 64, RingKind::mpmc, WaitBackend::native);
    auto results = AnyRing::attach(RingKind::mpmc, f.seg->base() + f.off, f.bytes);
    MpmcRing consumer = f.ring<MpmcRing>();
    // Each exits once sent a byte: the other children hold copies of the pipes' write ends.
    auto child = [](int code) {
        int go[2];
        CHECK(pipe(go) == 0);
        pid_t pid = fork();
        if (pid == 0) {
            char c;
            close(go[1]);
            if (read(go[0], &c, 1) != 1) _exit(1);
            _exit(code);
        }
        close(go[0]);
        return std::make_pair(pid, go[1]);
    };
    auto [first, first_go] = child(3);
    auto [replaced, replaced_go] = child(4);
    auto [second, second_go] = child(5);
    auto release = [](int go) {
        CHECK(write(go, "x", 1) == 1);
        close(go);
    };
    char out[512];
    {
        ExitBell bell(*results);
        bell.watch(7, replaced);
        bell.watch(7, first);   // in place of `replaced`
        bell.watch(9, second);
        release(replaced_go);
        int status = 0;
        CHECK(waitpid(replaced, &status, 0) == replaced);
        release(first_go);
        Waiter w;
        WaitOptions opt;
        opt.deadline_ns = now_ns() + 10'000'000'000LL;
        Reservation res;
        CHECK(consumer.wait_pop(res, w, opt) == WaitStatus::ready);
        messages::Message m = messages::read_message(static_cast<const char*>(res.data()), res.size());
        consumer.end_pop(res);
        CHECK(m.kind == messages::kResult && m.result.status == uint8_t(messages::Status::gone) &&
              m.result.sender == 7 && m.result.task_id == 0);
        CHECK(consumer.try_pop(out, sizeof out) == -1);
        release(second_go);
        CHECK(consumer.wait_pop(res, w, opt) == WaitStatus::ready);
        m = messages::read_message(static_cast<const char*>(res.data()), res.size());
        consumer.end_pop(res);
        CHECK(m.result.sender == 9);
    }
    for (pid_t pid : {first, second}) {
        int status = 0;
        CHECK(waitpid(pid, &status, 0) == pid);
    }
    CHECK(consumer.try_pop(out, sizeof out) == -1);
}

// A process whose watch thread sees its peer exit ends at once, whatever its
// main thread is doing (here: waiting for a signal that never comes).
void die_with_peer() {
    int gone[2], watching[2];
    CHECK(pipe(gone) == 0 && pipe(watching) == 0);
    pid_t peer = fork();
    if (peer == 0) {
        pid_t watcher = fork();
        if (watcher == 0) {
            PeerWatch::die_with(getppid());
            char c = 1;
            if (write(watching[1], &c, 1) != 1) _exit(1);
            for (;;) pause();
        }
        char c;
        if (read(watching[0], &c, 1) != 1) _exit(1);
        _exit(0);
    }
    close(gone[1]);
    close(watching[1]);
    int status = 0;
    CHECK(waitpid(peer, &status, 0) == peer && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    // The watcher holds the write end until it exits: then the read sees end of file.
    pollfd p{gone[0], POLLIN, 0};
    CHECK(poll(&p, 1, 10000) == 1);
    char c;
    CHECK(read(gone[0], &c, 1) == 0);
    close(gone[0]);
    close(watching[0]);
}

// A spare's wait for its index: the 4 bytes written in two pieces, on a
// blocking and on a non-blocking socket, each acknowledged; -1 once the other end is shut
// down (a forked copy of it open or not), and once the watched process has
// exited.
void spare_indexes() {
    int pair[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, pair) == 0);
    PeerWatch self(getpid());
    // Writes index's 4 bytes to the other end, the first `first` of them 20 ms before the rest.
    auto send_in_two = [&](uint32_t index, ssize_t first) {
        const unsigned char bytes[] = {uint8_t(index), uint8_t(index >> 8), uint8_t(index >> 16),
                                       uint8_t(index >> 24)};
        CHECK(write(pair[1], bytes, std::size_t(first)) == first);
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        CHECK(write(pair[1], bytes + first, std::size_t(4 - first)) == 4 - first);
    };
    for (int blocking : {1, 0}) {
        if (!blocking) CHECK(fcntl(pair[0], F_SETFL, fcntl(pair[0], F_GETFL) | O_NONBLOCK) == 0);
        std::thread writer(send_in_two, blocking ? 0x030201u : 7u, blocking ? 1 : 2);
        CHECK(self.wait_for_index(pair[0]) == (blocking ? 0x030201 : 7));
        writer.join();
        unsigned char ack = 0;
        CHECK(read(pair[1], &ack, 1) == 1 && ack == 1);
    }
    pid_t holder = fork();
    if (holder == 0) {
        pause();
        _exit(0);
    }
    shutdown(pair[1], SHUT_RDWR);
    CHECK(self.wait_for_index(pair[0]) == -1);
    kill(holder, SIGKILL);
    CHECK(waitpid(holder, nullptr, 0) == holder);
    close(pair[0]);
    close(pair[1]);
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, pair) == 0);
    pid_t client = fork();
    if (client == 0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        _exit(0);
    }
    PeerWatch watched(client);
    CHECK(watched.wait_for_index(pair[0]) == -1);
    CHECK(waitpid(client, nullptr, 0) == client);
    close(pair[0]);
    close(pair[1]);
}

int main() {
    wire_round_trips();
    wire_rejects_malformed();
    wire_survives_garbage(300000);
    segments();
    peers_exit();
    spare_indexes();
    die_with_peer();
    exit_bells();
    ring_headers();
    dead_peers();
    answered_tickets();
    arena_model();
    arena_churn();
    arena_limits();
    arena_spares();
    arena_release_idle();
    arena_attach();
    arena_bad_references();
    arena_held();
    arena_held_blocks();
    arena_remote_free(2, 20000);
    array_data(3, 20000);
    for (WaitBackend backend : {WaitBackend::native, WaitBackend::portable}) {
        stream<SpscRing>(RingKind::spsc, 1, 1, 200000, backend);
        stream<MpmcRing>(RingKind::mpmc, 3, 3, 50000, backend);
        stream<MpmcRing>(RingKind::mpmc, 1, 1, 100000, backend);
        stream<MpmcRing>(RingKind::mpmc, 3, 3, 3000, backend, true);
        wake_storm(backend, 2000);
        out_of_order_publication(backend);
        timeouts_and_close(backend);
        waits_without_spinning(backend);
        waits_leave_the_peers_cpu(backend);
        waits_give_way(backend);
        // Until a round has taken some back: a loaded machine may let the
        // consumer keep ahead of every withdrawal of a round.
        uint64_t taken_back = 0;
        for (int round = 0; round < 20 && taken_back == 0; ++round) taken_back = tickets_race(30000, backend);
        CHECK(taken_back > 0);
        worker_loop_serves(3000, 0, backend);
        worker_loop_serves(40, 7, backend);
    }
    StressResult r = stress_mpmc(2, 2, 20000, 64, 64, WaitBackend::native);
    CHECK(r.received == 40000 && r.duplicates == 0 && r.corrupt == 0 && r.missing == 0 && r.failed_children == 0);
    CHECK(pingpong_floor_ns(1000, false, true) > 0 && pingpong_floor_ns(1000, true, false) > 0);
    CHECK(pingpong_ring_ns(1000, 8, 0, WaitBackend::portable, true) > 0);
    std::puts("core_test: all passed");
    return 0;
}
