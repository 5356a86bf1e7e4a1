// libFuzzer target for the message envelope, in three modes chosen by the
// first byte.
//
// Read: the rest of the input is one message; read_message either throws
// MessageError or returns a task or result whose headers, buffer records
// and body lie inside the input. The input is copied to a buffer of exactly
// its size, so an overread shows under AddressSanitizer.
//
// Chunks: the input is cut into chunks, from up to four senders, fed to a
// Reassembler; each feed either throws MessageError or hands back a message
// no longer than its first chunk announced.
//
// Round trip: a task or result, wrapped or not in an out-of-band header,
// built from the input, is cut into chunks for a slot size the input picks,
// the chunks of two senders interleaved; the Reassembler gives back both
// messages byte for byte, and read_message reads back every field.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "messages.hpp"

namespace {

using namespace mizu::messages;

void require(bool ok) {
    if (!ok) __builtin_trap();
}

void read_mode(const std::string& bytes) {
    std::vector<char> exact(bytes.begin(), bytes.end());
    const char* data = exact.data();
    try {
        Message m = read_message(data, exact.size());
        require(m.kind == kTask || m.kind == kResult);
        require(m.body >= data && m.body + m.body_size == data + exact.size() && m.body_size > 0);
        require(m.body_offset == std::size_t(m.body - data));
        for (std::size_t i = 0; i < m.buffer_count; ++i) require(m.buffer(i).descriptor < m.descriptors);
    } catch (const MessageError& e) {
        require(e.offset() <= exact.size());
    }
}

void chunks_mode(FuzzedDataProvider& in) {
    Reassembler r;
    std::string out;
    while (in.remaining_bytes() > 0) {
        std::string chunk = in.ConsumeRandomLengthString(600);
        std::vector<char> exact(chunk.begin(), chunk.end());
        try {
            if (r.feed(exact.data(), exact.size(), out)) require(!out.empty());
        } catch (const MessageError&) {
        }
        require(r.pending() <= 65536);
    }
}

std::string body(FuzzedDataProvider& in) {
    std::string b = in.ConsumeRandomLengthString(3000);
    b.insert(b.begin(), char(in.ConsumeBool() ? kWireBody : kPickleBody));
    return b;
}

std::string build(FuzzedDataProvider& in, uint16_t sender, Message& expect) {
    std::string msg;
    uint16_t buffers = in.ConsumeIntegralInRange<uint16_t>(0, 3);
    uint16_t descriptors = buffers ? in.ConsumeIntegralInRange<uint16_t>(1, 4) : 0;
    if (buffers) {
        OutOfBandHeader h = out_of_band_header(sender, descriptors, buffers);
        msg.append(reinterpret_cast<const char*>(&h), sizeof h);
        for (uint16_t i = 0; i < buffers; ++i) {
            BufferRecord r{};
            r.block.arena_id = in.ConsumeIntegral<uint64_t>();
            r.block.length = in.ConsumeIntegralInRange<uint64_t>(1, 1 << 30);
            r.offset = in.ConsumeIntegralInRange<uint64_t>(0, r.block.length);
            r.length = in.ConsumeIntegralInRange<uint64_t>(0, r.block.length - r.offset);
            r.block.generation = in.ConsumeIntegral<uint32_t>();
            r.descriptor = in.ConsumeIntegralInRange<uint16_t>(0, uint16_t(descriptors - 1));
            msg.append(reinterpret_cast<const char*>(&r), sizeof r);
        }
    }
    if (in.ConsumeBool()) {
        uint8_t flags = in.ConsumeBool() ? uint8_t(kBatch | (in.ConsumeIntegral<uint8_t>() & (kFlat | kSingle)))
                                         : uint8_t(in.ConsumeBool() ? kKeywords : 0);
        if (in.ConsumeBool()) flags |= kCallable;
        uint64_t fn = (flags & kCallable) && in.ConsumeBool() ? 0 : in.ConsumeIntegralInRange<uint64_t>(1, ~0ULL);
        expect.task = task_header(in.ConsumeIntegralInRange<uint64_t>(1, ~0ULL), fn, flags);
        expect.kind = kTask;
        msg.append(reinterpret_cast<const char*>(&expect.task), sizeof expect.task);
    } else {
        auto status = Status(in.ConsumeIntegralInRange<uint8_t>(0, kLastStatus));
        bool notice = is_notice(uint8_t(status));
        expect.result = result_header(sender, notice ? 0 : in.ConsumeIntegralInRange<uint64_t>(1, ~0ULL), status,
                                      in.ConsumeFloatingPoint<double>());
        expect.kind = kResult;
        msg.append(reinterpret_cast<const char*>(&expect.result), sizeof expect.result);
    }
    expect.buffer_count = buffers;
    expect.descriptors = descriptors;
    expect.body_offset = msg.size();
    msg += body(in);
    return msg;
}

void round_trip_mode(FuzzedDataProvider& in) {
    std::size_t limit = in.ConsumeIntegralInRange<std::size_t>(sizeof(FirstChunkHeader) + 1, 700);
    Message expect[2];
    std::string msgs[2] = {build(in, 1, expect[0]), build(in, 2, expect[1])};
    std::vector<std::vector<char>> slots[2];
    for (int s = 0; s < 2; ++s) {
        if (msgs[s].size() <= limit) {
            slots[s].emplace_back(msgs[s].begin(), msgs[s].end());
            continue;
        }
        std::size_t n = chunk_count(msgs[s].size(), limit);
        for (std::size_t i = 0; i < n; ++i) {
            std::vector<char> slot(limit);
            slot.resize(write_chunk(msgs[s].data(), msgs[s].size(), uint16_t(s + 1), limit, i, slot.data()));
            require(is_chunk(slot.data(), slot.size()));
            slots[s].push_back(std::move(slot));
        }
    }
    Reassembler r;
    std::size_t next[2] = {0, 0};
    int done = 0;
    while (done < 2) {
        int s = next[0] == slots[0].size() ? 1 : next[1] == slots[1].size() ? 0 : in.ConsumeBool();
        const std::vector<char>& slot = slots[s][next[s]++];
        std::string whole;
        if (!is_chunk(slot.data(), slot.size())) {
            whole.assign(slot.begin(), slot.end());
        } else if (!r.feed(slot.data(), slot.size(), whole)) {
            continue;
        }
        require(whole == msgs[s]);
        Message m = read_message(whole.data(), whole.size());
        const Message& e = expect[s];
        require(m.kind == e.kind && m.buffer_count == e.buffer_count && m.descriptors == e.descriptors);
        require(m.body_offset == e.body_offset && m.body_size == whole.size() - e.body_offset);
        if (m.kind == kTask)
            require(std::memcmp(&m.task, &e.task, sizeof m.task) == 0);
        else
            require(std::memcmp(&m.result, &e.result, sizeof m.result) == 0);
        ++done;
    }
    require(r.pending() == 0);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size == 0) return 0;
    FuzzedDataProvider in(data + 1, size - 1);
    switch (data[0] % 3) {
    case 0: read_mode(std::string(reinterpret_cast<const char*>(data) + 1, size - 1)); break;
    case 1: chunks_mode(in); break;
    default: round_trip_mode(in); break;
    }
    return 0;
}
