import concurrent.futures as cf
import multiprocessing
import os
import platform
import signal
import sys
import time

# The tests fork, and numpy's BLAS would otherwise start threads in this
# process as soon as a test imports it: forking a multi-threaded process is
# what Python 3.12 warns about.
for _blas_threads in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_blas_threads, "1")

import pytest
from hypothesis import HealthCheck, settings

import mizu

# The tests, and the processes they start, import helpers.py and the child
# programs by name: helpers.IMPORT_PATH says from where.
sys.path.insert(0, os.path.dirname(__file__))

from helpers import (IMPORT_PATH, Client, process_group, require, shm_entries,  # noqa: E402
                     without_tblib_reducers)

sys.path[:0] = [folder for folder in IMPORT_PATH if folder not in sys.path]

settings.register_profile(
    "default", deadline=None, suppress_health_check=[HealthCheck.too_slow], max_examples=60
)
settings.register_profile(
    "thorough", deadline=None, suppress_health_check=[HealthCheck.too_slow], max_examples=600
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


# How many tests pytest_collection_modifyitems dropped for this Python.
_DROPPED = pytest.StashKey[int]()


def pytest_configure(config):
    config.addinivalue_line("markers", "stdlib_oracle_from(version): the stdlib's pool is this test's oracle only "
                            "from that Python on (before, it lacks the feature or hangs); its cases drop out before")
    config.addinivalue_line("markers", "python_from(version): what the test exercises is new in that Python (3.14's "
                            "terminate_workers, say); before it, the test drops out rather than skips")


def pytest_collection_finish(session):
    """Collecting tests/dask imports dask.dataframe, which imports distributed once it is installed: its mark on
    pickling goes again (helpers.without_tblib_reducers); tests/dask/conftest.py removes it after each of its
    modules too."""
    without_tblib_reducers()


def pytest_collection_modifyitems(config, items):
    dropped = []
    for item in items:
        marker = item.get_closest_marker("stdlib_oracle_from")
        params = getattr(item, "callspec", None)
        if marker and params and params.params.get("executor_type") == "stdlib" and sys.version_info < marker.args[0]:
            dropped.append(item)
        marker = item.get_closest_marker("python_from")
        if marker and sys.version_info < marker.args[0]:
            dropped.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if item not in dropped]
    config.stash[_DROPPED] = len(dropped)


def pytest_terminal_summary(terminalreporter, config):
    dropped = config.stash.get(_DROPPED, 0)
    if dropped:
        terminalreporter.write_line(f"{dropped} deselected by this suite: what they test is newer than Python "
                                    f"{platform.python_version()} (the markers python_from, stdlib_oracle_from)")


@pytest.fixture(params=[m for m in ("fork", "forkserver", "spawn") if m in multiprocessing.get_all_start_methods()])
def start_method(request):
    """Each multiprocessing start method this platform has."""
    return request.param


@pytest.fixture(params=["mizu", "stdlib"])
def executor_type(request):
    """mizu's ProcessPoolExecutor, then the stdlib's as the oracle."""
    return mizu.ProcessPoolExecutor if request.param == "mizu" else cf.ProcessPoolExecutor


@pytest.fixture
def pool(executor_type, start_method):
    """A two-worker pool of executor_type started with start_method."""
    with executor_type(2, mp_context=multiprocessing.get_context(start_method)) as ex:
        yield ex


@pytest.fixture
def mizu_pool():
    """A two-worker pool of mizu's alone, for what the stdlib's lacks (a map's progress bar, say)."""
    with mizu.ProcessPoolExecutor(2) as ex:
        yield ex


@pytest.fixture(params=["asyncio", "uvloop"])
def run_loop(request):
    """run_loop(coroutine): its value, run to the end in a new event loop of asyncio's own, then of uvloop's."""
    if request.param == "asyncio":
        import asyncio

        return asyncio.run
    try:
        import uvloop
    except ImportError:
        require(False, "uvloop is not installed (pip install uvloop, in the test extra)")
    return uvloop.run


@pytest.fixture(params=["native", "portable"])
def waiter(request):
    """Each wait backend in turn; the portable one is what platforms without an address wait use."""
    return request.param


@pytest.fixture(autouse=True)
def leaves_nothing_behind(request):
    """Every test ends with no new /dev/shm entry and no live child process.

    The stdlib's pool, run as the oracle, is excused /dev/shm: a broken pool
    of it leaves its semaphores for the resource tracker to remove later.
    """
    before = shm_entries()
    yield
    deadline = time.monotonic() + 10
    while multiprocessing.active_children() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not multiprocessing.active_children(), "a test left child processes running"
    params = getattr(request.node, "callspec", None)
    if params is None or params.params.get("executor_type") != "stdlib":
        assert shm_entries() - before == set(), "a test left entries in /dev/shm"


@pytest.fixture
def client(tmp_path):
    """Starts Client(program, args, env=...) in tmp_path as start(program, *args, env=...); kills whatever is left of
    its process group and its workers at the end.

    Its temporary files go to tmp_path too: a client killed by SIGKILL
    cannot remove its multiprocessing folder (pymp-*).
    """
    started = []
    temp = tmp_path / "tmp"
    temp.mkdir()

    def start(program, *args, env=None, **kwargs):
        started.append(Client(program, args, tmp_path, env={"TMPDIR": str(temp), **(env or {})}, **kwargs))
        return started[-1]

    yield start
    for c in started:
        for pid in process_group(c.pid) + c.workers:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        c.proc.kill()
        c.proc.wait(60)
        for stream in (c.proc.stdout, c.proc.stderr):
            stream.close()
