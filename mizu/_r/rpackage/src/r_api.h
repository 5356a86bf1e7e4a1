// R's C API, included one way everywhere: without the short aliases
// (length, error, PI) that collide with the C++ standard library.
#pragma once

#define R_NO_REMAP
#define STRICT_R_HEADERS
#include <R.h>
#include <Rinternals.h>
#include <Rversion.h>

namespace mizu::r {

// The writable data of an ordinary (not ALTREP) vector of a numeric,
// logical or raw type.
inline void* standard_data(SEXP x) {
    switch (TYPEOF(x)) {
    case REALSXP: return REAL(x);
    case INTSXP: return INTEGER(x);
    case LGLSXP: return LOGICAL(x);
    case RAWSXP: return RAW(x);
    default: return COMPLEX(x);
    }
}

}  // namespace mizu::r
