// R vectors whose data is a block of a pool's shared arena (blocks.h):
// double, integer, logical, raw and complex views, which R reads in the
// block's shared pages and writes in private pages mapped over it.
//
// altrep.cpp is the only file that uses R's ALTREP interface, which R
// documents as experimental, so a change to it touches one file.
#pragma once

#include <cstdint>
#include <memory>

#include "blocks.h"
#include "r_api.h"

namespace mizu::r {

// Creates the view classes; from R_init_mizu.
void register_view_classes(DllInfo* dll);

// Whether a view of this R type exists: REALSXP, INTSXP, LGLSXP, RAWSXP,
// CPLXSXP.
bool has_view_class(SEXPTYPE type) noexcept;

// A view of `type` with no data yet, of length 0, unprotected. Calls R,
// which may fail with an R error.
SEXP new_view(SEXPTYPE type);

// Gives a view from new_view its data: `length` elements, the whole of
// `block`. Calls nothing in R that can fail; throws std::bad_alloc.
void attach_view(SEXP view, std::unique_ptr<MappedBlock> block, R_xlen_t length);

// The block a view maps, or null if x is no view (or has no data yet).
const MappedBlock* view_block(SEXP x) noexcept;

// Whether R wrote to the view, so that its bytes may differ from the
// block's (for a view, false).
bool view_written(SEXP x) noexcept;

// Counts since the process started (or the last reset), for tests and
// debugging. R duplicates a vector before it modifies one that is shared:
// a view never written to is duplicated as a new view of its block
// (remaps), one written to by copying its bytes (copies). writable_pointers
// counts R's requests for a pointer it may write through, which R makes to
// read as well; private_mappings the views that mapped their pages
// privately on the first such request (a view R only reads maps nothing).
struct ViewCounters {
    uint64_t made = 0;
    uint64_t released = 0;
    uint64_t copies = 0;
    uint64_t remaps = 0;
    uint64_t writable_pointers = 0;
    uint64_t private_mappings = 0;
};

ViewCounters& view_counters() noexcept;

}  // namespace mizu::r
