// Learning that a peer process has died, without a race against pid reuse:
// a pidfd on Linux 5.3+, a kqueue EVFILT_PROC watch on macOS, and kill(pid, 0)
// where neither exists.
#pragma once

#include <cstddef>
#include <sys/types.h>

namespace mizu {

class PeerWatch {
public:
    // Throws std::system_error when pid names no process.
    explicit PeerWatch(pid_t pid);
    ~PeerWatch();
    PeerWatch(const PeerWatch&) = delete;
    PeerWatch& operator=(const PeerWatch&) = delete;

    // True until the process has exited (a zombie counts as exited where a
    // pidfd or kqueue is available). One syscall, no blocking.
    bool alive() const noexcept;

    // Blocks at most timeout_ns (forever if negative) for the process to
    // exit; true once it has.
    bool wait_exit(long long timeout_ns) const noexcept;

    // Whether any of peers[0, n) has exited: one poll over all their pidfds
    // (or kqueues), where asking each would cost a system call apiece.
    static bool any_exited(const PeerWatch* const* peers, std::size_t n);

    pid_t pid() const noexcept { return pid_; }
    // The descriptor that poll() finds readable once the process has exited,
    // or -1 where there is none (the kill(pid, 0) fallback).
    int fd() const noexcept { return fd_; }

    // Starts a thread that kills this process (SIGKILL) once `pid` has
    // exited, whatever the other threads are doing: it needs no lock and no
    // interpreter, so starting it waits for nothing. A signal where _exit
    // would do the same: R CMD check refuses compiled code that calls the C
    // library's exits, lest a package end the R session of a user who loaded
    // it, and this ends only a worker whose client is gone. Throws
    // std::system_error when pid names no process or no thread can start.
    static void die_with(pid_t pid);

    // Blocks until the peer at the other end of the stream socket socket_fd
    // has written 4 bytes there, and returns them as a little-endian
    // number, once it has written one byte back (the acknowledgement);
    // returns -1 once that end is shut down or closed, or once this
    // process has exited (a child it forked may keep its end open). A signal
    // does not end the wait. How a spare waits for the index of the worker
    // it is to be. Throws std::system_error when poll, recv or send fail.
    long wait_for_index(int socket_fd) const;

private:
    pid_t pid_;
    int fd_;  // pidfd or kqueue, -1 for the kill(pid, 0) fallback
};

}  // namespace mizu
