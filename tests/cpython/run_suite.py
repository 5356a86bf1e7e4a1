"""Run CPython's own concurrent.futures process-pool tests against mizu, with the stdlib as the oracle.

Usage:
    PYTHON run_suite.py [--timeout SECONDS] [--test-timeout SECONDS]
                                                run both, compare; exit 1 on a difference
    PYTHON run_suite.py run {mizu,stdlib} PROGRESS

PYTHON must ship its test package (Lib/test/test_concurrent_futures, as
pyenv's and python.org's builds do, or Debian's libpythonX.Y-testsuite) and
have mizu installed. No test code is copied: the tests are imported from
PYTHON's own Lib/test. For "mizu", concurrent.futures.ProcessPoolExecutor is
replaced by mizu.ProcessPoolExecutor before they are imported, so every
ProcessPool test case builds mizu's pools. The tests named in
differences.txt (beside this file) are not run for mizu; the reasons are
there and in the user guide.

A run appends one JSON line per event to PROGRESS: each test it will run
("collected"), each listed difference, each test's start and its outcome
("pass" | "fail" | "error" | "skip"); it leaves out the tests PROGRESS
already shows started. The comparison watches the file: a test that runs
longer than --test-timeout is "hung", its run is killed with every process
it started, and a new run goes on after it. A test collected but never
started is "not run". The comparison fails when a test that passes for the
stdlib does anything but pass for mizu, unless it is listed.
"""

import concurrent.futures
import json
import multiprocessing.util
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))


def differences():
    """{test method name: reason} from differences.txt."""
    listed = {}
    with open(os.path.join(HERE, "differences.txt"), encoding="utf-8") as f:
        for line in f:
            if line.strip() and not line.startswith("#"):
                name, reason = line.split(":", 1)
                listed[name.strip()] = reason.strip()
    return listed


def read_progress(path):
    """The events PROGRESS holds so far, as dicts (a line cut short by a kill is left out)."""
    events = []
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            for line in f:
                if line.endswith("\n"):
                    events.append(json.loads(line))
    return events


# A test's outcome is the worst of what happened in it: a failure then a skipped subtest is a failure.
_RANK = {"pass": 0, "skip": 1, "fail": 2, "error": 3}


class _Recorder(unittest.TextTestResult):
    """Writes each test's start and outcome to the progress file as it happens."""

    progress = None

    def _mark(self, outcome):
        self.outcome = max(self.outcome, outcome, key=_RANK.__getitem__)

    def _write(self, **event):
        self.progress.write(json.dumps(event) + "\n")
        self.progress.flush()

    def startTest(self, test):
        super().startTest(test)
        self.current, self.outcome = test, "pass"
        self._write(started=test.id())

    def stopTest(self, test):
        super().stopTest(test)
        self._write(ended=test.id(), outcome=self.outcome)

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._mark("fail")

    def addError(self, test, err):
        super().addError(test, err)
        self._mark("error")

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        if test is self.current:
            self._mark("skip")

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._mark("fail")

    def addSubTest(self, test, subtest, err):
        super().addSubTest(test, subtest, err)
        if err is not None:
            self._mark("fail" if issubclass(err[0], test.failureException) else "error")


def process_pool_tests(suite):
    for item in suite:
        if isinstance(item, unittest.TestSuite):
            yield from process_pool_tests(item)
        elif "ProcessPool" in item.id() or "FailingInitializerResourcesTest" in item.id():
            yield item


def _end_leftover_pools(cleanup):
    """Wrap the suite's module cleanup: kill mizu pools a failed test left open, and fail loudly.

    Their workers hold the resource tracker's pipe, so the cleanup's wait for
    the tracker would otherwise never end.
    """
    from mizu import _manager

    def cleanup_after_pools():
        leftover = list(_manager._live_pools)
        for pool in leftover:
            pool.force_shutdown("kill")
            pool.manager.join()
        if leftover:
            print(f"\n{len(leftover)} mizu pool(s) were left open by the tests above", file=sys.stderr)
        cleanup()

    return cleanup_after_pools


def run(which, progress):
    skipped = {}
    if which == "mizu":
        import mizu

        concurrent.futures.ProcessPoolExecutor = mizu.ProcessPoolExecutor
        concurrent.futures.process.ProcessPoolExecutor = mizu.ProcessPoolExecutor
        multiprocessing.util._cleanup_tests = _end_leftover_pools(multiprocessing.util._cleanup_tests)
        skipped = differences()
    import test.test_concurrent_futures as package

    here = os.path.dirname(package.__file__)
    loader = unittest.TestLoader()
    tests = list(process_pool_tests(loader.discover(here, top_level_dir=os.path.dirname(os.path.dirname(here)))))
    before = read_progress(progress)
    ended = {event["ended"] for event in before if "ended" in event}
    with open(progress, "a", encoding="utf-8") as f:
        _Recorder.progress = f
        if not before:
            for t in tests:
                event = {"listed": t.id()} if t._testMethodName in skipped else {"collected": t.id()}
                f.write(json.dumps(event) + "\n")
            f.flush()
        remaining = [t for t in tests if t._testMethodName not in skipped and t.id() not in ended]
        runner = unittest.TextTestRunner(verbosity=2, stream=sys.stderr, resultclass=_Recorder)
        runner.run(unittest.TestSuite(remaining))
    return 0


def outcomes(progress):
    """{test id: outcome} from a finished progress file."""
    seen = {}
    for event in read_progress(progress):
        if "collected" in event:
            seen[event["collected"]] = "not run"
        elif "listed" in event:
            seen[event["listed"]] = "different"
        elif "ended" in event:
            seen[event["ended"]] = event["outcome"]
    return seen


def run_watched(which, progress, timeout, test_timeout):
    """Run the suite for which until it ends, killing and restarting each run that one test holds too long.

    A run ends with every process of its session killed, its leftover workers among them.

    False when the whole of it took longer than timeout, or a run failed outside any test.
    """
    deadline = time.monotonic() + timeout
    while True:
        proc = subprocess.Popen([sys.executable, "-P", __file__, "run", which, progress],
                                cwd=os.path.dirname(progress), start_new_session=True)
        hung = None
        try:
            while proc.poll() is None:
                time.sleep(1)
                events = read_progress(progress)
                last = events[-1] if events else {}
                since = time.time() - os.path.getmtime(progress) if os.path.exists(progress) else 0.0
                if "started" in last and since > test_timeout:
                    hung = last["started"]
                if hung or time.monotonic() > deadline:
                    break
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
        if hung:
            if read_progress(progress)[-1] == {"started": hung}:
                print(f"\n{hung} did not end within {test_timeout:.0f} s: its run is killed, the rest goes on",
                      file=sys.stderr, flush=True)
                with open(progress, "a", encoding="utf-8") as f:
                    f.write(json.dumps({"ended": hung, "outcome": "hung"}) + "\n")
            continue
        if time.monotonic() > deadline:
            print(f"the run against {which} did not end within {timeout:.0f} s", file=sys.stderr)
            return False
        recorded = len(outcomes(progress))
        if proc.returncode != 0 or not recorded:
            print(f"the run against {which} failed outside its tests (exit status {proc.returncode}, "
                  f"{recorded} tests recorded)", file=sys.stderr)
            return False
        return True


def compare(timeout, test_timeout):
    """Run the suite for the stdlib and for mizu, each in processes of its own; 1 if mizu falls short."""
    results = {}
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    with tempfile.TemporaryDirectory() as tmp:
        for which in ("stdlib", "mizu"):
            progress = os.path.join(tmp, which + ".jsonl")
            print(f"== CPython's process-pool tests against {which}", flush=True)
            if not run_watched(which, progress, timeout, test_timeout):
                return 1
            results[which] = outcomes(progress)
    stdlib, ours = results["stdlib"], results["mizu"]
    short = sorted(t for t, outcome in stdlib.items() if outcome == "pass" and ours.get(t) not in ("pass", "different"))
    passed = sum(outcome == "pass" for outcome in ours.values())
    listed = sum(outcome == "different" for outcome in ours.values())
    print(f"stdlib passes {sum(o == 'pass' for o in stdlib.values())} of {len(stdlib)}; mizu passes {passed}, "
          f"{listed} listed as differences in tests/cpython/differences.txt")
    for which, seen in results.items():
        for test in sorted(t for t, outcome in seen.items() if outcome == "hung"):
            print(f"hung for {which}: {test}")
    for test in short:
        print(f"passes for the stdlib, {ours.get(test, 'missing')} for mizu: {test}")
    return 1 if short else 0


def option(argv, name, default):
    return float(argv[argv.index(name) + 1]) if name in argv else default


def main(argv):
    if argv[:1] == ["run"]:
        return run(*argv[1:])
    return compare(option(argv, "--timeout", 1800.0), option(argv, "--test-timeout", 300.0))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
