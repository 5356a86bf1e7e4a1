#include "worker_loop.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "spin.hpp"
#include "wire.hpp"

namespace mizu {

namespace {

// A popped slot, given back to the ring when the scope that copies its
// message out ends, however it ends.
class Popped {
public:
    Popped(AnyRing& ring, Reservation& res) : ring_(ring), res_(res) {}
    ~Popped() { ring_.end_pop(res_); }
    Popped(const Popped&) = delete;
    Popped& operator=(const Popped&) = delete;

private:
    AnyRing& ring_;
    Reservation& res_;
};

// The language lets go of its lock for the length of a wait that may sleep.
class Released {
public:
    explicit Released(const WorkerLanguage& language) : language_(language) {
        if (language_.release) language_.release(language_.self);
    }
    ~Released() {
        if (language_.release) language_.reacquire(language_.self);
    }
    Released(const Released&) = delete;
    Released& operator=(const Released&) = delete;

private:
    const WorkerLanguage& language_;
};

}  // namespace

WorkerLoop::WorkerLoop(AnyRing& tasks, Waiter& task_waiter, AnyRing& results, Waiter& result_waiter,
                       const PeerWatch& client, uint16_t index, long max_tasks, int64_t max_memory,
                       const WorkerLanguage& language)
    : tasks_(tasks), task_waiter_(task_waiter), results_(results), result_waiter_(result_waiter), client_(client),
      index_(index), max_tasks_(max_tasks), max_memory_(max_memory), language_(language),
      spin_limit_ns_(task_waiter.spin_limit_ns()) {
    if (!language.prepare || !language.drop || !language.run || !language.release != !language.reacquire)
        throw std::invalid_argument("a worker's language must supply prepare, drop and run, and release with reacquire");
    if (max_memory_ > 0) statm_ = ::open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
    results_.set_owner(uint32_t(::getpid()));
    // The idle hook runs each slice; the thread of PeerWatch::die_with ends
    // the worker sooner when its client dies, so an idle worker need not
    // wake often.
    task_waiter_.set_slice_ns(kIdleSliceNs);
    // The first task is waited for without spinning: the pool may be
    // starting other workers meanwhile (a fork pool starts every worker at
    // once), and their starts want the CPUs.
    task_waiter_.set_spin_limit_ns(0);
}

WorkerLoop::~WorkerLoop() {
    if (statm_ >= 0) ::close(statm_);
}

int64_t WorkerLoop::memory_bytes() const noexcept {
    // statm: in pages, the whole process, what is resident, and of that what
    // is shared (files, and shared memory: the pool's segments, whose blocks
    // the language counts as it holds them).
    char buf[128];
    ssize_t n = statm_ < 0 ? -1 : ::pread(statm_, buf, sizeof buf - 1, 0);
    if (n <= 0) return -1;
    buf[n] = '\0';
    char* end = nullptr;
    std::strtoll(buf, &end, 10);
    long long resident = std::strtoll(end, &end, 10);
    long long shared = std::strtoll(end, nullptr, 10);
    int64_t held = language_.held_bytes ? int64_t(language_.held_bytes(language_.self)) : 0;
    return int64_t(resident - shared) * ::sysconf(_SC_PAGESIZE) + held;
}

bool WorkerLoop::over_memory() {
    if (max_memory_ <= 0 || memory_bytes() <= max_memory_) return false;
    if (!language_.collect) return true;
    language_.collect(language_.self);
    return memory_bytes() > max_memory_;
}

WaitOptions WorkerLoop::wait_options() const noexcept {
    WaitOptions opt;
    opt.peer = &client_;
    opt.hook = SliceHook{language_.idle, language_.self};
    return opt;
}

bool WorkerLoop::waited(WaitStatus st) {
    switch (st) {
        case WaitStatus::ready:
        case WaitStatus::timed_out:  // no deadline is set: a spurious end, waited again
            return true;
        case WaitStatus::stopped:
            stop_ = Stop::language;
            return false;
        case WaitStatus::closed:
        case WaitStatus::peer_died:
            break;
    }
    stop_ = Stop::client_gone;
    return false;
}

WaitStatus WorkerLoop::wait_pop(Reservation& res) {
    if (tasks_.begin_pop(res)) return WaitStatus::ready;
    if (language_.release) {
        int64_t until = now_ns() + std::min(kHeldSpinNs, task_waiter_.budget_ns());
        while (now_ns() < until) {
            for (int i = 0; i < 8; ++i) {
                cpu_relax();
                if (tasks_.begin_pop(res)) return WaitStatus::ready;
            }
        }
    }
    Released released(language_);
    // Only the client notifies the task ring: its notifier's CPU is the
    // client's. (Every worker pushes to the result ring.)
    WaitOptions opt = wait_options();
    opt.leave_peer_cpu = true;
    return tasks_.wait_pop(res, task_waiter_, opt);
}

WorkerLoop::Stop WorkerLoop::serve() {
    while (!retired_) {
        Reservation res;
        WaitStatus st = wait_pop(res);
        if (st != WaitStatus::ready) {
            if (waited(st)) continue;
            return stop_;
        }
        if (first_) {
            task_waiter_.set_spin_limit_ns(spin_limit_ns_);
            first_ = false;
        }
        // The message is copied out and its slot given back before the
        // language reads it: a worker that dies while reading a task has
        // taken it (the pool's obituary counts the slots it popped).
        {
            Popped popped(tasks_, res);
            if (messages::is_chunk(res.data(), res.size())) {
                if (!chunks_.feed(res.data(), res.size(), whole_)) continue;
            } else {
                whole_.assign(res.data(), res.size());
            }
        }
        const char* data = whole_.data();
        std::size_t size = whole_.size();
        messages::Message m = messages::read_message(data, size);
        if (m.kind != messages::kTask) throw std::invalid_argument("the client sent a worker a result");
        // Claimed before its call is read: a worker that dies reading it
        // (a crash in an argument's unpickling) dies running it, and the
        // pool fails it rather than send it to the next worker.
        int64_t start = now_ns();
        bool claimed = tasks_.base().claim(m.task.task_id, start);
        bool prepared = language_.prepare(language_.self, m, data, size);
        // A large message's buffer goes back now, not when the next one
        // replaces it: an idle worker holds no copy of its last argument.
        if (whole_.capacity() > kKeptMessageBytes) std::string().swap(whole_);
        if (!prepared) {
            stop_ = Stop::language;
            return stop_;
        }
        if (!claimed) {
            // The client took the task back to run it on an idle worker.
            if (language_.drop(language_.self)) continue;
            stop_ = Stop::language;
            return stop_;
        }
        task_ = m.task;
        running_ = true;
        start_ns_ = start;
        if (!language_.run(language_.self, *this)) {
            stop_ = Stop::language;
            return stop_;
        }
        if (halted_) return stop_;  // the outcome could not be sent
        task_done();
        if (halted_) return stop_;  // nor the notice that the worker retires
    }
    stop_ = Stop::retired;
    return stop_;
}

messages::ResultHeader WorkerLoop::result_header(messages::Status status) noexcept {
    if (running_ && (task_.flags & messages::kTimed)) tasks_.base().answer();
    double seconds = running_ ? double(now_ns() - start_ns_) * 1e-9 : 0.0;
    return messages::result_header(index_, running_ ? task_.task_id : 0, status, seconds);
}

bool WorkerLoop::send(const char* data, std::size_t size) {
    // The outcome is whole: from now on a stop() leaves the task be.
    if (running_) tasks_.base().note_answered(task_.task_id);
    std::size_t limit = results_.base().max_message();
    if (size <= limit) return push(data, size);
    out_chunk_.resize(limit);
    std::size_t n = messages::chunk_count(size, limit);
    for (std::size_t i = 0; i < n; ++i)
        if (!push(out_chunk_.data(), messages::write_chunk(data, size, index_, limit, i, &out_chunk_[0]))) return false;
    return true;
}

bool WorkerLoop::push(const char* data, std::size_t size) {
    Reservation res;
    if (results_.base().closed()) {
        // The pool has shut down or broken: nobody reads results any more.
        stop_ = Stop::client_gone;
        halted_ = true;
        return false;
    }
    if (!results_.begin_push(uint32_t(size), res)) {
        for (;;) {
            WaitStatus st;
            {
                Released released(language_);
                st = results_.wait_push(uint32_t(size), res, result_waiter_, wait_options());
            }
            if (st == WaitStatus::ready) break;
            if (!waited(st)) {
                halted_ = true;
                return false;
            }
        }
    }
    std::memcpy(res.data(), data, size);
    results_.end_push(res);
    return true;
}

bool WorkerLoop::notice(messages::Status status) {
    messages::ResultHeader header = messages::result_header(index_, 0, status, 0.0);
    wire::Writer w;
    std::memcpy(w.put_header(sizeof header), &header, sizeof header);
    w.begin_message();
    w.put_none();
    return send(w.data(), w.size());
}

void WorkerLoop::task_done() {
    running_ = false;
    ++done_;
    if ((max_tasks_ > 0 && done_ >= max_tasks_) || over_memory()) {
        retired_ = true;
        notice(messages::Status::retiring);
    }
}

}  // namespace mizu
