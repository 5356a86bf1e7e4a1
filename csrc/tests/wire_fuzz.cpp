// libFuzzer target: any bytes either decode to values or throw WireError.
// The visitor reads every byte the Reader hands out, so an overread shows
// under AddressSanitizer.
#include <cstddef>
#include <cstdint>

#include "wire.hpp"

namespace {

struct Touch {
    uint64_t sum = 0;
    void span(mizu::wire::Span s) {
        for (uint64_t i = 0; i < s.size; ++i) sum += uint8_t(s.data[i]);
    }
    void none() {}
    void boolean(bool b) { sum += b; }
    void int64(int64_t v) { sum += uint64_t(v); }
    void float64(double v) { sum += v == v; }
    void str(mizu::wire::Span s) { span(s); }
    void bytes(mizu::wire::Span s) { span(s); }
    void key(mizu::wire::Span s) { span(s); }
    void begin(mizu::wire::Tag, uint32_t n) { sum += n; }
    void typed(mizu::wire::Typed k) { sum += uint8_t(k); }
    void end(mizu::wire::Tag) {}
    void array(const mizu::wire::ArrayHeader& a) {
        if (a.storage == mizu::wire::Storage::inline_data) span(a.data);
        else sum += a.buffer + a.extent;
    }
    void masked(const mizu::wire::ArrayHeader& values, const mizu::wire::ArrayHeader& mask) {
        array(values);
        array(mask);
    }
    void pickle(const mizu::wire::PickleBlob& p) { span(p.data); }
};

// Where every Touch's sum ends up: a volatile store the optimiser must
// keep, and with it each byte read that the sum depends on.
volatile uint64_t g_sink;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    Touch t;
    try {
        mizu::wire::read_message(data, size, t);
    } catch (const mizu::wire::WireError&) {
    }
    g_sink = t.sum;
    return 0;
}
