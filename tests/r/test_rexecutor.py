"""mizu.RExecutor: R processes as workers, checked against Rscript computing the same alone.

Every pool here runs real Rscript workers over the pool's shared memory;
the oracle for a computation is a fresh Rscript given the same numbers
through a file (rsession.r_oracle), and for a conversion the mapping of
doc/user/r.rst.
"""

import asyncio
import concurrent.futures as cf
import io
import os
import re
import subprocess
import time
import traceback
import warnings
from concurrent.futures.process import BrokenProcessPool

import numpy as np
import pytest

import children
import mizu
from helpers import insights_all_up, memfd_holders, memfds_made, memfds_of, shm_entries, wait_until
from mizu._messages import BATCH, FLAT, SINGLE
from mizu._r import package as rpackage
from rsession import r_environment, r_oracle

INT32_MIN = -(2**31)


@pytest.fixture(scope="module")
def r(r_library):
    """A pool of two R workers shared by the tests that leave it as they found it."""
    with mizu.RExecutor(2) as pool:
        yield pool


def _rng(seed=0):
    return np.random.default_rng(seed)


# -- computations, against Rscript ---------------------------------------------------------

COMPUTATIONS = [
    ("function(x, p) quantile(x, p, names = FALSE)", "quantile(x1, 0.9, names = FALSE)", [(1000,)], (0.9,)),
    ("stats::median", "stats::median(x1)", [(999,)], ()),
    ("mean", "mean(x1)", [(10_000,)], ()),
    ("function(x) sum(sqrt(abs(x)))", "sum(sqrt(abs(x1)))", [(100_000,)], ()),
    ("function(x) cumsum(sort(x))", "cumsum(sort(x1))", [(5000,)], ()),
    ("colMeans", "colMeans(x1)", [(300, 7)], ()),
    ("function(a, b) a %*% b", "x1 %*% x2", [(20, 30), (30, 5)], ()),
    ("function(x) apply(x, c(1, 3), max)", "apply(x1, c(1, 3), max)", [(4, 5, 6)], ()),
    ("function(x) var(x)", "var(x1)", [(200, 3)], ()),
    ("function(x) x * 2", "x1 * 2", [(1_000_000,)], ()),
]


@pytest.mark.parametrize("fn, oracle, shapes, extra", COMPUTATIONS, ids=[c[1] for c in COMPUTATIONS])
@pytest.mark.parametrize("where", ["numpy", "arena", "c-order"])
def test_an_r_function_computes_what_rscript_computes(r, r_library, fn, oracle, shapes, extra, where):
    arrays = [_rng(k).standard_normal(shape) for k, shape in enumerate(shapes)]
    if where == "arena":
        arrays = [mizu.asarray(a) for a in arrays]
    elif where == "c-order":
        arrays = [np.ascontiguousarray(a) for a in arrays]
    else:
        arrays = [np.asfortranarray(a) for a in arrays]
    got = r.submit(fn, *arrays, *extra).result()
    want = r_oracle(r_library, oracle, *arrays)
    assert np.array_equal(np.asarray(got, dtype=np.float64).ravel(order="F"), want)


def test_a_result_in_shared_memory_of_any_size_comes_back(r, r_library):
    got = r.submit("function(n) { set.seed(7); rnorm(n) }", 3_000_000).result()
    assert got.shape == (3_000_000,) and mizu.arena_block(got) is not None
    assert np.array_equal(got, r_oracle(r_library, "set.seed(7); rnorm(3e6)"))


@pytest.mark.parametrize("made_in", ["client", "worker"])
def test_a_dropped_array_s_memory_leaves_every_process_of_a_running_pool(r_library, made_in):
    """48 MiB of doubles passed to a call, or returned by one, are held nowhere a few seconds after the client drops
    them: the R worker lets go of its view of an argument, of its mapping, and of its result's segment."""
    n = 6 << 20

    def exchange():
        if made_in == "client":
            data = mizu.zeros(n)
            data[:] = 1
            assert pool.submit("sum", data).result(timeout=60) == n
        else:
            data = pool.submit("function(n) rep(1, n)", n).result(timeout=60)
            assert data.sum() == n
        return data

    with mizu.RExecutor(1) as pool:
        pids = [os.getpid(), pool.submit("Sys.getpid").result(timeout=60)]
        # Each arena keeps its first segment for the next arrays: made here.
        assert pool.submit("sum", mizu.full(1 << 17, 1.0)).result(timeout=60) == 1 << 17
        assert pool.submit("function(n) rep(1, n)", 1 << 17).result(timeout=60).sum() == 1 << 17
        data, taken = memfds_made(pids, exchange)
        assert taken & memfds_of(os.getpid())
        del data
        wait_until(lambda: not memfd_holders(taken), 10, "the array's segment given back", interval=0.05)


@pytest.mark.parametrize("call", ["sum", "function(x) stop('no sum of ', sum(x))"], ids=["returns", "raises"])
def test_new_large_arrays_call_after_call_do_not_fill_the_arena(r_library, monkeypatch, call):
    """Thirty calls, each given a new 40 MB array that the client drops once it has the outcome: 1.2 GB passed
    through an arena of 512 MB, as the views of finished calls give their blocks back, whether they returned or
    raised an R error."""
    small = mizu._arena.Arena(limit=512 << 20)
    monkeypatch.setattr(mizu._arena, "_default", small)
    n = 5 << 20
    with mizu.RExecutor(1) as pool:
        for i in range(30):
            data = mizu.full(n, float(i))
            future = pool.submit(call, data)
            if call == "sum":
                assert future.result(timeout=60) == n * i
            else:
                with pytest.raises(mizu.RError, match=f"no sum of {n * i}"):
                    future.result(timeout=60)
            del data, future
    monkeypatch.undo()
    small.close()


def test_a_forked_child_of_a_worker_gives_back_none_of_its_views(r_library):
    """A child that parallel::mcparallel forks inherits the worker's view of the client's array: its collection
    releases none of the block, so the block is not handed out again while the client holds it."""
    with mizu.RExecutor(1) as pool:
        kept = mizu.full(1 << 20, 1.0)
        assert pool.submit("sum", kept).result(timeout=60) == 1 << 20
        forked = "function() { p <- parallel::mcparallel({ gc(); 1 }); parallel::mccollect(p)[[1]] }"
        assert pool.submit(forked).result(timeout=60) == 1
        assert pool.submit("function() { gc(); 1 }").result(timeout=60) == 1   # the worker's own release
        fresh = mizu.full(1 << 20, 2.0)
        assert not np.shares_memory(kept, fresh)
        assert (kept == 1.0).all() and (fresh == 2.0).all()


def test_map_gives_what_rscript_gives_in_order(r, r_library):
    data = _rng().standard_normal((100, 60))
    want = r_oracle(r_library, "apply(x1, 2, function(x) sum(sqrt(abs(x))))", data).tolist()
    for chunksize in (1, 7):
        assert list(r.map("function(x) sum(sqrt(abs(x)))", data.T, chunksize=chunksize)) == want


def test_map_with_several_iterables_and_a_buffer(r):
    assert list(r.map("function(a, b) a * b", range(50), range(50, 100), buffersize=3)) == [
        a * b for a, b in zip(range(50), range(50, 100))]


def test_map_shows_a_bar_counting_calls_and_the_pool_its_insights(r_library):
    out = io.StringIO()
    with mizu.RExecutor(2) as pool:
        assert list(pool.map("function(x) x * 2", range(120), chunksize=9, progress={"file": out, "delay": 0})) == [
            2 * x for x in range(120)]
        pool.submit("function(s) { Sys.sleep(s); s }", 0.2).result()
        seen = insights_all_up(pool)
    assert re.findall(r"(\d+)/(\d+)", out.getvalue())[-1] == ("120", "120")
    assert sum(w.calls for w in seen.workers) == 121 and all(w.startup is not None for w in seen.workers)
    assert seen.slowest[0].seconds >= 0.2 and seen.slowest[0].task.startswith("(function(s)")


def test_keywords_become_named_arguments(r, r_library):
    x = _rng().standard_normal(101)
    got = r.submit("function(x, trim = 0, na.rm = FALSE) mean(x, trim = trim)", x, trim=0.1).result()
    assert got == r_oracle(r_library, "mean(x1, trim = 0.1)", x)[0]
    assert r.submit("function(...) names(list(...))", 1, b=2, c=3).result() == ["", "b", "c"]


def test_functions_by_name_namespace_and_source(r):
    assert r.submit("rev", np.arange(3.0)).result().tolist() == [2.0, 1.0, 0.0]
    assert r.submit("base::nchar", "abcd").result() == 4
    assert r.submit("function(x) x + 1L", 41).result() == 42


def test_a_function_s_source_is_evaluated_once_per_worker(r_library):
    counter = "local({ n <- 0; function() { n <<- n + 1; n } })"
    with mizu.RExecutor(1) as pool:
        assert [pool.submit(counter).result() for _ in range(5)] == [1, 2, 3, 4, 5]


# -- values, by the mapping of doc/user/r.rst ------------------------------------------------

@pytest.mark.parametrize("value, r_class", [
    (None, "NULL"), (True, "logical"), (7, "integer"), (2**40, "numeric"), (1.5, "numeric"), ("é", "character"),
    (b"\x00\x01", "raw"), ([1, "a"], "list"), ((1, 2), "list"), ({"a": 1}, "list"),
    (np.arange(5.0), "numeric"), (np.arange(5, dtype=np.int32), "integer"), (np.ones(3, dtype=bool), "logical"),
    (np.arange(3, dtype=np.uint8), "raw"), (np.arange(4, dtype=np.int64), "numeric"),
    (np.ones(2, dtype=np.complex128), "complex"), (np.zeros((2, 3)), "matrix"), (np.zeros((2, 3, 4)), "array"),
], ids=repr)
def test_python_values_arrive_as_the_r_types_the_guide_says(r, value, r_class):
    assert r_class in np.atleast_1d(r.submit("class", value).result()).tolist()


def test_arrays_keep_their_indexing_in_r_whatever_their_order(r):
    a = np.arange(24.0).reshape(2, 3, 4)
    for version in (a, np.asfortranarray(a), mizu.asarray(a)):
        assert r.submit("dim", version).result().tolist() == [2, 3, 4]
        assert r.submit("function(x) x[2, 3, 4]", version).result() == a[1, 2, 3]


@pytest.mark.parametrize("source, expected", [
    ("NULL", None), ("TRUE", True), ("3L", 3), ("2.5", 2.5), ("'x'", "x"), ("NA", None), ("NA_integer_", None),
    ("NA_character_", None), ("c('a', NA)", ["a", None]), ("letters[1:3]", ["a", "b", "c"]),
    ("factor(c('lo', 'hi', 'lo'))", ["lo", "hi", "lo"]), ("list(1L, 'a')", [1, "a"]), ("list(a = 1L)", {"a": 1}),
], ids=lambda v: str(v))
def test_r_values_arrive_as_the_python_values_the_guide_says(r, source, expected):
    got = r.submit(f"function() {source}").result()
    assert got == expected and type(got) is type(expected)


def test_r_vectors_arrive_as_numpy_arrays_with_their_shape(r):
    assert r.submit("function() c(a = 1, b = 2)").result().tolist() == [1.0, 2.0]
    m = r.submit("function() matrix(1:6, 2)").result()
    assert m.dtype == np.int32 and m.tolist() == [[1, 3, 5], [2, 4, 6]]
    assert r.submit("function() c(TRUE, FALSE)").result().dtype == np.bool_
    assert r.submit("function() as.raw(1:3)").result().dtype == np.uint8
    assert r.submit("function() c(1i, 2)").result().dtype == np.complex128
    assert np.isnan(r.submit("function() NA_real_").result())


def test_na_in_integers_and_logicals_is_a_masked_array_both_ways(r):
    got = r.submit("function() c(1L, NA, 3L)").result()
    assert isinstance(got, np.ma.MaskedArray) and got.mask.tolist() == [False, True, False]
    assert got.dtype == np.int32 and got.compressed().tolist() == [1, 3]
    logical = r.submit("function() c(NA, TRUE)").result()
    assert logical.mask.tolist() == [True, False] and logical.dtype == np.bool_
    sent = np.ma.masked_array([1, 2, 3], mask=[False, True, False], dtype=np.int32)
    assert r.submit("is.na", sent).result().tolist() == [False, True, False]
    assert r.submit("function(x) sum(x, na.rm = TRUE)", sent).result() == 4


def test_a_write_in_r_never_reaches_the_caller_s_memory(r):
    for a in (mizu.zeros(100_000), np.zeros(100_000)):
        assert r.submit("function(x) { x[1] <- 99; x[1] + sum(x) }", a).result() == 198.0
        assert not a.any()


# -- errors and warnings ---------------------------------------------------------------------

def test_an_r_error_is_an_rerror_with_r_s_message_call_classes_and_traceback(r):
    source = "function(x) { inner <- function(y) stop('bad value: ', y); inner(x) }"
    with pytest.raises(mizu.RError, match="bad value: 3") as caught:
        r.submit(source, 3).result()
    e = caught.value
    assert e.message == "bad value: 3" and e.call == "inner(x)"
    assert e.classes == ("simpleError", "error", "condition")
    assert e.traceback[-1] == "stop(\"bad value: \", y)" and "inner(x)" in e.traceback
    assert "inner(x)" in str(e.__cause__)
    # Named as the docs name it, in reprs and tracebacks.
    assert "".join(traceback.format_exception_only(type(e), e)).startswith("mizu.RError: ")
    assert repr(mizu.RWarning) == "<class 'mizu.RWarning'>"


def test_a_custom_condition_keeps_its_classes(r):
    source = ("function() stop(structure(class = c('myError', 'error', 'condition'), "
              "list(message = 'mine', call = NULL)))")
    with pytest.raises(mizu.RError) as caught:
        r.submit(source).result()
    assert caught.value.classes == ("myError", "error", "condition") and caught.value.call is None
    assert str(caught.value) == "mine"


def test_r_warnings_are_python_warnings(r):
    with pytest.warns(mizu.RWarning, match=r"In log\(x\): NaNs produced"):
        assert np.isnan(r.submit("function(x) log(x)", -1.0).result())


WARN_OPTIONS = [
    (2, "as.numeric('a')"),                                        # the warning becomes the call's error
    (2, "class(try(as.numeric('a'), silent = TRUE))"),             # ... which a try() in the call catches
    (1, "as.numeric('a')"),                                        # shown (here: as RWarning)
    (-1, "as.numeric('a')"),                                       # dropped
]


@pytest.mark.parametrize("warn, expression", WARN_OPTIONS, ids=[f"warn={w}: {e}" for w, e in WARN_OPTIONS])
def test_the_calls_warn_option_acts_as_in_rscript(r, r_library, warn, expression):
    source = f"function() {{ old <- options(warn = {warn}); on.exit(options(old)); {expression} }}"
    done = subprocess.run([str(rpackage.find_rscript()), "--vanilla", "-e",
                           f"f <- {source}; r <- try(f(), silent = TRUE); "
                           "cat(if (inherits(r, 'try-error')) conditionMessage(attr(r, 'condition')) else format(r))"],
                          capture_output=True, text=True, env=r_environment(r_library), timeout=120)
    assert done.returncode == 0, done.stderr
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            value = r.submit(source).result()
        except mizu.RError as error:
            got = error.message
        else:
            got = "NA" if isinstance(value, float) and np.isnan(value) else str(value)
    assert got == done.stdout
    assert any(issubclass(w.category, mizu.RWarning) for w in caught) == ("Warning" in done.stderr)


def test_warnings_as_errors_fail_the_future_with_the_warning(r):
    with warnings.catch_warnings():
        warnings.simplefilter("error", mizu.RWarning)
        with pytest.raises(mizu.RWarning, match="NaNs produced"):
            r.submit("function(x) log(x)", -1.0).result()
    assert r.submit("function() 1L").result() == 1


@pytest.mark.parametrize("chunksize, before", [(1, 5), (3, 3)])
def test_map_raises_the_error_of_its_first_failed_chunk_in_order(r, chunksize, before):
    """As the stdlib's map: the error stands for its whole chunk (3, 4, 5 with chunksize 3)."""
    results = r.map("function(x) if (x == 5) stop('five') else x", range(10), chunksize=chunksize)
    assert [next(results) for _ in range(before)] == list(range(before))
    with pytest.raises(mizu.RError, match="five"):
        next(results)


def test_each_call_after_errors_has_its_own_outcome_and_warnings(r):
    """Errors in calls and at every place of a batch fail just their call or unit; warnings stay with theirs."""
    source = "function(x) { if (x %% 3 == 0) warning('w', x); if (x %% 4 == 0) stop('e', x); x }"
    for x in range(60):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if x % 4 == 0:
                with pytest.raises(mizu.RError, match=f"e{x}$"):
                    r.submit(source, x).result()
            else:
                assert r.submit(source, x).result() == x
        assert [str(w.message) for w in caught] == ([f"In FUN({x}L): w{x}"] if x % 3 == 0 else [])
    # Units of 5: their first error is at their first, second, ... last call, or none.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mizu.RWarning)
        for first in range(6):
            items = [x * 4 if k == first else x * 4 + 1 for k, x in enumerate(range(5))]
            got = r.map(source, items, chunksize=5)
            if first == 5:
                assert list(got) == items
            else:
                with pytest.raises(mizu.RError, match=f"e{items[first]}$"):
                    next(got)
        assert list(r.map(source, [1, 2, 5, 7, 10], chunksize=2)) == [1, 2, 5, 7, 10]


@pytest.mark.parametrize("shape, units, values, failed, warned", [
    (SINGLE, [[1, 2], [4, 5], [6, 8], [9, 3]], [[1, 2], None, None, [9, 3]], [(1, "e4"), (2, "e8")], [6, 9, 3]),
    (FLAT | SINGLE, [1, 4, 6, 8, 9], [1, None, 6, None, 9], [(1, "e4"), (3, "e8")], [6, 9]),
])
def test_a_batch_runs_every_unit_after_one_fails(r, shape, units, values, failed, warned):
    """The worker's side of map: a unit ends at its first error, the next ones run, warnings stay with theirs."""
    source = "function(x) { if (x %% 3 == 0) warning('w', x); if (x %% 4 == 0) stop('e', x); x }"
    calls = len(units) if shape & FLAT else sum(map(len, units))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got, failures = r._pool.submit(BATCH, source, units, shape, calls).result()
    assert got == values
    assert [(index, error.message) for index, error in failures] == failed
    assert [str(w.message) for w in caught] == [f"In FUN({x}L): w{x}" for x in warned]


@pytest.mark.parametrize("fn, args, error, match", [
    ("identity", (object(),), TypeError, "has no form in R"),
    ("identity", (np.array([1, INT32_MIN], dtype=np.int32),), ValueError, "NA_integer_"),
    ("identity", (2**60,), ValueError, "2\\^53"),
    ("function() environment()", (), TypeError, "class \"environment\" has no form Python can read"),
    ("no_such_function", (), mizu.RError, "no_such_function"),
    ("function(x", (), mizu.RError, "unexpected end of input"),
    ("1 + 1", (), mizu.RError, "not a function"),
])
def test_what_r_or_python_cannot_take_fails_the_task_not_the_pool(r, fn, args, error, match):
    with pytest.raises(error, match=match):
        r.submit(fn, *args).result()
    assert r.submit(fn, 5).result() == 5 if fn == "identity" else r.submit("function(x) x", 5).result() == 5


def test_a_callable_that_is_not_r_source_is_a_typeerror_at_submit(r):
    with pytest.raises(TypeError, match="R source"):
        r.submit(len, [1])
    with pytest.raises(TypeError, match="R source"):
        r.map(abs, [1])


# -- the pool's life ---------------------------------------------------------------------------

def test_setup_runs_once_in_each_worker_before_its_first_task(r_library, tmp_path):
    script = tmp_path / "setup.R"
    script.write_text("scale_by <- function(x) x * factor\nfactor <- 3\n")
    with mizu.RExecutor(2, setup="library(stats); base_value <- 10") as pool:
        assert pool.submit("function() base_value").result() == 10
    with mizu.RExecutor(2, setup=script) as pool:
        assert list(pool.map("scale_by", [1, 2])) == [3, 6]
    with mizu.RExecutor(1, setup=str(script)) as pool:
        assert pool.submit("scale_by", 2).result() == 6


def test_a_failed_setup_breaks_the_pool_with_r_s_error(r_library):
    with mizu.RExecutor(2, setup="library(no_such_package_here)") as pool:
        with pytest.raises(BrokenProcessPool, match="setup script raised RError: in "
                                                                "library\\(no_such_package_here\\)"):
            pool.submit("function() 1").result()
        with pytest.raises(BrokenProcessPool):
            pool.submit("function() 1")


@pytest.mark.parametrize("how", ["code", "file"])
def test_a_setup_that_does_not_parse_breaks_the_pool_with_all_of_r_s_message(r_library, tmp_path, how):
    """R's whole message (a parse error's line and caret too) is in the error itself, not only in its cause, and
    it says the worker stopped, not that it exited with code 0."""
    script = tmp_path / "bad.R"
    script.write_text("library(stats; x <-\n")
    with mizu.RExecutor(1, setup=script if how == "file" else "library(stats; x <-") as pool:
        with pytest.raises(BrokenProcessPool) as info:
            pool.submit("function() 1").result()
    text = str(info.value)
    assert "(mizu-R-worker-0) stopped before its first task: its setup script raised RError: " in text, text
    assert "unexpected ';'" in text and "1: library(stats;" in text and text.rstrip().endswith("^"), text
    assert "exited with code" not in text


def test_a_setup_naming_a_missing_file_is_refused_at_construction(r_library, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError, match="'missing_file.R', which does not exist"):
        mizu.RExecutor(1, setup="missing_file.R")
    # R code that mentions such a name is R code.
    mizu.RExecutor(1, setup="x<-defaults.R").shutdown()


def test_bad_arguments_are_refused_at_construction(r_library):
    with pytest.raises(ValueError, match="max_workers"):
        mizu.RExecutor(0)
    with pytest.raises(TypeError, match="setup"):
        mizu.RExecutor(1, setup=42)
    with pytest.raises(ValueError, match="max_tasks_per_child"):
        mizu.RExecutor(1, max_tasks_per_child=0)
    for rscript in ("/nonexistent/Rscript", os.path.dirname(rpackage.find_rscript())):
        with pytest.raises(FileNotFoundError, match=f"rscript={rscript!r} is not an executable file"):
            mizu.RExecutor(1, rscript=rscript)


def test_rscript_names_the_r_that_runs_the_workers(r_library, tmp_path, monkeypatch):
    """The Rscript given runs every worker and is the R the package is built for, with none on PATH."""
    rscript = tmp_path / "Rscript"
    rscript.write_text(f'#!/bin/sh\nMIZU_TEST_RSCRIPT="$0" exec {rpackage.find_rscript()} "$@"\n')
    rscript.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with mizu.RExecutor(2, rscript=str(rscript)) as pool:
        ran = pool.map("function(i) Sys.getenv('MIZU_TEST_RSCRIPT')", range(4))
        assert list(ran) == [str(rscript)] * 4


def test_max_tasks_per_child_replaces_workers(r_library):
    with mizu.RExecutor(1, max_tasks_per_child=3) as pool:
        pids = [pool.submit("Sys.getpid").result() for _ in range(9)]
    assert len(set(pids)) == 3 and pids == sorted(pids, key=pids.index)


def test_no_task_waits_behind_a_running_one_while_a_worker_idles(r_library, tmp_path):
    started, gate, log = str(tmp_path / "started"), str(tmp_path / "gate"), str(tmp_path / "log")
    wait = "function(started, gate) { file.create(started); while (!file.exists(gate)) Sys.sleep(0.01); 0 }"
    # Each run appends a line to the log: read once the pool has shut down,
    # it shows a task that ran twice even when that run's result was dropped.
    record = "function(log, i) { Sys.sleep(0.001); cat(paste0(i, '\\n'), file = log, append = TRUE); i }"
    with mizu.RExecutor(2) as pool:
        running = pool.submit(wait, started, gate)
        children.wait_for_file(started)
        for wave in range(5):
            short = [pool.submit(record, log, 20 * wave + i) for i in range(20)]
            done, late = cf.wait(short, timeout=60)
            assert not late, f"wave {wave}: {len(late)} of 20 short tasks waited behind the running one"
            assert [f.result() for f in short] == list(range(20 * wave, 20 * wave + 20))
        assert not running.done()
        open(gate, "w").close()
        assert running.result(timeout=60) == 0
        # The worker that ran the long task knows the function of the tasks taken back from it.
        assert list(pool.map(record, [log] * 20, range(100, 120))) == list(range(100, 120))
    with open(log) as lines:
        assert sorted(int(word) for word in lines.read().split()) == list(range(120))


def test_futures_work_with_wait_as_completed_callbacks_and_asyncio(r):
    futures = [r.submit("function(s) { Sys.sleep(s); s }", s) for s in (0.2, 0.0, 0.1)]
    done, _ = cf.wait(futures, timeout=30)
    assert len(done) == 3
    assert sorted(f.result() for f in cf.as_completed(futures)) == [0.0, 0.1, 0.2]
    seen = []
    r.submit("function() 5L").add_done_callback(lambda f: seen.append(f.result()))
    deadline = time.monotonic() + 30
    while not seen and time.monotonic() < deadline:
        time.sleep(0.01)
    assert seen == [5]

    async def main():
        return await asyncio.wrap_future(r.submit("function(a, b) a + b", 2, 3))

    assert asyncio.run(main()) == 5


def test_map_timeout_raises_timeouterror(r):
    results = r.map("function(s) { Sys.sleep(s); s }", [1.0], timeout=0.1)
    with pytest.raises(cf.TimeoutError):   # the builtin TimeoutError from 3.11
        next(results)


def test_shutdown_ends_the_workers_and_leaves_nothing(r_library):
    before = shm_entries()
    pool = mizu.RExecutor(2)
    assert pool.submit("function() 1L").result() == 1
    procs = [w.process for w in pool._pool.workers]
    pending = [pool.submit("function() { Sys.sleep(0.3); 1L }") for _ in range(6)]
    pool.shutdown(wait=True, cancel_futures=True)
    assert all(f.cancelled() or f.result() == 1 for f in pending)
    assert all(p.exitcode == 0 for p in procs)
    with pytest.raises(RuntimeError, match="after shutdown"):
        pool.submit("function() 1")
    assert shm_entries() == before


def test_an_idle_pool_uses_no_cpu(r_library):
    with mizu.RExecutor(2) as pool:
        pool.submit("function() 1").result()
        pids = [w.process.pid for w in pool._pool.workers]

        def cpu_seconds():
            total = 0
            for pid in pids:
                with open(f"/proc/{pid}/stat") as file:
                    fields = file.read().rsplit(")", 1)[1].split()
                total += int(fields[11]) + int(fields[12])
            return total / os.sysconf("SC_CLK_TCK")

        time.sleep(0.5)
        start = cpu_seconds()
        time.sleep(2)
        assert cpu_seconds() - start < 0.05
