"""The CPUs this process may run on (csrc/cpus.hpp)."""

from mizu.includes.cpus cimport usable_cpus as _usable_cpus

__all__ = ["usable_cpus"]


def usable_cpus():
    """usable_cpus()

    The CPUs this process may run on: its affinity mask's count on Linux,
    the machine's hardware threads elsewhere; at least 1. The rings' spin
    gate counts the same.
    """
    return _usable_cpus()
