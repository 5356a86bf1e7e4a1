"""joblib's "mizu" backend, with joblib's own loky backend as the oracle.

Each test runs the same loop under both, unless it is about what only mizu
does (shared memory, its pool's reuse); the loops' tasks are functions of
children.py and joblib_children.py, lambdas and closures.
"""

import multiprocessing
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import children
import joblib_children
from helpers import CTRL_C, child_environ, exit_all, require

try:
    import joblib
    from joblib import Parallel, delayed, parallel_config
except ImportError as exc:
    require(False, f"joblib is not installed ({exc}): pip install joblib", module=True)

import mizu  # noqa: F401  (registers the backend)

BACKENDS = ["mizu", "loky"]


def worker_pids(n_jobs=2, tasks=20, **config):
    with parallel_config(backend="mizu", n_jobs=n_jobs, **config):
        return set(Parallel()(delayed(children.nap_then_pid)(0.02) for _ in range(tasks)))


@pytest.mark.parametrize("backend", BACKENDS)
def test_results_of_functions_lambdas_and_closures_come_back_in_order(backend):
    offset = 11
    with parallel_config(backend=backend, n_jobs=2):
        assert Parallel()(delayed(children.double)(i) for i in range(500)) == [2 * i for i in range(500)]
        assert Parallel()(delayed(lambda v: v + offset)(i) for i in range(50)) == list(range(11, 61))
        assert Parallel(batch_size=7, pre_dispatch="3 * n_jobs")(
            delayed(children.add)(i, b=1, c=2) for i in range(100)) == [i + 3 for i in range(100)]
    assert Parallel(backend=backend, n_jobs=2)(delayed(children.double)(i) for i in range(10)) == \
        [2 * i for i in range(10)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_generators_yield_every_result(backend):
    with parallel_config(backend=backend, n_jobs=2):
        ordered = Parallel(return_as="generator")(delayed(children.double)(i) for i in range(100))
        assert list(ordered) == [2 * i for i in range(100)]
        unordered = Parallel(return_as="generator_unordered")(
            delayed(children.nap)(0.01 * (i % 3)) for i in range(30))
        assert sorted(unordered) == sorted(0.01 * (i % 3) for i in range(30))


@pytest.mark.parametrize("n_jobs", [None, 1, 2, 5, -1, -2, -100])
def test_n_jobs_mean_what_they_mean_for_loky(n_jobs):
    found = {}
    for backend in BACKENDS:
        with parallel_config(backend=backend):
            found[backend] = (joblib.effective_n_jobs(n_jobs), Parallel(n_jobs=n_jobs)._effective_n_jobs())
    assert found["mizu"] == found["loky"]
    with pytest.raises(ValueError, match="n_jobs == 0"), parallel_config(backend="mizu"):
        joblib.effective_n_jobs(0)


def test_one_job_runs_in_the_caller_and_the_configs_n_jobs_is_the_default():
    with parallel_config(backend="mizu"):
        assert Parallel()(delayed(os.getpid)() for _ in range(3)) == [os.getpid()] * 3
    with parallel_config(backend="mizu", n_jobs=2):
        assert os.getpid() not in Parallel()(delayed(children.pid)() for _ in range(10))


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_error_is_raised_with_the_workers_traceback(backend):
    with pytest.raises(ValueError, match="7 is bad") as raised, parallel_config(backend=backend, n_jobs=2):
        Parallel()(delayed(children.fail_at)(i) for i in range(50))
    assert "fail_at" in str(raised.value.__cause__)
    # The loop after the error runs.
    with parallel_config(backend=backend, n_jobs=2):
        assert Parallel()(delayed(children.double)(i) for i in range(20)) == [2 * i for i in range(20)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_timeout_stops_the_stuck_task_and_the_next_loop_runs(backend, tmp_path):
    started = tmp_path / "started"
    with parallel_config(backend=backend, n_jobs=2):
        # The loop to time out finds the pool's workers up: started on its clock, they might not run its task
        # within the 3 s on a loaded machine, and there would be no stuck task to stop.
        assert Parallel()(delayed(children.double)(i) for i in range(4)) == [0, 2, 4, 6]
    start = time.monotonic()
    with pytest.raises(multiprocessing.TimeoutError), parallel_config(backend=backend, n_jobs=2):
        Parallel(timeout=3)(delayed(children.announce_then_nap)(str(started), 60) for _ in range(1))
    assert time.monotonic() - start < 30
    exit_all([int(started.read_text())], 30)
    with parallel_config(backend=backend, n_jobs=2):
        assert Parallel()(delayed(children.double)(i) for i in range(20)) == [2 * i for i in range(20)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_worker_killed_mid_loop_is_named_and_the_next_loop_runs(backend):
    with pytest.raises(Exception, match="terminated abruptly|killed|SIGKILL") as raised, \
            parallel_config(backend=backend, n_jobs=2):
        Parallel()(delayed(joblib_children.kill_self_at)(i) for i in range(20))
    if backend == "mizu":
        assert ("exit code -9 (SIGKILL) while running mizu._joblib._run_batch([joblib_children.kill_self_at("
                in str(raised.value))
    with parallel_config(backend=backend, n_jobs=2):
        assert Parallel()(delayed(children.double)(i) for i in range(20)) == [2 * i for i in range(20)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_initializer_runs_in_each_worker(backend):
    with parallel_config(backend=backend, n_jobs=2, initializer=children.remember, initargs=("ready",)):
        assert Parallel()(delayed(children.initialized)() for _ in range(10)) == [["ready"]] * 10


@pytest.mark.parametrize("backend", BACKENDS)
def test_workers_limit_their_inner_threads(backend, monkeypatch):
    with parallel_config(backend=backend, n_jobs=2, inner_max_num_threads=3):
        assert set(Parallel()(delayed(joblib_children.environ)("OMP_NUM_THREADS") for _ in range(4))) == {"3"}
    for variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        monkeypatch.delenv(variable, raising=False)
    with parallel_config(backend=backend, n_jobs=2):
        found = set(Parallel()(delayed(joblib_children.environ)("OPENBLAS_NUM_THREADS") for _ in range(4)))
    assert found == {str(max((os.cpu_count() or 1) // 2, 1))}


@pytest.mark.parametrize("backend", BACKENDS)
def test_prefer_and_require_hints_choose_as_for_loky(backend):
    with parallel_config(backend=backend, n_jobs=2):
        assert Parallel(prefer="threads")(delayed(os.getpid)() for _ in range(4)) != [os.getpid()] * 4
        assert Parallel(require="sharedmem")(delayed(os.getpid)() for _ in range(4)) == [os.getpid()] * 4
    assert Parallel(backend=backend, n_jobs=2, prefer="threads")(delayed(children.pid)() for _ in range(4)) \
        != [os.getpid()] * 4


@pytest.mark.parametrize("backend", BACKENDS)
def test_progress_is_printed_with_verbose(backend, capfd):
    with parallel_config(backend=backend, n_jobs=2):
        Parallel(verbose=10)(delayed(children.double)(i) for i in range(20))
    err = capfd.readouterr().err
    # joblib prints its "finished" line from the callback of the last batch, and
    # only if its dispatching loop has ended by then: a loop this short may lack it
    done = [int(n) for n in re.findall(r"Done +(\d+) (?:tasks|out of +20)", err)]
    assert "Using backend" in err and done and all(1 <= n <= 20 for n in done)
    assert ("MizuBackend" in err) == (backend == "mizu")


def test_a_task_can_run_a_nested_mizu_loop():
    with parallel_config(backend="mizu", n_jobs=2):
        got = Parallel()(delayed(joblib_children.nested_sum)(i) for i in range(4))
    assert got == [sum(2 * j for j in range(i * 10)) for i in range(4)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_loop_in_a_daemonic_process_runs_in_it(backend):
    with multiprocessing.get_context("fork").Pool(1) as pool:
        found = pool.apply(joblib_children.joblib_loop_pids, (backend,))
    assert found["n_jobs"] == 1 and found["pids"] == {found["pid"]} and "n_jobs=1" in found["warning"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_loop_nested_in_a_thread_runs_in_it_with_a_warning(backend):
    """A loop inside a call of a threading loop: in that thread, n_jobs=1, with a warning that says so."""
    import warnings

    def inner(_):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            pids = set(Parallel(backend=backend, n_jobs=2)(delayed(os.getpid)() for _ in range(4)))
        return pids, [str(w.message) for w in caught]

    found = Parallel(backend="threading", n_jobs=2)(delayed(inner)(i) for i in range(2))
    for pids, warned in found:
        assert pids == {os.getpid()} and len(warned) == 1 and "n_jobs=1" in warned[0], found


def test_the_context_of_parallel_config_chooses_the_start_method(monkeypatch):
    """parallel_config's context starts the workers, over the default context that Parallel passes: under
    fork they inherit the caller's state, under spawn and forkserver they do not."""
    monkeypatch.setattr(joblib_children, "SHARED", "the caller's")
    for method, inherited in [("fork", "the caller's"), ("spawn", None), ("forkserver", None)]:
        with parallel_config(backend="mizu", n_jobs=2, context=multiprocessing.get_context(method)):
            assert Parallel()(delayed(joblib_children.shared_value)(i) for i in range(4)) == [inherited] * 4, method


def test_an_option_the_backend_does_not_take_is_a_type_error_naming_it():
    with pytest.raises(TypeError, match="the mizu backend takes no argument 'bogus'; it takes context, "):
        with parallel_config(backend="mizu", n_jobs=2, bogus=1):
            Parallel()(delayed(children.double)(i) for i in range(4))


def test_a_loop_runs_while_another_holds_the_pool_with_other_arguments():
    """Each Parallel(backend="mizu") has a backend of its own; the second loop gets a pool of its own."""
    first = Parallel(backend="mizu", n_jobs=2, return_as="generator")(delayed(children.double)(i) for i in range(50))
    assert next(first) == 0
    assert Parallel(backend="mizu", n_jobs=3)(delayed(children.double)(i) for i in range(50)) == \
        [2 * i for i in range(50)]
    assert list(first) == [2 * i for i in range(1, 50)]
    # The shared pool is still the first loop's, and serves a loop with its arguments.
    assert Parallel(backend="mizu", n_jobs=2)(delayed(children.double)(i) for i in range(5)) == [0, 2, 4, 6, 8]


def test_an_error_in_one_loop_leaves_a_loop_of_another_thread_running():
    import threading

    found = {}

    def other():
        with parallel_config(backend="mizu", n_jobs=2):
            found["other"] = Parallel()(delayed(children.nap)(0.05) for _ in range(40))

    with parallel_config(backend="mizu", n_jobs=2):
        assert Parallel()(delayed(children.double)(i) for i in range(4)) == [0, 2, 4, 6]
        thread = threading.Thread(target=other)
        thread.start()
        with pytest.raises(ValueError, match="7 is bad"):
            Parallel()(delayed(children.fail_at)(i) for i in range(50))
        thread.join(120)
    assert found["other"] == [0.05] * 40


def test_the_pool_is_reused_while_the_arguments_stay_the_same():
    first = worker_pids()
    assert worker_pids() == first
    assert worker_pids(n_jobs=2, inner_max_num_threads=2) & first == set()


def test_arrays_go_through_shared_memory_not_the_memmapping_folder(tmp_path):
    big = np.arange(1 << 21, dtype=np.float64)   # 16 MB, over joblib's 1 MB memmapping threshold
    with parallel_config(backend="mizu", n_jobs=2):
        assert Parallel()(delayed(children.in_arena)(big) for _ in range(4)) == [True] * 4
        results = Parallel()(delayed(np.negative)(big) for _ in range(4))
    for result in results:
        np.testing.assert_array_equal(result, -big)
        assert mizu.arena_block(result) is not None
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_large_argument_is_read_only_in_the_workers_unless_asked(backend):
    big = np.zeros(1 << 18)   # 2 MB, over max_nbytes
    with parallel_config(backend=backend, n_jobs=2):
        with pytest.raises(ValueError, match="read-only"):
            Parallel()(delayed(joblib_children.fill_then_first)(big, i) for i in range(4))
        assert Parallel(max_nbytes=None)(delayed(joblib_children.fill_then_first)(big, i) for i in range(4)) == [0, 1, 2, 3]
        assert Parallel(mmap_mode="r+")(delayed(joblib_children.fill_then_first)(big, 7) for _ in range(4)) == [7] * 4
        assert Parallel(mmap_mode="w+")(delayed(joblib_children.fill_then_first)(big, 8) for _ in range(4)) == [8] * 4
    assert not big.any(), "the caller's array is never written"


def test_a_large_argument_goes_to_the_workers_once_per_loop():
    big = np.arange(1 << 18, dtype=np.float64)
    small = np.arange(100, dtype=np.float64)
    with parallel_config(backend="mizu", n_jobs=2):
        blocks = Parallel()(delayed(joblib_children.block_of)(big) for _ in range(8))
        assert len(set(blocks)) == 1 and None not in blocks
        assert Parallel()(delayed(joblib_children.block_of)(small) for _ in range(2)) == [None, None]
        inside = Parallel()(delayed(joblib_children.block_inside)(wrap(big)) for wrap in _HOLDERS.values()
                            for _ in range(2))
        assert len(set(inside)) == 1 and None not in inside


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_large_array_that_a_closure_captures_goes_once_per_loop_read_only_as_loky_sends_it(backend):
    big = np.arange(1 << 18, dtype=np.float64)

    def look(_):
        return joblib_children.block_of(big), joblib_children.writeable_inside(big), float(big[-1])

    with parallel_config(backend=backend, n_jobs=2):
        blocks, writeable, last = zip(*Parallel()(delayed(look)(i) for i in range(8)))
    assert not any(writeable) and set(last) == {float(big[-1])}
    if backend == "mizu":
        assert len(set(blocks)) == 1 and None not in blocks


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_list_holding_a_large_array_passed_twice_to_a_call_is_one_list_in_it(backend):
    held = [np.zeros(1 << 18)]
    with parallel_config(backend=backend, n_jobs=2):
        assert Parallel()(delayed(joblib_children.same)(held, held) for _ in range(2)) == [True, True]


_HOLDERS = {"list": lambda a: [1, a], "tuple": lambda a: ("x", (a,)), "dict": lambda a: {"data": a},
            "keyword": lambda a: a, "object": joblib_children.Holder, "deep list": lambda a: [[[[[[a]]]]]]}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("holder", list(_HOLDERS))
def test_a_large_array_inside_an_argument_is_read_only_as_loky_makes_it(backend, holder):
    big = np.zeros(1 << 18)
    wrap = _HOLDERS[holder]
    with parallel_config(backend=backend, n_jobs=2):
        if holder == "keyword":
            calls = (delayed(joblib_children.writeable_inside)(held=big) for _ in range(2))
        else:
            calls = (delayed(joblib_children.writeable_inside)(wrap(big)) for _ in range(2))
        assert Parallel()(calls) == [False, False]


def _pandas():
    try:
        import pandas
    except ImportError as exc:
        require(False, f"pandas is not installed ({exc}): pip install pandas")
    return pandas


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", ["DataFrame", "Series"])
def test_a_large_pandas_argument_is_read_only_in_the_workers_unless_asked(backend, kind):
    pd = _pandas()
    data = np.zeros((1 << 16, 4))   # 2 MB, over max_nbytes
    value = pd.DataFrame(data, columns=list("abcd")) if kind == "DataFrame" else pd.Series(data.ravel())
    with parallel_config(backend=backend, n_jobs=2):
        with pytest.raises(ValueError, match="read-only"):
            Parallel()(delayed(joblib_children.set_first)(value, i) for i in range(4))
        assert Parallel(max_nbytes=None)(delayed(joblib_children.set_first)(value, i) for i in range(4)) == [0, 1, 2, 3]
        assert Parallel(mmap_mode="r+")(delayed(joblib_children.set_first)(value, 7) for _ in range(4)) == [7] * 4
    assert not value.to_numpy().any(), "the caller's frame is never written"


def test_a_large_pandas_argument_goes_to_the_workers_once_per_loop():
    pd = _pandas()
    frame = pd.DataFrame(np.arange(1 << 18, dtype=np.float64).reshape(-1, 4), columns=list("abcd"))   # 2 MB
    series = pd.Series(np.arange(1 << 18, dtype=np.float64))
    with parallel_config(backend="mizu", n_jobs=2):
        blocks = Parallel()(delayed(joblib_children.block_inside)(value) for value in [frame, series] * 4)
    assert None not in blocks and len(set(blocks[::2])) == 1 and len(set(blocks[1::2])) == 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_large_memmap_argument_keeps_its_mode_in_the_workers_as_loky_keeps_it(backend, tmp_path):
    path = tmp_path / "data.npy"
    np.save(path, np.zeros(1 << 18))   # 2 MB, over max_nbytes
    with parallel_config(backend=backend, n_jobs=2):
        read_only = np.load(path, mmap_mode="r")
        with pytest.raises(ValueError, match="read-only"):
            Parallel()(delayed(joblib_children.fill_then_first)(read_only, i) for i in range(4))
        # Copy-on-write: each batch's writes are its own; the calls of one batch share the batch's copy.
        private = np.load(path, mmap_mode="c")
        assert Parallel(batch_size=1)(delayed(joblib_children.add_then_first)(private, 1) for _ in range(6)) == [1] * 6
        assert Parallel(batch_size=2)(delayed(joblib_children.add_then_first)(private, 1) for _ in range(4)) == [1, 2] * 2
        writable = np.load(path, mmap_mode="r+")
        assert Parallel()(delayed(joblib_children.fill_then_first)(writable, 3) for _ in range(4)) == [3] * 4


def test_a_memmap_whose_file_cannot_serve_goes_as_the_caller_sees_it(tmp_path):
    path = tmp_path / "data.npy"
    np.save(path, np.zeros(1 << 18))   # 2 MB, over max_nbytes
    private = np.load(path, mmap_mode="c")
    private[0] = 5   # in the caller's memory only, where loky's workers would read the file's 0
    writable, read_only = np.load(path, mmap_mode="r+"), np.load(path, mmap_mode="r")
    os.unlink(path)
    with parallel_config(backend="mizu", n_jobs=2):
        for options in ({}, {"mmap_mode": "r+"}):
            for value in (private, np.asarray(private), private[:]):
                # Each batch gets a copy of its own, the caller's writes in it.
                assert Parallel(batch_size=1, **options)(
                    delayed(joblib_children.add_then_first)(value, 1) for _ in range(2)) == [6, 6]
        for value in (read_only, np.asarray(read_only)):
            with pytest.raises(ValueError, match="read-only"):
                Parallel()(delayed(joblib_children.fill_then_first)(value, 1) for _ in range(2))
        assert Parallel()(delayed(joblib_children.writeable_inside)(value) for value in
                          (writable, np.asarray(writable), writable[5:])) == [True] * 3
        blocks = Parallel()(delayed(joblib_children.block_inside)(value) for value in [read_only, read_only[10:]] * 4)
    assert None not in blocks and len(set(blocks[::2])) == 1 and len(set(blocks[1::2])) == 1, "once per loop"
    assert private[0] == 5


MEMMAP_VIEWS = {"itself": lambda m: m, "a slice": lambda m: m[5:], "numpy.asarray": np.asarray,
                "a small slice": lambda m: m[:10], "a column": lambda m: m.reshape(-1, 4)[:, 1],
                "windows": lambda m: np.lib.stride_tricks.as_strided(m, (500, 1000), (8 * 500, 8)),
                "reversed, strided": lambda m: m[::-2], "transposed": lambda m: m.reshape(-1, 4).T}
# loky's worker reads the wrong bytes of these (it places the first item at the lowest byte the view spans, in
# the memmap's order), or dies of SIGSEGV.
LOKY_MISREADS = {"reversed, strided", "transposed"}


@pytest.mark.parametrize(("view", "backend"), [(view, backend) for view in sorted(MEMMAP_VIEWS) for backend in BACKENDS
                                               if backend == "mizu" or view not in LOKY_MISREADS])
def test_a_memmap_argument_maps_its_file_in_the_workers_as_loky_maps_it(view, backend, tmp_path):
    path = tmp_path / "data.npy"
    np.save(path, np.arange(1 << 18, dtype=np.float64))
    array = MEMMAP_VIEWS[view](np.load(path, mmap_mode="r+"))
    with parallel_config(backend=backend, n_jobs=2):
        found = Parallel()(delayed(joblib_children.mark_first)(array, -7) for _ in range(1))
    assert found == [(str(path), float(MEMMAP_VIEWS[view](np.arange(1 << 18, dtype=np.float64)).sum()))]
    assert array.flat[0] == -7 and (np.load(path) == -7).sum() == 1, "the worker's write reaches the file"


@pytest.mark.parametrize(("view", "backend"), [(view, backend) for view in sorted(MEMMAP_VIEWS) for backend in BACKENDS
                                               if backend == "mizu" or view not in LOKY_MISREADS])
def test_a_result_that_a_memmap_maps_goes_back_as_a_mapping_of_its_file_as_loky_sends_it(view, backend, tmp_path):
    path = tmp_path / "data.npy"
    np.save(path, np.arange(1 << 18, dtype=np.float64))
    with parallel_config(backend=backend, n_jobs=2):
        [result] = Parallel()(delayed(joblib_children.view_of_file)(str(path), "r+", MEMMAP_VIEWS[view])
                              for _ in range(1))
    expected = MEMMAP_VIEWS[view](np.arange(1 << 18, dtype=np.float64))
    np.testing.assert_array_equal(result, expected)
    assert joblib_children.mark_first(result, -7) == (str(path), float(expected.sum()))
    assert (np.load(path) == -7).sum() == 1, "the caller's write reaches the file"


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_result_that_a_read_only_memmap_maps_goes_back_read_only_as_loky_sends_it(backend, tmp_path):
    path = tmp_path / "data.npy"
    np.save(path, np.arange(1000, dtype=np.float64))
    with parallel_config(backend=backend, n_jobs=2):
        [result] = Parallel()(delayed(joblib_children.view_of_file)(str(path), "r", lambda m: m[5:])
                              for _ in range(1))
    np.testing.assert_array_equal(result, np.arange(5.0, 1000.0))
    assert not result.flags.writeable
    assert isinstance(result, np.memmap) and result.filename == str(path)


def test_a_result_of_a_copy_on_write_memmap_comes_back_as_the_worker_saw_it(tmp_path):
    """Its own write included, where loky's caller maps the file again and reads [0, 1, 2, 3]."""
    path = tmp_path / "data.npy"
    np.save(path, np.arange(1000, dtype=np.float64))
    with parallel_config(backend="mizu", n_jobs=2):
        [result] = Parallel()(delayed(joblib_children.marked_copy_on_write)(str(path)) for _ in range(1))
    assert result.tolist() == [-5, 1, 2, 3]
    assert np.load(path)[0] == 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_memmap_argument_maps_its_file_whatever_joblib_s_memmapping_options(backend, tmp_path):
    path = tmp_path / "data.npy"
    np.save(path, np.arange(1000, dtype=np.float64))   # under max_nbytes
    array = np.load(path, mmap_mode="r+")[10:]
    with parallel_config(backend=backend, n_jobs=2):
        for mark, options in enumerate([{}, {"max_nbytes": None}, {"mmap_mode": "c"}, {"mmap_mode": "w+"},
                                         {"max_nbytes": 0}], start=1):
            total = float(array.sum())
            assert Parallel(**options)(delayed(joblib_children.mark_first)(array, -mark) for _ in range(1)) == \
                [(str(path), total)], options
            assert array[0] == -mark and np.load(path)[10] == -mark, options


def test_the_backend_is_registered_whatever_is_imported_first(tmp_path):
    folder = tmp_path
    code = ("import sys, mizu; assert 'joblib' not in sys.modules; import joblib.parallel; "
            "print('mizu' in joblib.parallel.BACKENDS)")
    reloaded = ("import importlib, mizu; importlib.reload(mizu); import joblib.parallel; "
                "print('mizu' in joblib.parallel.BACKENDS and joblib.parallel.__loader__.__class__.__name__ != "
                "'_ThenRegister')")
    # The backend's own module first, as a fresh worker that unpickles a nested loop's task imports it.
    backend_first = "import mizu._joblib; from joblib.parallel import BACKENDS; print('mizu' in BACKENDS)"
    for program in (code, reloaded, "import joblib, mizu; print('mizu' in joblib.parallel.BACKENDS)", backend_first):
        # From a folder of its own: `python -c` puts the current folder first on sys.path, where a source
        # checkout's mizu/ would shadow the installed package.
        done = subprocess.run([sys.executable, "-W", "error::RuntimeWarning", "-c", program], env=child_environ(),
                              capture_output=True, text=True, timeout=120, cwd=folder)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "True"


INTERRUPTED = """
import sys
import children
import mizu
from joblib import Parallel, delayed

print("started", flush=True)
try:
    Parallel(backend="mizu", n_jobs=2)(delayed(children.announce_then_nap)(f"{sys.argv[1]}.{i}", 60) for i in range(4))
except KeyboardInterrupt:
    print("interrupted", flush=True)
    sys.exit(3)
"""


def test_ctrl_c_stops_a_loop_promptly_and_leaves_no_worker(tmp_path):
    started = tmp_path / "task"
    program = subprocess.Popen([sys.executable, "-c", f"{CTRL_C}\n{INTERRUPTED}", str(started)], env=child_environ(),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                               cwd=tmp_path)
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "task.0").exists() or not (tmp_path / "task.1").exists():
            assert time.monotonic() < deadline and program.poll() is None, program.stderr.read()
            time.sleep(0.01)
        workers = [int((tmp_path / f"task.{i}").read_text()) for i in range(2)]
        interrupted = time.monotonic()
        program.send_signal(signal.SIGINT)
        out, err = program.communicate(timeout=30)
        assert time.monotonic() - interrupted < 10
        assert program.returncode == 3, err
        assert out.split() == ["started", "interrupted"]
        exit_all(workers, 30)
    finally:
        program.kill()
        program.wait()
