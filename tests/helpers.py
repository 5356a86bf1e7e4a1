"""What the tests share beside conftest.py's fixtures: paths, child interpreters' environment, leftovers to look for.

Like children.py (the child processes' entry points), it is imported by
name: conftest.py puts this folder on sys.path, and child_environ() puts it
on a child interpreter's PYTHONPATH.
"""

import os

import pytest

TESTS = os.path.dirname(os.path.abspath(__file__))
BENCHMARKS = os.path.join(os.path.dirname(TESTS), "benchmarks")


def child_environ(env=None):
    """os.environ with env, and this folder first on PYTHONPATH: a child interpreter imports children by name."""
    environ = dict(os.environ, **(env or {}))
    environ["PYTHONPATH"] = os.pathsep.join(filter(None, [TESTS, environ.get("PYTHONPATH")]))
    return environ


def require(ready, missing, module=False):
    """Skip the calling test (module: the calling module) when what it needs is missing (`missing` says what);
    under .ci/run fail instead.

    .ci/run sets MIZU_TESTS_NEED_ALL=1: CI has everything (R, root), and a
    test skipped there would pass for one that never ran.
    """
    if ready:
        return
    if os.environ.get("MIZU_TESTS_NEED_ALL") == "1":
        pytest.fail(f"{missing}, and .ci/run needs every test to run")
    pytest.skip(missing, allow_module_level=module)


def shm_entries():
    """/dev/shm's entries, but multiprocessing's semaphores: mizu makes none, and any other Python process on the
    machine may create and remove them at any time."""
    try:
        return {name for name in os.listdir("/dev/shm") if not name.startswith("sem.mp-")}
    except FileNotFoundError:
        return set()


def mapped_segments():
    """How many mappings of mizu's memfd segments this process has (Linux)."""
    with open("/proc/self/maps") as maps:
        return sum("memfd:mizu" in line for line in maps)
