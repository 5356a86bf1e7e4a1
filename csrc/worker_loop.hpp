// The loop every worker runs, whatever language runs its tasks (see
// doc/dev/workers.rst): wait on the worker's task ring, spinning and then
// sleeping in slices; put together a message sent in chunks; read its
// envelope; claim the task, then have the language read its call; time it;
// send its outcome, in chunks if it needs more than a slot; watch the
// client all along; send the notices that carry no value; count the tasks
// against max_tasks, and retire once a task leaves the process's memory
// (resident, and the arena blocks it holds) above max_memory. A kind of
// worker supplies a WorkerLanguage: how it reads a task's call, runs it
// and encodes its outcome.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "any_ring.hpp"
#include "liveness.hpp"
#include "messages.hpp"
#include "waiter.hpp"

namespace mizu {

class WorkerLoop;

// What a kind of worker supplies, as plain functions of `self`, so that a
// language reached through a C interface (Cython's cdef functions) can fill
// it in. A function that returns false stops the loop with Stop::language:
// the language's own error is pending (a Python exception) for the caller
// of serve() to raise. A function may also throw: the loop keeps its state
// in its members, so that serve() may be called again after an exception
// (the R worker does, after an R error ended a task).
struct WorkerLanguage {
    void* self = nullptr;
    // Reads the call of task m, whose whole message is data[0, size),
    // valid during the call only, and registers the callable it brings: it
    // is the worker's from now on, whether the task runs here or not.
    bool (*prepare)(void* self, const messages::Message& m, const char* data, std::size_t size) = nullptr;
    // The task prepared last was taken back by the client: forget its call.
    bool (*drop)(void* self) = nullptr;
    // Runs the task prepared last, which this worker has claimed, and sends
    // its outcome (WorkerLoop::result_header, WorkerLoop::send).
    bool (*run)(void* self, WorkerLoop& loop) = nullptr;
    // Optional: called each idle slice of a wait (memory kept for tasks goes
    // back, signal handlers run); false ends the wait.
    bool (*idle)(void* self) = nullptr;
    // Optional: around a wait that may sleep (Python lets go of its GIL).
    void (*release)(void* self) = nullptr;
    void (*reacquire)(void* self) = nullptr;
    // Optional: the bytes of arena blocks the language's values hold. They
    // lie in the pool's shared memory, which the process's resident memory
    // leaves out, and count with it against max_memory.
    std::size_t (*held_bytes)(void* self) = nullptr;
    // Optional: lets go of what the language's values no longer need (R
    // collects its garbage). Costly, so called only before a worker whose
    // memory is above max_memory retires, which then measures it again.
    void (*collect)(void* self) = nullptr;
};

class WorkerLoop {
public:
    enum class Stop : int { client_gone = 0, retired = 1, language = 2 };

    // An idle worker wakes this often to run the language's idle hook and see
    // that its client lives; a thread (PeerWatch::die_with) ends it sooner
    // when the client dies during a long task.
    static constexpr int64_t kIdleSliceNs = 250000000;
    // Before a wait that would let go of the language's lock (release), a
    // poll this long, so that a task about to come costs no hand-over.
    static constexpr int64_t kHeldSpinNs = 2000;
    // A task message's copy keeps its buffer for the next one up to this
    // size (a slot's, and then some).
    static constexpr std::size_t kKeptMessageBytes = 64 << 10;

    // The rings, and their waiters, outlive the loop. max_tasks, max_memory
    // (bytes held after a task, see memory_bytes) 0: no limit. The loop
    // names its process in the result ring's slots it claims
    // (MpmcRing::set_owner).
    WorkerLoop(AnyRing& tasks, Waiter& task_waiter, AnyRing& results, Waiter& result_waiter, const PeerWatch& client,
               uint16_t index, long max_tasks, int64_t max_memory, const WorkerLanguage& language);
    ~WorkerLoop();
    WorkerLoop(const WorkerLoop&) = delete;
    WorkerLoop& operator=(const WorkerLoop&) = delete;

    // Runs tasks until the client is gone, max_tasks are done, or the
    // language stops it. Throws std::invalid_argument for a message that is
    // not a task, and messages::MessageError for one that cannot be read.
    Stop serve();

    // The header of the running task's result: its id, and the seconds since
    // it was claimed. A task with a deadline is marked answered from now on.
    messages::ResultHeader result_header(messages::Status status) noexcept;
    // Sends a message (a result, or a notice), in chunks if it needs them;
    // the running task's result is noted answered as it goes (note_answered);
    // false once the client is gone or the idle hook ended the wait (see
    // stop()), and serve() then stops after the running task.
    bool send(const char* data, std::size_t size);
    // A notice with no task and no value (ready, retiring); as send.
    bool notice(messages::Status status);
    // The running task's outcome is sent: counts it against max_tasks, and
    // retires the worker (the notice sent) once they are done, or once the
    // process holds more than max_memory.
    void task_done();

    // The task claimed last, until task_done(); null between tasks.
    const messages::TaskHeader* running() const noexcept { return running_ ? &task_ : nullptr; }
    // Why serve() last stopped, or send() last failed.
    Stop stop() const noexcept { return stop_; }
    bool retired() const noexcept { return retired_; }

private:
    WaitStatus wait_pop(Reservation& res);
    bool push(const char* data, std::size_t size);
    // Whether serve() goes on after a wait that ended with st.
    bool waited(WaitStatus st);
    WaitOptions wait_options() const noexcept;
    // The process's own resident memory in bytes (shared pages left out),
    // and the arena blocks its language holds; -1 if it cannot be read.
    int64_t memory_bytes() const noexcept;
    // Whether that is above max_memory, once the language has collected.
    bool over_memory();

    AnyRing& tasks_;
    Waiter& task_waiter_;
    AnyRing& results_;
    Waiter& result_waiter_;
    const PeerWatch& client_;
    uint16_t index_;
    long max_tasks_;
    int64_t max_memory_;
    int statm_ = -1;          // /proc/self/statm, open while max_memory is set
    WorkerLanguage language_;

    messages::Reassembler chunks_;
    std::string whole_;       // the task message being read, copied out of its slot or put together from its chunks
    std::string out_chunk_;   // a chunk of a message sent in several
    int64_t spin_limit_ns_;   // the task waiter's, held back until the first task
    bool first_ = true;       // no task popped yet: the first is waited for without spinning
    bool running_ = false;
    messages::TaskHeader task_{};
    int64_t start_ns_ = 0;
    long done_ = 0;
    bool retired_ = false;
    bool halted_ = false;     // a send failed: the client is gone, or the idle hook ended its wait
    Stop stop_ = Stop::client_gone;
};

}  // namespace mizu
