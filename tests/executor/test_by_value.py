"""Pickling callables by value (by_value=True, or MIZU_BY_VALUE=1): lambdas, closures and __main__'s functions run.

With it off, mizu fails them exactly as the stdlib's pool does, which is the
oracle here.
"""

import concurrent.futures as cf
import functools
import gc
import multiprocessing
import weakref
import subprocess
import sys

import pytest

import children
import executor_children
import mizu
from helpers import child_environ


def adder(k):
    def add(x):
        return x + k

    return add


CALLABLES = {
    "lambda": (lambda x: x + 1, 2),
    "closure": (adder(5), 6),
}


@pytest.mark.parametrize("kind", sorted(CALLABLES))
def test_lambdas_and_closures_run_under_every_start_method(start_method, kind):
    fn, one = CALLABLES[kind]
    with mizu.ProcessPoolExecutor(2, mp_context=multiprocessing.get_context(start_method), by_value=True) as ex:
        assert ex.submit(fn, 1).result(timeout=60) == one
        assert list(ex.map(fn, range(50), chunksize=7)) == [fn(x) for x in range(50)]
        assert ex.submit(children.double, 4).result(timeout=60) == 8


@pytest.mark.parametrize("kind", sorted(CALLABLES))
def test_without_it_they_fail_with_the_stdlibs_error(start_method, kind):
    fn, _ = CALLABLES[kind]
    errors = []
    for cls in (cf.ProcessPoolExecutor, functools.partial(mizu.ProcessPoolExecutor, by_value=False)):
        with cls(1, mp_context=multiprocessing.get_context(start_method)) as ex:
            with pytest.raises(Exception) as caught:
                ex.submit(fn, 1).result(timeout=60)
            errors.append((type(caught.value), str(caught.value)))
            assert ex.submit(children.double, 4).result(timeout=60) == 8
    assert errors[0] == errors[1]
    if sys.version_info >= (3, 11):
        # mizu's error has a note that says what to do (exception notes are new in 3.11).
        notes = getattr(caught.value, "__notes__", [])
        assert any("by_value=True" in note for note in notes), notes


def test_functions_inside_the_arguments_travel_by_value_too(start_method):
    """As in a Dask graph: the task's callable is a module's function, the user's lambdas are in its arguments."""
    with mizu.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context(start_method), by_value=True) as ex:
        assert ex.submit(executor_children.apply, lambda x: [x, x], 3).result(timeout=60) == [3, 3]
        assert ex.submit(executor_children.apply, executor_children.apply, adder(2), 3).result(timeout=60) == 5
        assert list(ex.map(executor_children.apply, [lambda x: x, adder(1), children.double], [5, 5, 5])) == [5, 6, 10]


def test_an_arena_array_that_a_lambda_captures_crosses_by_reference(start_method):
    """A task's callable, or a function in its arguments: the worker's writes reach the caller, as to an argument."""
    called, inside, tiny = mizu.zeros(1000), mizu.zeros(1000), mizu.zeros(3)
    with mizu.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context(start_method), by_value=True) as ex:
        ex.submit(lambda: called.fill(3.0)).result(timeout=60)
        ex.submit(executor_children.apply, lambda: (inside.fill(4.0), tiny.fill(5.0))).result(timeout=60)
    assert (called == 3).all() and (inside == 4).all() and (tiny == 5).all()


def test_a_plain_array_that_a_lambda_captures_arrives_as_the_worker_s_own_copy(start_method):
    import numpy as np

    big, small = np.arange(1 << 18, dtype=np.float64), np.arange(10)
    with mizu.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context(start_method), by_value=True) as ex:
        assert ex.submit(lambda: (big.sum(), small.tolist(), big.flags.writeable)).result(timeout=60) == \
            (big.sum(), small.tolist(), True)
        assert ex.submit(lambda: big.fill(1.0)).result(timeout=60) is None
    assert big[1] == 1.0 and big[2] == 2.0, "the caller's array is not written"


def test_each_closure_keeps_its_own_captured_values():
    with mizu.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"), by_value=True) as ex:
        adders = [adder(k) for k in range(5)]
        assert [ex.submit(fn, 10).result(timeout=60) for fn in adders * 2] == [10, 11, 12, 13, 14] * 2


MAIN_PROGRAM = """
import multiprocessing, sys
import mizu

def triple(x):
    return 3 * x

with mizu.ProcessPoolExecutor(2, mp_context=multiprocessing.get_context(sys.argv[1]){by_value}) as ex:
    try:
        print(list(ex.map(triple, range(5))), ex.submit(lambda: "lambda").result(timeout=60))
    except Exception as exc:
        print(type(exc).__name__)
"""


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
@pytest.mark.parametrize("switch", ["argument", "variable", "off"])
def test_functions_of_a_main_module_without_a_file_run(tmp_path, method, switch):
    """`python -c` (as a notebook): the workers cannot import __main__, so its functions must travel by value."""
    code = MAIN_PROGRAM.format(by_value=", by_value=True" if switch == "argument" else "")
    env = child_environ({"MIZU_BY_VALUE": "1" if switch == "variable" else "0"})
    out = subprocess.run([sys.executable, "-c", code, method], capture_output=True, text=True, timeout=120, env=env,
                         cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    if switch == "off":
        # Unpickling __main__.triple fails in the worker, which breaks the pool, as the stdlib's.
        assert out.stdout.split() == ["BrokenProcessPool"]
    else:
        assert out.stdout.strip() == "[0, 3, 6, 9, 12] lambda"


def test_an_initializer_lambda_runs_under_spawn():
    with mizu.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"), by_value=True,
                                  initializer=lambda: children.remember("set by a lambda")) as ex:
        assert ex.submit(children.initialized).result(timeout=60) == ["set by a lambda"]


def test_the_switch_refuses_what_it_cannot_read(monkeypatch):
    with pytest.raises(TypeError, match="by_value must be True, False or None, not str"):
        mizu.ProcessPoolExecutor(1, by_value="yes")
    monkeypatch.setenv("MIZU_BY_VALUE", "maybe")
    with pytest.raises(ValueError, match="MIZU_BY_VALUE must be 0, 1, false or true, not 'maybe'"):
        mizu.ProcessPoolExecutor(1)
    with mizu.ProcessPoolExecutor(1, by_value=False) as ex:
        assert ex.submit(children.double, 2).result(timeout=60) == 4


def test_without_cloudpickle_the_switch_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "cloudpickle", None)
    with pytest.raises(ImportError, match="needs cloudpickle: pip install cloudpickle"):
        mizu.ProcessPoolExecutor(1, by_value=True)


CLASS_PROGRAM = """
import multiprocessing
import children, executor_children, mizu

class Point:
    def __init__(self, x):
        self.x = x

    def norm(self):
        return abs(self.x)

with mizu.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"), by_value=True) as ex:
    back = ex.submit(children.echo_value, Point(2)).result(timeout=60)
    print(ex.submit(executor_children.apply, Point.norm, Point(-4)).result(timeout=60), back.x, type(back) is Point)
"""


def test_classes_of_a_main_module_without_a_file_travel_by_value(tmp_path):
    out = subprocess.run([sys.executable, "-c", CLASS_PROGRAM], capture_output=True, text=True, timeout=120,
                         env=child_environ(), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["4", "2", "True"]


GLOBALS_PROGRAM = """
import multiprocessing, sys
import mizu

SETTING = None

def configure(value):
    global SETTING
    SETTING = value

def setting(_):
    return SETTING

if __name__ == "__main__":
    for by_value in (False, True):
        with mizu.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context(sys.argv[1]), initializer=configure,
                                      initargs=(42,), by_value=by_value) as ex:
            print(ex.submit(setting, 0).result(timeout=60))
"""


@pytest.mark.parametrize("method", ["fork", "forkserver", "spawn"])
def test_a_scripts_functions_share_its_globals_with_the_initializer_as_without_it(tmp_path, method):
    script = tmp_path / "program.py"
    script.write_text(GLOBALS_PROGRAM)
    out = subprocess.run([sys.executable, str(script), method], capture_output=True, text=True, timeout=120,
                         env=child_environ(), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["42", "42"]


def test_a_worker_keeps_a_bounded_number_of_closures_sent_by_value():
    class Payload:
        pass

    kept = []
    with mizu.ProcessPoolExecutor(1, by_value=True) as ex:
        for k in range(300):
            payload = Payload()
            kept.append(weakref.ref(payload))
            assert ex.submit(lambda x, p=payload, k=k: x + k, 1).result(timeout=60) == 1 + k
        gc.collect()
        alive = sum(ref() is not None for ref in kept)
        # The newest are still registered, and an old one sent again still runs.
        assert alive <= 65
        assert [ex.submit(adder(k), 1).result(timeout=60) for k in range(3)] == [1, 2, 3]
