#include "messages.hpp"

#include "open_files.hpp"

#include <algorithm>
#include <cerrno>
#include <sys/socket.h>
#include <system_error>
#include <unistd.h>

namespace mizu::messages {

MessageError::MessageError(std::size_t offset, const std::string& what)
    : std::invalid_argument("message at byte " + std::to_string(offset) + ": " + what), offset_(offset) {}

namespace {

// The throws, out of line: the checks on the way of every message stay a
// compare and a branch each.
[[noreturn]] [[gnu::cold]] [[gnu::noinline]] void fail(std::size_t at, const char* what) {
    throw MessageError(at, what);
}

[[noreturn]] [[gnu::cold]] [[gnu::noinline]] void fail(std::size_t at, const char* what, uint64_t n) {
    throw MessageError(at, what + std::to_string(n));
}

[[noreturn]] [[gnu::cold]] [[gnu::noinline]] void fail_short(std::size_t at, const char* what, std::size_t left,
                                                            std::size_t header) {
    throw MessageError(at, std::string("a ") + what + " of " + std::to_string(left) + " bytes, shorter than its header (" +
                               std::to_string(header) + " bytes)");
}

template <class Header>
Header read_header(const char* data, std::size_t size, std::size_t at, const char* what) {
    if (size - at < sizeof(Header)) fail_short(at, what, size - at, sizeof(Header));
    Header h;
    std::memcpy(&h, data + at, sizeof h);
    return h;
}

// The task or result at `at`, and its body.
void read_inner(const char* data, std::size_t size, std::size_t at, Message& m) {
    uint8_t kind = uint8_t(data[at]);
    std::size_t body = at;
    if (kind == kTask) {
        m.task = read_header<TaskHeader>(data, size, at, "task");
        const TaskHeader& h = m.task;
        if (h.reserved16 || h.reserved32) fail(at, "a task header with reserved bits set");
        if (h.flags & ~kTaskFlags) fail(at + 1, "a task with unknown flags ", h.flags);
        bool batch = h.flags & kBatch;
        if (!batch && (h.flags & (kFlat | kSingle))) fail(at + 1, "a call's flags say how to run a batch");
        if (batch && (h.flags & kKeywords)) fail(at + 1, "a batch with keyword arguments");
        if (h.task_id == 0) fail(at + 8, "a task with id 0");
        if (h.fn_id == 0 && !(h.flags & kCallable)) fail(at + 16, "a task that names no callable");
        body += sizeof(TaskHeader);
    } else if (kind == kResult) {
        m.result = read_header<ResultHeader>(data, size, at, "result");
        const ResultHeader& h = m.result;
        if (h.reserved32) fail(at, "a result header with reserved bits set");
        if (h.status > kLastStatus) fail(at + 1, "a result of unknown status ", h.status);
        bool notice = is_notice(h.status);
        if (notice != (h.task_id == 0)) fail(at + 8, notice ? "a notice naming a task" : "a result with task id 0");
        m.sender = h.sender;
        body += sizeof(ResultHeader);
    } else {
        fail(at, "a message of unknown kind ", kind);
    }
    m.kind = kind;
    if (body == size) fail(body, "a message without a body");
    uint8_t first = uint8_t(data[body]);
    if (first != kWireBody && first != kPickleBody) fail(body, "a body that is neither a wire message nor a pickle");
    m.body = data + body;
    m.body_size = size - body;
    m.body_offset = body;
}

}  // namespace

void read_message(const char* data, std::size_t size, Message& m) {
    if (size == 0) fail(0, "an empty message");
    uint8_t kind = uint8_t(data[0]);
    if (kind == kFirstChunk || kind == kNextChunk) fail(0, "a chunk, not a whole message");
    m.sender = m.descriptors = m.buffer_count = 0;
    m.buffers = nullptr;
    if (kind != kOutOfBand) {
        read_inner(data, size, 0, m);
        return;
    }
    OutOfBandHeader h = read_header<OutOfBandHeader>(data, size, 0, "out-of-band message");
    if (h.reserved8) fail(0, "an out-of-band header with reserved bits set");
    if (h.buffers == 0) fail(6, "an out-of-band message with no buffers");
    std::size_t records = std::size_t(h.buffers) * sizeof(BufferRecord);
    if (size - sizeof h < records)
        throw MessageError(sizeof h, std::to_string(h.buffers) + " buffer records, and " +
                                         std::to_string(size - sizeof h) + " bytes left");
    m.buffers = data + sizeof h;
    m.buffer_count = h.buffers;
    m.descriptors = h.descriptors;
    for (std::size_t i = 0; i < h.buffers; ++i) {
        BufferRecord r = m.buffer(i);
        std::size_t at = sizeof h + i * sizeof r;
        if (r.descriptor >= h.descriptors)
            throw MessageError(at + offsetof(BufferRecord, descriptor),
                               "a buffer in descriptor " + std::to_string(r.descriptor) + " of " +
                                   std::to_string(h.descriptors));
        for (uint8_t b : r.reserved)
            if (b) fail(at + offsetof(BufferRecord, reserved), "a buffer record with reserved bits set");
        if (r.offset > r.block.length || r.length > r.block.length - r.offset)
            throw MessageError(at, "a buffer of " + std::to_string(r.length) + " bytes at offset " +
                                       std::to_string(r.offset) + " of a block of " + std::to_string(r.block.length));
    }
    std::size_t inner = sizeof h + records;
    if (inner == size) fail(inner, "an out-of-band message with nothing inside");
    if (uint8_t(data[inner]) == kOutOfBand) fail(inner, "an out-of-band message inside another");
    read_inner(data, size, inner, m);
    m.sender = h.sender;
}

std::size_t chunk_count(std::size_t size, std::size_t limit) {
    if (limit <= sizeof(FirstChunkHeader)) throw std::invalid_argument("a ring slot too small for a chunk");
    if (size <= limit) throw std::invalid_argument("a message that fits in one slot is not cut into chunks");
    std::size_t rest = size - (limit - sizeof(FirstChunkHeader));
    std::size_t step = limit - sizeof(NextChunkHeader);
    return 1 + (rest + step - 1) / step;
}

std::size_t write_chunk(const char* message, std::size_t size, uint16_t sender, std::size_t limit,
                        std::size_t index, char* out) noexcept {
    std::size_t first = limit - sizeof(FirstChunkHeader);
    if (index == 0) {
        FirstChunkHeader h{};
        h.kind = kFirstChunk;
        h.sender = sender;
        h.total = size;
        std::memcpy(out, &h, sizeof h);
        std::memcpy(out + sizeof h, message, first);
        return limit;
    }
    std::size_t step = limit - sizeof(NextChunkHeader);
    std::size_t start = first + (index - 1) * step;
    std::size_t n = size - start < step ? size - start : step;
    NextChunkHeader h{};
    h.kind = kNextChunk;
    h.sender = sender;
    std::memcpy(out, &h, sizeof h);
    std::memcpy(out + sizeof h, message + start, n);
    return sizeof h + n;
}

namespace {

// The most descriptors one sendmsg passes: the kernel takes at most 253.
constexpr std::size_t kBatchDescriptors = 250;

// The byte beside each batch: more follow, this is the last, or (without
// descriptors) the batches sent before it are void: a later batch failed.
constexpr char kMoreFollow = 'f';
constexpr char kLastBatch = 'F';
constexpr char kVoid = 'X';

// One byte of payload (`byte`) and room for `count` descriptors beside it:
// the message both send_batch and receive_descriptors pass.
struct DescriptorMessage {
    iovec iov;
    std::vector<char> control;
    msghdr msg{};

    DescriptorMessage(char* byte, std::size_t count) : iov{byte, 1}, control(CMSG_SPACE(count * sizeof(int)), 0) {
        msg.msg_iov = &iov;
        msg.msg_iovlen = 1;
        msg.msg_control = count ? control.data() : nullptr;
        msg.msg_controllen = count ? control.size() : 0;
    }
    DescriptorMessage(const DescriptorMessage&) = delete;
    DescriptorMessage& operator=(const DescriptorMessage&) = delete;
};

// One sendmsg of `byte` and `count` descriptors (none for kVoid); 0 or errno.
int send_batch(int socket, char byte, const int* fds, std::size_t count) {
    DescriptorMessage dm(&byte, count);
    msghdr& msg = dm.msg;
    if (count) {
        cmsghdr* c = CMSG_FIRSTHDR(&msg);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(count * sizeof(int));
        std::memcpy(CMSG_DATA(c), fds, count * sizeof(int));
    }
#ifdef MSG_NOSIGNAL
    int flags = MSG_NOSIGNAL;
#else
    int flags = 0;
#endif
    for (;;) {
        if (sendmsg(socket, &msg, flags) == 1) return 0;
        // ETOOMANYREFS: the descriptors this process's user has in flight,
        // sent and not yet received, would pass this process's soft limit.
        if (errno != EINTR && !(errno == ETOOMANYREFS && raise_open_files_limit())) return errno;
    }
}

void close_all(const std::vector<int>& fds) {
    for (int fd : fds) close(fd);
}

}  // namespace

void send_descriptors(int socket, const int* fds, std::size_t count) {
    if (count == 0 || count > kMaxDescriptors)
        throw std::invalid_argument("a message sends from 1 to " + std::to_string(kMaxDescriptors) +
                                    " descriptors, not " + std::to_string(count));
    for (std::size_t sent = 0; sent < count;) {
        std::size_t n = std::min(kBatchDescriptors, count - sent);
        int error = send_batch(socket, sent + n == count ? kLastBatch : kMoreFollow, fds + sent, n);
        if (error) {
            // The receiver takes the batches already sent with the next
            // message's, and drops them at this mark (a peer that has gone
            // takes nothing).
            if (sent) send_batch(socket, kVoid, nullptr, 0);
            throw std::system_error(error, std::generic_category(), "sending descriptors");
        }
        sent += n;
    }
}

std::vector<int> receive_descriptors(int socket, std::size_t count) {
    if (count == 0 || count > kMaxDescriptors)
        throw MessageError(4, "a message of " + std::to_string(count) + " descriptors");
#ifdef MSG_CMSG_CLOEXEC
    int flags = MSG_DONTWAIT | MSG_CMSG_CLOEXEC;
#else
    int flags = MSG_DONTWAIT;
#endif
    // Those past the soft limit the kernel would drop.
    [[maybe_unused]] static const bool raised = raise_open_files_limit();
    std::vector<int> fds;
    bool whole = false, truncated = false;
    while (!whole) {
        char byte = 0;
        DescriptorMessage dm(&byte, kBatchDescriptors);
        msghdr& msg = dm.msg;
        ssize_t n;
        do {
            n = recvmsg(socket, &msg, flags);
        } while (n < 0 && errno == EINTR);
        for (cmsghdr* c = CMSG_FIRSTHDR(&msg); n > 0 && c; c = CMSG_NXTHDR(&msg, c)) {
            if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
            std::size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            const char* data = reinterpret_cast<const char*>(CMSG_DATA(c));
            for (std::size_t i = 0; i < k; ++i) {
                int fd;
                std::memcpy(&fd, data + i * sizeof fd, sizeof fd);
                fds.push_back(fd);
            }
        }
        if (n == 1 && byte == kVoid) {
            close_all(fds);
            fds.clear();
            continue;
        }
        truncated = n > 0 && (msg.msg_flags & MSG_CTRUNC);
        if (n != 1 || (byte != kMoreFollow && byte != kLastBatch) || truncated) break;
        whole = byte == kLastBatch;
    }
    if (whole && fds.size() == count) return fds;
    close_all(fds);
    std::string why;
    if (truncated)
        why = ": the kernel dropped the rest, as it does past this process's limit of " +
              std::to_string(open_files_limit()) + " open files (RLIMIT_NOFILE, ulimit -n): raise it";
    throw MessageError(4, "expected " + std::to_string(count) + " shared-memory descriptors from the peer, got " +
                              std::to_string(fds.size()) + why);
}

bool Reassembler::feed(const char* chunk, std::size_t size, std::string& out) {
    if (size == 0) throw MessageError(0, "an empty chunk");
    uint8_t kind = uint8_t(chunk[0]);
    if (kind == kFirstChunk) {
        FirstChunkHeader h = read_header<FirstChunkHeader>(chunk, size, 0, "first chunk");
        if (h.reserved8 || h.reserved32) throw MessageError(0, "a chunk header with reserved bits set");
        if (partial_.erase(h.sender))
            throw MessageError(0, "a first chunk from sender " + std::to_string(h.sender) +
                                      " before its last message was whole");
        std::size_t n = size - sizeof h;
        if (n >= h.total)
            throw MessageError(8, "a first chunk of " + std::to_string(n) + " bytes of a message of " +
                                      std::to_string(h.total) + ": it needs no chunks");
        Partial& p = partial_[h.sender];
        p.data.assign(chunk + sizeof h, n);
        p.total = h.total;
        return false;
    }
    if (kind != kNextChunk) throw MessageError(0, "neither a first nor a next chunk");
    NextChunkHeader h = read_header<NextChunkHeader>(chunk, size, 0, "next chunk");
    if (h.reserved8 || h.reserved32) throw MessageError(0, "a chunk header with reserved bits set");
    auto it = partial_.find(h.sender);
    if (it == partial_.end())
        throw MessageError(0, "a next chunk from sender " + std::to_string(h.sender) + " with no first chunk before it");
    Partial& p = it->second;
    std::size_t n = size - sizeof h;
    if (n == 0 || n > p.total - p.data.size()) {
        uint64_t total = p.total;
        partial_.erase(it);
        throw MessageError(sizeof h, "chunks from sender " + std::to_string(h.sender) + " carry more than the " +
                                         std::to_string(total) + " bytes announced, or an empty chunk");
    }
    p.data.append(chunk + sizeof h, n);
    if (p.data.size() < p.total) return false;
    out = std::move(p.data);
    partial_.erase(it);
    return true;
}

}  // namespace mizu::messages
