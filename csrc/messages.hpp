// The message envelope of doc/dev/messages.rst: what a pool's client and its
// workers, in any language, put into the rings around the values of
// doc/dev/wire.rst.
//
// A task goes to a worker as a TaskHeader and a body; its answer comes back
// as a ResultHeader and a body. A body is one value: a wire message, or a
// pickle (Python peers only). A message whose values live in arena blocks is
// wrapped in an out-of-band header that lists the blocks, and the segments'
// descriptors travel beside the ring, over the worker's socket. A message
// longer than a ring slot is cut into chunks, and a Reassembler joins them.
//
// Every field is little-endian, and these structs are the bytes: they are
// read and written with memcpy, never cast over a message. read_message()
// checks every length and field of untrusted bytes and throws MessageError.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "arena.hpp"

namespace mizu::messages {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the envelope's structs are its little-endian bytes");

// First bytes. A ring slot holds a whole message (kTask, kResult,
// kOutOfBand) or a chunk of one (kFirstChunk, kNextChunk).
constexpr uint8_t kFirstChunk = 0x01;
constexpr uint8_t kNextChunk = 0x02;
constexpr uint8_t kOutOfBand = 'O';
constexpr uint8_t kResult = 'R';
constexpr uint8_t kTask = 'T';
// First bytes of a body: a wire message, or a pickle of protocol 2 or later.
constexpr uint8_t kWireBody = 0x57;
constexpr uint8_t kPickleBody = 0x80;

// TaskHeader::flags: the shape of the call the body carries.
constexpr uint8_t kCall = 0x00;      // none of them: one call, its arguments a tuple
constexpr uint8_t kBatch = 0x01;     // map's units: a list, one value per unit; else one call
constexpr uint8_t kFlat = 0x02;      // with kBatch: a unit is one call; else a list of calls
constexpr uint8_t kSingle = 0x04;    // with kBatch: a call's arguments are one bare value; else a tuple
constexpr uint8_t kKeywords = 0x08;  // without kBatch: the call is (args tuple, kwargs dict); else the args tuple
constexpr uint8_t kCallable = 0x10;  // the body is (callable, the call); fn_id != 0 names it from now on
constexpr uint8_t kTimed = 0x20;     // the client judges the task's deadline: the worker marks it answered (Ring::answer)
constexpr uint8_t kTaskFlags = kBatch | kFlat | kSingle | kKeywords | kCallable | kTimed;

enum class Status : uint8_t {
    ok = 0,        // the body is the value; for a batch, (values, failures)
    raised = 1,    // the body is the exception the call raised
    retiring = 2,  // task_id 0, body None: max_tasks_per_child reached, the worker exits
    exiting = 3,   // task_id 0, body (stage, traceback): the worker exits on a failure
    ready = 4,     // task_id 0, body None: the worker has started (its initializer ran) and takes tasks
    gone = 5,      // task_id 0, body None: the client's own word that the worker's process has exited (ExitBell)
};
constexpr uint8_t kLastStatus = uint8_t(Status::gone);

// Whether a result of this status is a notice, which names no task.
constexpr bool is_notice(uint8_t status) noexcept {
    return status == uint8_t(Status::retiring) || status == uint8_t(Status::exiting) ||
           status == uint8_t(Status::ready) || status == uint8_t(Status::gone);
}

// The stage of an exiting worker's failure, the first item of its body.
enum class Stage : uint8_t { initializer = 0, decoding = 1, starting = 2 };

struct TaskHeader {
    uint8_t kind;  // kTask
    uint8_t flags;
    uint16_t reserved16;  // 0
    uint32_t reserved32;  // 0
    uint64_t task_id;     // > 0, unique in the pool
    uint64_t fn_id;       // a callable the worker was given with kCallable; 0 with kCallable alone
};
static_assert(sizeof(TaskHeader) == 24, "TaskHeader is 24 bytes");

struct ResultHeader {
    uint8_t kind;  // kResult
    uint8_t status;
    uint16_t sender;      // the worker's index in the pool
    uint32_t reserved32;  // 0
    uint64_t task_id;     // the task answered, or 0 (retiring, exiting)
    double seconds;       // how long the call ran
};
static_assert(sizeof(ResultHeader) == 24, "ResultHeader is 24 bytes");

// Wraps a task or result whose values live in arena blocks: `buffers`
// BufferRecords follow, then the task or result. The `descriptors` file
// descriptors the records index are sent, in one sendmsg with one byte of
// data, over the sender's socket before the message enters the ring.
struct OutOfBandHeader {
    uint8_t kind;  // kOutOfBand
    uint8_t reserved8;
    uint16_t sender;  // the worker's index; 0 from the client
    uint16_t descriptors;
    uint16_t buffers;  // >= 1
};
static_assert(sizeof(OutOfBandHeader) == 8, "OutOfBandHeader is 8 bytes");

// One out-of-band buffer: `length` bytes at `offset` in the data of the
// block `block` names, whose segment is the message's descriptor number
// `descriptor`. The receiver adopts the block reference the sender took
// for it (mizu::BlockRef, csrc/arena.hpp). A pickle body's out-of-band
// buffers are the records in order; a wire array in the arena names its
// record by index.
struct BufferRecord {
    BlockRef block;
    uint64_t offset;
    uint64_t length;
    uint16_t descriptor;
    uint8_t reserved[6];  // 0
};
static_assert(sizeof(BlockRef) == 40 && sizeof(BufferRecord) == 64, "BufferRecord is 64 bytes");

struct FirstChunkHeader {
    uint8_t kind;  // kFirstChunk
    uint8_t reserved8;
    uint16_t sender;
    uint32_t reserved32;
    uint64_t total;  // bytes of the whole message, more than one slot holds
};
static_assert(sizeof(FirstChunkHeader) == 16, "FirstChunkHeader is 16 bytes");

struct NextChunkHeader {
    uint8_t kind;  // kNextChunk
    uint8_t reserved8;
    uint16_t sender;
    uint32_t reserved32;
};
static_assert(sizeof(NextChunkHeader) == 8, "NextChunkHeader is 8 bytes");

class MessageError : public std::invalid_argument {
public:
    MessageError(std::size_t offset, const std::string& what);
    std::size_t offset() const noexcept { return offset_; }

private:
    std::size_t offset_;
};

// A task or result, read in place from its bytes.
struct Message {
    uint8_t kind = 0;  // kTask or kResult
    TaskHeader task{};
    ResultHeader result{};
    uint16_t sender = 0;  // the out-of-band header's, or the result's
    uint16_t descriptors = 0;
    uint16_t buffer_count = 0;
    const char* buffers = nullptr;  // buffer_count records, not aligned
    const char* body = nullptr;     // starts with kWireBody or kPickleBody
    std::size_t body_size = 0;
    std::size_t body_offset = 0;    // of body in the message

    BufferRecord buffer(std::size_t i) const noexcept {
        BufferRecord r;
        std::memcpy(&r, buffers + i * sizeof r, sizeof r);
        return r;
    }
};

// Checks and reads a whole message (not a chunk) into m: of its task and
// result headers, the one of its kind. Throws MessageError.
void read_message(const char* data, std::size_t size, Message& m);

inline Message read_message(const char* data, std::size_t size) {
    Message m;
    read_message(data, size, m);
    return m;
}

inline TaskHeader task_header(uint64_t task_id, uint64_t fn_id, uint8_t flags) noexcept {
    TaskHeader h{};
    h.kind = kTask;
    h.flags = flags;
    h.task_id = task_id;
    h.fn_id = fn_id;
    return h;
}

inline ResultHeader result_header(uint16_t sender, uint64_t task_id, Status status, double seconds) noexcept {
    ResultHeader h{};
    h.kind = kResult;
    h.status = uint8_t(status);
    h.sender = sender;
    h.task_id = task_id;
    h.seconds = seconds;
    return h;
}

inline OutOfBandHeader out_of_band_header(uint16_t sender, uint16_t descriptors, uint16_t buffers) noexcept {
    OutOfBandHeader h{};
    h.kind = kOutOfBand;
    h.sender = sender;
    h.descriptors = descriptors;
    h.buffers = buffers;
    return h;
}

// Whether a ring slot holds a chunk rather than a whole message.
inline bool is_chunk(const char* data, std::size_t size) noexcept {
    return size > 0 && (uint8_t(data[0]) == kFirstChunk || uint8_t(data[0]) == kNextChunk);
}

// How many chunks a message of `size` bytes takes in slots of `limit`
// bytes. Throws std::invalid_argument if it fits one slot, or if a slot
// cannot hold a chunk header and a byte.
std::size_t chunk_count(std::size_t size, std::size_t limit);

// Writes chunk `index` of the message into out, which has room for `limit`
// bytes; returns the chunk's length.
std::size_t write_chunk(const char* message, std::size_t size, uint16_t sender, std::size_t limit,
                        std::size_t index, char* out) noexcept;

// The most descriptors one message's records may name. They go in
// batches (the kernel passes at most 253 in one sendmsg), all before the
// message enters the ring; the receiver holds them all at once.
constexpr std::size_t kMaxDescriptors = 1000;

// Sends a message's descriptors over a Unix socket: one sendmsg with
// SCM_RIGHTS and one byte per batch of up to 250, without SIGPIPE. Throws
// std::system_error when the peer has gone or the kernel refuses (too many
// in flight, even once raise_open_files_limit has raised the limit); the
// batches sent before are then marked void.
void send_descriptors(int socket, const int* fds, std::size_t count);

// Takes the `count` descriptors sent before the message that names them:
// they are there already, so it does not block. The first call raises the
// process's limit on open files (raise_open_files_limit). Void batches
// before them are closed. Throws MessageError if fewer are waiting (none
// closed by the receiver stays open).
std::vector<int> receive_descriptors(int socket, std::size_t count);

// Joins the chunks of each sender's messages, which may interleave with
// other senders' in a shared ring. Memory grows with the chunks received,
// never with what a first chunk announces.
class Reassembler {
public:
    // Feeds one chunk. Returns true, and moves the whole message into out,
    // when it completes one. Throws MessageError for a chunk that does not
    // continue its sender's chunks (the sender's partial message is dropped).
    bool feed(const char* chunk, std::size_t size, std::string& out);
    // Drops a sender's partial message (it exited).
    void forget(uint16_t sender) { partial_.erase(sender); }
    std::size_t pending() const noexcept { return partial_.size(); }

private:
    struct Partial {
        std::string data;
        uint64_t total;
    };
    std::unordered_map<uint16_t, Partial> partial_;
};

}  // namespace mizu::messages
