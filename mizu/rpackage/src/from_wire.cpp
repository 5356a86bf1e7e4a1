// Wire values to R values. The walk runs inside one r_call and keeps the
// rules of unwind.hpp: its frames hold nothing with a destructor where they
// call R, every new R object goes into its parent list at once (the
// outermost into a protected holder), so nothing needs to stay PROTECTed
// across a C++ throw; code that holds a block (MappedBlock, BlockHold) runs
// in frames of its own that call no R.
#include <climits>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>

#include "altrep.hpp"
#include "unwind.hpp"
#include "values.hpp"

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
    case Element::b1: return gather(ints, src, a, count, [](const char* p) { return int(*p != 0); });
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

    // A data.frame: a list of its columns, with compact row names.
    void frame(SEXP parent, R_xlen_t i) {
        wire::FrameHeader f = r_.begin_frame();
        if (f.nrows > uint64_t(INT_MAX))
            throw std::invalid_argument("a data frame of " + std::to_string(f.nrows) +
                                        " rows exceeds R's data.frame, which numbers rows with int");
        SEXP out = Rf_allocVector(VECSXP, f.ncols);
        SET_VECTOR_ELT(parent, i, out);
        SEXP names = install_names(out, f.ncols);
        for (uint32_t k = 0; k < f.ncols; ++k) {
            SET_STRING_ELT(names, k, utf8_char(r_.key()));
            ArrayHeader a;
            r_.column(a, f.nrows);
            array(a, out, k);
        }
        r_.end();
        SEXP row_names = PROTECT(Rf_allocVector(INTSXP, 2));
        INTEGER(row_names)[0] = NA_INTEGER;
        INTEGER(row_names)[1] = -int(f.nrows);
        Rf_setAttrib(out, R_RowNamesSymbol, row_names);
        SEXP cls = PROTECT(Rf_mkString("data.frame"));
        Rf_setAttrib(out, R_ClassSymbol, cls);
        UNPROTECT(2);
    }

    // An array with missing elements: a vector of its own (never a view,
    // as NA is written into it), NA where the mask is set. The values under
    // the mask are not read, so an int32 there may be anything but INT_MIN.
    void masked(SEXP parent, R_xlen_t i) {
        ArrayHeader values, mask;
        r_.masked(values, mask);
        array(values, parent, i, false);
        SEXP holder = PROTECT(Rf_allocVector(VECSXP, 1));
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
            for (R_xlen_t k = 0; k < n; ++k)
                if (missing[k]) REAL(out)[k] = NA_REAL;
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
        UNPROTECT(1);
    }

    void array(const ArrayHeader& a, SEXP parent, R_xlen_t i, bool may_view = true) {
        ArrayPlan plan = plan_for(a);
        R_xlen_t count = element_count(a);
        if (may_view && a.storage == wire::Storage::arena && plan.r_layout && column_major(a) &&
            uint64_t(count) * a.itemsize > kViewMinBytes) {
            SEXP view = new_view(plan.type);
            SET_VECTOR_ELT(parent, i, view);
            fill_view(view, a, count);
            set_dims(view, a);
            return;
        }
        SEXP out = Rf_allocVector(plan.type, count);
        SET_VECTOR_ELT(parent, i, out);
        set_dims(out, a);
        void* dst = standard_data(out);
        if (a.storage == wire::Storage::inline_data)
            convert_elements(dst, a.data.data, a, plan, count);
        else
            copy_from_block(dst, a, plan, count);
    }

    void fill_view(SEXP view, const ArrayHeader& a, R_xlen_t count) {
        BlockSource source = resolver_.resolve(a.buffer, a.extent);
        source.nbytes = uint64_t(count) * a.itemsize;
        auto block = std::make_unique<MappedBlock>(source);
        if (TYPEOF(view) == INTSXP) refuse_na_integers(reinterpret_cast<const int*>(block->data()), count);
        attach_view(view, std::move(block), count);
    }

    void copy_from_block(void* dst, const ArrayHeader& a, const ArrayPlan& plan, R_xlen_t count) {
        BlockSource source = resolver_.resolve(a.buffer, a.extent);
        BlockHold hold(source.block, source.fd);
        convert_elements(dst, hold.shared_data() + source.start, a, plan, count);
    }

    Reader& r_;
    BlockResolver& resolver_;
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
