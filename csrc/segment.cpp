#include "segment.hpp"

#include "cpus.hpp"
#include "open_files.hpp"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <sstream>
#include <string>
#include <sys/mman.h>
#include <sys/stat.h>
#include <system_error>
#include <unistd.h>

namespace mizu {

namespace {

std::string describe(const char* dir) { return dir ? std::string("in ") + dir : std::string("(anonymous memory)"); }

[[noreturn]] void fail_errno(int err, const std::string& what) {
    if (err == ENOSPC || err == ENOMEM || err == EFBIG || err == EDQUOT)
        throw OutOfSharedMemory(what + ": " + std::strerror(err));
    throw std::system_error(err, std::generic_category(), what);
}

// make() returns a new descriptor, or -1 and errno; once more after a
// failure for want of descriptors, if the limit could be raised.
template <class Make>
int with_room(Make make) {
    int fd = make();
    if (fd < 0 && errno == EMFILE && raise_open_files_limit()) fd = make();
    return fd;
}

int open_unnamed(const char* dir) {
    int fd = -1;
#if defined(__linux__)
    if (!dir) {
        fd = with_room([] { return memfd_create("mizu", MFD_CLOEXEC); });
        if (fd < 0) fail_errno(errno, "memfd_create");
        return fd;
    }
#ifdef O_TMPFILE
    fd = with_room([dir] { return open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600); });
    if (fd >= 0) return fd;
    if (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL) fail_errno(errno, std::string("open ") + dir);
#endif
#elif defined(__APPLE__)
    if (!dir) {
        // Names are at most 31 bytes on macOS; unlinked before anyone else
        // could open it, so only the descriptor ever refers to it.
        for (int attempt = 0; attempt < 100 && fd < 0; ++attempt) {
            char name[32];
            std::snprintf(name, sizeof name, "/mizu.%d.%08x", int(getpid()), unsigned(arc4random()));
            fd = with_room([&name] { return shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600); });
            if (fd >= 0) {
                shm_unlink(name);
                fcntl(fd, F_SETFD, FD_CLOEXEC);
            } else if (errno != EEXIST) {
                fail_errno(errno, "shm_open");
            }
        }
        if (fd < 0) fail_errno(EEXIST, "shm_open");
        return fd;
    }
#endif
    std::string path;
    fd = with_room([&path, dir] {
        path = std::string(dir) + "/.mizu-XXXXXX";
        return mkstemp(&path[0]);
    });
    if (fd < 0) fail_errno(errno, "mkstemp " + path);
    unlink(path.c_str());
    fcntl(fd, F_SETFD, FD_CLOEXEC);
    return fd;
}

// Reserves every page now, so that a full tmpfs fails here with an error
// instead of raising SIGBUS on first touch in the middle of a task. Returns
// false where the filesystem cannot reserve (no fallocate): the creator then
// pre-faults the mapping instead.
bool reserve(int fd, std::size_t size, const char* dir) {
    if (ftruncate(fd, off_t(size)) != 0) fail_errno(errno, "cannot size shared memory to " + std::to_string(size) + " bytes " + describe(dir));
#if defined(__linux__)
    int rc = posix_fallocate(fd, 0, off_t(size));
    if (rc == EOPNOTSUPP || rc == EINVAL) return false;
    if (rc != 0)
        fail_errno(rc, "cannot reserve " + std::to_string(size) + " bytes of shared memory " + describe(dir) +
                           "; free memory there, or give mizu a larger tmpfs");
    return true;
#else
    (void)dir;
    return false;
#endif
}

// Memory that is reserved is faulted in as it is touched: pre-faulting costs
// as much as touching every page (a few ms per MB on a VM), and a pool uses
// few of its ring slots in a short life. Where nothing could be reserved,
// the creator pre-faults everything (populate), so a short tmpfs fails here
// rather than with SIGBUS later.
char* map(int fd, std::size_t size, bool populate) {
    int flags = MAP_SHARED;
#ifdef MAP_POPULATE
    if (populate) flags |= MAP_POPULATE;
#endif
    void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, flags, fd, 0);
    if (p == MAP_FAILED) fail_errno(errno, "mmap of " + std::to_string(size) + " bytes");
#ifndef MAP_POPULATE
    long page = sysconf(_SC_PAGESIZE);
    for (std::size_t off = 0; populate && off < size; off += std::size_t(page))
        static_cast<volatile char*>(p)[off] = static_cast<volatile char*>(p)[off];
#endif
    return static_cast<char*>(p);
}

std::size_t physical_memory() {
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? std::size_t(pages) * std::size_t(page) : SIZE_MAX;
}

#if defined(__linux__)
// Shared memory is charged to the memory cgroup of the process that reserves
// it. Past the cgroup's limit the kernel does not fail the reservation: it
// kills a process of the cgroup. So a request is checked against the room
// left first, the least of every level up to the hierarchy's root, counting
// the file cache as reclaimable.
struct CgroupRoom {
    std::size_t bytes = SIZE_MAX;
    std::string where;  // the cgroup whose limit is nearest
};

bool read_number(const std::string& path, uint64_t& value) {
    std::ifstream in(path);
    return bool(in >> value);  // "max" (cgroup v2's no limit) does not parse
}

uint64_t stat_value(const std::string& dir, const std::string& key) {
    std::ifstream in(dir + "/memory.stat");
    std::string name;
    uint64_t value;
    while (in >> name >> value)
        if (name == key) return value;
    return 0;
}

// The directory of this process's memory cgroup and its hierarchy's mount
// point, and whether it is cgroup v2's. Empty if there is none.
struct Cgroup {
    std::string dir, mount;
    bool v2 = false;
};

Cgroup memory_cgroup() {
    std::ifstream mounts("/proc/self/mountinfo");
    std::string line, v1_root, v1_mount, v2_root, v2_mount;
    while (std::getline(mounts, line)) {
        // id parent dev root mount-point options [optional fields] - type source super-options
        std::istringstream in(line);
        std::string id, parent, dev, root, point, field, type, source, options;
        in >> id >> parent >> dev >> root >> point;
        while (in >> field && field != "-") {
        }
        in >> type >> source >> options;
        if (type == "cgroup" && ("," + options + ",").find(",memory,") != std::string::npos) {
            v1_root = root;
            v1_mount = point;
        } else if (type == "cgroup2" && v2_mount.empty()) {
            v2_root = root;
            v2_mount = point;
        }
    }
    auto under = [](const std::string& mount, const std::string& root, const std::string& path) {
        bool inside = root != "/" && path.compare(0, root.size(), root) == 0;
        return mount + (inside ? path.substr(root.size()) : path == "/" ? std::string() : path);
    };
    std::ifstream groups("/proc/self/cgroup");
    Cgroup v2;
    while (std::getline(groups, line)) {
        // hierarchy-id:controllers:path
        std::size_t a = line.find(':'), b = line.find(':', a + 1);
        if (a == std::string::npos || b == std::string::npos) continue;
        std::string controllers = "," + line.substr(a + 1, b - a - 1) + ",", path = line.substr(b + 1);
        if (!v1_mount.empty() && controllers.find(",memory,") != std::string::npos)
            return {under(v1_mount, v1_root, path), v1_mount, false};
        if (!v2_mount.empty() && controllers == ",,") v2 = {under(v2_mount, v2_root, path), v2_mount, true};
    }
    return v2;
}

CgroupRoom cgroup_room() {
    CgroupRoom room;
    Cgroup cg = memory_cgroup();
    if (cg.dir.empty()) return room;
    for (std::string dir = cg.dir;; dir = dir.substr(0, dir.rfind('/'))) {
        uint64_t limit, usage;
        if (read_number(dir + (cg.v2 ? "/memory.max" : "/memory.limit_in_bytes"), limit) &&
            read_number(dir + (cg.v2 ? "/memory.current" : "/memory.usage_in_bytes"), usage)) {
            const char* prefix = cg.v2 ? "" : "total_";
            uint64_t cache = stat_value(dir, std::string(prefix) + "active_file") +
                             stat_value(dir, std::string(prefix) + "inactive_file");
            uint64_t used = usage > cache ? usage - cache : 0;
            uint64_t left = limit > used ? limit - used : 0;
            if (left < room.bytes) {
                room.bytes = std::size_t(left);
                room.where = dir;
            }
        }
        if (dir.size() <= cg.mount.size() || dir.rfind('/') == std::string::npos) break;
    }
    return room;
}
#endif

}  // namespace

std::unique_ptr<Segment> Segment::create(std::size_t size, const char* dir, WaitBackend backend) {
    constexpr std::size_t min_size = round_up(sizeof(SegmentHeader), kFalseSharingRange);
    if (size < min_size)
        throw std::invalid_argument("segment size must be at least " + std::to_string(min_size) + " bytes, got " +
                                    std::to_string(size));
    if (size > physical_memory())
        throw OutOfSharedMemory("segment size of " + std::to_string(size) + " bytes exceeds this machine's memory of " +
                                std::to_string(physical_memory()) + " bytes");
    if (backend != WaitBackend::native && backend != WaitBackend::portable)
        throw std::invalid_argument("unknown waiter backend");
#if defined(__linux__)
    CgroupRoom room = cgroup_room();
    if (size > room.bytes)
        throw OutOfSharedMemory("cannot reserve " + std::to_string(size) + " bytes of shared memory " + describe(dir) +
                                ": the memory cgroup " + room.where + " has about " + std::to_string(room.bytes) +
                                " bytes left under its limit; raise that limit, or use less shared memory");
#endif
    int fd = open_unnamed(dir);
    char* base;
    try {
        base = map(fd, size, !reserve(fd, size, dir));
    } catch (...) {
        close(fd);
        throw;
    }
    auto* h = new (base) SegmentHeader;
    h->magic = kSegmentMagic;
    h->version = kSegmentVersion;
    h->waiter_backend = uint32_t(backend);
    h->size = size;
    h->used.store(min_size, std::memory_order_relaxed);
    h->spin_gate.spinning.store(0, std::memory_order_relaxed);
    h->spin_gate.limit = usable_cpus();
    return std::unique_ptr<Segment>(new Segment(fd, base, size));
}

std::unique_ptr<Segment> Segment::attach(int fd, const std::string& name) {
    std::string what = name.empty() ? "fd " + std::to_string(fd) : name;
    struct stat st;
    if (fstat(fd, &st) != 0) throw std::system_error(errno, std::generic_category(), "fstat of " + what);
    std::string not_ours = what + " is not a mizu shared segment";
#if defined(__APPLE__)
    // A POSIX shm object is no regular file there and cannot be pread.
    if (std::size_t(st.st_size) < sizeof(SegmentHeader)) throw std::invalid_argument(not_ours);
#else
    uint64_t magic = 0;
    if (!S_ISREG(st.st_mode) || std::size_t(st.st_size) < sizeof(SegmentHeader) ||
        pread(fd, &magic, sizeof magic, 0) != ssize_t(sizeof magic) || magic != kSegmentMagic)
        throw std::invalid_argument(not_ours);
#endif
    std::size_t size = std::size_t(st.st_size);
    int own = with_room([fd] { return fcntl(fd, F_DUPFD_CLOEXEC, 0); });
    if (own < 0) throw std::system_error(errno, std::generic_category(), "dup of " + what);
    char* base;
    try {
        base = map(own, size, false);
    } catch (...) {
        close(own);
        throw;
    }
    auto* h = reinterpret_cast<SegmentHeader*>(base);
    // macOS rounds a shm object's size up to whole pages.
    if (h->magic != kSegmentMagic || h->size > size) {
        munmap(base, size);
        close(own);
        throw std::invalid_argument(not_ours);
    }
    if (h->version != kSegmentVersion) {
        munmap(base, size);
        close(own);
        throw std::invalid_argument(what + " holds a mizu segment of layout version " +
                                    std::to_string(h->version) + ", this build reads version " +
                                    std::to_string(kSegmentVersion) + "; use one mizu build for the whole pool");
    }
    return std::unique_ptr<Segment>(new Segment(own, base, size));
}

Segment::~Segment() {
    munmap(base_, size_);
    close(fd_);
}

std::size_t Segment::free_bytes() const noexcept {
    std::size_t used = header().used.load(std::memory_order_relaxed);
    return used < size_ ? size_ - used : 0;
}

std::size_t Segment::alloc(std::size_t bytes) {
    std::size_t need = round_up(bytes ? bytes : 1, kFalseSharingRange);
    // relaxed: allocation hands out disjoint ranges; what is placed in them is
    // published to peers by other means (offsets sent through a ring or at
    // start-up).
    uint64_t used = header().used.load(std::memory_order_relaxed);
    do {
        if (need > size_ || used > size_ - need)
            throw OutOfSharedMemory("shared segment has " + std::to_string(size_ - used) + " bytes free, " +
                                    std::to_string(bytes) + " were asked for; create the segment larger");
    } while (!header().used.compare_exchange_weak(used, used + need, std::memory_order_relaxed));
    return std::size_t(used);
}

char* Segment::at(std::size_t offset, std::size_t bytes) const {
    std::size_t used = header().used.load(std::memory_order_relaxed);
    if (offset < sizeof(SegmentHeader) || offset > used || bytes > used - offset)
        throw std::invalid_argument("offset " + std::to_string(offset) + " with " + std::to_string(bytes) +
                                    " bytes lies outside the segment's allocated range");
    return base_ + offset;
}

}  // namespace mizu
