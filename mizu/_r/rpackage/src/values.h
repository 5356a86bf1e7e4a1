// Wire values (doc/dev/wire.rst) as R values, and R values as wire values,
// by the mapping of doc/user/r.rst, "Values".
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "arena.hpp"
#include "blocks.h"
#include "messages.hpp"
#include "r_api.h"
#include "wire.hpp"

namespace mizu::r {

// The R value of one whole wire message, unprotected. Arena arrays of R's
// own layout become views of their blocks; everything else is copied into
// ordinary R vectors. Throws wire::WireError for a malformed message,
// std::invalid_argument for a value R cannot hold, RJump for an R error
// (out of memory). Calls r_call, so it may not run inside one.
SEXP decode_message(const char* data, std::size_t size, BlockResolver& resolver);

// The R value of the first item of a wire message that is a tuple or list,
// the rest unread: a task's callable, when the call's arguments are what R
// cannot hold. Throws as decode_message does.
SEXP decode_first_item(const char* data, std::size_t size, BlockResolver& resolver);

// The blocks an encoding placed in this process's arena: the message's
// out-of-band records, each with the one reference its receiver adopts, and
// the descriptors of their segments here. Until hand_over(), destroying
// this drops those references, so a message that is never sent frees its
// blocks.
class OutgoingBlocks {
public:
    OutgoingBlocks() = default;
    ~OutgoingBlocks();
    OutgoingBlocks(const OutgoingBlocks&) = delete;
    OutgoingBlocks& operator=(const OutgoingBlocks&) = delete;

    // A new block of `nbytes` in `arena`, recorded here; `buffer` is set to
    // its record's index.
    char* alloc(Arena& arena, std::size_t nbytes, uint32_t& buffer);
    // The bytes a view maps, in their block (another process's, as a
    // rule), recorded here with a reference of their own; `buffer` as for
    // alloc.
    void share(const MappedBlock& view, uint32_t& buffer);
    const std::vector<messages::BufferRecord>& records() const noexcept { return records_; }
    // The descriptors the records name, in their order.
    const std::vector<int>& descriptors() const noexcept { return fds_; }
    // The references now belong to whoever receives records().
    void hand_over() noexcept {
        records_.clear();
        bases_.clear();
        fds_.clear();
        held_.clear();
    }

private:
    // Records r, its descriptor's index set, with its segment's base here;
    // its index. The caller reserved room in every vector.
    uint32_t add(messages::BufferRecord& r, char* base);

    std::vector<messages::BufferRecord> records_;
    std::vector<char*> bases_;  // of their segments here
    std::vector<int> fds_;
    std::vector<std::shared_ptr<Segment>> held_;  // the segments share() named, mapped until sent
};

struct EncodeOptions {
    // Arrays of more bytes than this go to the arena, the rest inline.
    std::size_t inline_limit = std::size_t(64) << 10;
};

// This process's arena for large results, created on first use.
Arena& worker_arena();

// Gives back the segments of worker_arena(), if it was made, that have
// held no block for idle_ns (Arena::release_idle).
void release_idle_arena(uint64_t idle_ns);

// Writes `value` to w as one wire message (begin_message() included),
// placing large arrays in worker_arena() and recording their blocks in `out`.
// Throws std::invalid_argument naming the class of a part that has no wire
// form, RJump for an R error. Calls r_call, so it may not run inside one.
void encode_message(SEXP value, wire::Writer& w, OutgoingBlocks& out, const EncodeOptions& options);

}  // namespace mizu::r
