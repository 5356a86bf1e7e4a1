#include "liveness.hpp"

#include <cerrno>
#include <climits>
#include <csignal>
#include <memory>
#include <string>
#include <system_error>
#include <thread>
#include <vector>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "spin.hpp"

#if defined(__linux__)
#include <sys/syscall.h>
#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#elif defined(__APPLE__)
#include <sys/event.h>
#endif

namespace mizu {

PeerWatch::PeerWatch(pid_t pid) : pid_(pid), fd_(-1) {
    if (pid <= 0) throw std::system_error(ESRCH, std::generic_category(), "no process with pid " + std::to_string(pid));
#if defined(__linux__)
    fd_ = int(syscall(SYS_pidfd_open, pid, 0));
    if (fd_ >= 0) return;
    if (errno != ENOSYS) throw std::system_error(errno, std::generic_category(), "pidfd_open(" + std::to_string(pid) + ")");
#elif defined(__APPLE__)
    fd_ = kqueue();
    if (fd_ < 0) throw std::system_error(errno, std::generic_category(), "kqueue");
    struct kevent change;
    EV_SET(&change, pid, EVFILT_PROC, EV_ADD | EV_ONESHOT, NOTE_EXIT, 0, nullptr);
    if (kevent(fd_, &change, 1, nullptr, 0, nullptr) == 0) return;
    int err = errno;
    close(fd_);
    fd_ = -1;
    throw std::system_error(err, std::generic_category(), "watching pid " + std::to_string(pid));
#endif
    if (kill(pid, 0) != 0 && errno == ESRCH)
        throw std::system_error(ESRCH, std::generic_category(), "no process with pid " + std::to_string(pid));
}

PeerWatch::~PeerWatch() {
    if (fd_ >= 0) close(fd_);
}

bool PeerWatch::alive() const noexcept { return !wait_exit(0); }

bool PeerWatch::wait_exit(long long timeout_ns) const noexcept {
    if (fd_ < 0) {
        int64_t deadline = timeout_ns < 0 ? kForever : now_ns() + timeout_ns;
        for (;;) {
            if (kill(pid_, 0) != 0 && errno == ESRCH) return true;
            if (now_ns() >= deadline) return false;
            usleep(1000);
        }
    }
    // Both a pidfd and a kqueue with a NOTE_EXIT filter become readable when
    // the process exits, so poll serves both.
    pollfd p{fd_, POLLIN, 0};
    long long ms_wanted = timeout_ns < 0 ? -1 : (timeout_ns + 999999) / 1000000;
    int ms = ms_wanted > INT_MAX ? INT_MAX : int(ms_wanted);
    int r;
    do r = poll(&p, 1, ms);
    while (r < 0 && errno == EINTR);
    return r > 0;
}

void PeerWatch::die_with(pid_t pid) {
    std::thread([watch = std::make_unique<PeerWatch>(pid)] {
        watch->wait_exit(-1);
        kill(getpid(), SIGKILL);
    }).detach();
}

bool PeerWatch::any_exited(const PeerWatch* const* peers, std::size_t n) {
    std::vector<pollfd> fds;
    fds.reserve(n);
    for (std::size_t i = 0; i < n; ++i) {
        if (peers[i]->fd_ >= 0)
            fds.push_back(pollfd{peers[i]->fd_, POLLIN, 0});
        else if (peers[i]->wait_exit(0))
            return true;
    }
    if (fds.empty()) return false;
    int r;
    do r = poll(fds.data(), nfds_t(fds.size()), 0);
    while (r < 0 && errno == EINTR);
    return r > 0;
}

long PeerWatch::wait_for_index(int socket_fd) const {
    pollfd fds[2] = {{socket_fd, POLLIN, 0}, {fd_, POLLIN, 0}};
    const nfds_t n = fd_ >= 0 ? 2 : 1;
    unsigned char bytes[4];
    std::size_t got = 0;
    while (got < sizeof bytes) {
        // Without a descriptor to poll (the kill(pid, 0) fallback), the process is asked once a second.
        int ready = poll(fds, n, n == 2 ? -1 : 1000);
        if (ready < 0) {
            if (errno == EINTR) continue;
            throw std::system_error(errno, std::generic_category(), "poll");
        }
        if (fds[0].revents == 0) {
            if (n == 2 ? fds[1].revents != 0 : !alive()) return -1;
            continue;
        }
        ssize_t r = recv(socket_fd, bytes + got, sizeof bytes - got, 0);
        if (r == 0 || (r < 0 && errno == ECONNRESET)) return -1;
        if (r < 0) {
            // A socket made non-blocking may have nothing yet after all.
            if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
            throw std::system_error(errno, std::generic_category(), "recv");
        }
        got += std::size_t(r);
    }
    // The acknowledgement tells the peer that this process was alive once it
    // had its index: a spare killed before, even one killed too recently to
    // have closed its end yet, never sends it (KeepsSpare.launch).
    const unsigned char ack = 1;
    for (;;) {
        ssize_t w = send(socket_fd, &ack, 1, MSG_NOSIGNAL);
        if (w == 1) break;
        if (w < 0 && (errno == EPIPE || errno == ECONNRESET)) return -1;
        if (w < 0 && errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK) {
            throw std::system_error(errno, std::generic_category(), "send");
        }
    }
    return long(bytes[0]) | long(bytes[1]) << 8 | long(bytes[2]) << 16 | long(bytes[3]) << 24;
}

}  // namespace mizu
