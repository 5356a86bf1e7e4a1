// The R worker: the common worker loop (worker_loop.hpp) running R calls,
// tasks from its ring in the pool's segment, results into the pool's result
// ring, in the messages of doc/dev/messages.rst with the values of
// doc/dev/wire.rst, as the Python worker reads and writes them.
//
// The loop's frame holds C++ objects (the segment, rings, buffers), so
// every R call below it runs inside r_call (unwind.h) or, for the
// sessions the tasks run in (evaluate.h), under R_tryEvalSilent, which
// no jump leaves; values it keeps across R calls are on R's PROTECT stack.
#include "worker.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <unistd.h>
#include <unordered_map>
#include <vector>

#include "any_ring.hpp"
#include "blocks.h"
#include "evaluate.h"
#include "liveness.hpp"
#include "messages.hpp"
#include "segment.hpp"
#include "spin.hpp"
#include "unwind.h"
#include "values.h"
#include "worker_loop.hpp"

namespace mizu::r {

namespace {

using messages::Message;
using messages::Status;

// R allocates each vector of more than a few elements with malloc, and a
// task's large results and temporaries are freed at its next collections.
// glibc's defaults give such blocks back to the system at once (an mmap
// each, or a trim of the heap's top), so the next task's vectors of the
// same size fault in every page again: for x * 2 of 1e6 doubles, 2,000
// faults and most of the task's time. A worker keeps what R frees, up to
// these sizes, while tasks keep coming, and gives it back (malloc_trim)
// once it has waited a whole slice for the next.
constexpr int kHeapBlockMax = 32 << 20;  // larger blocks are mmapped, unmapped when freed
constexpr int kHeapKeepMax = 256 << 20;  // a free heap top beyond this is trimmed at once

void keep_freed_memory() {
#if defined(__GLIBC__)
    mallopt(M_MMAP_THRESHOLD, kHeapBlockMax);
    mallopt(M_TRIM_THRESHOLD, kHeapKeepMax);
#endif
}

// The mappings of the client's segments kept for the next task's blocks
// (attached_segment), and the worker's arena segments that results have
// left empty, go back once they have gone this long unused, as in a Python
// worker (mizu._array_data.IDLE_MEMORY_SECONDS).
constexpr int64_t kIdleMemoryNs = 1000000000;

// A collection, once a worker waits after tasks that adopted blocks: the
// views of the client's blocks that its last calls were given are garbage
// now, and until R's collector runs (at its own pace, on later
// allocations) each keeps its block from going back to the client. R_gc
// runs pending finalizers too; R_ToplevelExec keeps any jump of theirs out
// of the loop's frames.
void collect_garbage() {
    R_ToplevelExec([](void*) { R_gc(); }, nullptr);
}

// R's collector runs on a schedule reckoned by R's own heap, in which a
// view of a block of any size is small: a worker given new large arrays
// call after call would hold every one until the client's arena ran out.
// Once its views pin this many bytes of distinct blocks more than its last
// collection left, it collects as soon as a call ends. A full collection
// takes milliseconds even of a fresh session's heap; the same array passed
// call after call pins its bytes once, and so costs none.
constexpr uint64_t kCollectAtPinned = uint64_t(64) << 20;

// Gives the memory kept since the last trim back once.
void give_back_memory(bool& kept) {
#if defined(__GLIBC__)
    if (kept) malloc_trim(0);
#endif
    kept = false;
}

// The client closed the result ring, or exited: the worker's work is over.
struct ClientGone {};

// The pool's rings, as the worker sees them.
struct Rings {
    std::unique_ptr<Segment> segment;
    std::unique_ptr<AnyRing> tasks;
    std::unique_ptr<AnyRing> results;
};

Rings attach_rings(const WorkerOptions& o) {
    std::unique_ptr<Segment> seg = Segment::attach(o.segment_fd);
    auto ring_at = [&](uint64_t offset) {
        if (offset >= seg->size()) throw std::invalid_argument("a ring offset past the end of the segment");
        return seg->base() + offset;
    };
    char* tasks = ring_at(o.task_ring);
    char* results = ring_at(o.result_ring);
    std::unique_ptr<AnyRing> t = AnyRing::attach(RingKind::spsc, tasks, seg->size() - o.task_ring);
    std::unique_ptr<AnyRing> r = AnyRing::attach(RingKind::mpmc, results, seg->size() - o.result_ring);
    return Rings{std::move(seg), std::move(t), std::move(r)};
}

// The tag of the external pointer through which a session reaches its
// worker (serve_worker).
SEXP worker_tag() {
    static SEXP tag = Rf_install("mizu_worker");
    return tag;
}

class Worker {
public:
    Worker(const WorkerOptions& o, Rings rings)
        : o_(o), rings_(std::move(rings)), client_(o.client_pid), result_waiter_(&rings_.segment->header().spin_gate),
          task_waiter_(&rings_.segment->header().spin_gate),
          loop_(*rings_.tasks, task_waiter_, *rings_.results, result_waiter_, client_, uint16_t(o.index), o.max_tasks,
                o.max_memory, language()) {
        // The arrays of a task the pool kills go back through the client.
        hold_in(&rings_.tasks->base().layout()->held);
    }
    // Before the rings' segment goes: what the worker still holds is its own.
    ~Worker() { hold_in(nullptr); }

    Worker(const Worker&) = delete;
    Worker& operator=(const Worker&) = delete;

    // Runs until the client closes the ring or exits, or max_tasks are done:
    // serve() inside sessions (evaluate.h), a new one after each R error,
    // which fails the call that raised it.
    void run() {
        SEXP ns = PROTECT(r_call([] {
            SEXP name = PROTECT(Rf_mkString("mizu"));
            SEXP found = R_FindNamespace(name);
            UNPROTECT(1);
            return found;
        }));
        SEXP expression = PROTECT(r_call([&] {
            SEXP serve = namespace_value(ns, "C_serve");
            SEXP handle = PROTECT(R_MakeExternalPtr(this, worker_tag(), R_NilValue));
            SEXP body = PROTECT(Rf_lang3(Rf_install(".Call"), serve, handle));
            SEXP wrapped = session_expression(body);
            UNPROTECT(2);
            return wrapped;
        }));
        then_unprotect(2, [&] {
            for (bool returned = false; !returned;) {
                r_call([] {
                    begin_session();
                    return R_NilValue;
                });
                returned = run_session(expression, ns);
                try {
                    if (!returned) fail_running();
                } catch (...) {
                    end_session();
                    throw;
                }
                end_session();
            }
        });
        if (stopped_) std::rethrow_exception(stopped_);
    }

    // The loop a session runs: the rest of a batch an error interrupted,
    // then tasks until the client is gone or max_tasks are done. What the
    // core throws ends it, to be rethrown by run() outside R.
    SEXP serve() {
        // The call prepared last stays protected here until it has run or
        // was dropped; an R error unwinds it with the session.
        call_ = R_NilValue;
        PROTECT_WITH_INDEX(R_NilValue, &call_index_);
        try {
            if (batch_.active) {
                send_outcome(r_call([&] { return continue_batch(); }));
                call_ended();
                loop_.task_done();
            }
            if (!loop_.retired()) loop_.serve();
        } catch (const RJump&) {
            throw;
        } catch (const ClientGone&) {
        } catch (...) {
            stopped_ = std::current_exception();
        }
        UNPROTECT(1);
        return R_NilValue;
    }

    // The notice that the worker takes tasks.
    void send_ready() {
        if (!loop_.notice(Status::ready)) throw ClientGone();
    }

    // The notice that the worker ends, with body list(stage, traceback text).
    void send_exiting(SEXP body) {
        PROTECT(body);
        then_unprotect(1, [&] { push_result(loop_.result_header(Status::exiting), body); });
    }

private:
    WorkerLanguage language() {
        WorkerLanguage l;
        l.self = this;
        l.prepare = [](void* self, const Message& m, const char*, std::size_t) {
            return static_cast<Worker*>(self)->prepare(m);
        };
        l.drop = [](void* self) { return static_cast<Worker*>(self)->drop(); };
        l.run = [](void* self, WorkerLoop&) { return static_cast<Worker*>(self)->run_prepared(); };
        l.idle = [](void* self) {
            auto* worker = static_cast<Worker*>(self);
            worker->collect_after_calls();
            give_back_memory(worker->memory_kept_);
            release_idle_segments(kIdleMemoryNs);
            release_idle_arena(kIdleMemoryNs);
            return true;
        };
        // The client's blocks that R's values still view (its own results
        // leave the arena as they are sent), and those of finished calls
        // until R collects them: before a worker over max_memory retires.
        l.held_bytes = [](void*) { return std::size_t(block_holds().pinned); };
        l.collect = [](void* self) {
            auto* worker = static_cast<Worker*>(self);
            if (!worker->collected_since_call_) worker->collect_now();
            give_back_memory(worker->memory_kept_);
        };
        return l;
    }

    // The task's call and callable, decoded; the callable is registered,
    // the call kept for run_prepared.
    bool prepare(const Message& m) {
        memory_kept_ = true;
        collected_since_call_ = false;
        std::vector<messages::BufferRecord> records;
        for (std::size_t i = 0; i < m.buffer_count; ++i) records.push_back(m.buffer(i));
        std::vector<int> fds;
        if (m.descriptors) fds = messages::receive_descriptors(o_.socket_fd, m.descriptors);
        Descriptors closing{fds};
        if (m.body_size == 0 || uint8_t(m.body[0]) != messages::kWireBody)
            throw std::invalid_argument("a task for an R worker must carry a wire message, not a pickle");
        SEXP value = R_NilValue, callable = R_NilValue;
        refused_.clear();
        BlockTable table(records, fds);
        try {
            value = decode_message(m.body, m.body_size, table);
        } catch (const std::invalid_argument& e) {
            // A value R cannot hold fails its task, not the worker; the
            // callable it brings is still this worker's from now on.
            refused_ = e.what();
            if (m.task.flags & messages::kCallable) callable = decode_first_item(m.body, m.body_size, table);
        }
        REPROTECT(refused_.empty() ? value : callable, call_index_);
        if (refused_.empty() && (m.task.flags & messages::kCallable)) {
            if (TYPEOF(value) != VECSXP || XLENGTH(value) != 2)
                throw std::invalid_argument("a task with its callable must carry (callable, call)");
            callable = VECTOR_ELT(value, 0);
            value = VECTOR_ELT(value, 1);
        }
        call_ = value;
        // The callable a task brings is this worker's from now on, whether
        // the task runs here or not.
        if (callable != R_NilValue) r_call([&] { return learn(m.task.fn_id, callable); });
        return true;
    }

    bool drop() {
        forget_call();
        return true;
    }

    // Runs R's collector once the worker has waited kIdleMemoryNs between
    // tasks, if a call it has let go of since adopted block references and
    // some are still alive.
    void collect_after_calls() {
        if (!collect_pending_ || loop_.running() || now_ns() - call_forgotten_ns_ < kIdleMemoryNs) return;
        collect_pending_ = false;
        if (block_holds().alive != 0) collect_now();
    }

    void collect_now() {
        collect_pending_ = false;
        collected_since_call_ = true;
        collect_garbage();
        // What the collection left pinned is held on purpose: the next one
        // waits for kCollectAtPinned more.
        collect_at_pinned_ = block_holds().pinned + kCollectAtPinned;
    }

    void forget_call() {
        call_ = R_NilValue;
        REPROTECT(R_NilValue, call_index_);
        call_ended();
    }

    // Once the values of a call are let go of (forget_call; unwound by an
    // R error): a collection is due after the next wait, or at once if
    // the blocks R's values view have grown by kCollectAtPinned.
    void call_ended() {
        HoldCounts holds = block_holds();
        if (holds.bytes_made != bytes_seen_) {
            collect_pending_ = true;
            call_forgotten_ns_ = now_ns();
        }
        bytes_seen_ = holds.bytes_made;
        if (holds.pinned >= collect_at_pinned_) collect_now();
    }

    // Runs the task prepared last, claimed; an R error in it fails it
    // (fail_running).
    bool run_prepared() {
        const messages::TaskHeader& task = *loop_.running();
        bool plain = false;
        SEXP outcome = r_call([&] {
            return refused_.empty() ? run_call(task, call_, plain) : refusal(kRefused, refused_.c_str());
        });
        send_outcome(outcome, plain);
        forget_call();
        return true;
    }

    // Sends the outcome of the running task: a call's value alone (plain),
    // or list(value =, error =, warnings =), which goes as its value alone
    // too when it holds neither an error nor a warning (doc/dev/messages.rst:
    // status ok; else raised).
    void send_outcome(SEXP outcome, bool plain = false) {
        PROTECT(outcome);
        if (!plain && VECTOR_ELT(outcome, 1) == R_NilValue && Rf_xlength(VECTOR_ELT(outcome, 2)) == 0) {
            outcome = VECTOR_ELT(outcome, 0);
            plain = true;
        }
        Status status = plain ? Status::ok : Status::raised;
        std::string unreadable;
        then_unprotect(1, [&] {
            try {
                push_result(loop_.result_header(status), outcome);
            } catch (const std::invalid_argument& e) {
                // A value Python cannot read fails its task, not the worker.
                unreadable = e.what();
            }
        });
        if (!unreadable.empty()) {
            SEXP error = PROTECT(r_call([&] { return refusal(kUnreadable, unreadable.c_str()); }));
            then_unprotect(1, [&] { push_result(loop_.result_header(Status::raised), error); });
        }
    }

    // After an R error ended a session: the outcome of the call it ended.
    // In a batch, that unit fails and the next session runs the rest.
    void fail_running() {
        if (!loop_.running()) throw std::runtime_error("an R error struck the R worker between tasks");
        if (batch_.active && batch_.unit >= batch_.units) {
            // It struck after the batch's calls, making its outcome: the
            // whole task fails.
            R_ReleaseObject(batch_.lists);
            batch_ = Batch{};
        }
        if (!batch_.active) {
            send_outcome(r_call([] { return session_outcome(R_NilValue, true); }));
            call_ended();
            loop_.task_done();
            return;
        }
        r_call([&] {
            SEXP outcome = PROTECT(session_outcome(R_NilValue, true));
            SET_VECTOR_ELT(batch_list(kErrors), batch_.unit, VECTOR_ELT(outcome, 1));
            ++batch_.failed;
            end_unit(VECTOR_ELT(outcome, 2));
            UNPROTECT(1);
            return R_NilValue;
        });
    }

    // Registers the R function `text` names or defines as the client's
    // fn_id; R_NilValue.
    SEXP learn(uint64_t fn_id, SEXP text) {
        SEXP registered = PROTECT(register_function(text));
        if (VECTOR_ELT(registered, 1) != R_NilValue) {
            // The function itself does not evaluate: every task that
            // names it gets that error.
            R_PreserveObject(registered);
            failures_[fn_id] = registered;
        } else {
            ids_[fn_id] = Rf_asInteger(VECTOR_ELT(registered, 0));
        }
        UNPROTECT(1);
        return R_NilValue;
    }

    // list(value =, error =, warnings =) of the task's call, as eval_safely
    // gives them; its value alone, plain set, if it raised no warning.
    SEXP run_call(const messages::TaskHeader& h, SEXP call, bool& plain) {
        auto failure = failures_.find(h.fn_id);
        if (failure != failures_.end()) return failure->second;
        auto id = ids_.find(h.fn_id);
        if (id == ids_.end())
            throw std::invalid_argument("a task names R function " + std::to_string(h.fn_id) +
                                        ", which this worker was never sent");
        if (h.flags & messages::kBatch) return run_batch(id->second, h.flags, call);
        SEXP args = call, kwargs = R_NilValue;
        if (h.flags & messages::kKeywords) {
            if (TYPEOF(call) != VECSXP || XLENGTH(call) != 2)
                throw std::invalid_argument("a call with keywords must be (args, kwargs)");
            args = VECTOR_ELT(call, 0);
            kwargs = VECTOR_ELT(call, 1);
        }
        SEXP result = PROTECT(session_call(id->second, as_arguments(args), kwargs));
        plain = session_quiet();
        SEXP outcome = plain ? result : session_outcome(result, false);
        UNPROTECT(1);
        return outcome;
    }

    // A batch's outcome, shaped as one call's: its value is list(values,
    // failures), one value per unit (NULL where the unit failed) and
    // list(unit index, error record) for each unit that failed; its
    // warnings are every call's. A unit ends at its first error; the batch
    // goes on with the next, in the next session (fail_running).
    SEXP run_batch(int id, uint8_t flags, SEXP units) {
        if (TYPEOF(units) != VECSXP) throw std::invalid_argument("a batch's units must be a list");
        R_xlen_t n = XLENGTH(units);
        SEXP lists = PROTECT(Rf_allocVector(VECSXP, kBatchLists));
        SET_VECTOR_ELT(lists, kUnits, units);
        for (BatchList k : {kValues, kErrors, kWarnings}) SET_VECTOR_ELT(lists, k, Rf_allocVector(VECSXP, n));
        R_PreserveObject(lists);
        UNPROTECT(1);
        batch_ = Batch{true, id, bool(flags & messages::kFlat), bool(flags & messages::kSingle), n, 0, 0, 0, 0, lists};
        return continue_batch();
    }

    enum BatchList : R_xlen_t { kUnits, kValues, kErrors, kWarnings, kUnitValues, kUnitWarnings, kBatchLists };

    SEXP batch_list(BatchList k) const { return VECTOR_ELT(batch_.lists, k); }

    // The batch from its current unit and call on; its outcome.
    SEXP continue_batch() {
        for (; batch_.unit < batch_.units; ) {
            SEXP unit = VECTOR_ELT(batch_list(kUnits), batch_.unit);
            if (!batch_.flat && TYPEOF(unit) != VECSXP)
                throw std::invalid_argument("a batch's unit must be a list of calls");
            R_xlen_t calls = batch_.flat ? 1 : XLENGTH(unit);
            if (batch_.call == 0) {
                SET_VECTOR_ELT(batch_.lists, kUnitValues, Rf_allocVector(VECSXP, calls));
                SET_VECTOR_ELT(batch_.lists, kUnitWarnings, Rf_allocVector(VECSXP, 0));
            }
            for (; batch_.call < calls; ++batch_.call) {
                SEXP args = batch_.flat ? unit : VECTOR_ELT(unit, batch_.call);
                SEXP value = PROTECT(
                    session_call(batch_.id, batch_.single ? one_item(args) : as_arguments(args), R_NilValue));
                SET_VECTOR_ELT(batch_list(kUnitValues), batch_.call, value);
                UNPROTECT(1);
                if (!session_quiet()) {
                    SEXP outcome = PROTECT(session_outcome(R_NilValue, false));
                    add_unit_warnings(VECTOR_ELT(outcome, 2));
                    UNPROTECT(1);
                }
            }
            SEXP values = batch_list(kUnitValues);
            SET_VECTOR_ELT(batch_list(kValues), batch_.unit, batch_.flat ? VECTOR_ELT(values, 0) : values);
            end_unit(R_NilValue);
        }
        return batch_outcome();
    }

    void add_unit_warnings(SEXP warnings) {
        SET_VECTOR_ELT(batch_.lists, kUnitWarnings, append(batch_list(kUnitWarnings), warnings));
    }

    // The current unit is over, with these last warnings: on to the next.
    void end_unit(SEXP warnings) {
        add_unit_warnings(warnings);
        SEXP unit_warnings = batch_list(kUnitWarnings);
        batch_.warned += XLENGTH(unit_warnings);
        SET_VECTOR_ELT(batch_list(kWarnings), batch_.unit, unit_warnings);
        ++batch_.unit;
        batch_.call = 0;
    }

    SEXP batch_outcome() {
        SEXP errors = batch_list(kErrors), warnings = batch_list(kWarnings);
        SEXP failures = PROTECT(Rf_allocVector(VECSXP, batch_.failed));
        SEXP all_warnings = PROTECT(Rf_allocVector(VECSXP, batch_.warned));
        for (R_xlen_t u = 0, f = 0, w = 0; u < batch_.units; ++u) {
            if (VECTOR_ELT(errors, u) != R_NilValue) {
                SEXP pair = Rf_allocVector(VECSXP, 2);
                SET_VECTOR_ELT(failures, f++, pair);
                SET_VECTOR_ELT(pair, 0, Rf_ScalarInteger(int(u)));
                SET_VECTOR_ELT(pair, 1, VECTOR_ELT(errors, u));
            }
            SEXP unit_warnings = VECTOR_ELT(warnings, u);
            for (R_xlen_t k = 0; k < XLENGTH(unit_warnings); ++k) SET_VECTOR_ELT(all_warnings, w++, VECTOR_ELT(unit_warnings, k));
        }
        SEXP pair = PROTECT(Rf_allocVector(VECSXP, 2));
        SET_VECTOR_ELT(pair, 0, batch_list(kValues));
        SET_VECTOR_ELT(pair, 1, failures);
        SEXP outcome = outcome_of(pair, R_NilValue, all_warnings);
        UNPROTECT(3);
        R_ReleaseObject(batch_.lists);
        batch_ = Batch{};
        return outcome;
    }

    static SEXP outcome_of(SEXP value, SEXP error, SEXP warnings) {
        SEXP out = PROTECT(Rf_allocVector(VECSXP, 3));
        SEXP names = PROTECT(Rf_allocVector(STRSXP, 3));
        SET_STRING_ELT(names, 0, Rf_mkChar("value"));
        SET_STRING_ELT(names, 1, Rf_mkChar("error"));
        SET_STRING_ELT(names, 2, Rf_mkChar("warnings"));
        Rf_setAttrib(out, R_NamesSymbol, names);
        SET_VECTOR_ELT(out, 0, value);
        SET_VECTOR_ELT(out, 1, error);
        SET_VECTOR_ELT(out, 2, warnings);
        UNPROTECT(2);
        return out;
    }

    // The classes of the errors the worker itself gives: for a task whose
    // arguments R cannot hold (ValueError in Python), and for one whose value
    // Python cannot read (TypeError).
    static constexpr const char* kRefused = "mizuValueError";
    static constexpr const char* kUnreadable = "mizuTypeError";

    // The outcome of a task that failed in the worker, not in R.
    static SEXP refusal(const char* cls, const char* message) {
        SEXP error = PROTECT(Rf_allocVector(VECSXP, 4));
        SEXP names = PROTECT(Rf_allocVector(STRSXP, 4));
        const char* fields[] = {"message", "call", "classes", "traceback"};
        for (int k = 0; k < 4; ++k) SET_STRING_ELT(names, k, Rf_mkChar(fields[k]));
        Rf_setAttrib(error, R_NamesSymbol, names);
        SET_VECTOR_ELT(error, 0, Rf_mkString(message));
        SEXP classes = PROTECT(Rf_allocVector(STRSXP, 3));
        SET_STRING_ELT(classes, 0, Rf_mkChar(cls));
        SET_STRING_ELT(classes, 1, Rf_mkChar("error"));
        SET_STRING_ELT(classes, 2, Rf_mkChar("condition"));
        SET_VECTOR_ELT(error, 2, classes);
        SET_VECTOR_ELT(error, 3, Rf_allocVector(STRSXP, 0));
        SEXP out = outcome_of(R_NilValue, error, PROTECT(Rf_allocVector(VECSXP, 0)));
        UNPROTECT(4);
        return out;
    }

    // The positional arguments of a call: the list a tuple decodes to.
    static SEXP as_arguments(SEXP args) {
        if (TYPEOF(args) == VECSXP && Rf_getAttrib(args, R_NamesSymbol) == R_NilValue) return args;
        return one_item(args);
    }

    static SEXP one_item(SEXP x) {
        SEXP one = PROTECT(Rf_allocVector(VECSXP, 1));
        SET_VECTOR_ELT(one, 0, x);
        UNPROTECT(1);
        return one;
    }

    static SEXP append(SEXP list, SEXP more) {
        R_xlen_t n = XLENGTH(list), k = Rf_xlength(more);
        if (k == 0) return list;
        SEXP out = PROTECT(Rf_allocVector(VECSXP, n + k));
        for (R_xlen_t i = 0; i < n; ++i) SET_VECTOR_ELT(out, i, VECTOR_ELT(list, i));
        for (R_xlen_t i = 0; i < k; ++i) SET_VECTOR_ELT(out, n + i, VECTOR_ELT(more, i));
        UNPROTECT(1);
        return out;
    }

    // Encodes body, wraps it in header and the records of the blocks it
    // placed, sends their descriptors, and pushes it, in chunks if needed.
    void push_result(const messages::ResultHeader& header, SEXP body) {
        wire::Writer w;
        std::memcpy(w.put_header(sizeof header), &header, sizeof header);
        OutgoingBlocks out;
        encode_message(body, w, out, options_);
        const std::vector<messages::BufferRecord>& records = out.records();
        if (records.empty()) {
            if (!loop_.send(w.data(), w.size())) throw ClientGone();
            return;
        }
        messages::OutOfBandHeader oob = messages::out_of_band_header(
            uint16_t(o_.index), uint16_t(out.descriptors().size()), uint16_t(records.size()));
        std::string message;
        message.append(reinterpret_cast<const char*>(&oob), sizeof oob);
        message.append(reinterpret_cast<const char*>(records.data()), records.size() * sizeof(records[0]));
        message.append(w.data(), w.size());
        // Before the message is in the ring: the client reads them with it.
        messages::send_descriptors(o_.socket_fd, out.descriptors().data(), out.descriptors().size());
        out.hand_over();
        if (!loop_.send(message.data(), message.size())) throw ClientGone();
    }

    // Closes the descriptors a message brought once its blocks are mapped.
    struct Descriptors {
        std::vector<int>& fds;
        ~Descriptors() {
            for (int fd : fds) close(fd);
        }
    };

    const WorkerOptions& o_;
    Rings rings_;
    PeerWatch client_;
    Waiter result_waiter_;
    Waiter task_waiter_;
    std::unordered_map<uint64_t, int> ids_;        // the client's fn_id -> the registry's
    std::unordered_map<uint64_t, SEXP> failures_;  // fn_id -> the error registering it gave (preserved)
    EncodeOptions options_;


    // The batch being run: where it is, and its lists (the units, then the
    // values, errors and warnings by unit, then the current unit's values
    // and warnings), preserved while it runs.
    struct Batch {
        bool active = false;
        int id = 0;
        bool flat = false, single = false;
        R_xlen_t units = 0, unit = 0, call = 0, failed = 0, warned = 0;
        SEXP lists = R_NilValue;
    };
    Batch batch_;

    WorkerLoop loop_;
    // The call of the task prepared last, and the slot of serve()'s that
    // protects it (with the callable it brought, or alone that callable when
    // R cannot hold the call).
    SEXP call_ = R_NilValue;
    PROTECT_INDEX call_index_ = 0;
    std::string refused_;       // why R cannot hold the call prepared last, if it cannot
    bool memory_kept_ = false;  // tasks ran since the last give_back_memory
    bool collected_since_call_ = false;  // collect_now ran since the last task was prepared
    uint64_t bytes_seen_ = 0;                        // block_holds().bytes_made when call_ended last looked
    uint64_t collect_at_pinned_ = kCollectAtPinned;  // call_ended collects once block_holds().pinned reaches it
    bool collect_pending_ = false;      // a call let go of since then adopted blocks (collect_after_calls)
    int64_t call_forgotten_ns_ = 0;     // when the last such call was let go of (now_ns)
    std::exception_ptr stopped_;  // what ended serve(), for run() to rethrow
};

// list(stage 0, text) for a setup error's record: R's traceback, and a
// last line as a Python traceback's (setup_failure_text in R/worker.R).
SEXP setup_failure(SEXP record) {
    SEXP ns = PROTECT(R_FindNamespace(PROTECT(Rf_mkString("mizu"))));
    SEXP format = PROTECT(Rf_findFun(Rf_install("setup_failure_text"), ns));
    SEXP text = PROTECT(Rf_eval(PROTECT(Rf_lang2(format, record)), ns));
    SEXP out = PROTECT(Rf_allocVector(VECSXP, 2));
    SET_VECTOR_ELT(out, 0, Rf_ScalarInteger(int(messages::Stage::initializer)));
    SET_VECTOR_ELT(out, 1, text);
    UNPROTECT(6);
    return out;
}

}  // namespace

SEXP serve_worker(SEXP handle) {
    if (TYPEOF(handle) != EXTPTRSXP || R_ExternalPtrTag(handle) != worker_tag() || !R_ExternalPtrAddr(handle))
        throw std::invalid_argument("serve: not the handle of a running R worker");
    return static_cast<Worker*>(R_ExternalPtrAddr(handle))->serve();
}

void run_worker(const WorkerOptions& options, SEXP setup) {
    // A task may run for hours; a thread of the core's ends the worker as
    // soon as the client is gone, whatever R is doing.
    PeerWatch::die_with(options.client_pid);
    keep_freed_memory();
    Worker worker(options, attach_rings(options));
    if (setup != R_NilValue) {
        SEXP outcome = PROTECT(r_call([&] { return eval_safely(setup, R_GlobalEnv); }));
        if (VECTOR_ELT(outcome, 1) != R_NilValue) {
            SEXP notice = PROTECT(r_call([&] { return setup_failure(VECTOR_ELT(outcome, 1)); }));
            then_unprotect(2, [&] { worker.send_exiting(notice); });
            return;
        }
        UNPROTECT(1);
    }
    try {
        worker.send_ready();
        worker.run();
    } catch (const ClientGone&) {
    }
}

}  // namespace mizu::r
