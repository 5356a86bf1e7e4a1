// The process's limit on open files, which shared memory uses up: each
// segment a process maps holds a descriptor, and a task's arrays cross to
// a worker as descriptors, up to 1,000 at once, where many systems' soft
// limit is 1,024.
#pragma once

#include <algorithm>
#include <cerrno>
#include <sys/resource.h>

namespace mizu {

// Raises this process's soft limit on open files (RLIMIT_NOFILE) to
// 16,384, or to its hard limit if that is lower; true if it raised it.
// Called where descriptors run short (EMFILE, ETOOMANYREFS), and before
// descriptors are received, whose excess the kernel drops.
// errno is left as it was, for the caller's error.
inline bool raise_open_files_limit() noexcept {
    constexpr rlim_t wanted = 16384;
    int error = errno;
    rlimit limit;
    bool raised = getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY &&
                  limit.rlim_cur < wanted && limit.rlim_cur < limit.rlim_max;
    if (raised) {
        limit.rlim_cur = limit.rlim_max == RLIM_INFINITY ? wanted : std::min(limit.rlim_max, wanted);
        raised = setrlimit(RLIMIT_NOFILE, &limit) == 0;
    }
    errno = error;
    return raised;
}

// The soft limit on open files, for an error's text; 0 if unlimited or unknown.
inline unsigned long long open_files_limit() noexcept {
    rlimit limit;
    if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return 0;
    return limit.rlim_cur;
}

}  // namespace mizu
