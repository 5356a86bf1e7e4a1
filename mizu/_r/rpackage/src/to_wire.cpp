// R values to wire values. The walk runs inside one r_call and keeps the
// rules of unwind.h: its frames hold nothing with a destructor where they
// call R; the Writer and the outgoing blocks live in the caller's frame.
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>

#include "altrep.h"
#include "unwind.h"
#include "values.h"

namespace mizu::r {

namespace {

using wire::ArrayHeader;

constexpr char kNativeOrder = __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ ? '<' : '>';
// Elements read at a time from vectors without a data pointer (ALTREP).
constexpr R_xlen_t kRegion = 512;
// Times go to pandas in microseconds: POSIXct's doubles hold no finer.
constexpr int64_t kTicks = 1000000;

// Whether an atomic vector of length 1, not raw, has attributes.
bool has_attributes(SEXP x) {
#if R_VERSION >= R_Version(4, 5, 0)
    return ANY_ATTRIB(x);
#else
    // Before R 4.5 the API has no ANY_ATTRIB: identical() (16: its default
    // flags) tells x from a copy of its element only by its attributes. The
    // copies are made in one vector of length 1 per type, kept for the
    // process's life, by type in `bare`.
    static SEXP bare = nullptr;
    if (!bare) {
        SEXP list = PROTECT(Rf_allocVector(VECSXP, STRSXP + 1));
        R_PreserveObject(list);
        UNPROTECT(1);
        bare = list;
    }
    SEXPTYPE type = TYPEOF(x);
    SEXP copy = VECTOR_ELT(bare, type);
    if (copy == R_NilValue) {
        copy = Rf_allocVector(type, 1);
        SET_VECTOR_ELT(bare, type, copy);
    }
    Rf_copyVector(copy, x);
    return !R_compute_identical(x, copy, 16);
#endif
}

// What class(x)[1] says.
const char* class_name(SEXP x) {
    SEXP cls = Rf_getAttrib(x, R_ClassSymbol);
    if (TYPEOF(cls) == STRSXP && XLENGTH(cls) > 0) return CHAR(STRING_ELT(cls, 0));
    switch (TYPEOF(x)) {
    case CLOSXP:
    case SPECIALSXP:
    case BUILTINSXP: return "function";
    case LANGSXP: return "call";
    case SYMSXP: return "name";
    default: return Rf_type2char(TYPEOF(x));
    }
}

// Throws the error for a value with no wire form, naming its R class.
[[noreturn]] void refuse(SEXP x, const char* advice) {
    const char* cls = class_name(x);
    throw std::invalid_argument(std::string("an R value of class \"") + cls + "\" has no form Python can read" +
                                advice);
}

// The elements of an atomic vector: its data pointer, or null for an
// ALTREP vector that has none (such as 1:n), to be read by regions.
template <class T>
const T* elements_or_null(SEXP x) {
    switch (TYPEOF(x)) {
    case REALSXP: return reinterpret_cast<const T*>(REAL_OR_NULL(x));
    case INTSXP: return reinterpret_cast<const T*>(INTEGER_OR_NULL(x));
    case LGLSXP: return reinterpret_cast<const T*>(LOGICAL_OR_NULL(x));
    case RAWSXP: return reinterpret_cast<const T*>(RAW_OR_NULL(x));
    default: return reinterpret_cast<const T*>(COMPLEX_OR_NULL(x));
    }
}

template <class T>
R_xlen_t get_region(SEXP x, R_xlen_t i, R_xlen_t n, T* buf) {
    switch (TYPEOF(x)) {
    case REALSXP: return REAL_GET_REGION(x, i, n, reinterpret_cast<double*>(buf));
    case INTSXP: return INTEGER_GET_REGION(x, i, n, reinterpret_cast<int*>(buf));
    case LGLSXP: return LOGICAL_GET_REGION(x, i, n, reinterpret_cast<int*>(buf));
    case RAWSXP: return RAW_GET_REGION(x, i, n, reinterpret_cast<Rbyte*>(buf));
    default: return COMPLEX_GET_REGION(x, i, n, reinterpret_cast<Rcomplex*>(buf));
    }
}

// Calls each(chunk, first, count) over the elements of x in order, without
// making R materialize an ALTREP vector.
template <class T, class Each>
void for_each_region(SEXP x, Each each) {
    R_xlen_t n = XLENGTH(x);
    if (const T* all = elements_or_null<T>(x)) {
        each(all, R_xlen_t(0), n);
        return;
    }
    T buf[kRegion];
    for (R_xlen_t i = 0; i < n;) {
        R_xlen_t got = get_region<T>(x, i, std::min(kRegion, n - i), buf);
        if (got <= 0) Rf_error("an ALTREP vector gave %lld of its %lld elements", (long long)i, (long long)n);
        each(buf, i, got);
        i += got;
    }
}

// Whether any element is NA: a pass without early exits, which the
// compiler vectorizes.
bool has_na_int(SEXP x) {
    bool found = false;
    for_each_region<int>(x, [&](const int* p, R_xlen_t, R_xlen_t count) {
        bool here = false;
        for (R_xlen_t j = 0; j < count; ++j) here |= p[j] == NA_INTEGER;
        found |= here;
    });
    return found;
}

// R's NA_real_ is one NaN among many: only NaNs need R_IsNA's look.
bool is_na_real(double v) noexcept { return std::isnan(v) && R_IsNA(v); }

bool has_na_real(SEXP x) {
    bool found = false;
    for_each_region<double>(x, [&](const double* p, R_xlen_t, R_xlen_t count) {
        bool nan = false;
        for (R_xlen_t j = 0; j < count; ++j) nan |= std::isnan(p[j]);
        for (R_xlen_t j = 0; nan && j < count && !found; ++j) found = is_na_real(p[j]);
    });
    return found;
}

struct Shape {
    uint32_t ndim;
    uint64_t dims[wire::kMaxDims];
};

// The dim attribute of x, or its length as one dimension.
Shape shape_of(SEXP x) {
    Shape s;
    SEXP dim = Rf_getAttrib(x, R_DimSymbol);
    R_xlen_t n = XLENGTH(x);
    if (TYPEOF(dim) == INTSXP && XLENGTH(dim) > 0) {
        if (XLENGTH(dim) > R_xlen_t(wire::kMaxDims))
            throw std::invalid_argument("an R array of " + std::to_string(XLENGTH(dim)) +
                                        " dimensions exceeds the wire's " + std::to_string(wire::kMaxDims));
        s.ndim = uint32_t(XLENGTH(dim));
        for (uint32_t k = 0; k < s.ndim; ++k) s.dims[k] = uint64_t(INTEGER(dim)[k]);
        return s;
    }
    s.ndim = 1;
    s.dims[0] = uint64_t(n);
    return s;
}

void set_typestr(ArrayHeader& h, char kind, uint32_t itemsize) {
    h.typestr[0] = itemsize == 1 ? '|' : kNativeOrder;
    h.typestr[1] = kind;
    std::snprintf(h.typestr + 2, sizeof h.typestr - 2, "%u", itemsize);
    h.itemsize = itemsize;
}

class ToWire {
public:
    ToWire(wire::Writer& w, OutgoingBlocks& out, const EncodeOptions& options) noexcept
        : w_(w), out_(out), options_(options) {}

    // depth: of the containers around x, the outermost value's being 1.
    void value(SEXP x, int depth) {
        switch (TYPEOF(x)) {
        case NILSXP: w_.put_none(); return;
        case LGLSXP:
        case INTSXP:
        case REALSXP:
        case CPLXSXP:
        case RAWSXP:
        case STRSXP:
            if (Rf_isS4(x)) refuse(x, "");
            if (Rf_inherits(x, "factor"))
                factor(x);
            else
                atomic(x);
            return;
        case VECSXP:
            if (Rf_inherits(x, "data.frame")) {
                frame(x, depth);
                return;
            }
            if (Rf_isS4(x)) refuse(x, "");
            list(x, depth);
            return;
        default:
            refuse(x, ": send NULL, atomic vectors, factors and lists of them");
        }
    }

private:
    // A data.frame (a tibble, a data.table): a frame record, with row names
    // unless R made them itself.
    void frame(SEXP x, int depth) {
        if (depth > wire::kMaxDepth - 2)
            throw std::invalid_argument("the value nests a data frame more than " +
                                        std::to_string(wire::kMaxDepth - 2) + " deep, the wire's limit");
        // The row names as R stores them: c(NA, n) or c(NA, -n) when R
        // numbers the rows itself (integer(0) without rows), else a vector.
        SEXP info = PROTECT(Rf_lang3(Rf_install(".row_names_info"), x, PROTECT(Rf_ScalarInteger(0))));
        SEXP row_names = PROTECT(Rf_eval(info, R_BaseEnv));
        then_unprotect(3, [&] { frame_parts(x, row_names); });
    }

    void frame_parts(SEXP x, SEXP row_names) {
        bool numbered = TYPEOF(row_names) == INTSXP &&
                        (XLENGTH(row_names) == 0 || (XLENGTH(row_names) == 2 && INTEGER(row_names)[0] == NA_INTEGER));
        if (TYPEOF(row_names) != INTSXP && TYPEOF(row_names) != STRSXP)
            throw std::invalid_argument("a data frame's row names are of class \"" + std::string(class_name(row_names)) +
                                        "\", not integer or character");
        R_xlen_t nrows = !numbered ? XLENGTH(row_names) : XLENGTH(row_names) ? std::abs(INTEGER(row_names)[1]) : 0;
        R_xlen_t ncols = XLENGTH(x);
        SEXP names = Rf_getAttrib(x, R_NamesSymbol);
        w_.begin_frame(count_of(ncols), uint64_t(nrows));
        if (numbered)
            w_.put_none();
        else if (TYPEOF(row_names) == STRSXP)
            typed_strings(row_names);
        else
            numbers<int>(row_names, 'i');
        for (R_xlen_t k = 0; k < ncols; ++k) {
            SEXP name = TYPEOF(names) == STRSXP && k < XLENGTH(names) ? STRING_ELT(names, k) : R_BlankString;
            if (name == NA_STRING)
                throw std::invalid_argument("column " + std::to_string(k + 1) +
                                            " of a data frame is named NA; give it a name");
            with_utf8(name, "a column name", [&](const char* s, std::size_t len) { w_.put_key(s, len); });
            column(VECTOR_ELT(x, k), k, nrows);
        }
    }

    // A column of a data frame: a vector of nrows, never a scalar.
    void column(SEXP x, R_xlen_t k, R_xlen_t nrows) {
        if (!Rf_isVectorAtomic(x) || Rf_isS4(x) || XLENGTH(x) != nrows ||
            Rf_getAttrib(x, R_DimSymbol) != R_NilValue) {
            std::string what = Rf_getAttrib(x, R_DimSymbol) != R_NilValue ? std::string("a matrix")
                               : !Rf_isVectorAtomic(x) || Rf_isS4(x)
                                   ? std::string("of class \"") + class_name(x) + "\""
                                   : "a vector of " + std::to_string(XLENGTH(x)) + " elements in a frame of " +
                                         std::to_string(nrows) + " rows";
            throw std::invalid_argument("column " + std::to_string(k + 1) + " of a data frame is " + what +
                                        ", which has no form as a pandas column: send atomic vectors, factors, Date, "
                                        "POSIXct and difftime columns (as.POSIXct() a POSIXlt one)");
        }
        switch (TYPEOF(x)) {
        case STRSXP: typed_strings(x); return;
        case INTSXP:
            if (Rf_inherits(x, "factor")) {
                typed_factor(x);
                return;
            }
            if (Rf_inherits(x, "Date")) {
                times(x, wire::Typed::date, 1.0);
                return;
            }
            if (!unwritten_block(x, sizeof(int)) && has_na_int(x))
                put_masked_array(x, 'i', 4);
            else
                numbers<int>(x, 'i');
            return;
        case REALSXP:
            if (Rf_inherits(x, "Date")) {
                times(x, wire::Typed::date, 1.0);
            } else if (Rf_inherits(x, "POSIXct")) {
                SEXP tz = Rf_getAttrib(x, Rf_install("tzone"));
                times(x, wire::Typed::datetime, double(kTicks),
                      TYPEOF(tz) == STRSXP && XLENGTH(tz) > 0 ? STRING_ELT(tz, 0) : R_BlankString);
            } else if (Rf_inherits(x, "difftime")) {
                times(x, wire::Typed::timedelta, double(kTicks) * seconds_per_unit(x));
            } else if (Rf_inherits(x, "integer64")) {
                integer64(x);
            } else {
                doubles(x);
            }
            return;
        case LGLSXP:
            if (has_na_int(x))
                put_masked_array(x, 'b', 1);
            else
                put_array(x, shape_of(x), 'b', 1, [&](char* dst) { logical_values(x, dst); });
            return;
        case CPLXSXP: numbers<Rcomplex>(x, 'c'); return;
        default: numbers<Rbyte>(x, 'u'); return;
        }
    }

    void typed_strings(SEXP x) {
        w_.begin_typed(wire::Typed::strings);
        R_xlen_t n = XLENGTH(x);
        w_.begin_list(count_of(n));
        for (R_xlen_t k = 0; k < n; ++k) string(STRING_ELT(x, k));
    }

    // Levels, then 0-based codes, -1 for NA.
    void typed_factor(SEXP x) {
        SEXP levels = Rf_getAttrib(x, R_LevelsSymbol);
        R_xlen_t nlevels = TYPEOF(levels) == STRSXP ? XLENGTH(levels) : 0;
        w_.begin_typed(Rf_inherits(x, "ordered") ? wire::Typed::ordered : wire::Typed::factor);
        if (nlevels)
            typed_levels(levels);
        else
            w_.begin_list(0);
        put_array(x, shape_of(x), 'i', 4, [&](char* dst) {
            for_each_region<int>(x, [&](const int* p, R_xlen_t first, R_xlen_t count) {
                int* out = reinterpret_cast<int*>(dst) + first;
                // NA (INT_MIN) becomes -1 and every code one less; then one
                // vectorized check of the range.
                int low = 0, high = -1;
                for (R_xlen_t j = 0; j < count; ++j) {
                    out[j] = p[j] == NA_INTEGER ? -1 : p[j] - 1;
                    low = std::min(low, p[j] == NA_INTEGER ? 0 : p[j] - 1);
                    high = std::max(high, out[j]);
                }
                if (low < 0 || high >= nlevels)
                    throw std::invalid_argument("a factor holds the code " + std::to_string((low < 0 ? low : high) + 1) +
                                                " beyond its " + std::to_string(nlevels) + " levels");
            });
        });
    }

    void typed_levels(SEXP levels) {
        R_xlen_t n = XLENGTH(levels);
        w_.begin_list(count_of(n));
        for (R_xlen_t k = 0; k < n; ++k) string(STRING_ELT(levels, k));
    }

    // A Date, POSIXct or difftime vector as int64 ticks: its values times
    // scale, rounded, NA (or any other non-finite value) missing.
    void times(SEXP x, wire::Typed kind, double scale, SEXP zone = R_NilValue) {
        w_.begin_typed(kind);
        if (kind == wire::Typed::datetime)
            with_utf8(zone, "a time zone", [&](const char* s, std::size_t n) { w_.put_str(s, n); });
        if (kind != wire::Typed::date) w_.put_int64(kTicks);
        bool whole_days = kind == wire::Typed::date;
        auto tick = [&](double v) {
            if (!std::isfinite(v)) return wire::kMissingTime;
            double t = whole_days ? std::floor(v) : std::nearbyint(v * scale);
            if (!(t > -9.2e18 && t < 9.2e18))
                throw std::invalid_argument("a time of " + std::to_string(v) + " lies beyond int64 " +
                                            (whole_days ? "days" : "microseconds"));
            return int64_t(t);
        };
        put_array(x, shape_of(x), 'i', 8, [&](char* dst) {
            auto* out = reinterpret_cast<int64_t*>(dst);
            if (TYPEOF(x) == INTSXP)
                for_each_region<int>(x, [&](const int* p, R_xlen_t first, R_xlen_t count) {
                    for (R_xlen_t j = 0; j < count; ++j)
                        out[first + j] = p[j] == NA_INTEGER ? wire::kMissingTime : tick(double(p[j]));
                });
            else
                for_each_region<double>(x, [&](const double* p, R_xlen_t first, R_xlen_t count) {
                    for (R_xlen_t j = 0; j < count; ++j) out[first + j] = tick(p[j]);
                });
        });
    }

    // A difftime's units in seconds.
    static double seconds_per_unit(SEXP x) {
        SEXP units = Rf_getAttrib(x, Rf_install("units"));
        const char* u = TYPEOF(units) == STRSXP && XLENGTH(units) > 0 ? CHAR(STRING_ELT(units, 0)) : "secs";
        static const struct {
            const char* name;
            double seconds;
        } known[] = {{"secs", 1}, {"mins", 60}, {"hours", 3600}, {"days", 86400}, {"weeks", 604800}};
        for (const auto& k : known)
            if (std::strcmp(u, k.name) == 0) return k.seconds;
        throw std::invalid_argument(std::string("a difftime column counts in units \"") + u +
                                    "\", not secs, mins, hours, days or weeks");
    }

    // bit64's integer64: int64 in a double's bytes, NA_integer64_ missing.
    void integer64(SEXP x) {
        if (unwritten_block(x, sizeof(double))) {
            numbers<double>(x, 'i');
            return;
        }
        bool any_na = false;
        for_each_region<double>(x, [&](const double* p, R_xlen_t, R_xlen_t count) {
            bool here = false;
            for (R_xlen_t j = 0; j < count; ++j) here |= bits_of(p[j]) == wire::kMissingTime;
            any_na |= here;
        });
        if (!any_na) {
            numbers<double>(x, 'i');
            return;
        }
        w_.begin_masked();
        put_array(x, shape_of(x), 'i', 8, [&](char* dst) {
            for_each_region<double>(x, [&](const double* p, R_xlen_t first, R_xlen_t count) {
                auto* out = reinterpret_cast<int64_t*>(dst) + first;
                for (R_xlen_t j = 0; j < count; ++j) out[j] = bits_of(p[j]) == wire::kMissingTime ? 0 : bits_of(p[j]);
            });
        });
        put_na_mask(x, [](double v) { return bits_of(v) == wire::kMissingTime; });
    }

    static int64_t bits_of(double v) noexcept {
        int64_t bits;
        std::memcpy(&bits, &v, sizeof bits);
        return bits;
    }

    // A double column: NA (R_IsNA, not every NaN) makes it a masked array.
    void doubles(SEXP x) {
        if (unwritten_block(x, sizeof(double)) || !has_na_real(x)) {
            numbers<double>(x, 'f');
            return;
        }
        w_.begin_masked();
        put_array(x, shape_of(x), 'f', 8, [&](char* dst) {
            for_each_region<double>(x, [&](const double* p, R_xlen_t first, R_xlen_t count) {
                double* out = reinterpret_cast<double*>(dst) + first;
                for (R_xlen_t j = 0; j < count; ++j) out[j] = is_na_real(p[j]) ? 0.0 : p[j];
            });
        });
        put_na_mask(x, is_na_real);
    }

    template <class Missing>
    void put_na_mask(SEXP x, Missing missing) {
        put_array(x, shape_of(x), 'b', 1, [&](char* dst) {
            for_each_region<double>(x, [&](const double* p, R_xlen_t first, R_xlen_t count) {
                for (R_xlen_t j = 0; j < count; ++j) dst[first + j] = char(missing(p[j]));
            });
        });
    }

    void atomic(SEXP x) {
        if (TYPEOF(x) == REALSXP && Rf_inherits(x, "integer64")) {
            integer64(x);
            return;
        }
        if (XLENGTH(x) == 1 && TYPEOF(x) != RAWSXP && !has_attributes(x)) {
            scalar(x);
            return;
        }
        switch (TYPEOF(x)) {
        case STRSXP: strings(x); return;
        case REALSXP: numbers<double>(x, 'f'); return;
        case CPLXSXP: numbers<Rcomplex>(x, 'c'); return;
        case RAWSXP: numbers<Rbyte>(x, 'u'); return;
        case INTSXP:
            if (has_na_int(x))
                put_masked_array(x, 'i', 4);
            else
                numbers<int>(x, 'i');
            return;
        default:
            if (has_na_int(x))
                put_masked_array(x, 'b', 1);
            else
                put_array(x, shape_of(x), 'b', 1, [&](char* dst) { logical_values(x, dst); });
            return;
        }
    }

    void scalar(SEXP x) {
        switch (TYPEOF(x)) {
        case LGLSXP: {
            int v = LOGICAL_ELT(x, 0);
            v == NA_LOGICAL ? w_.put_none() : w_.put_bool(v != 0);
            return;
        }
        case INTSXP: {
            int v = INTEGER_ELT(x, 0);
            v == NA_INTEGER ? w_.put_none() : w_.put_int64(v);
            return;
        }
        case REALSXP: w_.put_float64(REAL_ELT(x, 0)); return;
        case STRSXP: string(STRING_ELT(x, 0)); return;
        default: {
            // The wire has no complex scalar: a 0-d complex128 array.
            Rcomplex v = COMPLEX_ELT(x, 0);
            ArrayHeader h;
            set_typestr(h, 'c', 16);
            h.ndim = 0;
            h.storage = wire::Storage::inline_data;
            h.data = {reinterpret_cast<const char*>(&v), sizeof v};
            w_.put_array(h);
        }
        }
    }

    // A character vector other than a plain scalar: a list of str, None
    // where NA.
    void strings(SEXP x) {
        R_xlen_t n = XLENGTH(x);
        w_.begin_list(count_of(n));
        for (R_xlen_t k = 0; k < n; ++k) string(STRING_ELT(x, k));
    }

    // As as.character(x) would send it.
    void factor(SEXP x) {
        SEXP levels = Rf_getAttrib(x, R_LevelsSymbol);
        R_xlen_t n = XLENGTH(x), nlevels = TYPEOF(levels) == STRSXP ? XLENGTH(levels) : 0;
        if (n != 1) w_.begin_list(count_of(n));
        for (R_xlen_t k = 0; k < n; ++k) {
            int code = INTEGER_ELT(x, k);
            if (code == NA_INTEGER)
                w_.put_none();
            else if (code >= 1 && code <= nlevels)
                string(STRING_ELT(levels, code - 1));
            else
                throw std::invalid_argument("a factor holds the code " + std::to_string(code) + " beyond its " +
                                            std::to_string(nlevels) + " levels");
        }
    }

    void string(SEXP c) {
        if (c == NA_STRING) {
            w_.put_none();
            return;
        }
        with_utf8(c, "a string", [&](const char* s, std::size_t n) { w_.put_str(s, n); });
    }

    // Calls put(text, size) with the UTF-8 form of the CHARSXP c.
    template <class Put>
    void with_utf8(SEXP c, const char* what, Put put) {
        const void* vmax = vmaxget();
        const char* s = Rf_translateCharUTF8(c);
        std::size_t n = std::strlen(s);
        uint64_t valid = wire::detail::utf8_valid_prefix(s, n);
        if (valid != n) {
            vmaxset(vmax);
            throw std::invalid_argument(std::string(what) + " holds bytes that are not UTF-8 (from byte " +
                                        std::to_string(valid) + "); convert it with iconv() or enc2utf8()");
        }
        put(s, n);
        vmaxset(vmax);
    }

    // A list: a dict if it has names, which must then be all present and
    // distinct, since a dict cannot hold the others.
    void list(SEXP x, int depth) {
        if (depth > wire::kMaxDepth)
            throw std::invalid_argument("the value nests lists more than " + std::to_string(wire::kMaxDepth) +
                                        " deep, the wire's limit");
        R_xlen_t n = XLENGTH(x);
        SEXP names = Rf_getAttrib(x, R_NamesSymbol);
        if (names == R_NilValue) {
            w_.begin_list(count_of(n));
            for (R_xlen_t k = 0; k < n; ++k) value(VECTOR_ELT(x, k), depth + 1);
            return;
        }
        for (R_xlen_t k = 0; k < n; ++k) {
            SEXP name = STRING_ELT(names, k);
            if (name == NA_STRING || CHAR(name)[0] == '\0')
                throw std::invalid_argument("element " + std::to_string(k + 1) + " of a list with names has " +
                                            (name == NA_STRING ? "NA" : "an empty name") +
                                            ", which a dict cannot hold as a key; name every element, or unname() "
                                            "the list for a Python list");
        }
        if (R_xlen_t dup = Rf_any_duplicated(names, FALSE)) {
            const char* name = Rf_translateCharUTF8(STRING_ELT(names, dup - 1));
            throw std::invalid_argument(std::string("the name \"") + name +
                                        "\" appears twice in a list, and a dict keeps one value per key; make the "
                                        "names unique (make.unique()), or unname() the list for a Python list");
        }
        w_.begin_dict(count_of(n));
        for (R_xlen_t k = 0; k < n; ++k) {
            with_utf8(STRING_ELT(names, k), "a name", [&](const char* s, std::size_t len) { w_.put_key(s, len); });
            value(VECTOR_ELT(x, k), depth + 1);
        }
    }

    // A vector whose elements' bytes are numpy's as they are. A view of a
    // block R never wrote to goes back as that block, uncopied.
    template <class T>
    void numbers(SEXP x, char kind) {
        if (const MappedBlock* block = unwritten_block(x, sizeof(T))) {
            ArrayHeader h = header(shape_of(x), kind, sizeof(T));
            h.storage = wire::Storage::arena;
            out_.share(*block, h.buffer);
            w_.put_array(h);
            return;
        }
        put_array(x, shape_of(x), kind, sizeof(T), [&](char* dst) { copy_elements<T>(x, dst); });
    }

    // The block whose bytes x's elements of itemsize are, unwritten, if x
    // is a view of more than the inline limit, else null. Such a vector
    // holds what its sender sent: it needs no look for NA.
    const MappedBlock* unwritten_block(SEXP x, std::size_t itemsize) const noexcept {
        std::size_t nbytes = std::size_t(XLENGTH(x)) * itemsize;
        if (nbytes <= options_.inline_limit) return nullptr;
        const MappedBlock* block = view_block(x);
        return block && !view_written(x) && block->size() == nbytes ? block : nullptr;
    }

    template <class T>
    void copy_elements(SEXP x, char* dst) {
        for_each_region<T>(x, [&](const T* p, R_xlen_t first, R_xlen_t count) {
            std::memcpy(dst + std::size_t(first) * sizeof(T), p, std::size_t(count) * sizeof(T));
        });
    }

    // Logicals as numpy bools; NA as false.
    void logical_values(SEXP x, char* dst) {
        for_each_region<int>(x, [&](const int* p, R_xlen_t first, R_xlen_t count) {
            for (R_xlen_t j = 0; j < count; ++j) dst[first + j] = char((p[j] != 0) & (p[j] != NA_LOGICAL));
        });
    }

    // An integer or logical vector with NA: a masked array
    // (doc/dev/wire.rst), its values 0 where NA.
    void put_masked_array(SEXP x, char kind, uint32_t itemsize) {
        Shape shape = shape_of(x);
        w_.begin_masked();
        if (kind == 'b')
            put_array(x, shape, kind, itemsize, [&](char* dst) { logical_values(x, dst); });
        else
            put_array(x, shape, kind, itemsize, [&](char* dst) {
                for_each_region<int>(x, [&](const int* p, R_xlen_t first, R_xlen_t count) {
                    int* out = reinterpret_cast<int*>(dst) + first;
                    for (R_xlen_t j = 0; j < count; ++j) out[j] = p[j] == NA_INTEGER ? 0 : p[j];
                });
            });
        put_array(x, shape, 'b', 1, [&](char* dst) {
            for_each_region<int>(x, [&](const int* p, R_xlen_t first, R_xlen_t count) {
                for (R_xlen_t j = 0; j < count; ++j) dst[first + j] = char(p[j] == NA_INTEGER);
            });
        });
    }

    // An array record of x's elements, in Fortran order, filled by
    // fill(destination): in the arena above the inline limit, else inline.
    template <class Fill>
    void put_array(SEXP x, const Shape& shape, char kind, uint32_t itemsize, Fill fill) {
        ArrayHeader h = header(shape, kind, itemsize);
        std::size_t nbytes = std::size_t(XLENGTH(x)) * itemsize;
        if (nbytes > options_.inline_limit) {
            h.storage = wire::Storage::arena;
            fill(out_.alloc(worker_arena(), nbytes, h.buffer));
            w_.put_array(h);
            return;
        }
        h.storage = wire::Storage::inline_data;
        const void* vmax = vmaxget();
        char* buffer = nbytes ? R_alloc(nbytes, 1) : nullptr;
        fill(buffer);
        h.data = {buffer, nbytes};
        w_.put_array(h);
        vmaxset(vmax);
    }

    // The header of an array of this shape in Fortran order, storage unset.
    static ArrayHeader header(const Shape& shape, char kind, uint32_t itemsize) {
        ArrayHeader h;
        set_typestr(h, kind, itemsize);
        h.ndim = shape.ndim;
        int64_t stride = itemsize;
        for (uint32_t k = 0; k < shape.ndim; ++k) {
            h.shape[k] = shape.dims[k];
            h.strides[k] = stride;
            stride *= int64_t(shape.dims[k]);
        }
        return h;
    }

    static uint32_t count_of(R_xlen_t n) {
        if (uint64_t(n) > UINT32_MAX)
            throw std::invalid_argument("a list or character vector of " + std::to_string(n) +
                                        " elements exceeds the wire's count of at most 2^32 - 1");
        return uint32_t(n);
    }

    wire::Writer& w_;
    OutgoingBlocks& out_;
    const EncodeOptions& options_;
};

}  // namespace

OutgoingBlocks::~OutgoingBlocks() {
    for (std::size_t i = 0; i < records_.size(); ++i) release_block(bases_[i], records_[i].block.offset);
}

char* OutgoingBlocks::alloc(Arena& arena, std::size_t nbytes, uint32_t& buffer) {
    records_.reserve(records_.size() + 1);
    bases_.reserve(bases_.size() + 1);
    fds_.reserve(fds_.size() + 1);
    Allocation a = arena.alloc(nbytes);
    // The arena keeps the segment while the block lives.
    std::shared_ptr<Segment> seg = arena.segment(a.segment_id);
    int fd = seg->fd();
    messages::BufferRecord r{};
    r.block = BlockRef{arena.id(), a.offset, nbytes, a.segment_id, current_pid(), fd, a.generation};
    r.length = nbytes;
    buffer = add(r, seg->base());
    return seg->base() + a.offset;
}

uint32_t OutgoingBlocks::add(messages::BufferRecord& r, char* base) {
    auto known = std::find(fds_.begin(), fds_.end(), r.block.fd);
    r.descriptor = uint16_t(known - fds_.begin());
    if (known == fds_.end()) fds_.push_back(r.block.fd);
    records_.push_back(r);
    bases_.push_back(base);
    return uint32_t(records_.size() - 1);
}

void OutgoingBlocks::share(const MappedBlock& view, uint32_t& buffer) {
    records_.reserve(records_.size() + 1);
    bases_.reserve(bases_.size() + 1);
    fds_.reserve(fds_.size() + 1);
    held_.reserve(held_.size() + 1);
    std::shared_ptr<Segment> seg = view.segment();
    const BlockRef& b = view.block();
    int fd = seg->fd();
    // The receiver's own reference, dropped here unless handed over.
    retain_block(seg->base(), b.offset);
    messages::BufferRecord r{};
    r.block = BlockRef{b.arena_id, b.offset, b.length, b.segment_id, current_pid(), fd, b.generation};
    r.offset = view.start();
    r.length = view.size();
    buffer = add(r, seg->base());
    held_.push_back(std::move(seg));
}

namespace {

// Never destroyed: blocks may outlive any static, in other processes.
// Only R's thread makes and uses it.
Arena* made_arena = nullptr;

}  // namespace

Arena& worker_arena() {
    if (made_arena == nullptr) made_arena = new Arena(ArenaOptions{});
    return *made_arena;
}

void release_idle_arena(uint64_t idle_ns) {
    if (made_arena != nullptr) made_arena->release_idle(idle_ns);
}

void encode_message(SEXP value, wire::Writer& w, OutgoingBlocks& out, const EncodeOptions& options) {
    w.begin_message();
    r_call([&] {
        ToWire(w, out, options).value(value, 1);
        return R_NilValue;
    });
}

}  // namespace mizu::r
