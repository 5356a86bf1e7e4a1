"""What the tests share beside conftest.py's fixtures: paths, child interpreters' environment, leftovers to look for.

Like children.py (the child processes' entry points), it is imported by
name: conftest.py puts this folder on sys.path, and child_environ() puts it
on a child interpreter's PYTHONPATH.
"""

import os

TESTS = os.path.dirname(os.path.abspath(__file__))
BENCHMARKS = os.path.join(os.path.dirname(TESTS), "benchmarks")


def child_environ(env=None):
    """os.environ with env, and this folder first on PYTHONPATH: a child interpreter imports children by name."""
    environ = dict(os.environ, **(env or {}))
    environ["PYTHONPATH"] = os.pathsep.join(filter(None, [TESTS, environ.get("PYTHONPATH")]))
    return environ


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
