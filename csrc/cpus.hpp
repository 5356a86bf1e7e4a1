// How many CPUs this process may run on: the one count that the spin gate,
// the pool's spin decisions and Python's mizu._core.usable_cpus() share.
#pragma once

namespace mizu {

// The CPUs in this process's affinity mask on Linux (a cgroup cpuset or
// `taskset` shrinks it; std::thread::hardware_concurrency() does not see
// that), the machine's hardware threads elsewhere; at least 1.
unsigned usable_cpus() noexcept;

}  // namespace mizu
