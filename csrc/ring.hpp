// Bounded lock-free rings in shared memory, carrying messages of up to
// max_message bytes in fixed-size slots.
//
// Every slot carries a sequence number that says whose turn it is, written
// with a release store after the payload, so a slot still being written (or
// abandoned by a producer that died half-way) is never seen as complete, and
// a consumer polls the slot itself rather than a shared index: in the common
// case one cache line crosses between cores per message. A slot stores its
// turn less its own index, so that the zeroed memory of a fresh segment is a
// ring whose every slot awaits its first lap: creating a ring touches only
// its header, not a page per slot.
//
// SpscRing: one producer, one consumer (after rigtorp/SPSCQueue): head and
// tail on their own lines, and the producer keeps a private copy of head,
// refreshed only when the ring looks full.
//
// MpmcRing: any number of producers and consumers (Vyukov's bounded MPMC
// queue): a producer or consumer claims a position with one CAS on tail or
// head and then waits only on its own slot's turn.
//
// Tickets (a ring with one consumer): the producer numbers its messages
// with increasing tickets; the consumer claims a message's ticket before it
// acts on it, and the producer may withdraw the messages queued behind the
// one being acted on, to act on them elsewhere. One word decides each race,
// so a ticket is either claimed or withdrawn, never both. The consumer
// notes when it claimed its ticket, so that the producer can tell how long
// the message it acts on has been acted on (a task's deadline), and may mark
// it answered before it sends the answer, after which the producer's
// withdrawal behind it fails unless asked to go behind the answer: a
// deadline judged as the answer goes out either wins before the mark (the
// consumer is ended) or sees it. Of every ticket, marked or not, it notes
// with a plain store that it has sent the answer: a hint that decides no
// race, by which the producer leaves a consumer be that has answered (a
// task stopped as its result waits to be collected).
//
// A consumer or producer that dies is the producer's to clean up after, once
// it is gone: reset_consumer() drops what a dead consumer of a ring with one
// consumer left unread, and MpmcRing::void_abandoned() completes, empty, the
// slots that a dead producer claimed and never completed, which would hold
// every later message back (a producer names itself in each slot it claims).
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

#include "arena.hpp"
#include "layout.hpp"
#include "waiter.hpp"

namespace mizu {

enum class RingKind : uint32_t { spsc = 1, mpmc = 2 };

constexpr uint64_t kRingMagic = 0x474e49525a55494dULL;  // "MIUZRING"
constexpr uint64_t kMaxRingCapacity = uint64_t(1) << 24;
constexpr uint32_t kMaxSlotBytes = uint32_t(1) << 24;
// Slots are whole 64-byte lines so a slot being read and the next one being
// written rarely share a line.
constexpr uint32_t kSlotAlign = 64;
// Marks a ticket word whose tickets up to the rest are withdrawn.
constexpr uint64_t kWithdrawn = uint64_t(1) << 63;
// Marks a ticket word whose consumer has answered the ticket it acts on.
constexpr uint64_t kAnswered = uint64_t(1) << 62;
// A ticket word's ticket: tickets stay below kAnswered.
constexpr uint64_t kTicketBits = kAnswered - 1;

struct Slot {
    std::atomic<uint64_t> seq;  // turn number less the slot's index: pos + 1 - index once pos is complete
    uint32_t len;
    std::atomic<uint32_t> owner;  // MpmcRing: the producer that claimed it (see set_owner), 0 once popped
    char* data() noexcept { return reinterpret_cast<char*>(this + 1); }
};

struct RingLayout {
    uint64_t magic;
    uint32_t kind;
    uint32_t slot_size;
    uint64_t capacity;
    std::atomic<uint32_t> closed;
    alignas(kFalseSharingRange) std::atomic<uint64_t> tail;  // next position to write
    alignas(kFalseSharingRange) std::atomic<uint64_t> head;  // next position to read
    EventWord readable;  // consumers sleep here while the ring is empty
    EventWord writable;  // producers sleep here while it is full
    // The last ticket claimed, or kWithdrawn | the last ticket withdrawn;
    // with kAnswered once the consumer has answered the one it acts on.
    alignas(kFalseSharingRange) std::atomic<uint64_t> tickets;
    std::atomic<int64_t> claimed_at;  // when the consumer claimed its last ticket (now_ns's clock)
    std::atomic<uint64_t> answered;   // the last ticket whose answer the consumer has sent (note_answered)
    // What a task ring's consumer holds of other processes' blocks (hold_in),
    // for its producer to release once the consumer has died.
    alignas(kFalseSharingRange) HeldTable held;
    // capacity slots of slot_size bytes follow, starting at sizeof(RingLayout)
};

// A slot claimed by begin_push or begin_pop, handed back to end_push/end_pop.
struct Reservation {
    Slot* slot = nullptr;
    uint64_t pos = 0;
    char* data() const noexcept { return slot->data(); }
    uint32_t size() const noexcept { return slot->len; }
};

class RingBase {
public:
    // Bytes of shared memory a ring of this shape occupies. Throws
    // std::invalid_argument for a capacity that is not a power of two in
    // [2, 2**24] or a max_message outside [1, 2**24 - 16].
    static std::size_t footprint(uint64_t capacity, uint32_t max_message);

    uint64_t capacity() const noexcept { return r_->capacity; }
    uint32_t max_message() const noexcept { return r_->slot_size - uint32_t(sizeof(Slot)); }
    RingKind kind() const noexcept { return RingKind(r_->kind); }
    RingLayout* layout() const noexcept { return r_; }

    // Approximate when other processes are active.
    uint64_t size() const noexcept {
        // acquire: a consistent enough pair for a snapshot; head never passes tail.
        uint64_t head = r_->head.load(std::memory_order_acquire);
        uint64_t tail = r_->tail.load(std::memory_order_acquire);
        return tail > head ? tail - head : 0;
    }

    // Messages popped so far, by any consumer. Whoever knows what it pushed
    // learns from it whether a consumer has taken anything since.
    uint64_t popped() const noexcept {
        // relaxed: a count to compare, ordering nothing.
        return r_->head.load(std::memory_order_relaxed);
    }

    // Tickets, each race decided by one RMW on one word: no other memory
    // is published through it (messages travel through the slots), so
    // relaxed order suffices.
    //
    // The consumer, before acting on the message of ticket t (tickets
    // increase message by message), at now_ns: false if the producer withdrew it.
    bool claim(uint64_t ticket, int64_t at = 0) noexcept {
        // relaxed: published by the claim's release below.
        r_->claimed_at.store(at, std::memory_order_relaxed);
        uint64_t word = r_->tickets.load(std::memory_order_relaxed);
        for (;;) {
            if ((word & kWithdrawn) && ticket <= (word & kTicketBits)) return false;
            if (r_->tickets.compare_exchange_weak(word, ticket, std::memory_order_release, std::memory_order_relaxed))
                return true;
        }
    }
    // The consumer, once it has the outcome of the ticket it claimed last,
    // before it sends it: from now on the producer withdraws behind that
    // ticket only if asked to go behind the answer (withdraw's
    // behind_answered). Marking it again changes nothing.
    void answer() noexcept {
        // The word names that ticket, or tickets withdrawn behind it since: a
        // CAS that fails has met a withdrawal, and marks the word it left.
        uint64_t word = r_->tickets.load(std::memory_order_relaxed);
        while (!(word & kAnswered) &&
               !r_->tickets.compare_exchange_weak(word, word | kAnswered, std::memory_order_relaxed,
                                                  std::memory_order_relaxed)) {
        }
    }
    // The consumer, as it sends the outcome of the ticket it claimed last
    // (marked answered or not): a hint for the producer, which decides no
    // race. One that has not seen it yet may still end the consumer's run of
    // a ticket just answered, and its answer is then dropped.
    void note_answered(uint64_t ticket) noexcept {
        // relaxed: a hint, ordering nothing; the answer's push publishes it
        // with the answer, and a stale read only misses a race.
        r_->answered.store(ticket, std::memory_order_relaxed);
    }
    // The producer: the last ticket whose answer the consumer has sent, as
    // far as this process has seen (note_answered); 0 before the first.
    uint64_t answered() const noexcept {
        // relaxed: see note_answered.
        return r_->answered.load(std::memory_order_relaxed);
    }
    // The producer: the consumer's last claim (a ticket, or kWithdrawn | the
    // last ticket withdrawn since, either with kAnswered once it has answered
    // the ticket it acts on), and in `at` when it was made, or later: never
    // earlier than the claim of the ticket returned.
    uint64_t last_claim(int64_t& at) const noexcept {
        // acquire: pairs with claim's release, so `at` is at least this claim's.
        uint64_t word = r_->tickets.load(std::memory_order_acquire);
        at = r_->claimed_at.load(std::memory_order_relaxed);
        return word;
    }
    // The producer: withdraws the tickets after `acting` up to `last`, all
    // pushed, provided the consumer has claimed `acting` (the oldest ticket
    // whose outcome the producer still awaits) and nothing since, and has not
    // answered it, unless `behind_answered`: taking back what is queued
    // behind an answered ticket is as safe, and only a producer that means
    // to end the consumer's run of `acting` needs it unanswered. True if
    // they are withdrawn: the consumer will claim none of them.
    bool withdraw(uint64_t acting, uint64_t last, bool behind_answered = false) noexcept {
        uint64_t word = r_->tickets.load(std::memory_order_relaxed);
        uint64_t claim = word & ~kAnswered;
        // Withdrawn words name tickets after the acting one of their time,
        // which the producer still awaits if it still awaits `acting`.
        bool on_acting = claim == acting || ((claim & kWithdrawn) && acting <= (claim & kTicketBits));
        if (!on_acting || ((word & kAnswered) && !behind_answered) || last <= acting) return false;
        // The answer stays marked: a later withdrawal must still see it.
        return r_->tickets.compare_exchange_strong(word, kWithdrawn | (word & kAnswered) | last,
                                                   std::memory_order_relaxed);
    }

    // The producer, once the consumer of a ring with one consumer has died
    // (and none runs): everything unread is dropped and the tickets start
    // afresh, for the consumer that takes its place.
    void reset_consumer() noexcept {
        // relaxed: no consumer runs; the next one starts after this process
        // has started it, which orders these stores before its loads.
        r_->head.store(r_->tail.load(std::memory_order_relaxed), std::memory_order_relaxed);
        r_->tickets.store(0, std::memory_order_relaxed);
        r_->answered.store(0, std::memory_order_relaxed);
        r_->readable.sleepers.store(0, std::memory_order_relaxed);
    }

    // After close(), pushes fail and pops drain what is left, then report closed.
    void close() noexcept {
        // release: everything pushed before close() stays visible to consumers.
        r_->closed.store(1, std::memory_order_release);
        notify(r_->readable, true);
        notify(r_->writable, true);
    }
    bool closed() const noexcept { return r_->closed.load(std::memory_order_acquire) != 0; }

    void check_length(std::size_t len) const {
        if (len > max_message())
            throw std::length_error("message of " + std::to_string(len) + " bytes exceeds the ring's limit of " +
                                    std::to_string(max_message()) + " bytes per message");
    }

protected:
    // mem must be zero, as a segment's fresh memory is.
    static RingLayout* init(void* mem, std::size_t bytes, RingKind kind, uint64_t capacity, uint32_t max_message,
                            WaitBackend backend);
    static RingLayout* check(void* mem, std::size_t bytes, RingKind kind);
    explicit RingBase(RingLayout* r) noexcept
        : r_(r), slots_(reinterpret_cast<char*>(r) + sizeof(RingLayout)), mask_(r->capacity - 1) {}
    Slot* slot(uint64_t pos) const noexcept { return reinterpret_cast<Slot*>(slots_ + (pos & mask_) * r_->slot_size); }
    // The turn of the slot of pos, as the ring's algorithms reason about it
    // (Vyukov's: the slot of pos starts at turn pos & mask).
    uint64_t turn(const Slot* s, uint64_t pos, std::memory_order order) const noexcept {
        return s->seq.load(order) + (pos & mask_);
    }
    void set_turn(Slot* s, uint64_t pos, uint64_t turn, std::memory_order order) const noexcept {
        s->seq.store(turn - (pos & mask_), order);
    }

    RingLayout* r_;
    char* slots_;
    uint64_t mask_;
};

// Copying and blocking forms shared by both rings; Ring supplies
// begin_push/end_push/begin_pop/end_pop/readable/writable.
template <class Ring>
class RingOps : public RingBase {
public:
    bool try_push(const void* data, std::size_t len) {
        check_length(len);
        Reservation res;
        if (!self().begin_push(uint32_t(len), res)) return false;
        std::memcpy(res.data(), data, len);
        self().end_push(res);
        return true;
    }

    // Copies the next message into out, which holds cap >= max_message()
    // bytes; returns its length, or -1 if the ring is empty.
    int64_t try_pop(void* out, std::size_t cap) {
        if (cap < max_message())
            throw std::length_error("a buffer of " + std::to_string(cap) + " bytes cannot hold every message of a ring "
                                    "whose limit is " + std::to_string(max_message()) + " bytes");
        Reservation res;
        if (!self().begin_pop(res)) return -1;
        uint32_t len = res.size();
        std::memcpy(out, res.data(), len);
        self().end_pop(res);
        return len;
    }

    // Blocks until a slot is claimed (ready), or the options end the wait.
    WaitStatus wait_push(uint32_t len, Reservation& res, Waiter& w, const WaitOptions& opt) {
        check_length(len);
        for (;;) {
            if (closed()) return WaitStatus::closed;
            if (self().begin_push(len, res)) return WaitStatus::ready;
            WaitStatus st = w.wait(r_->writable, [this] { return self().writable() || closed(); }, opt);
            if (st != WaitStatus::ready) return st;
        }
    }

    WaitStatus wait_pop(Reservation& res, Waiter& w, const WaitOptions& opt) {
        for (;;) {
            if (self().begin_pop(res)) return WaitStatus::ready;
            if (closed()) return self().begin_pop(res) ? WaitStatus::ready : WaitStatus::closed;
            WaitStatus st = w.wait(r_->readable, [this] { return self().readable() || closed(); }, opt);
            if (st == WaitStatus::peer_died && self().begin_pop(res)) return WaitStatus::ready;
            if (st != WaitStatus::ready) return st;
        }
    }

    // Waits until a message is there to pop, without claiming it.
    WaitStatus wait_readable(Waiter& w, const WaitOptions& opt) {
        for (;;) {
            if (self().readable()) return WaitStatus::ready;
            if (closed()) return self().readable() ? WaitStatus::ready : WaitStatus::closed;
            WaitStatus st = w.wait(r_->readable, [this] { return self().readable() || closed(); }, opt);
            if (st != WaitStatus::ready) return st;
        }
    }

protected:
    using RingBase::RingBase;

private:
    Ring& self() noexcept { return static_cast<Ring&>(*this); }
};

class SpscRing : public RingOps<SpscRing> {
public:
    static SpscRing create(void* mem, std::size_t bytes, uint64_t capacity, uint32_t max_message, WaitBackend backend) {
        return SpscRing(init(mem, bytes, RingKind::spsc, capacity, max_message, backend));
    }
    static SpscRing attach(void* mem, std::size_t bytes) { return SpscRing(check(mem, bytes, RingKind::spsc)); }

    bool begin_push(uint32_t len, Reservation& res) noexcept {
        // relaxed: only this producer writes tail.
        uint64_t pos = r_->tail.load(std::memory_order_relaxed);
        if (pos - head_cache_ >= r_->capacity) {
            // acquire: the consumer has finished reading every slot before head.
            head_cache_ = r_->head.load(std::memory_order_acquire);
            if (pos - head_cache_ >= r_->capacity) return false;
        }
        res.slot = slot(pos);
        res.pos = pos;
        res.slot->len = len;
        return true;
    }
    void end_push(const Reservation& res) noexcept {
        // release: payload and length are written before the consumer sees the turn.
        set_turn(res.slot, res.pos, res.pos + 1, std::memory_order_release);
        // relaxed: tail is this producer's own cursor; others read it only for size().
        r_->tail.store(res.pos + 1, std::memory_order_relaxed);
        notify(r_->readable);
    }
    bool begin_pop(Reservation& res) noexcept {
        // relaxed: only this consumer writes head.
        uint64_t pos = r_->head.load(std::memory_order_relaxed);
        Slot* s = slot(pos);
        // acquire: pairs with end_push's release; the slot is complete.
        if (turn(s, pos, std::memory_order_acquire) != pos + 1) return false;
        res.slot = s;
        res.pos = pos;
        return true;
    }
    void end_pop(const Reservation& res) noexcept {
        // release: our reads of the slot finish before the producer may reuse it.
        r_->head.store(res.pos + 1, std::memory_order_release);
        notify(r_->writable);
    }
    bool readable() const noexcept {
        uint64_t pos = r_->head.load(std::memory_order_relaxed);
        return turn(slot(pos), pos, std::memory_order_acquire) == pos + 1;
    }
    bool writable() const noexcept {
        return r_->tail.load(std::memory_order_relaxed) - r_->head.load(std::memory_order_acquire) < r_->capacity;
    }

private:
    explicit SpscRing(RingLayout* r) noexcept : RingOps(r), head_cache_(r->head.load(std::memory_order_acquire)) {}
    uint64_t head_cache_;  // the producer's copy of head
};

class MpmcRing : public RingOps<MpmcRing> {
public:
    static MpmcRing create(void* mem, std::size_t bytes, uint64_t capacity, uint32_t max_message, WaitBackend backend) {
        return MpmcRing(init(mem, bytes, RingKind::mpmc, capacity, max_message, backend));
    }
    static MpmcRing attach(void* mem, std::size_t bytes) { return MpmcRing(check(mem, bytes, RingKind::mpmc)); }

    bool begin_push(uint32_t len, Reservation& res) noexcept {
        // relaxed loads of tail: it only hands out tickets; the slot's seq
        // carries the synchronisation. The claim is seq_cst for pass_baton.
        uint64_t pos = r_->tail.load(std::memory_order_relaxed);
        for (;;) {
            Slot* s = slot(pos);
            // acquire: the consumer that freed this slot has finished reading it.
            int64_t dif = int64_t(turn(s, pos, std::memory_order_acquire) - pos);
            if (dif == 0) {
                if (r_->tail.compare_exchange_weak(pos, pos + 1, std::memory_order_seq_cst,
                                                   std::memory_order_relaxed)) {
                    res.slot = s;
                    res.pos = pos;
                    // relaxed: read only once this process is dead (void_abandoned).
                    s->owner.store(owner_, std::memory_order_relaxed);
                    s->len = len;
                    pass_baton(r_->writable, [this] { return writable(); });
                    return true;
                }
            } else if (dif < 0) {
                return false;
            } else {
                pos = r_->tail.load(std::memory_order_relaxed);
            }
        }
    }
    void end_push(const Reservation& res) noexcept {
        // release: payload before turn; consumers acquire the turn.
        set_turn(res.slot, res.pos, res.pos + 1, std::memory_order_release);
        notify(r_->readable);
    }
    bool begin_pop(Reservation& res) noexcept {
        uint64_t pos = r_->head.load(std::memory_order_relaxed);
        for (;;) {
            Slot* s = slot(pos);
            // acquire: pairs with end_push's release, the payload is complete.
            int64_t dif = int64_t(turn(s, pos, std::memory_order_acquire) - (pos + 1));
            if (dif == 0) {
                // seq_cst: for pass_baton.
                if (r_->head.compare_exchange_weak(pos, pos + 1, std::memory_order_seq_cst,
                                                   std::memory_order_relaxed)) {
                    res.slot = s;
                    res.pos = pos;
                    pass_baton(r_->readable, [this] { return readable(); });
                    return true;
                }
            } else if (dif < 0) {
                return false;
            } else {
                pos = r_->head.load(std::memory_order_relaxed);
            }
        }
    }
    void end_pop(const Reservation& res) noexcept {
        // relaxed: ordered before the next lap's claim by the release below.
        res.slot->owner.store(0, std::memory_order_relaxed);
        // release: our reads finish before the producer of the next lap writes.
        set_turn(res.slot, res.pos, res.pos + r_->capacity, std::memory_order_release);
        notify(r_->writable);
    }
    // Both re-read the index when it went stale under them (another
    // consumer or producer moved on), so they never report false while a
    // later position is ready.
    bool readable() const noexcept {
        uint64_t pos = r_->head.load(std::memory_order_relaxed);
        for (;;) {
            int64_t dif = int64_t(turn(slot(pos), pos, std::memory_order_acquire) - (pos + 1));
            if (dif == 0) return true;
            if (dif < 0) return false;
            pos = r_->head.load(std::memory_order_relaxed);
        }
    }
    bool writable() const noexcept {
        uint64_t pos = r_->tail.load(std::memory_order_relaxed);
        for (;;) {
            int64_t dif = int64_t(turn(slot(pos), pos, std::memory_order_acquire) - pos);
            if (dif == 0) return true;
            if (dif < 0) return false;
            pos = r_->tail.load(std::memory_order_relaxed);
        }
    }

    // This handle's producer names itself `owner` (its process id) in the
    // slots it claims; 0, the default, names nobody.
    void set_owner(uint32_t owner) noexcept { owner_ = owner; }
    // Once the producer `owner` has died: completes each slot it claimed and
    // never completed as an empty message, which consumers skip; returns how
    // many. A producer that dies between its claim and naming itself (two
    // stores apart) is not found.
    std::size_t void_abandoned(uint32_t owner) noexcept {
        std::size_t n = 0;
        uint64_t tail = r_->tail.load(std::memory_order_relaxed);
        for (uint64_t pos = r_->head.load(std::memory_order_relaxed); pos < tail; ++pos) {
            Slot* s = slot(pos);
            // relaxed: the dead producer's stores are ordered before its death,
            // which this process has learned of through the kernel.
            if (turn(s, pos, std::memory_order_relaxed) != pos || s->owner.load(std::memory_order_relaxed) != owner)
                continue;
            s->len = 0;
            // release: as end_push's.
            set_turn(s, pos, pos + 1, std::memory_order_release);
            ++n;
        }
        if (n) notify(r_->readable, true);
        return n;
    }

private:
    explicit MpmcRing(RingLayout* r) noexcept : RingOps(r) {}
    uint32_t owner_ = 0;

    // Positions complete out of order when several processes push or pop,
    // so the wake-up for a later position can reach a sleeper that still
    // finds the head unready and sleeps again. Whoever claims a position
    // therefore wakes the next sleeper while more is ready. `sleepers` is
    // read first: while nobody sleeps, the next slot, which the other side
    // wrote last, is not read.
    // seq_cst, as the claim before it: a sleeper announces itself and
    // fences before it re-checks the ring, so if this load misses the
    // announcement, the claim precedes that fence and the re-check sees it
    // (free on x86, where the claim is a locked instruction and the load a
    // plain one).
    template <class More>
    static void pass_baton(EventWord& ev, More more) noexcept {
        if (ev.sleepers.load(std::memory_order_seq_cst) != 0 && more()) notify(ev);
    }
};

}  // namespace mizu
