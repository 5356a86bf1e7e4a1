// The wire format of doc/dev/wire.rst: one tagged binary encoding of values
// shared by every worker language.
//
// Writer appends values to a growable buffer that starts on the stack, so a
// small message costs no allocation. Reader is a cursor over untrusted bytes:
// every read first checks the bytes left, counts are checked against what the
// bytes left could hold before anyone allocates for them, and containers nest
// at most kMaxDepth deep, so a walk over any input ends without an overread
// and with bounded recursion. Malformed input throws WireError. No Python
// here: the R worker and the fuzzer use these headers as they are.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

namespace mizu::wire {

// 'W': differs from pickle's 0x80, the other first byte of a message's body.
constexpr uint8_t kMagic = 0x57;
constexpr uint8_t kVersion = 1;
constexpr int kMaxDepth = 64;
constexpr uint32_t kMaxDims = 32;

enum class Tag : uint8_t {
    none = 'N',
    false_ = 'F',
    true_ = 'T',
    int64 = 'i',
    float64 = 'd',
    str = 's',
    bytes = 'b',
    tuple = 't',
    list = 'l',
    dict = 'm',
    ndarray = 'a',
    frame = 'D',
    pickle = 'P',
    masked = 'M',
    typed = 'K',
};

// What a typed vector (Tag::typed) holds, and the values that follow its
// kind byte (doc/dev/wire.rst).
enum class Typed : uint8_t {
    factor = 'c',     // levels (a list of str), codes (an int32 array, 0-based, -1 missing)
    ordered = 'o',    // as factor, the levels in order
    strings = 's',    // a list of str and None (missing)
    datetime = 't',   // zone (str, empty for none), ticks per second (int), an int64 array
    date = 'd',       // an int64 array of days since 1970-01-01
    timedelta = 'e',  // ticks per second (int), an int64 array
};

// How many values follow a typed vector's kind byte.
constexpr uint32_t typed_parts(Typed k) noexcept {
    return k == Typed::factor || k == Typed::ordered ? 2 : k == Typed::datetime ? 3 : k == Typed::timedelta ? 2 : 1;
}

// The missing element of a typed vector's int64 array, numpy's NaT.
constexpr int64_t kMissingTime = INT64_MIN;

enum class Storage : uint8_t { inline_data = 0, arena = 1 };

class WireError : public std::invalid_argument {
public:
    WireError(std::size_t offset, const std::string& what);
    std::size_t offset() const noexcept { return offset_; }

private:
    std::size_t offset_;
};

// Bytes inside the message being read.
struct Span {
    const char* data;
    uint64_t size;
};

struct ArrayHeader {
    char typestr[5];  // numpy's dtype.str, NUL-terminated: "<f8", "|b1"
    uint32_t itemsize;
    uint32_t ndim;
    uint64_t shape[kMaxDims];
    int64_t strides[kMaxDims];  // bytes
    Storage storage;
    Span data;        // storage == inline_data
    uint32_t buffer;  // storage == arena: the message's out-of-band buffer record (csrc/messages.hpp)
    uint64_t extent;  // bytes from the first to one past the last element, as the Reader found
};

struct PickleBlob {
    uint32_t buffers;  // out-of-band buffers; 0 in version 1
    Span data;
};

struct FrameHeader {
    uint32_t ncols;
    uint64_t nrows;
};

namespace detail {

inline uint64_t to_le(uint64_t v) noexcept {
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    return __builtin_bswap64(v);
#else
    return v;
#endif
}

inline uint32_t to_le(uint32_t v) noexcept {
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    return __builtin_bswap32(v);
#else
    return v;
#endif
}

template <class T>
void store(char* p, T v) noexcept {
    v = to_le(v);
    std::memcpy(p, &v, sizeof v);
}

template <class T>
T load(const char* p) noexcept {
    T v;
    std::memcpy(&v, p, sizeof v);
    return to_le(v);
}

// Index of the first byte that breaks UTF-8 well-formedness, or n.
uint64_t utf8_valid_prefix(const char* s, uint64_t n) noexcept;

}  // namespace detail

class Writer {
public:
    Writer() noexcept : data_(small_) {}
    ~Writer();
    Writer(const Writer&) = delete;
    Writer& operator=(const Writer&) = delete;

    const char* data() const noexcept { return data_; }
    std::size_t size() const noexcept { return size_; }
    // Drops everything written after an earlier size().
    void truncate(std::size_t size) noexcept { size_ = size; }
    // Drops everything, and gives back memory grown past the inline buffer.
    void clear() noexcept {
        if (data_ != small_) std::free(data_);
        data_ = small_;
        capacity_ = sizeof small_;
        size_ = 0;
    }

    // n bytes outside any value, for the caller to fill: a header that
    // frames the message, written before begin_message().
    char* put_header(std::size_t n) { return grow(n); }
    void begin_message() {
        char* p = grow(2);
        p[0] = char(kMagic);
        p[1] = char(kVersion);
    }
    void put_none() { put_tag(Tag::none); }
    void put_bool(bool v) { put_tag(v ? Tag::true_ : Tag::false_); }
    void put_int64(int64_t v) { put_word(Tag::int64, uint64_t(v)); }
    void put_float64(double v) {
        uint64_t bits;
        std::memcpy(&bits, &v, sizeof bits);
        put_word(Tag::float64, bits);
    }
    // s must be well-formed UTF-8.
    void put_str(const char* s, uint64_t n) { put_span(Tag::str, s, n); }
    void put_bytes(const char* s, uint64_t n) { put_span(Tag::bytes, s, n); }
    // Then `count` values (tuple, list) or key and value pairs (dict).
    void begin_tuple(uint32_t count) { put_count(Tag::tuple, count); }
    void begin_list(uint32_t count) { put_count(Tag::list, count); }
    void begin_dict(uint32_t count) { put_count(Tag::dict, count); }
    // A dict key or column name; s must be well-formed UTF-8.
    void put_key(const char* s, uint64_t n) {
        char* p = grow(8 + n);
        detail::store(p, n);
        if (n) std::memcpy(p + 8, s, n);
    }
    // Throws std::invalid_argument for more than kMaxDims dimensions.
    void put_array(const ArrayHeader& a);
    // Then the put_array of an array with missing elements, then that of
    // its mask: a "|b1" array of the values' shape, nonzero where an
    // element is missing.
    void begin_masked() { put_tag(Tag::masked); }
    // Then the typed_parts(k) values of a typed vector.
    void begin_typed(Typed k) {
        char* p = grow(2);
        p[0] = char(Tag::typed);
        p[1] = char(k);
    }
    // Then the row names (None, or a vector of nrows), and ncols pairs of
    // put_key and a column: a vector of nrows elements.
    void begin_frame(uint32_t ncols, uint64_t nrows) {
        put_count(Tag::frame, ncols);
        detail::store(grow(8), nrows);
    }
    void put_pickle(const char* s, uint64_t n) {
        char* p = grow(1 + 4 + 8 + n);
        p[0] = char(Tag::pickle);
        detail::store(p + 1, uint32_t(0));
        detail::store(p + 5, n);
        if (n) std::memcpy(p + 13, s, n);
    }

private:
    char* grow(std::size_t n) {
        if (capacity_ - size_ < n) reserve(n);
        char* p = data_ + size_;
        size_ += n;
        return p;
    }
    void reserve(std::size_t extra);  // throws std::bad_alloc
    void put_tag(Tag t) { *grow(1) = char(t); }
    void put_word(Tag t, uint64_t v) {
        char* p = grow(9);
        p[0] = char(t);
        detail::store(p + 1, v);
    }
    void put_count(Tag t, uint32_t count) {
        char* p = grow(5);
        p[0] = char(t);
        detail::store(p + 1, count);
    }
    void put_span(Tag t, const char* s, uint64_t n) {
        char* p = grow(9 + n);
        p[0] = char(t);
        detail::store(p + 1, n);
        if (n) std::memcpy(p + 9, s, n);
    }

    char* data_;
    std::size_t size_ = 0;
    std::size_t capacity_ = sizeof small_;
    char small_[256];
};

// Reads one message. After tag() the caller reads that tag's body with the
// matching call: int64(), float64(), str(), bytes(), begin() ... end() for
// tuple, list and dict (key() before each dict value), array(), begin_frame()
// ... end() (the row names, then key() and a value per column),
// begin_typed() ... end() (typed_parts values), pickle(). finish() checks
// that the message ends there. Frames' and typed vectors' parts are read
// as values: their readers check their shapes.
class Reader {
public:
    // Checks the magic byte and the version.
    Reader(const void* data, std::size_t size) : data_(static_cast<const char*>(data)), size_(size) {
        if (size < 2 || uint8_t(data_[0]) != kMagic || uint8_t(data_[1]) != kVersion) bad_header();
        pos_ = 2;
    }

    std::size_t offset() const noexcept { return pos_; }
    std::size_t remaining() const noexcept { return size_ - pos_; }

    Tag tag() {
        need(1, "a tag");
        uint8_t t = uint8_t(data_[pos_]);
        switch (Tag(t)) {
        case Tag::none: case Tag::false_: case Tag::true_: case Tag::int64: case Tag::float64:
        case Tag::str: case Tag::bytes: case Tag::tuple: case Tag::list: case Tag::dict:
        case Tag::ndarray: case Tag::frame: case Tag::pickle: case Tag::masked: case Tag::typed:
            ++pos_;
            return Tag(t);
        }
        unknown_tag(t);
    }
    int64_t int64() { return int64_t(word("an int64")); }
    double float64() {
        uint64_t bits = word("a float64");
        double v;
        std::memcpy(&v, &bits, sizeof v);
        return v;
    }
    Span str() { return utf8("a str"); }
    Span bytes() { return span("bytes"); }
    Span key() { return utf8("a key"); }
    // The count of a tuple, list or dict, one level deeper.
    uint32_t begin(Tag container) {
        std::size_t at = pos_;
        need(4, "a count");
        uint32_t count = detail::load<uint32_t>(data_ + pos_);
        pos_ += 4;
        // Every value takes at least its tag; a dict entry also its key's length.
        check_count(count, container == Tag::dict ? 9 : 1, at);
        enter();
        return count;
    }
    void end() noexcept { --depth_; }
    void array(ArrayHeader& a);
    // After Tag::masked: the values, then their mask.
    void masked(ArrayHeader& values, ArrayHeader& mask);
    FrameHeader begin_frame();
    // After Tag::typed: its kind, one level deeper.
    Typed begin_typed();
    PickleBlob pickle();
    void finish() const {
        if (pos_ != size_) trailing();
    }

private:
    [[noreturn]] void fail(std::size_t at, const std::string& what) const;
    [[noreturn]] void bad_header() const;
    [[noreturn]] void too_many(uint32_t count, std::size_t at) const;
    [[noreturn]] void too_deep() const;
    [[noreturn]] void trailing() const;
    [[noreturn]] void short_of(std::size_t n, const char* what) const;
    [[noreturn]] void too_long(uint64_t n, const char* what) const;
    [[noreturn]] void unknown_tag(uint8_t t) const;
    void need(std::size_t n, const char* what) const {
        if (size_ - pos_ < n) short_of(n, what);
    }
    uint64_t word(const char* what) {
        need(8, what);
        uint64_t v = detail::load<uint64_t>(data_ + pos_);
        pos_ += 8;
        return v;
    }
    uint8_t byte(const char* what) {
        need(1, what);
        return uint8_t(data_[pos_++]);
    }
    Span span(const char* what) {
        need(8, what);
        uint64_t n = detail::load<uint64_t>(data_ + pos_);
        if (n > size_ - pos_ - 8) too_long(n, what);
        Span s{data_ + pos_ + 8, n};
        pos_ += 8 + n;
        return s;
    }
    Span utf8(const char* what) {
        std::size_t start = pos_ + 8;
        Span s = span(what);
        uint64_t ok = detail::utf8_valid_prefix(s.data, s.size);
        if (ok != s.size) fail(start + ok, std::string("invalid UTF-8 in ") + what);
        return s;
    }
    void check_count(uint32_t count, std::size_t min_bytes, std::size_t at) const {
        if (uint64_t(count) * min_bytes > size_ - pos_) too_many(count, at);
    }
    void enter() {
        if (depth_ == kMaxDepth) too_deep();
        ++depth_;
    }

    const char* data_;
    std::size_t size_;
    std::size_t pos_ = 0;
    int depth_ = 0;
};

// Reads one value with r and hands it to v, depth first: v.none(),
// v.boolean(b), v.int64(i), v.float64(d), v.str(span), v.bytes(span),
// v.begin(tag, count) ... v.end(tag) around the items of a tuple, list, dict
// or frame (the frame's row names first, then v.key(span) before each dict
// value and frame column), v.typed(kind) ... v.end(Tag::typed) around a
// typed vector's parts, v.array(header), v.masked(values, mask),
// v.pickle(blob).
template <class Visitor>
void read_value(Reader& r, Visitor& v) {
    Tag t = r.tag();
    switch (t) {
    case Tag::none: v.none(); return;
    case Tag::false_: v.boolean(false); return;
    case Tag::true_: v.boolean(true); return;
    case Tag::int64: v.int64(r.int64()); return;
    case Tag::float64: v.float64(r.float64()); return;
    case Tag::str: v.str(r.str()); return;
    case Tag::bytes: v.bytes(r.bytes()); return;
    case Tag::tuple:
    case Tag::list:
    case Tag::dict: {
        uint32_t n = r.begin(t);
        v.begin(t, n);
        for (uint32_t i = 0; i < n; ++i) {
            if (t == Tag::dict) v.key(r.key());
            read_value(r, v);
        }
        r.end();
        v.end(t);
        return;
    }
    case Tag::ndarray: {
        ArrayHeader a;
        r.array(a);
        v.array(a);
        return;
    }
    case Tag::frame: {
        FrameHeader f = r.begin_frame();
        v.begin(t, f.ncols);
        read_value(r, v);
        for (uint32_t i = 0; i < f.ncols; ++i) {
            v.key(r.key());
            read_value(r, v);
        }
        r.end();
        v.end(t);
        return;
    }
    case Tag::typed: {
        Typed k = r.begin_typed();
        v.typed(k);
        for (uint32_t i = 0; i < typed_parts(k); ++i) read_value(r, v);
        r.end();
        v.end(t);
        return;
    }
    case Tag::pickle: v.pickle(r.pickle()); return;
    case Tag::masked: {
        ArrayHeader values, mask;
        r.masked(values, mask);
        v.masked(values, mask);
        return;
    }
    }
}

// Reads a whole message, one value and nothing after it.
template <class Visitor>
void read_message(const void* data, std::size_t size, Visitor& v) {
    Reader r(data, size);
    read_value(r, v);
    r.finish();
}

}  // namespace mizu::wire
