#include "exit_bell.hpp"

#include <cerrno>
#include <cstring>
#include <new>
#include <system_error>
#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include "messages.hpp"
#include "wire.hpp"

namespace mizu {

ExitBell::ExitBell(AnyRing& results) : results_(results) {
    if (pipe(wake_) != 0) throw std::system_error(errno, std::generic_category(), "pipe");
    for (int fd : wake_) {
        fcntl(fd, F_SETFD, FD_CLOEXEC);
        fcntl(fd, F_SETFL, O_NONBLOCK);
    }
    try {
        thread_ = std::thread([this] { run(); });
    } catch (...) {
        close(wake_[0]);
        close(wake_[1]);
        throw;
    }
}

ExitBell::~ExitBell() {
    {
        std::lock_guard<std::mutex> lock(mu_);
        stop_ = true;
    }
    wake();
    thread_.join();
    close(wake_[0]);
    close(wake_[1]);
}

void ExitBell::watch(uint16_t index, pid_t pid) {
    auto peer = std::make_unique<PeerWatch>(pid);
    {
        std::lock_guard<std::mutex> lock(mu_);
        for (Watched& w : watched_)
            if (w.index == index) w.current = false;
        watched_.push_back(Watched{index, std::move(peer), true});
    }
    wake();
}

void ExitBell::wake() noexcept {
    char c = 1;
    // A full pipe already holds a wake-up the thread has not read.
    while (write(wake_[1], &c, 1) < 0 && errno == EINTR) {
    }
}

void ExitBell::ring(uint16_t index) noexcept {
    // Whoever collects looks at the workers at least once a slice: the
    // notice only hastens that, so a full ring, or no memory for the
    // message, goes without it.
    try {
        messages::ResultHeader header = messages::result_header(index, 0, messages::Status::gone, 0.0);
        wire::Writer w;
        std::memcpy(w.put_header(sizeof header), &header, sizeof header);
        w.begin_message();
        w.put_none();
        Reservation res;
        if (!results_.begin_push(uint32_t(w.size()), res)) return;
        std::memcpy(res.data(), w.data(), w.size());
        results_.end_push(res);
    } catch (const std::bad_alloc&) {
    }
}

void ExitBell::run() noexcept {
    // Out of memory, the thread ends: whoever collects still looks at the
    // workers once a slice.
    try {
        serve();
    } catch (const std::bad_alloc&) {
    }
}

void ExitBell::serve() {
    std::vector<pollfd> fds;
    std::vector<const PeerWatch*> polled;
    for (;;) {
        fds.assign(1, pollfd{wake_[0], POLLIN, 0});
        polled.clear();
        {
            std::lock_guard<std::mutex> lock(mu_);
            if (stop_) return;
            // Only this thread erases, and not while it polls: the
            // descriptors polled stay open until it looks again.
            std::vector<Watched> kept;
            for (Watched& w : watched_) {
                if (!w.current) continue;
                kept.push_back(std::move(w));
                if (kept.back().peer->fd() < 0) continue;
                fds.push_back(pollfd{kept.back().peer->fd(), POLLIN, 0});
                polled.push_back(kept.back().peer.get());
            }
            watched_.swap(kept);
        }
        int r = poll(fds.data(), nfds_t(fds.size()), -1);
        if (r < 0) {
            if (errno == EINTR) continue;
            return;
        }
        if (fds[0].revents) {
            char buf[64];
            while (read(wake_[0], buf, sizeof buf) > 0) {
            }
        }
        std::lock_guard<std::mutex> lock(mu_);
        for (std::size_t i = 1; i < fds.size(); ++i) {
            if (!fds[i].revents) continue;
            for (Watched& w : watched_) {
                if (w.peer.get() != polled[i - 1] || !w.current) continue;
                ring(w.index);
                w.current = false;
            }
        }
    }
}

}  // namespace mizu
