#include "wire.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <new>

namespace mizu::wire {

WireError::WireError(std::size_t offset, const std::string& what)
    : std::invalid_argument("malformed wire message at byte " + std::to_string(offset) + ": " + what),
      offset_(offset) {}

namespace detail {

uint64_t utf8_valid_prefix(const char* s, uint64_t n) noexcept {
    const auto* p = reinterpret_cast<const unsigned char*>(s);
    uint64_t i = 0;
    while (i < n) {
        unsigned c = p[i];
        if (c < 0x80) {
            ++i;
            continue;
        }
        // The second byte's range excludes overlong forms (E0, F0),
        // surrogates (ED) and code points above U+10FFFF (F4).
        uint64_t len;
        unsigned lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF) {
            len = 2;
        } else if (c >= 0xE0 && c <= 0xEF) {
            len = 3;
            if (c == 0xE0) lo = 0xA0;
            if (c == 0xED) hi = 0x9F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            len = 4;
            if (c == 0xF0) lo = 0x90;
            if (c == 0xF4) hi = 0x8F;
        } else {
            return i;
        }
        if (n - i < len || p[i + 1] < lo || p[i + 1] > hi) return i;
        for (uint64_t k = 2; k < len; ++k)
            if ((p[i + k] & 0xC0) != 0x80) return i;
        i += len;
    }
    return n;
}

}  // namespace detail

Writer::~Writer() {
    if (data_ != small_) std::free(data_);
}

void Writer::reserve(std::size_t extra) {
    if (extra > SIZE_MAX / 2 - size_) throw std::bad_alloc();
    std::size_t cap = std::max(capacity_ * 2, size_ + extra);
    void* p = data_ == small_ ? std::malloc(cap) : std::realloc(data_, cap);
    if (!p) throw std::bad_alloc();
    if (data_ == small_) std::memcpy(p, small_, size_);
    data_ = static_cast<char*>(p);
    capacity_ = cap;
}

void Writer::put_array(const ArrayHeader& a) {
    if (a.ndim > kMaxDims)
        throw std::invalid_argument("an array of " + std::to_string(a.ndim) + " dimensions exceeds the wire's " +
                                    std::to_string(kMaxDims));
    std::size_t tlen = strnlen(a.typestr, sizeof a.typestr - 1);
    char* p = grow(1 + 1 + tlen + 4 + 1 + 16 * std::size_t(a.ndim) + 1);
    *p++ = char(Tag::ndarray);
    *p++ = char(tlen);
    std::memcpy(p, a.typestr, tlen);
    p += tlen;
    detail::store(p, a.itemsize);
    p += 4;
    *p++ = char(a.ndim);
    for (uint32_t k = 0; k < a.ndim; ++k, p += 8) detail::store(p, a.shape[k]);
    for (uint32_t k = 0; k < a.ndim; ++k, p += 8) detail::store(p, uint64_t(a.strides[k]));
    *p = char(a.storage);
    if (a.storage == Storage::inline_data) {
        p = grow(8 + a.data.size);
        detail::store(p, a.data.size);
        if (a.data.size) std::memcpy(p + 8, a.data.data, a.data.size);
    } else {
        detail::store(grow(4), a.buffer);
    }
}

void Reader::bad_header() const {
    if (size_ < 2) fail(0, "a message holds at least a magic byte and a version, got " + std::to_string(size_) + " bytes");
    if (uint8_t(data_[0]) != kMagic) {
        char what[64];
        std::snprintf(what, sizeof what, "first byte 0x%02x is not the wire magic 0x%02x", uint8_t(data_[0]), kMagic);
        fail(0, what);
    }
    fail(1, "version " + std::to_string(uint8_t(data_[1])) + " is not the version this reader knows (" +
                std::to_string(kVersion) + ")");
}

void Reader::fail(std::size_t at, const std::string& what) const { throw WireError(at, what); }

void Reader::short_of(std::size_t n, const char* what) const {
    fail(pos_, std::string(what) + " needs " + std::to_string(n) + " bytes, " + std::to_string(size_ - pos_) +
                   " left");
}

void Reader::too_long(uint64_t n, const char* what) const {
    fail(pos_, std::string(what) + " of " + std::to_string(n) + " bytes runs past the end (" +
                   std::to_string(size_ - pos_ - 8) + " bytes left)");
}

void Reader::unknown_tag(uint8_t t) const {
    char what[32];
    std::snprintf(what, sizeof what, "unknown tag 0x%02x", t);
    fail(pos_, what);
}

void Reader::too_many(uint32_t count, std::size_t at) const {
    fail(at, "count " + std::to_string(count) + " cannot fit in the " + std::to_string(size_ - pos_) + " bytes left");
}

void Reader::too_deep() const { fail(pos_, "containers nest deeper than " + std::to_string(kMaxDepth)); }

namespace {

bool itemsize_allowed(char kind, uint32_t size) {
    switch (kind) {
    case 'b': return size == 1;
    case 'i':
    case 'u': return size == 1 || size == 2 || size == 4 || size == 8;
    case 'f': return size == 2 || size == 4 || size == 8;
    case 'c': return size == 8 || size == 16;
    default: return false;
    }
}

}  // namespace

void Reader::array(ArrayHeader& a) {
    std::size_t start = pos_;
    uint8_t tlen = byte("a typestr length");
    if (tlen < 3 || tlen > 4) fail(start, "typestr length " + std::to_string(tlen) + " is not 3 or 4");
    need(tlen, "a typestr");
    std::memcpy(a.typestr, data_ + pos_, tlen);
    a.typestr[tlen] = '\0';
    uint32_t size = 0;
    bool digits = a.typestr[2] != '0';
    for (int k = 2; k < tlen; ++k) {
        digits = digits && a.typestr[k] >= '0' && a.typestr[k] <= '9';
        size = size * 10 + uint32_t(a.typestr[k] - '0');
    }
    char order = a.typestr[0];
    bool order_ok = size == 1 ? order == '|' : order == '<' || order == '>';
    if (!digits || !order_ok || !itemsize_allowed(a.typestr[1], size))
        fail(pos_, "unsupported typestr \"" + std::string(a.typestr) + "\"");
    pos_ += tlen;
    need(4, "an itemsize");
    a.itemsize = detail::load<uint32_t>(data_ + pos_);
    if (a.itemsize != size)
        fail(pos_, "itemsize " + std::to_string(a.itemsize) + " contradicts typestr \"" + a.typestr + "\"");
    pos_ += 4;
    a.ndim = byte("ndim");
    if (a.ndim > kMaxDims) fail(pos_ - 1, "ndim " + std::to_string(a.ndim) + " exceeds " + std::to_string(kMaxDims));
    need(16 * std::size_t(a.ndim), "shape and strides");
    std::size_t dims_at = pos_;
    for (uint32_t k = 0; k < a.ndim; ++k, pos_ += 8) a.shape[k] = detail::load<uint64_t>(data_ + pos_);
    for (uint32_t k = 0; k < a.ndim; ++k, pos_ += 8) a.strides[k] = int64_t(detail::load<uint64_t>(data_ + pos_));
    uint64_t count = 1, nbytes, last = 0;
    for (uint32_t k = 0; k < a.ndim; ++k)
        if (__builtin_mul_overflow(count, a.shape[k], &count)) fail(dims_at, "the shape's product overflows 64 bits");
    if (__builtin_mul_overflow(count, uint64_t(a.itemsize), &nbytes))
        fail(dims_at, "the array's size in bytes overflows 64 bits");
    // Offset of the last element's first byte; all others lie below it, as
    // strides are non-negative.
    for (uint32_t k = 0; count && k < a.ndim; ++k) {
        uint64_t step;
        if (a.strides[k] < 0) fail(dims_at + 8 * (a.ndim + k), "negative stride " + std::to_string(a.strides[k]));
        if (__builtin_mul_overflow(a.shape[k] - 1, uint64_t(a.strides[k]), &step) ||
            __builtin_add_overflow(last, step, &last))
            fail(dims_at, "the strides reach beyond 64 bits");
    }
    uint64_t extent = count ? last + a.itemsize : 0;
    if (count && extent < last) fail(dims_at, "the strides reach beyond 64 bits");
    a.extent = extent;
    std::size_t storage_at = pos_;
    uint8_t storage = byte("a storage kind");
    if (storage == uint8_t(Storage::inline_data)) {
        a.storage = Storage::inline_data;
        std::size_t data_at = pos_;
        a.data = span("inline array data");
        if (a.data.size != nbytes)
            fail(data_at, "inline data of " + std::to_string(a.data.size) + " bytes for an array of " +
                              std::to_string(nbytes) + " bytes");
        if (extent > nbytes) fail(dims_at, "the strides reach past the inline data");
    } else if (storage == uint8_t(Storage::arena)) {
        // Whether the elements fit the buffer is the decoder's to check:
        // the records are the message's, not the value's.
        a.storage = Storage::arena;
        need(4, "an out-of-band buffer's index");
        a.buffer = detail::load<uint32_t>(data_ + pos_);
        pos_ += 4;
    } else {
        fail(storage_at, "unknown array storage " + std::to_string(storage));
    }
}

void Reader::masked(ArrayHeader& values, ArrayHeader& mask) {
    std::size_t at = pos_;
    if (tag() != Tag::ndarray) fail(at, "a masked array's values must be an ndarray");
    array(values);
    at = pos_;
    if (tag() != Tag::ndarray) fail(at, "a masked array's mask must be an ndarray");
    array(mask);
    bool same_shape = mask.ndim == values.ndim;
    for (uint32_t k = 0; same_shape && k < values.ndim; ++k) same_shape = mask.shape[k] == values.shape[k];
    if (std::strcmp(mask.typestr, "|b1") != 0 || !same_shape)
        fail(at, "a masked array's mask must be a |b1 array of its values' shape");
}

FrameHeader Reader::begin_frame() {
    std::size_t at = pos_;
    need(12, "a frame header");
    FrameHeader f{detail::load<uint32_t>(data_ + pos_), detail::load<uint64_t>(data_ + pos_ + 4)};
    pos_ += 12;
    // The row names take at least a tag, and each column a key and a tag.
    if (pos_ == size_) short_of(1, "a frame's row names");
    check_count(f.ncols, 9, at);
    enter();
    return f;
}

Typed Reader::begin_typed() {
    std::size_t at = pos_;
    switch (Typed k = Typed(byte("a typed vector's kind"))) {
    case Typed::factor: case Typed::ordered: case Typed::strings: case Typed::datetime: case Typed::date:
    case Typed::timedelta:
        // Every part takes at least its tag.
        check_count(typed_parts(k), 1, pos_);
        enter();
        return k;
    }
    fail(at, "unknown typed vector kind " + std::to_string(uint8_t(data_[at])));
}

PickleBlob Reader::pickle() {
    need(4, "a pickle's buffer count");
    PickleBlob p;
    p.buffers = detail::load<uint32_t>(data_ + pos_);
    if (p.buffers != 0) fail(pos_, "out-of-band pickle buffers are not part of version 1");
    pos_ += 4;
    p.data = span("a pickle");
    return p;
}

void Reader::trailing() const { fail(pos_, std::to_string(size_ - pos_) + " bytes left after the value"); }

}  // namespace mizu::wire
