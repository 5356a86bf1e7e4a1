#include "cpus.hpp"

#include <thread>
#if defined(__linux__)
#include <sched.h>
#endif

namespace mizu {

unsigned usable_cpus() noexcept {
#if defined(__linux__)
    cpu_set_t mask;
    if (sched_getaffinity(0, sizeof mask, &mask) == 0) {
        int count = CPU_COUNT(&mask);
        if (count > 0) return unsigned(count);
    }
#endif
    unsigned cores = std::thread::hardware_concurrency();
    return cores ? cores : 1;
}

}  // namespace mizu
