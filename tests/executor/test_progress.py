"""A long map's progress: map's own bar (tqdm's, or a plain line without tqdm), tqdm's patterns, the pool's insights.

tqdm's process_map and tqdm(as_completed(...)) run against the stdlib's
pool as the oracle: the bar ends where it ends with the stdlib's.
"""

import concurrent.futures as cf
import io
import multiprocessing
import re
import subprocess
import sys
import threading
import time

import pytest
import tqdm
import tqdm.contrib.concurrent

import children
import mizu
from helpers import child_environ, insights_all_up, returns_within


def final_count(text):
    """(n, total) of the last state a tqdm bar or mizu's plain line wrote into text."""
    n, total = re.findall(r"(\d+)/(\d+)", text)[-1]
    return int(n), int(total)


@pytest.mark.parametrize("chunksize", [1, 100])
def test_the_bar_counts_every_call_for_any_chunksize(mizu_pool, chunksize):
    out = io.StringIO()
    results = list(mizu_pool.map(children.double, range(1234), chunksize=chunksize,
                            progress={"file": out, "desc": "d", "delay": 0}))
    assert results == [2 * i for i in range(1234)]
    assert final_count(out.getvalue()) == (1234, 1234)
    assert out.getvalue().rstrip().split("\r")[-1].startswith("d: 100%")


@pytest.mark.parametrize("delay", [0, 0.05])
def test_a_finished_map_draws_one_bar_as_tqdm_used_by_hand_does(mizu_pool, delay):
    """Into a file (not a terminal), the bar a map draws ends at 100% and is closed once, as tqdm used by hand
    over the stdlib's pool is."""
    by_hand, ours = io.StringIO(), io.StringIO()
    with cf.ProcessPoolExecutor(2) as stdlib:
        for _ in tqdm.tqdm(stdlib.map(children.nap, [0.01] * 60), total=60, unit="call", file=by_hand,
                           delay=delay):
            pass
    assert list(mizu_pool.map(children.nap, [0.01] * 60, progress={"file": ours, "delay": delay})) == [0.01] * 60
    # tqdm draws 100% once or twice (its last update is drawn only if its interval has passed); a second bar
    # would draw it again, after a second line.
    for text in (by_hand.getvalue(), ours.getvalue()):
        assert text.count("\n") == 1 and text.endswith("\n") and 1 <= text.count("100%") <= 2, text
        assert text.rstrip("\n").split("\r")[-1].startswith("100%"), text


def test_the_bar_counts_calls_over_several_iterables_and_a_generator(mizu_pool):
    out = io.StringIO()
    bar = {"file": out, "delay": 0}
    assert list(mizu_pool.map(children.add, range(300), range(250), progress=bar)) == [2 * i for i in range(250)]
    assert final_count(out.getvalue()) == (250, 250)
    out = io.StringIO()
    bar = {"file": out, "delay": 0}
    assert list(mizu_pool.map(children.double, (i for i in range(77)), chunksize=10, progress=bar)) == [
        2 * i for i in range(77)]
    assert final_count(out.getvalue()) == (77, 77)


def test_without_tqdm_a_plain_line_on_stderr_counts_every_call(mizu_pool, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)
    assert list(mizu_pool.map(children.double, range(500), chunksize=7, progress={"delay": 0})) == [
        2 * i for i in range(500)]
    err = capsys.readouterr().err
    assert final_count(err) == (500, 500)
    assert err.rstrip().splitlines()[-1].startswith("500/500 calls (100%)")
    list(mizu_pool.map(children.double, range(5), progress={"desc": "mine", "colour": "red", "delay": 0}))
    assert capsys.readouterr().err.rstrip().splitlines()[-1].startswith("mine: 5/5 calls")


def test_the_bar_appears_once_the_map_has_run_for_its_delay(mizu_pool, monkeypatch, capsys):
    out = io.StringIO()
    assert list(mizu_pool.map(children.nap, [0.02] * 30, progress={"file": out, "delay": 30})) == [0.02] * 30
    assert out.getvalue() == ""
    assert list(mizu_pool.map(children.nap, [0.02] * 30, progress={"file": out})) == [0.02] * 30
    assert final_count(out.getvalue()) == (30, 30)
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)
    assert list(mizu_pool.map(children.nap, [0.02] * 30, progress=True)) == [0.02] * 30
    assert final_count(capsys.readouterr().err) == (30, 30)


def test_a_bar_that_fails_is_logged_and_the_map_goes_on(mizu_pool, monkeypatch, caplog):
    """tqdm stops writing to a file it cannot write; the plain line's failure is logged."""
    out = io.StringIO()
    out.close()
    assert list(mizu_pool.map(children.double, range(200), progress={"file": out, "delay": 0})) == [
        2 * i for i in range(200)]
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)
    monkeypatch.setattr(sys, "stderr", out)
    assert list(mizu_pool.map(children.double, range(200), progress={"delay": 0})) == [2 * i for i in range(200)]
    assert "A map's progress bar failed; the map goes on without it" in caplog.text


def test_a_failing_call_ends_the_bar_and_the_map_raises_as_without_it(mizu_pool):
    out = io.StringIO()
    results = mizu_pool.map(children.fail_at, range(50), progress={"file": out, "delay": 0})
    with pytest.raises(ValueError, match="7 is bad"):
        list(results)
    done, total = final_count(out.getvalue())
    assert total == 50 and done <= 50
    # The pool goes on.
    assert list(mizu_pool.map(children.double, range(3), progress={"file": io.StringIO()})) == [0, 2, 4]


def test_a_call_past_its_deadline_ends_a_map_with_a_bar_with_timeout_error():
    with mizu.ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("forkserver"), task_timeout=0.5) as ex:
        results = ex.map(children.nap, [0.01, 60, 0.01], progress={"file": io.StringIO(), "delay": 0})
        assert next(results) == 0.01
        with pytest.raises(TimeoutError, match="task_timeout"):
            returns_within(lambda: next(results), 60)


def test_closing_the_map_early_closes_the_bar_and_cancels_the_rest(mizu_pool):
    out = io.StringIO()
    results = mizu_pool.map(children.nap, [0.01] * 400, progress={"file": out, "delay": 0})
    next(results)
    results.close()
    done, total = final_count(out.getvalue())
    assert total == 400 and 1 <= done < 400


def test_a_bad_progress_argument_is_refused_before_any_call(mizu_pool):
    with pytest.raises(TypeError, match="progress must be True, False or a dict of tqdm's options, not str"):
        mizu_pool.map(children.double, range(10), progress="yes")
    with pytest.raises(ValueError, match="progress's delay must be a number of seconds >= 0, not -1"):
        mizu_pool.map(children.double, range(10), progress={"delay": -1})
    assert sum(worker.calls for worker in mizu_pool.insights().workers) == 0
    assert list(mizu_pool.map(children.double, range(3), progress=None)) == [0, 2, 4]


def test_an_empty_map_shows_no_bar(mizu_pool):
    out = io.StringIO()
    assert list(mizu_pool.map(children.double, [], progress={"file": out, "delay": 0})) == []
    assert out.getvalue() == ""


@pytest.mark.parametrize("chunksize", [1, 7])
def test_tqdms_process_map_counts_as_it_does_with_the_stdlib(monkeypatch, chunksize):
    """process_map builds concurrent.futures.ProcessPoolExecutor, and counts the futures its submit returns."""
    ends = {}
    for name, cls in [("stdlib", cf.ProcessPoolExecutor), ("mizu", mizu.ProcessPoolExecutor)]:
        monkeypatch.setattr(cf, "ProcessPoolExecutor", cls)
        out = io.StringIO()
        results = tqdm.contrib.concurrent.process_map(children.double, range(101), max_workers=2,
                                                      chunksize=chunksize, file=out)
        assert results == [2 * i for i in range(101)]
        ends[name] = final_count(out.getvalue())
    # With chunksize > 1 tqdm 4.70 counts chunks, not calls (tqdm#1791), for either pool.
    assert ends["mizu"] == ends["stdlib"]
    assert chunksize > 1 or ends["mizu"] == (101, 101)


class CountingPool(mizu.ProcessPoolExecutor):
    def submit(self, fn, /, *args, **kwargs):
        self.submitted = getattr(self, "submitted", 0) + 1
        return super().submit(fn, *args, **kwargs)


def test_a_subclass_submit_sees_each_chunk_of_map_as_with_the_stdlib():
    with CountingPool(2) as ex:
        assert list(ex.map(children.double, range(10), chunksize=3)) == [2 * i for i in range(10)]
        assert ex.submitted == 4
        with pytest.raises(TypeError, match="progress cannot be combined with a submit of the pool's own"):
            ex.map(children.double, range(3), progress=True)


def test_a_submit_set_on_the_pool_cannot_take_a_bar_too(mizu_pool):
    mizu_pool.submit = mizu_pool.submit
    with pytest.raises(TypeError, match="progress cannot be combined with a submit of the pool's own"):
        mizu_pool.map(children.double, range(3), progress=True)
    assert list(mizu_pool.map(children.double, range(3))) == [0, 2, 4]


def test_tqdm_over_as_completed_reaches_every_future(executor_type):
    out = io.StringIO()
    with executor_type(2) as ex:
        futures = [ex.submit(children.double, i) for i in range(300)]
        got = sorted(f.result() for f in tqdm.tqdm(cf.as_completed(futures), total=len(futures), file=out))
    assert got == [2 * i for i in range(300)]
    assert final_count(out.getvalue()) == (300, 300)


def test_insights_count_every_call_per_worker_and_name_the_slowest_tasks():
    with mizu.ProcessPoolExecutor(2) as ex:
        assert all(w.calls == 0 and w.startup is None for w in ex.insights().workers)
        list(ex.map(children.double, range(1000), chunksize=10))
        slow = ex.submit(children.nap, 0.3)
        slow.result()
        seen = insights_all_up(ex)
        pids = set(ex._processes)
    assert len(seen.workers) == 2 and [w.index for w in seen.workers] == [0, 1]
    # The public types, by their public names.
    assert isinstance(seen, mizu.Insights) and all(isinstance(w, mizu.WorkerInsights) for w in seen.workers)
    assert all(isinstance(t, mizu.SlowTask) for t in seen.slowest)
    assert sum(w.calls for w in seen.workers) == 1001
    assert {w.pid for w in seen.workers} == pids
    assert all(w.busy >= 0 and w.idle >= 0 and w.startup is not None and w.startup >= 0 for w in seen.workers)
    assert sum(w.busy for w in seen.workers) >= 0.3
    assert 1 <= len(seen.slowest) <= 5
    assert [t.seconds for t in seen.slowest] == sorted((t.seconds for t in seen.slowest), reverse=True)
    assert seen.slowest[0].seconds >= 0.3 and seen.slowest[0].task == "children.nap(0.3)"
    assert all(t.task.startswith("a map batch of 10 calls, the first children.double(") for t in seen.slowest[1:])
    text = str(seen)
    assert len(text.splitlines()) == 1 + 2 + 1 + len(seen.slowest)
    assert "children.nap(0.3)" in text
    # After shutdown, the figures as of the workers' end.
    after = ex.insights()
    assert after.slowest == seen.slowest and [w.calls for w in after.workers] == [w.calls for w in seen.workers]
    assert after == ex.insights()


def test_insights_add_up_over_a_workers_successive_processes():
    with mizu.ProcessPoolExecutor(1, max_tasks_per_child=3) as ex:
        assert [f.result() for f in [ex.submit(children.pid) for _ in range(7)]] != []
        seen = ex.insights()
    assert seen.workers[0].calls == 7


def test_a_pool_never_asked_for_insights_does_not_load_them(tmp_path):
    """Their module (dataclasses) costs milliseconds of import: a pool's life without insights() does not pay it."""
    code = """
import sys
import children, mizu
with mizu.ProcessPoolExecutor(2) as ex:
    assert list(ex.map(children.double, range(100), chunksize=7)) == list(range(0, 200, 2))
    ex.submit(children.double, 1).result(timeout=60)
print("mizu._insights" in sys.modules)
print(ex.insights().workers[0].calls + ex.insights().workers[1].calls, "mizu._insights" in sys.modules)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=child_environ(),
                         cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "101", "True"]


def test_the_bar_moves_while_the_first_task_is_still_running(mizu_pool, tmp_path):
    """The thread waiting on a slow first result draws what the others have done, with the map's whole time."""
    out, gate = io.StringIO(), tmp_path / "gate"

    def drawn():
        return [(int(n), int(total)) for n, total in re.findall(r"(\d+)/(\d+)", out.getvalue())]

    def open_the_gate():
        # Once the bar has drawn the other tasks done (or after a minute), and a second after the map began: after
        # the bar first appeared, as this thread may start well before the map does.
        deadline = time.monotonic() + 60
        while not drawn() and time.monotonic() < deadline:
            time.sleep(0.01)
        began = time.monotonic()
        while not any(n >= 50 for n, _ in drawn()) and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(max(0.0, began + 1.1 - time.monotonic()))
        gate.touch()

    opener = threading.Thread(target=open_the_gate)
    opener.start()
    got = list(mizu_pool.map(children.wait_for_file, [str(gate)] + [str(tmp_path)] * 99, progress={"file": out}))
    opener.join()
    assert len(got) == 100 and set(got) <= set(mizu_pool._processes), got
    states = drawn()
    assert any(50 <= n < 100 for n, _ in states) and states[-1] == (100, 100)
    minutes, seconds = re.findall(r"100/100 \[(\d+):(\d+)<", out.getvalue())[-1]
    assert 60 * int(minutes) + int(seconds) >= 1


def test_insights_describe_any_argument_in_bounded_time_without_calling_its_repr():
    huge = 10**5000
    with mizu.ProcessPoolExecutor(1) as ex:
        assert ex.submit(children.double, huge).result(timeout=60) == 2 * huge
        future = ex.submit(children.echo_value, {"many": list(range(100_000))})
        cf.wait([future], timeout=60)   # collected by the manager thread
        assert future.result() == {"many": list(range(100_000))}
        assert ex.submit(children.add, 2, b=3).result(timeout=60) == 5
        tasks = {t.task for t in ex.insights().slowest}
    assert "children.double(<int of 16610 bits>)" in tasks
    assert "children.echo_value(<dict>)" in tasks and "children.add(2, b=3)" in tasks
