#include "altrep.h"

#include <R_ext/Altrep.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <type_traits>

namespace mizu::r {

namespace {

// What a view's data1, an external pointer, points to. data2 stays NULL:
// the data moves once, from the block's shared pages to private ones
// mapped over it when R first asks for a pointer to write through.
struct View {
    std::unique_ptr<MappedBlock> block;  // mapped once R has had a pointer it may write through
    R_xlen_t length;

    bool written() const noexcept { return block->written(); }
};

ViewCounters counters;

R_altrep_class_t double_view, integer_view, logical_view, raw_view, complex_view;

// The view R asked about last, with its length and its private pages once
// mapped. Some of R's loops ask about a vector once per element (unlist(),
// so as.matrix() of a data frame, asks for its length and a pointer it may
// write through), and reaching the View through data1 costs two calls into
// R, then two loads more to its pages: answered from here, each is a
// compare and a load. An address is one view's from new_view until the
// view is released (R's collector moves nothing), so both forget it.
struct LastView {
    SEXP x = nullptr;
    View* view = nullptr;
    R_xlen_t length = 0;
    char* mapped = nullptr;
} last;

[[gnu::noinline]] View* remember(SEXP x) noexcept {
    auto* view = static_cast<View*>(R_ExternalPtrAddr(R_altrep_data1(x)));
    last = {x, view, view ? view->length : 0, view ? view->block->mapped() : nullptr};
    return view;
}

View* view_of(SEXP x) noexcept { return x == last.x ? last.view : remember(x); }

void release_view(SEXP holder) {
    auto* view = static_cast<View*>(R_ExternalPtrAddr(holder));
    if (!view) return;
    if (view == last.view) last = {};
    R_ClearExternalPtr(holder);
    delete view;
    ++counters.released;
}

View* live_view(SEXP x) {
    View* view = view_of(x);
    if (!view) Rf_error("a mizu view was used before it had data");
    return view;
}

// The bytes to read: shared until R asks for a pointer to write through.
const char* view_bytes(SEXP x) { return live_view(x)->block->bytes(); }

template <class T>
const T* elements(SEXP x) {
    return reinterpret_cast<const T*>(view_bytes(x));
}

R_xlen_t view_length(SEXP x) {
    if (x == last.x) return last.length;
    View* view = remember(x);
    return view ? view->length : 0;
}

// Maps the view's private pages on R's first request for a pointer it may
// write through. Not inlined: its message buffer would give dataptr, which
// R may call once per element, a stack frame and a stack check.
[[gnu::noinline]] char* map_privately(MappedBlock& block) {
    char message[256];
    try {
        char* data = block.data();
        ++counters.private_mappings;
        return data;
    } catch (const std::exception& e) {
        std::snprintf(message, sizeof message, "%s", e.what());
    }
    Rf_error("%s", message);
}

// A pointer R only reads through (DATAPTR_RO, DATAPTR_OR_NULL, whose
// results R's API types const) is to the block's shared bytes; one it may
// write through, to the view's private pages, mapped then. R asks for the
// latter to read too, some of its loops once per element (unlist(), and so
// as.matrix() of a data frame): once mapped, it costs a compare and a load
// (last), with no stack frame of its own.
[[gnu::noinline]] void* first_dataptr(SEXP x, Rboolean writeable) {
    MappedBlock& block = *live_view(x)->block;
    if (!writeable) return const_cast<char*>(block.bytes());
    char* data = block.mapped();
    if (!data) data = map_privately(block);
    last.mapped = data;
    return data;
}

void* dataptr(SEXP x, Rboolean writeable) {
    if (writeable) ++counters.writable_pointers;
    if (writeable && x == last.x && last.mapped) return last.mapped;
    return first_dataptr(x, writeable);
}

const void* dataptr_or_null(SEXP x) {
    View* view = view_of(x);
    return view ? view->block->bytes() : nullptr;
}

template <class T>
T elt(SEXP x, R_xlen_t i) {
    return elements<T>(x)[i];
}

template <class T>
R_xlen_t get_region(SEXP x, R_xlen_t i, R_xlen_t n, T* buf) {
    R_xlen_t length = view_length(x);
    R_xlen_t count = i < length ? std::min(n, length - i) : 0;
    if (count > 0) std::memcpy(buf, elements<T>(x) + i, std::size_t(count) * sizeof(T));
    return count;
}

template <class T>
void set_na(T& v) {
    if constexpr (std::is_same_v<T, double>) v = NA_REAL;
    if constexpr (std::is_same_v<T, int>) v = NA_INTEGER;
    if constexpr (std::is_same_v<T, Rbyte>) v = 0;
    if constexpr (std::is_same_v<T, Rcomplex>) v.r = v.i = NA_REAL;
}

// x[indices] for the 1-based, already validated indices R hands over:
// without it, R reads every element through Elt, several times slower.
// Out of range or NA selects NA (0 for raw), as R's own subsetting does.
template <class T>
SEXP extract_subset(SEXP x, SEXP indices, SEXP) {
    R_xlen_t n = XLENGTH(indices), length = view_length(x);
    const T* data = elements<T>(x);
    SEXP out = PROTECT(Rf_allocVector(TYPEOF(x), n));
    T* dst = static_cast<T*>(standard_data(out));
    if (TYPEOF(indices) == INTSXP) {
        const int* at = INTEGER_RO(indices);
        for (R_xlen_t i = 0; i < n; ++i)
            if (at[i] > 0 && at[i] <= length)
                dst[i] = data[at[i] - 1];
            else
                set_na(dst[i]);
    } else {
        const double* at = REAL_RO(indices);
        // As R does: the index truncated toward zero, so 0.5 selects the first.
        for (R_xlen_t i = 0; i < n; ++i)
            if (std::isfinite(at[i]) && at[i] > 0 && at[i] - 1 < double(length))
                dst[i] = data[R_xlen_t(at[i] - 1)];
            else
                set_na(dst[i]);
    }
    UNPROTECT(1);
    return out;
}

// R requires a duplicate to be a new object that nothing else references,
// since R modifies it next. A view never written to becomes a new view of
// its block, with private pages of its own: no bytes are copied. Any other
// becomes an ordinary vector holding a copy.
SEXP duplicate(SEXP x, Rboolean) {
    View* view = view_of(x);
    R_xlen_t length = view_length(x);
    if (view && !view->written()) {
        SEXP twin = PROTECT(new_view(TYPEOF(x)));
        bool remapped = true;
        try {
            attach_view(twin, view->block->remap(), length);
        } catch (const std::exception&) {
            remapped = false;  // no reference to be had: copy instead
        }
        UNPROTECT(1);
        if (remapped) {
            ++counters.remaps;
            return twin;
        }
    }
    SEXP copy = Rf_allocVector(TYPEOF(x), length);
    if (length > 0) std::memcpy(standard_data(copy), view->block->bytes(), view->block->size());
    ++counters.copies;
    return copy;
}

// as.numeric() of an integer view, which R would otherwise read element by
// element through Elt; R copies the attributes. Other coercions are R's.
SEXP coerce_integer(SEXP x, int type) {
    if (type != REALSXP) return nullptr;
    R_xlen_t n = view_length(x);
    const int* from = elements<int>(x);
    SEXP out = Rf_allocVector(REALSXP, n);
    double* to = REAL(out);
    for (R_xlen_t i = 0; i < n; ++i) to[i] = from[i] == NA_INTEGER ? NA_REAL : double(from[i]);
    return out;
}

Rboolean inspect(SEXP x, int, int, int, void (*)(SEXP, int, int, int)) {
    View* view = view_of(x);
    if (!view) {
        Rprintf(" mizu view without data\n");
        return TRUE;
    }
    const MappedBlock& b = *view->block;
    Rprintf(" mizu view of %lld elements: %llu bytes at byte %llu of the block at offset %llu of segment %u of "
            "arena %016llx (generation %u)%s\n",
            static_cast<long long>(view->length), static_cast<unsigned long long>(b.size()),
            static_cast<unsigned long long>(b.start()), static_cast<unsigned long long>(b.block().offset),
            b.block().segment_id, static_cast<unsigned long long>(b.block().arena_id), b.block().generation,
            view->written() ? ", written to" : "");
    return TRUE;
}

// The methods of a view class whose elements are T; set_elt and
// set_region are the class family's setters (R_set_altreal_Elt_method...).
template <class T, class EltMethod, class RegionMethod>
R_altrep_class_t make_view_class(R_altrep_class_t cls, void (*set_elt)(R_altrep_class_t, EltMethod),
                                 void (*set_region)(R_altrep_class_t, RegionMethod)) {
    R_set_altrep_Length_method(cls, view_length);
    R_set_altrep_Inspect_method(cls, inspect);
    R_set_altrep_Duplicate_method(cls, duplicate);
    R_set_altvec_Dataptr_method(cls, dataptr);
    R_set_altvec_Dataptr_or_null_method(cls, dataptr_or_null);
    R_set_altvec_Extract_subset_method(cls, extract_subset<T>);
    set_elt(cls, elt<T>);
    set_region(cls, get_region<T>);
    return cls;
}

const R_altrep_class_t* class_of(SEXPTYPE type) noexcept {
    switch (type) {
    case REALSXP: return &double_view;
    case INTSXP: return &integer_view;
    case LGLSXP: return &logical_view;
    case RAWSXP: return &raw_view;
    case CPLXSXP: return &complex_view;
    default: return nullptr;
    }
}

bool is_view(SEXP x) noexcept {
    const R_altrep_class_t* cls = class_of(TYPEOF(x));
    return cls && ALTREP(x) && R_altrep_inherits(x, *cls);
}

}  // namespace

void register_view_classes(DllInfo* dll) {
    double_view = make_view_class<double>(R_make_altreal_class("mizu_double_view", "mizu", dll),
                                          R_set_altreal_Elt_method, R_set_altreal_Get_region_method);
    integer_view = make_view_class<int>(R_make_altinteger_class("mizu_integer_view", "mizu", dll),
                                        R_set_altinteger_Elt_method, R_set_altinteger_Get_region_method);
    R_set_altrep_Coerce_method(integer_view, coerce_integer);
    logical_view = make_view_class<int>(R_make_altlogical_class("mizu_logical_view", "mizu", dll),
                                        R_set_altlogical_Elt_method, R_set_altlogical_Get_region_method);
    raw_view = make_view_class<Rbyte>(R_make_altraw_class("mizu_raw_view", "mizu", dll), R_set_altraw_Elt_method,
                                      R_set_altraw_Get_region_method);
    complex_view = make_view_class<Rcomplex>(R_make_altcomplex_class("mizu_complex_view", "mizu", dll),
                                             R_set_altcomplex_Elt_method, R_set_altcomplex_Get_region_method);
}

bool has_view_class(SEXPTYPE type) noexcept { return class_of(type) != nullptr; }

SEXP new_view(SEXPTYPE type) {
    const R_altrep_class_t* cls = class_of(type);
    if (!cls) Rf_error("no mizu view holds R vectors of type %s", Rf_type2char(type));
    last = {};
    SEXP holder = PROTECT(R_MakeExternalPtr(nullptr, R_NilValue, R_NilValue));
    R_RegisterCFinalizerEx(holder, release_view, TRUE);
    SEXP view = R_new_altrep(*cls, holder, R_NilValue);
    UNPROTECT(1);
    return view;
}

void attach_view(SEXP view, std::unique_ptr<MappedBlock> block, R_xlen_t length) {
    R_SetExternalPtrAddr(R_altrep_data1(view), new View{std::move(block), length});
    last = {};
    ++counters.made;
}

const MappedBlock* view_block(SEXP x) noexcept {
    if (!is_view(x)) return nullptr;
    View* view = view_of(x);
    return view ? view->block.get() : nullptr;
}

bool view_written(SEXP x) noexcept {
    View* view = is_view(x) ? view_of(x) : nullptr;
    return view && view->written();
}

ViewCounters& view_counters() noexcept { return counters; }

}  // namespace mizu::r
