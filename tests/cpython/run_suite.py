"""Run CPython's own concurrent.futures process-pool tests against mizu, with the stdlib as the oracle.

Usage:
    PYTHON run_suite.py [--timeout SECONDS]     run both, compare; exit 1 on a difference
    PYTHON run_suite.py run {mizu,stdlib} OUTPUT.json

PYTHON must ship its test package (Lib/test/test_concurrent_futures, as
pyenv's and python.org's builds do, or Debian's libpythonX.Y-testsuite) and
have mizu installed. No test code is copied: the tests are imported from
PYTHON's own Lib/test. For "mizu", concurrent.futures.ProcessPoolExecutor is
replaced by mizu.ProcessPoolExecutor before they are imported, so every
ProcessPool test case builds mizu's pools. The tests named in
differences.txt (beside this file) are not run for mizu; the reasons are
there and in the user guide.

A run writes {test id: "pass" | "fail" | "error" | "skip" | "not run" |
"different"} to OUTPUT.json. The comparison fails when a test that passes
for the stdlib does anything but pass for mizu, unless it is listed.
"""

import concurrent.futures
import json
import multiprocessing.util
import os
import subprocess
import sys
import tempfile
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


class _Recorder(unittest.TextTestResult):
    """Remembers which tests started, so a test never run (a class that failed to set up) is no pass."""

    def startTest(self, test):
        super().startTest(test)
        self.started.append(test.id())

    def startTestRun(self):
        super().startTestRun()
        self.started = []


def outcomes(tests):
    """Run tests; {test id: outcome}."""
    runner = unittest.TextTestRunner(verbosity=2, stream=sys.stderr, resultclass=_Recorder)
    result = runner.run(unittest.TestSuite(tests))
    seen = {test.id(): "not run" for test in tests}
    seen.update((name, "pass") for name in result.started)
    for kind, entries in (("fail", result.failures), ("error", result.errors), ("skip", result.skipped),
                          ("fail", [(test, "") for test in result.unexpectedSuccesses])):
        for test, _ in entries:
            seen[test.id()] = kind
    return seen


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
    from mizu import _pool

    def cleanup_after_pools():
        leftover = list(_pool._live_pools)
        for pool in leftover:
            pool.force_shutdown("kill")
            pool.manager.join()
        if leftover:
            print(f"\n{len(leftover)} mizu pool(s) were left open by the tests above", file=sys.stderr)
        cleanup()

    return cleanup_after_pools


def run(which, output):
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
    seen = outcomes([t for t in tests if t._testMethodName not in skipped])
    seen.update((t.id(), "different") for t in tests if t._testMethodName in skipped)
    with open(output, "w") as f:
        json.dump(seen, f, indent=1, sort_keys=True)
    return 0


def compare(timeout):
    """Run the suite for the stdlib and for mizu, each in its own process; 1 if mizu falls short."""
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for which in ("stdlib", "mizu"):
            output = os.path.join(tmp, which + ".json")
            print(f"== CPython's process-pool tests against {which}", flush=True)
            try:
                subprocess.run([sys.executable, "-P", __file__, "run", which, output], timeout=timeout, cwd=tmp)
            except subprocess.TimeoutExpired:
                print(f"the run against {which} did not end within {timeout} s", file=sys.stderr)
                return 1
            with open(output) as f:
                results[which] = json.load(f)
    stdlib, ours = results["stdlib"], results["mizu"]
    short = sorted(t for t, outcome in stdlib.items() if outcome == "pass" and ours.get(t) not in ("pass", "different"))
    passed = sum(outcome == "pass" for outcome in ours.values())
    listed = sum(outcome == "different" for outcome in ours.values())
    print(f"stdlib passes {sum(o == 'pass' for o in stdlib.values())} of {len(stdlib)}; mizu passes {passed}, "
          f"{listed} listed as differences in tests/cpython/differences.txt")
    for test in short:
        print(f"passes for the stdlib, {ours.get(test, 'missing')} for mizu: {test}")
    return 1 if short else 0


def main(argv):
    if argv[:1] == ["run"]:
        return run(*argv[1:])
    timeout = float(argv[argv.index("--timeout") + 1]) if "--timeout" in argv else 1800.0
    return compare(timeout)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
