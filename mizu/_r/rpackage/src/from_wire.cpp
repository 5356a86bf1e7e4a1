// Wire values to R values. The walk runs inside one r_call and keeps the
// rules of unwind.h: its frames hold nothing with a destructor where they
// call R, every new R object goes into its parent list at once (the
// outermost into a protected holder), and a holder a part needs of its
// own is unprotected by then_unprotect when a C++ exception passes; code
// that holds a block (MappedBlock, BlockHold) runs in frames of its own
// that call no R.
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>

#include "altrep.h"
#include "unwind.h"
#include "values.h"

namespace mizu::r {

namespace {

using wire::ArrayHeader;
using wire::Reader;
using wire::Span;
using wire::Tag;

// Integers of larger magnitude are not all doubles.
constexpr int64_t kExactInDouble = int64_t(1) << 53;

constexpr bool kLittleEndian = __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__;

// Arena arrays of at most this many bytes are copied into R vectors: a
// view's private mapping, its page faults and its unmapping cost more
// than copying that much.
constexpr uint64_t kViewMinBytes = uint64_t(1) << 16;

// The numpy element types the wire carries.
enum class Element : uint8_t { f2, f4, f8, i1, i2, i4, i8, u1, u2, u4, u8, b1, c8, c16 };

struct ArrayPlan {
    Element element;
    SEXPTYPE type;    // of the R vector it becomes
    bool swap;        // the data's byte order is not this machine's
    bool r_layout;    // each element's bytes are already an R element's
};

ArrayPlan plan_for(const ArrayHeader& a) {
    char order = a.typestr[0], kind = a.typestr[1];
    bool swap = a.itemsize > 1 && (order == '<') != kLittleEndian;
    auto plan = [&](Element e, SEXPTYPE type, bool r_layout) { return ArrayPlan{e, type, swap, r_layout && !swap}; };
    switch (kind) {
    case 'f':
        return a.itemsize == 8 ? plan(Element::f8, REALSXP, true)
               : a.itemsize == 4 ? plan(Element::f4, REALSXP, false)
                                 : plan(Element::f2, REALSXP, false);
    case 'i':
        switch (a.itemsize) {
        case 1: return plan(Element::i1, INTSXP, false);
        case 2: return plan(Element::i2, INTSXP, false);
        case 4: return plan(Element::i4, INTSXP, true);
        default: return plan(Element::i8, REALSXP, false);
        }
    case 'u':
        switch (a.itemsize) {
        case 1: return plan(Element::u1, RAWSXP, true);
        case 2: return plan(Element::u2, INTSXP, false);
        case 4: return plan(Element::u4, REALSXP, false);
        default: return plan(Element::u8, REALSXP, false);
        }
    case 'c':
        return a.itemsize == 16 ? plan(Element::c16, CPLXSXP, true) : plan(Element::c8, CPLXSXP, false);
    default:
        return plan(Element::b1, LGLSXP, false);
    }
}

R_xlen_t element_count(const ArrayHeader& a) {
    uint64_t count = 1;
    for (uint32_t k = 0; k < a.ndim; ++k) count *= a.shape[k];  // the Reader checked it fits
    if (count > uint64_t(R_XLEN_T_MAX))
        throw std::invalid_argument("an array of " + std::to_string(count) + " elements exceeds R's longest vector (" +
                                    std::to_string(R_XLEN_T_MAX) + ")");
    for (uint32_t k = 0; a.ndim >= 2 && k < a.ndim; ++k)
        if (a.shape[k] > uint64_t(INT_MAX))
            throw std::invalid_argument("dimension " + std::to_string(k) + " of an array has " +
                                        std::to_string(a.shape[k]) + " elements, more than an R dim can hold");
    return R_xlen_t(count);
}

// Whether the elements lie in R's order, column-major with no gaps.
bool column_major(const ArrayHeader& a) {
    int64_t expected = a.itemsize;
    for (uint32_t k = 0; k < a.ndim; ++k) {
        if (a.shape[k] != 1 && a.strides[k] != expected) return false;
        expected *= int64_t(a.shape[k]);
    }
    return true;
}

template <class U>
U byteswap(U v) noexcept {
    if constexpr (sizeof(U) == 2) return __builtin_bswap16(v);
    if constexpr (sizeof(U) == 4) return __builtin_bswap32(v);
    if constexpr (sizeof(U) == 8) return __builtin_bswap64(v);
    return v;
}

template <class T>
T load(const char* p, bool swap) noexcept {
    using U = std::conditional_t<sizeof(T) == 1, uint8_t,
                                 std::conditional_t<sizeof(T) == 2, uint16_t,
                                                    std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>>>;
    U bits;
    std::memcpy(&bits, p, sizeof bits);
    if (swap) bits = byteswap(bits);
    T v;
    std::memcpy(&v, &bits, sizeof v);
    return v;
}

double half_to_double(uint16_t h) noexcept {
    int exponent = (h >> 10) & 0x1f, fraction = h & 0x3ff;
    double magnitude = exponent == 0    ? std::ldexp(fraction, -24)
                       : exponent == 31 ? (fraction ? std::numeric_limits<double>::quiet_NaN()
                                                    : std::numeric_limits<double>::infinity())
                                        : std::ldexp(fraction + 1024, exponent - 25);
    return h >> 15 ? -magnitude : magnitude;
}

[[noreturn]] void refuse_inexact(const std::string& value) {
    throw std::invalid_argument("the integer " + value +
                                " is beyond 2^53 in magnitude, where R's doubles cannot hold every integer; send "
                                "a float64 if rounding it is acceptable");
}

[[noreturn]] void refuse_na_integer() {
    throw std::invalid_argument(
        "an int32 array holds -2147483648, which R reads as NA_integer_; send a numpy.ma.MaskedArray with those "
        "elements masked to mean NA, or an int64 array for the number itself");
}

double exact_double(int64_t v) {
    if (v < -kExactInDouble || v > kExactInDouble) refuse_inexact(std::to_string(v));
    return double(v);
}

double exact_double(uint64_t v) {
    if (v > uint64_t(kExactInDouble)) refuse_inexact(std::to_string(v));
    return double(v);
}

int not_na(int32_t v) {
    if (v == NA_INTEGER) refuse_na_integer();
    return v;
}

// bit64 reads -2^63 as NA_integer64_, as R reads INT_MIN as NA_integer_.
void refuse_na_integer64(const char* data, R_xlen_t count) {
    for (R_xlen_t j = 0; j < count; ++j) {
        int64_t v;
        std::memcpy(&v, data + j * 8, sizeof v);
        if (v == wire::kMissingTime)
            throw std::invalid_argument(
                "an int64 column holds -9223372036854775808, which bit64 reads as NA_integer64_; send a nullable "
                "Int64 column with those rows missing, or a float64 one for the number");
    }
}

void refuse_na_integers(const int* data, R_xlen_t count) {
    for (R_xlen_t j = 0; j < count; ++j)
        if (data[j] == NA_INTEGER) refuse_na_integer();
}

// Rcomplex is a struct before R 4.3 and a union from then on.
Rcomplex complex_of(double re, double im) noexcept {
    Rcomplex c;
    c.r = re;
    c.i = im;
    return c;
}

// Copies the array's elements from src into dst in column-major order,
// each through convert(pointer to its bytes).
template <class Dst, class Convert>
void gather(Dst* dst, const char* src, const ArrayHeader& a, R_xlen_t count, Convert convert) {
    if (count == 0) return;
    if (a.ndim == 0) {
        dst[0] = convert(src);
        return;
    }
    uint64_t inner = a.shape[0];
    int64_t step = a.strides[0];
    uint64_t index[wire::kMaxDims] = {};
    for (R_xlen_t done = 0; done < count; done += R_xlen_t(inner)) {
        const char* p = src;
        for (uint32_t k = 1; k < a.ndim; ++k) p += index[k] * a.strides[k];
        for (uint64_t j = 0; j < inner; ++j) dst[done + R_xlen_t(j)] = convert(p + j * step);
        for (uint32_t k = 1; k < a.ndim && ++index[k] == a.shape[k]; ++k) index[k] = 0;
    }
}

// Fills dst, the data of a new R vector of plan.type, from the array's
// bytes at src.
void convert_elements(void* dst, const char* src, const ArrayHeader& a, const ArrayPlan& plan, R_xlen_t count) {
    bool swap = plan.swap;
    if (plan.r_layout && column_major(a)) {
        std::memcpy(dst, src, std::size_t(count) * a.itemsize);
        if (plan.type == INTSXP) refuse_na_integers(static_cast<int*>(dst), count);
        return;
    }
    auto* reals = static_cast<double*>(dst);
    auto* ints = static_cast<int*>(dst);
    switch (plan.element) {
    case Element::f2: return gather(reals, src, a, count, [&](const char* p) { return half_to_double(load<uint16_t>(p, swap)); });
    case Element::f4: return gather(reals, src, a, count, [&](const char* p) { return double(load<float>(p, swap)); });
    case Element::f8: return gather(reals, src, a, count, [&](const char* p) { return load<double>(p, swap); });
    case Element::i8: return gather(reals, src, a, count, [&](const char* p) { return exact_double(load<int64_t>(p, swap)); });
    case Element::u4: return gather(reals, src, a, count, [&](const char* p) { return double(load<uint32_t>(p, swap)); });
    case Element::u8: return gather(reals, src, a, count, [&](const char* p) { return exact_double(load<uint64_t>(p, swap)); });
    case Element::i1: return gather(ints, src, a, count, [](const char* p) { return int(load<int8_t>(p, false)); });
    case Element::i2: return gather(ints, src, a, count, [&](const char* p) { return int(load<int16_t>(p, swap)); });
    case Element::i4: return gather(ints, src, a, count, [&](const char* p) { return not_na(load<int32_t>(p, swap)); });
    case Element::u2: return gather(ints, src, a, count, [&](const char* p) { return int(load<uint16_t>(p, swap)); });
    case Element::b1:
        if (a.ndim == 1 && a.strides[0] == 1) {
            // The common case, in a loop the compiler vectorizes.
            const auto* bytes = reinterpret_cast<const unsigned char*>(src);
            for (R_xlen_t k = 0; k < count; ++k) ints[k] = bytes[k] != 0;
            return;
        }
        return gather(ints, src, a, count, [](const char* p) { return int(*p != 0); });
    case Element::u1:
        return gather(static_cast<Rbyte*>(dst), src, a, count, [](const char* p) { return Rbyte(*p); });
    case Element::c8:
        return gather(static_cast<Rcomplex*>(dst), src, a, count, [&](const char* p) {
            return complex_of(load<float>(p, swap), load<float>(p + 4, swap));
        });
    case Element::c16:
        return gather(static_cast<Rcomplex*>(dst), src, a, count, [&](const char* p) {
            return complex_of(load<double>(p, swap), load<double>(p + 8, swap));
        });
    }
}

// A CHARSXP of well-formed UTF-8 (the Reader checked it), unprotected.
SEXP utf8_char(Span s) {
    if (s.size > uint64_t(INT_MAX))
        throw std::invalid_argument("a str of " + std::to_string(s.size) + " bytes exceeds R's longest string");
    if (const void* nul = std::memchr(s.data, 0, s.size))
        throw std::invalid_argument("a str holds a NUL character (at byte " +
                                    std::to_string(static_cast<const char*>(nul) - s.data) +
                                    "), which R strings cannot; send bytes instead");
    return Rf_mkCharLenCE(s.data, int(s.size), CE_UTF8);
}

SEXP integer_scalar(int64_t v) {
    if (v > INT_MIN && v <= INT_MAX) return Rf_ScalarInteger(int(v));
    return Rf_ScalarReal(exact_double(v));
}

// Gives x an all-empty names attribute of n and returns the one installed.
SEXP install_names(SEXP x, R_xlen_t n) {
    SEXP names = PROTECT(Rf_allocVector(STRSXP, n));
    Rf_setAttrib(x, R_NamesSymbol, names);
    UNPROTECT(1);
    return Rf_getAttrib(x, R_NamesSymbol);
}

void set_dims(SEXP x, const ArrayHeader& a) {
    if (a.ndim < 2) return;
    SEXP dim = PROTECT(Rf_allocVector(INTSXP, a.ndim));
    for (uint32_t k = 0; k < a.ndim; ++k) INTEGER(dim)[k] = int(a.shape[k]);
    Rf_setAttrib(x, R_DimSymbol, dim);
    UNPROTECT(1);
}

// Whether bit64 can be loaded, which gives int64 columns R's integer64
// class; asked once. R_tryEvalSilent stops any error a load raises.
bool have_bit64() {
    static int known = -1;
    if (known < 0) {
        SEXP name = PROTECT(Rf_mkString("bit64")), quietly = PROTECT(Rf_ScalarLogical(TRUE));
        SEXP call = PROTECT(Rf_lang3(Rf_install("requireNamespace"), name, quietly));
        SET_TAG(CDDR(call), Rf_install("quietly"));
        int failed = 0;
        SEXP found = R_tryEvalSilent(call, R_BaseEnv, &failed);
        known = !failed && TYPEOF(found) == LGLSXP && XLENGTH(found) == 1 && LOGICAL(found)[0] == TRUE;
        UNPROTECT(3);
    }
    return known == 1;
}

void set_class(SEXP x, const char* first, const char* second = nullptr) {
    SEXP cls = PROTECT(Rf_allocVector(STRSXP, second ? 2 : 1));
    SET_STRING_ELT(cls, 0, Rf_mkChar(first));
    if (second) SET_STRING_ELT(cls, 1, Rf_mkChar(second));
    Rf_setAttrib(x, R_ClassSymbol, cls);
    UNPROTECT(1);
}

class FromWire {
public:
    FromWire(Reader& r, BlockResolver& resolver) noexcept : r_(r), resolver_(resolver) {}

    // Reads the next value into slot i of `parent`, a list reachable from a
    // protected object, whose slot holds NULL.
    void value(SEXP parent, R_xlen_t i) {
        Tag t = r_.tag();
        switch (t) {
        case Tag::none: return;
        case Tag::false_:
        case Tag::true_: SET_VECTOR_ELT(parent, i, Rf_ScalarLogical(t == Tag::true_)); return;
        case Tag::int64: SET_VECTOR_ELT(parent, i, integer_scalar(r_.int64())); return;
        case Tag::float64: SET_VECTOR_ELT(parent, i, Rf_ScalarReal(r_.float64())); return;
        case Tag::str: {
            SEXP c = PROTECT(utf8_char(r_.str()));
            SET_VECTOR_ELT(parent, i, Rf_ScalarString(c));
            UNPROTECT(1);
            return;
        }
        case Tag::bytes: {
            Span s = r_.bytes();
            SEXP raw = Rf_allocVector(RAWSXP, R_xlen_t(s.size));
            SET_VECTOR_ELT(parent, i, raw);
            if (s.size) std::memcpy(RAW(raw), s.data, s.size);
            return;
        }
        case Tag::tuple:
        case Tag::list: sequence(parent, i, t); return;
        case Tag::dict: dict(parent, i); return;
        case Tag::ndarray: {
            ArrayHeader a;
            r_.array(a);
            array(a, parent, i);
            return;
        }
        case Tag::frame: frame(parent, i); return;
        case Tag::masked: masked(parent, i); return;
        case Tag::typed: typed(parent, i); return;
        case Tag::pickle:
            throw std::invalid_argument("the value holds a pickled Python object (at byte " +
                                        std::to_string(r_.offset() - 1) +
                                        "), which R cannot read: send R only None, bool, int, float, str, bytes, "
                                        "tuples, lists, dicts with str keys and numeric numpy arrays");
        }
    }

private:
    void sequence(SEXP parent, R_xlen_t i, Tag t) {
        uint32_t n = r_.begin(t);
        SEXP out = Rf_allocVector(VECSXP, n);
        SET_VECTOR_ELT(parent, i, out);
        for (uint32_t k = 0; k < n; ++k) value(out, k);
        r_.end();
    }

    void dict(SEXP parent, R_xlen_t i) {
        uint32_t n = r_.begin(Tag::dict);
        SEXP out = Rf_allocVector(VECSXP, n);
        SET_VECTOR_ELT(parent, i, out);
        SEXP names = install_names(out, n);
        for (uint32_t k = 0; k < n; ++k) {
            SET_STRING_ELT(names, k, utf8_char(r_.key()));
            value(out, k);
        }
        r_.end();
    }

    // A data.frame: a list of its columns, its row names compact unless
    // the frame names its rows.
    void frame(SEXP parent, R_xlen_t i) {
        std::size_t at = r_.offset() - 1;
        wire::FrameHeader f = r_.begin_frame();
        if (f.nrows > uint64_t(INT_MAX))
            throw std::invalid_argument("a data frame of " + std::to_string(f.nrows) +
                                        " rows exceeds R's data.frame, which numbers rows with int");
        SEXP out = Rf_allocVector(VECSXP, f.ncols);
        SET_VECTOR_ELT(parent, i, out);
        SEXP holder = PROTECT(Rf_allocVector(VECSXP, 1));
        then_unprotect(1, [&] { frame_parts(out, holder, f, at); });
    }

    void frame_parts(SEXP out, SEXP holder, const wire::FrameHeader& f, std::size_t at) {
        value(holder, 0);
        SEXP row_names = VECTOR_ELT(holder, 0);
        if (row_names == R_NilValue) {
            // R's automatic row names: c(NA, -n), or integer(0) without rows.
            row_names = Rf_allocVector(INTSXP, f.nrows ? 2 : 0);
            SET_VECTOR_ELT(holder, 0, row_names);
            if (f.nrows) {
                INTEGER(row_names)[0] = NA_INTEGER;
                INTEGER(row_names)[1] = -int(f.nrows);
            }
        } else if ((TYPEOF(row_names) != INTSXP && TYPEOF(row_names) != STRSXP) ||
                   XLENGTH(row_names) != R_xlen_t(f.nrows)) {
            throw std::invalid_argument("the row names of a data frame at byte " + std::to_string(at) +
                                        " are not " + std::to_string(f.nrows) + " int32 or str");
        }
        SEXP names = install_names(out, f.ncols);
        for (uint32_t k = 0; k < f.ncols; ++k) {
            SET_STRING_ELT(names, k, utf8_char(r_.key()));
            column_ = true;
            value(out, k);
            column_ = false;
            SEXP c = VECTOR_ELT(out, k);
            if (!Rf_isVectorAtomic(c) || XLENGTH(c) != R_xlen_t(f.nrows) || Rf_getAttrib(c, R_DimSymbol) != R_NilValue)
                throw std::invalid_argument("column " + std::to_string(k + 1) + " of a data frame at byte " +
                                            std::to_string(at) + " is not a vector of its " +
                                            std::to_string(f.nrows) + " rows");
        }
        r_.end();
        Rf_setAttrib(out, R_RowNamesSymbol, row_names);
        set_class(out, "data.frame");
    }

    // A typed vector (wire::Typed): a factor, character vector, POSIXct,
    // Date or difftime.
    void typed(SEXP parent, R_xlen_t i) {
        std::size_t at = r_.offset() - 1;
        wire::Typed kind = r_.begin_typed();
        switch (kind) {
        case wire::Typed::strings: strings(parent, i); break;
        case wire::Typed::factor:
        case wire::Typed::ordered: factor(parent, i, kind == wire::Typed::ordered, at); break;
        case wire::Typed::datetime: {
            Span zone = text_part(at);
            int64_t ticks = ticks_part(at);
            times(parent, i, at, double(ticks));
            SEXP out = VECTOR_ELT(parent, i);
            set_class(out, "POSIXct", "POSIXt");
            if (zone.size) {
                SEXP tz = PROTECT(Rf_ScalarString(utf8_char(zone)));
                Rf_setAttrib(out, Rf_install("tzone"), tz);
                UNPROTECT(1);
            }
            break;
        }
        case wire::Typed::date:
            times(parent, i, at, 1.0);
            set_class(VECTOR_ELT(parent, i), "Date");
            break;
        case wire::Typed::timedelta: {
            int64_t ticks = ticks_part(at);
            times(parent, i, at, double(ticks));
            SEXP out = VECTOR_ELT(parent, i);
            set_class(out, "difftime");
            SEXP units = PROTECT(Rf_mkString("secs"));
            Rf_setAttrib(out, Rf_install("units"), units);
            UNPROTECT(1);
            break;
        }
        }
        r_.end();
    }

    [[noreturn]] void bad_part(std::size_t at, const char* what) {
        throw std::invalid_argument(std::string("a typed vector at byte ") + std::to_string(at) + " lacks " + what);
    }

    Span text_part(std::size_t at) {
        if (r_.tag() != Tag::str) bad_part(at, "its zone, a str");
        return r_.str();
    }

    int64_t ticks_part(std::size_t at) {
        if (r_.tag() != Tag::int64) bad_part(at, "its ticks per second, an int");
        int64_t ticks = r_.int64();
        if (ticks <= 0) bad_part(at, "a positive count of ticks per second");
        return ticks;
    }

    // A list of str and None as a character vector, NA where None.
    void strings(SEXP parent, R_xlen_t i) {
        std::size_t at = r_.offset();
        if (r_.tag() != Tag::list) bad_part(at, "its strings, a list");
        uint32_t n = r_.begin(Tag::list);
        SEXP out = Rf_allocVector(STRSXP, n);
        SET_VECTOR_ELT(parent, i, out);
        for (uint32_t k = 0; k < n; ++k) {
            Tag t = r_.tag();
            if (t == Tag::str)
                SET_STRING_ELT(out, k, utf8_char(r_.str()));
            else if (t == Tag::none)
                SET_STRING_ELT(out, k, NA_STRING);
            else
                bad_part(at, "strings: its list holds something other than str and None");
        }
        r_.end();
    }

    // Levels, then 0-based int32 codes, -1 where missing.
    void factor(SEXP parent, R_xlen_t i, bool ordered, std::size_t at) {
        SEXP holder = PROTECT(Rf_allocVector(VECSXP, 2));
        then_unprotect(1, [&] { factor_parts(parent, i, holder, ordered, at); });
    }

    void factor_parts(SEXP parent, R_xlen_t i, SEXP holder, bool ordered, std::size_t at) {
        strings(holder, 0);
        if (r_.tag() != Tag::ndarray) bad_part(at, "its codes, an int32 array");
        ArrayHeader a;
        r_.array(a);
        if (std::strcmp(a.typestr + 1, "i4") != 0 || a.ndim != 1) bad_part(at, "its codes, a one-dimensional int32 array");
        array(a, holder, 1, false);
        SEXP levels = VECTOR_ELT(holder, 0), codes = VECTOR_ELT(holder, 1);
        int nlevels = int(XLENGTH(levels));
        int* code = INTEGER(codes);
        R_xlen_t n = XLENGTH(codes);
        // Checked in one pass and converted in another, both vectorized.
        int low = 0, high = -1;
        for (R_xlen_t k = 0; k < n; ++k) {
            low = std::min(low, code[k]);
            high = std::max(high, code[k]);
        }
        if (low < -1 || high >= nlevels)
            throw std::invalid_argument("a factor at byte " + std::to_string(at) + " holds the code " +
                                        std::to_string(low < -1 ? low : high) + " of its " +
                                        std::to_string(nlevels) + " levels");
        for (R_xlen_t k = 0; k < n; ++k) code[k] = code[k] < 0 ? NA_INTEGER : code[k] + 1;
        Rf_setAttrib(codes, R_LevelsSymbol, levels);
        if (ordered)
            set_class(codes, "ordered", "factor");
        else
            set_class(codes, "factor");
        SET_VECTOR_ELT(parent, i, codes);
    }

    // An int64 array of ticks as doubles of ticks / per, NA where missing.
    void times(SEXP parent, R_xlen_t i, std::size_t at, double per) {
        if (r_.tag() != Tag::ndarray) bad_part(at, "its times, an int64 array");
        ArrayHeader a;
        r_.array(a);
        if (a.typestr[1] != 'i' || a.itemsize != 8 || a.ndim != 1) bad_part(at, "its times, a one-dimensional int64 array");
        R_xlen_t n = element_count(a);
        SEXP out = Rf_allocVector(REALSXP, n);
        SET_VECTOR_ELT(parent, i, out);
        bool swap = (a.typestr[0] == '<') != kLittleEndian;
        double* dst = REAL(out);
        with_data(a, [&](const char* src) {
            for (R_xlen_t k = 0; k < n; ++k) {
                int64_t v = load<int64_t>(src + k * a.strides[0], swap);
                dst[k] = v == wire::kMissingTime ? NA_REAL : double(v) / per;
            }
        });
    }

    // Calls use(bytes) with the array's bytes, inline or in its block; use
    // must not call R.
    template <class Use>
    void with_data(const ArrayHeader& a, Use use) {
        if (a.storage == wire::Storage::inline_data) {
            use(a.data.data);
            return;
        }
        BlockSource source = resolver_.resolve(a.buffer, a.extent);
        BlockHold hold(source.block, source.fd);
        use(hold.shared_data() + source.start);
    }

    // An array with missing elements: a vector of its own (never a view,
    // as NA is written into it), NA where the mask is set. The values under
    // the mask are not read, so an int32 there may be anything but INT_MIN.
    void masked(SEXP parent, R_xlen_t i) {
        ArrayHeader values, mask;
        r_.masked(values, mask);
        bool integer64 = integer64_column(values);
        array(values, parent, i, false);
        SEXP holder = PROTECT(Rf_allocVector(VECSXP, 1));
        then_unprotect(1, [&] {
            array(mask, holder, 0, false);
            SEXP out = VECTOR_ELT(parent, i);
            const int* missing = LOGICAL(VECTOR_ELT(holder, 0));
            R_xlen_t n = XLENGTH(out);
            switch (TYPEOF(out)) {
            case INTSXP:
                for (R_xlen_t k = 0; k < n; ++k)
                    if (missing[k]) INTEGER(out)[k] = NA_INTEGER;
                break;
            case LGLSXP:
                for (R_xlen_t k = 0; k < n; ++k)
                    if (missing[k]) LOGICAL(out)[k] = NA_LOGICAL;
                break;
            case REALSXP:
                if (integer64) {
                    // bit64's NA_integer64_.
                    for (R_xlen_t k = 0; k < n; ++k)
                        if (missing[k]) std::memcpy(REAL(out) + k, &wire::kMissingTime, sizeof(double));
                } else {
                    for (R_xlen_t k = 0; k < n; ++k)
                        if (missing[k]) REAL(out)[k] = NA_REAL;
                }
                break;
            case CPLXSXP:
                for (R_xlen_t k = 0; k < n; ++k)
                    if (missing[k]) COMPLEX(out)[k] = complex_of(NA_REAL, NA_REAL);
                break;
            default:
                for (R_xlen_t k = 0; k < n; ++k)
                    if (missing[k]) throw std::invalid_argument("a masked uint8 array has missing elements, which R's raw "
                                                                "vectors cannot hold; send it as int16 or wider");
            }
        });
    }

    // Whether a is an int64 column to be read as bit64's integer64: its
    // bytes as they are, in a double vector of that class.
    bool integer64_column(const ArrayHeader& a) {
        return column_ && a.typestr[1] == 'i' && a.itemsize == 8 && a.ndim == 1 && have_bit64();
    }

    void array(const ArrayHeader& a, SEXP parent, R_xlen_t i, bool may_view = true) {
        ArrayPlan plan = plan_for(a);
        bool integer64 = integer64_column(a);
        if (integer64) plan = ArrayPlan{Element::f8, REALSXP, plan.swap, !plan.swap};
        R_xlen_t count = element_count(a);
        bool viewable = may_view && a.storage == wire::Storage::arena && plan.r_layout && column_major(a) &&
                        uint64_t(count) * a.itemsize > kViewMinBytes;
        if (viewable) {
            // The view is made before the block is taken, so that R failing
            // to make it leaves the reference to the message.
            SEXP view = new_view(plan.type);
            SET_VECTOR_ELT(parent, i, view);
            BlockSource source = resolver_.resolve(a.buffer, a.extent);
            source.nbytes = uint64_t(count) * a.itemsize;
            fill_view(view, source, count, integer64);
            set_dims(view, a);
            if (integer64) set_class(view, "integer64");
            return;
        }
        SEXP out = Rf_allocVector(plan.type, count);
        SET_VECTOR_ELT(parent, i, out);
        set_dims(out, a);
        void* dst = standard_data(out);
        if (integer64) set_class(out, "integer64");
        if (a.storage == wire::Storage::inline_data)
            convert_elements(dst, a.data.data, a, plan, count);
        else
            copy_from_block(dst, a, plan, count);
        if (integer64) refuse_na_integer64(static_cast<const char*>(dst), count);
    }

    void fill_view(SEXP view, const BlockSource& source, R_xlen_t count, bool integer64) {
        auto block = std::make_unique<MappedBlock>(source);
        if (TYPEOF(view) == INTSXP) refuse_na_integers(reinterpret_cast<const int*>(block->bytes()), count);
        if (integer64) refuse_na_integer64(block->bytes(), count);
        attach_view(view, std::move(block), count);
    }

    void copy_from_block(void* dst, const ArrayHeader& a, const ArrayPlan& plan, R_xlen_t count) {
        BlockSource source = resolver_.resolve(a.buffer, a.extent);
        BlockHold hold(source.block, source.fd);
        convert_elements(dst, hold.shared_data() + source.start, a, plan, count);
    }

    Reader& r_;
    BlockResolver& resolver_;
    bool column_ = false;  // the value being read is a frame's column
};

}  // namespace

namespace {

// The value `read` puts in slot 0 of a list, given the message's Reader and a FromWire over it.
template <class Read>
SEXP decode_with(const char* data, std::size_t size, BlockResolver& resolver, Read read) {
    return r_call([&] {
        SEXP holder = PROTECT(Rf_allocVector(VECSXP, 1));
        try {
            Reader r(data, size);
            FromWire from(r, resolver);
            read(r, from, holder);
        } catch (...) {
            UNPROTECT(1);
            throw;
        }
        SEXP value = VECTOR_ELT(holder, 0);
        // Dropped from the holder, the value is referenced by its caller
        // alone, so R may modify it in place.
        SET_VECTOR_ELT(holder, 0, R_NilValue);
        UNPROTECT(1);
        return value;
    });
}

}  // namespace

SEXP decode_message(const char* data, std::size_t size, BlockResolver& resolver) {
    return decode_with(data, size, resolver, [](Reader& r, FromWire& from, SEXP holder) {
        from.value(holder, 0);
        r.finish();
    });
}

SEXP decode_first_item(const char* data, std::size_t size, BlockResolver& resolver) {
    return decode_with(data, size, resolver, [](Reader& r, FromWire& from, SEXP holder) {
        Tag t = r.tag();
        if ((t != Tag::tuple && t != Tag::list) || r.begin(t) == 0)
            throw std::invalid_argument("the message is not a tuple or list with a first item");
        from.value(holder, 0);
    });
}

}  // namespace mizu::r
