"""Run CPython's own concurrent.futures process-pool tests against an executor class.

Usage: PYTHON run_suite.py {mizu,stdlib} OUTPUT.json

PYTHON must ship its test package (Lib/test/test_concurrent_futures, as
pyenv's and python.org's builds do, or Debian's libpythonX.Y-testsuite).
With "mizu", concurrent.futures.ProcessPoolExecutor is replaced by
mizu.ProcessPoolExecutor before the tests are imported, so every
ProcessPool test case builds mizu's pools. The outcome of every process-pool
test is written to OUTPUT.json as {test id: "pass" | "fail" | "error" | "skip" | "not run"}.
"""

import concurrent.futures
import json
import os
import sys
import unittest


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
    runner = unittest.TextTestRunner(verbosity=1, stream=sys.stderr, resultclass=_Recorder)
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


def main(which, output):
    if which == "mizu":
        import mizu

        concurrent.futures.ProcessPoolExecutor = mizu.ProcessPoolExecutor
        concurrent.futures.process.ProcessPoolExecutor = mizu.ProcessPoolExecutor
    import test.test_concurrent_futures as package

    here = os.path.dirname(package.__file__)
    loader = unittest.TestLoader()
    tests = list(process_pool_tests(loader.discover(here, top_level_dir=os.path.dirname(os.path.dirname(here)))))
    seen = outcomes(tests)
    with open(output, "w") as f:
        json.dump(seen, f, indent=1, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
