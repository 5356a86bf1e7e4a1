// The package's .Call routines and their registration. Each reads its R
// arguments before it makes any object with a destructor (unwind.h).
#include <algorithm>
#include <R_ext/Rdynload.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include "altrep.h"
#include "evaluate.h"
#include "liveness.hpp"
#include "unwind.h"
#include "values.h"
#include "worker.h"

using namespace mizu;
using namespace mizu::r;

namespace {

static_assert(sizeof(BlockRef) == 40, "a block reference is the 40 bytes Block.share() gives");

std::string hex(uint64_t v) {
    char buf[19];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
    return buf;
}

uint64_t arena_id_of(SEXP text) {
    if (TYPEOF(text) != STRSXP || XLENGTH(text) != 1) throw std::invalid_argument("arena_id must be a hex string");
    const char* s = CHAR(STRING_ELT(text, 0));
    char* end = nullptr;
    errno = 0;
    unsigned long long id = std::strtoull(s, &end, 16);
    if (errno || *s == '\0' || *end != '\0')
        throw std::invalid_argument(std::string("arena_id \"") + s + "\" is not a hex number");
    return id;
}

uint64_t whole_number(SEXP x, const char* what) {
    if (TYPEOF(x) != REALSXP || XLENGTH(x) != 1 || !(REAL(x)[0] >= 0) || REAL(x)[0] > 9007199254740992.0 ||
        REAL(x)[0] != double(uint64_t(REAL(x)[0])))
        throw std::invalid_argument(std::string(what) + " must be a whole number from 0 to 2^53");
    return uint64_t(REAL(x)[0]);
}

SEXPTYPE view_type(SEXP name) {
    const char* types[] = {"double", "integer", "logical", "raw", "complex"};
    const SEXPTYPE codes[] = {REALSXP, INTSXP, LGLSXP, RAWSXP, CPLXSXP};
    if (TYPEOF(name) == STRSXP && XLENGTH(name) == 1)
        for (int k = 0; k < 5; ++k)
            if (std::strcmp(CHAR(STRING_ELT(name, 0)), types[k]) == 0) return codes[k];
    throw std::invalid_argument("type must be one of \"double\", \"integer\", \"logical\", \"raw\", \"complex\"");
}

// R keeps routines as DL_FUNC; void (*)() converts to and from any
// function pointer type.
template <class F>
DL_FUNC routine(F* f) {
    return reinterpret_cast<DL_FUNC>(reinterpret_cast<void (*)()>(f));
}

template <class T>
void name_items(SEXP x, std::initializer_list<std::pair<const char*, T>> items) {
    SEXP names = PROTECT(Rf_allocVector(STRSXP, R_xlen_t(items.size())));
    R_xlen_t k = 0;
    for (const auto& item : items) SET_STRING_ELT(names, k++, Rf_mkChar(item.first));
    Rf_setAttrib(x, R_NamesSymbol, names);
    UNPROTECT(1);
}

SEXP named_list(std::initializer_list<std::pair<const char*, SEXP>> items) {
    SEXP list = PROTECT(Rf_allocVector(VECSXP, R_xlen_t(items.size())));
    R_xlen_t k = 0;
    for (const auto& item : items) SET_VECTOR_ELT(list, k++, item.second);
    name_items(list, items);
    UNPROTECT(1);
    return list;
}

SEXP named_numbers(std::initializer_list<std::pair<const char*, double>> items) {
    SEXP out = PROTECT(Rf_allocVector(REALSXP, R_xlen_t(items.size())));
    R_xlen_t k = 0;
    for (const auto& item : items) REAL(out)[k++] = item.second;
    name_items(out, items);
    UNPROTECT(1);
    return out;
}

}  // namespace

extern "C" {

// decode(message, records, fds): records holds the message's out-of-band
// buffer records (csrc/messages.hpp), 64 bytes each; fds[d + 1] a
// descriptor of the segment of the records whose descriptor is d, or NA.
SEXP mizu_decode(SEXP message, SEXP records, SEXP fds) {
    return entry([&] {
        if (TYPEOF(message) != RAWSXP) throw std::invalid_argument("message must be a raw vector");
        if (TYPEOF(records) != RAWSXP || TYPEOF(fds) != INTSXP)
            throw std::invalid_argument("records must be a raw vector and fds an integer vector");
        std::size_t bytes = std::size_t(XLENGTH(records));
        if (bytes % sizeof(messages::BufferRecord))
            throw std::invalid_argument("records must hold whole 64-byte buffer records");
        std::vector<messages::BufferRecord> table(bytes / sizeof(messages::BufferRecord));
        if (bytes) std::memcpy(table.data(), RAW(records), bytes);
        const int* raw_fds = INTEGER(fds);
        std::vector<int> descriptors(raw_fds, raw_fds + XLENGTH(fds));
        for (int& fd : descriptors)
            if (fd == NA_INTEGER) fd = -1;
        BlockTable blocks(table, descriptors);
        return decode_message(reinterpret_cast<const char*>(RAW(message)), std::size_t(XLENGTH(message)), blocks);
    });
}

// encode(value, inline_limit): list(message =, records =, fds =): the wire
// message of value, the out-of-band records of the arena blocks it names
// (64 bytes each; each reference is the receiver's to adopt) and the
// descriptors of their segments here.
SEXP mizu_encode(SEXP value, SEXP inline_limit) {
    return entry([&] {
        EncodeOptions options;
        if (TYPEOF(inline_limit) != REALSXP || XLENGTH(inline_limit) != 1 || !(REAL(inline_limit)[0] >= 0))
            throw std::invalid_argument("inline_limit must be a number of bytes");
        double limit = REAL(inline_limit)[0];
        options.inline_limit = limit >= double(SIZE_MAX) ? SIZE_MAX : std::size_t(limit);
        wire::Writer w;
        OutgoingBlocks out;
        encode_message(value, w, out, options);
        SEXP result = r_call([&] {
            SEXP message = PROTECT(Rf_allocVector(RAWSXP, R_xlen_t(w.size())));
            std::memcpy(RAW(message), w.data(), w.size());
            const std::vector<messages::BufferRecord>& placed = out.records();
            std::size_t bytes = placed.size() * sizeof(messages::BufferRecord);
            SEXP records = PROTECT(Rf_allocVector(RAWSXP, R_xlen_t(bytes)));
            if (bytes) std::memcpy(RAW(records), placed.data(), bytes);
            const std::vector<int>& descriptors = out.descriptors();
            SEXP fds = PROTECT(Rf_allocVector(INTSXP, R_xlen_t(descriptors.size())));
            std::copy(descriptors.begin(), descriptors.end(), INTEGER(fds));
            SEXP list = named_list({{"message", message}, {"records", records}, {"fds", fds}});
            UNPROTECT(3);
            return list;
        });
        out.hand_over();
        return result;
    });
}

// block_view(fd, arena_id, segment_id, offset, length, generation, type,
// count): a view of the first `count` elements of the block a reference
// names, adopting the reference.
SEXP mizu_block_view(SEXP fd, SEXP arena_id, SEXP segment_id, SEXP offset, SEXP length, SEXP generation, SEXP type,
                     SEXP count) {
    return entry([&] {
        BlockSource source;
        int descriptor = Rf_asInteger(fd);
        source.fd = descriptor == NA_INTEGER ? -1 : descriptor;
        source.block = BlockRef{arena_id_of(arena_id), whole_number(offset, "offset"), whole_number(length, "length"),
                                uint32_t(whole_number(segment_id, "segment_id")), 0, source.fd,
                                uint32_t(whole_number(generation, "generation"))};
        SEXPTYPE r_type = view_type(type);
        uint64_t elements = whole_number(count, "count");
        std::size_t item = r_type == REALSXP ? 8 : r_type == CPLXSXP ? 16 : r_type == RAWSXP ? 1 : 4;
        if (elements == 0 || elements > source.block.length / item)
            throw std::invalid_argument("count must be at least 1 and fit in the block's " +
                                        std::to_string(source.block.length) + " bytes");
        source.start = 0;
        source.nbytes = elements * item;
        SEXP view = PROTECT(new_view(r_type));
        attach_view(view, std::make_unique<MappedBlock>(source), R_xlen_t(elements));
        UNPROTECT(1);
        return view;
    });
}

SEXP mizu_view_info(SEXP x) {
    return entry([&] {
        const MappedBlock* block = view_block(x);
        if (!block) return R_NilValue;
        const BlockRef& b = block->block();
        SEXP id = PROTECT(Rf_mkString(hex(b.arena_id).c_str()));
        SEXP numbers = PROTECT(named_numbers({{"segment_id", double(b.segment_id)},
                                              {"offset", double(b.offset)},
                                              {"length", double(b.length)},
                                              {"generation", double(b.generation)},
                                              {"start", double(block->start())},
                                              {"nbytes", double(block->size())}}));
        SEXP written = PROTECT(Rf_ScalarLogical(view_written(x)));
        SEXP info = named_list({{"arena_id", id}, {"block", numbers}, {"written", written}});
        UNPROTECT(3);
        return info;
    });
}

SEXP mizu_view_counters(SEXP reset) {
    ViewCounters& c = view_counters();
    SEXP out = named_numbers({{"made", double(c.made)},
                              {"released", double(c.released)},
                              {"copies", double(c.copies)},
                              {"remaps", double(c.remaps)},
                              {"writable_pointers", double(c.writable_pointers)},
                              {"private_mappings", double(c.private_mappings)}});
    if (Rf_asLogical(reset) == TRUE) c = ViewCounters{};
    return out;
}

SEXP mizu_arena_stats() {
    return entry([&] {
        ArenaStats s = worker_arena().stats();
        return named_numbers({{"in_use", double(s.in_use)},
                              {"blocks", double(s.blocks)},
                              {"capacity", double(s.capacity)},
                              {"segments", double(s.segments)}});
    });
}

SEXP mizu_eval_safely(SEXP call, SEXP env) {
    if (TYPEOF(env) != ENVSXP) Rf_error("env must be an environment");
    return eval_safely(call, env);
}

SEXP mizu_record_error(SEXP condition, SEXP calls) {
    record_error(condition, calls);
    return R_NilValue;
}

SEXP mizu_record_warning(SEXP condition) {
    record_warning(condition);
    return R_NilValue;
}

SEXP mizu_register_function(SEXP text) {
    if (TYPEOF(text) != STRSXP || XLENGTH(text) != 1 || STRING_ELT(text, 0) == NA_STRING)
        Rf_error("the R source of a function must be one string");
    return register_function(text);
}

SEXP mizu_call_function(SEXP id, SEXP args, SEXP kwargs) {
    if (TYPEOF(args) != VECSXP || (kwargs != R_NilValue && TYPEOF(kwargs) != VECSXP))
        Rf_error("args must be a list, and kwargs a named list or NULL");
    int function_id = Rf_asInteger(id);
    return entry([&] { return call_function(function_id, args, kwargs); });
}

// worker(segment_fd, task_ring, result_ring, socket_fd, index, client_pid,
// max_tasks, max_memory, setup): the worker loop of an R pool; returns NULL
// when the pool is done with this worker.
SEXP mizu_worker(SEXP segment_fd, SEXP task_ring, SEXP result_ring, SEXP socket_fd, SEXP index, SEXP client_pid,
                 SEXP max_tasks, SEXP max_memory, SEXP setup) {
    WorkerOptions o;
    o.segment_fd = Rf_asInteger(segment_fd);
    o.socket_fd = Rf_asInteger(socket_fd);
    o.index = Rf_asInteger(index);
    o.client_pid = pid_t(Rf_asInteger(client_pid));
    return entry([&] {
        o.task_ring = whole_number(task_ring, "task_ring");
        o.result_ring = whole_number(result_ring, "result_ring");
        o.max_tasks = long(whole_number(max_tasks, "max_tasks"));
        o.max_memory = int64_t(whole_number(max_memory, "max_memory"));
        run_worker(o, setup);
        return R_NilValue;
    });
}

// wait_for_index(socket_fd, client_pid): a spare's wait for the index of the
// worker it is to be (PeerWatch::wait_for_index); -1 once it will get none.
SEXP mizu_wait_for_index(SEXP socket_fd, SEXP client_pid) {
    int fd = Rf_asInteger(socket_fd);
    pid_t pid = pid_t(Rf_asInteger(client_pid));
    long index = -1;
    entry([&] {
        try {
            index = mizu::PeerWatch(pid).wait_for_index(fd);
        } catch (const std::system_error& e) {
            if (e.code().value() != ESRCH) throw;   // no client: it has exited
        }
        return R_NilValue;
    });
    return Rf_ScalarInteger(int(index));
}

// serve(handle): one session of the worker loop (worker.h).
SEXP mizu_serve(SEXP handle) {
    return entry([&] { return serve_worker(handle); });
}

static const R_CallMethodDef routines[] = {
    {"worker", routine(mizu_worker), 9},
    {"serve", routine(mizu_serve), 1},
    {"wait_for_index", routine(mizu_wait_for_index), 2},
    {"decode", routine(mizu_decode), 3},
    {"encode", routine(mizu_encode), 2},
    {"block_view", routine(mizu_block_view), 8},
    {"view_info", routine(mizu_view_info), 1},
    {"view_counters", routine(mizu_view_counters), 1},
    {"arena_stats", routine(mizu_arena_stats), 0},
    {"eval_safely", routine(mizu_eval_safely), 2},
    {"record_error", routine(mizu_record_error), 2},
    {"record_warning", routine(mizu_record_warning), 1},
    {"register_function", routine(mizu_register_function), 1},
    {"call_function", routine(mizu_call_function), 3},
    {nullptr, nullptr, 0},
};

void R_init_mizu(DllInfo* dll) {
    register_view_classes(dll);
    R_registerRoutines(dll, nullptr, routines, nullptr, nullptr);
    R_useDynamicSymbols(dll, FALSE);
    R_forceSymbols(dll, TRUE);
}

}  // extern "C"
