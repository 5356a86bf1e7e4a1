"""joblib's own test_parallel.py with "mizu" among its process backends, loky's outcome as the oracle.

The installed joblib's tests/test_parallel.py is copied to a temporary
folder with three edits: it imports mizu (which registers the backend), its
list of process backends gains "mizu", and its one relative import names
joblib's package. pytest then runs the cases of mizu and of loky. Every
mizu case must pass where its loky twin (the same test with "loky" for
"mizu" in its id) passes, unless the test is listed below with the reason
mizu differs; doc/user/joblib.rst lists the same. A listed test that now
passes is reported, not failed.

Usage: python tests/joblib/run_joblib_suite.py [--timeout SECONDS]
"""

import argparse
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ElementTree

import joblib

# Test functions whose mizu cases fail where loky's pass, and why.
DIFFERENCES = {
    "test_parallel_with_interactively_defined_functions":
        "runs a script in a new interpreter that never imports mizu, so joblib there knows no 'mizu' backend",
    "test_parallel_with_unpicklable_functions_in_args":
        "runs a script in a new interpreter that never imports mizu, so joblib there knows no 'mizu' backend",
    "test_auto_memmap_on_arrays_from_generator":
        "expects large arguments to arrive as np.memmap; mizu's arrive as views of shared memory",
    "test_memmapping_leaks":
        "expects joblib's memmapping folder; mizu's arrays never go through it",
    "test_parallel_unordered_generator_returns_fastest_first":
        "a worker holds a second task behind its running one, which then waits for the slow task",
}

EDITS = [
    ("", "import mizu  # registers the 'mizu' backend\n"),
    ("    from ._openmp_test_helper.parallel_sum import parallel_sum",
     "    from joblib.test._openmp_test_helper.parallel_sum import parallel_sum"),
    ('    PROCESS_BACKENDS = ["multiprocessing", "loky"]',
     '    PROCESS_BACKENDS = ["multiprocessing", "loky", "mizu"]'),
]


def edited_suite(folder):
    """Write the edited copy of joblib's test_parallel.py into folder; return its path."""
    source = os.path.join(os.path.dirname(joblib.__file__), "test", "test_parallel.py")
    with open(source) as file:
        text = file.read()
    for old, new in EDITS:
        if old and text.count(old) != 1:
            raise SystemExit(f"joblib {joblib.__version__}'s test_parallel.py no longer has {old.strip()!r} once: "
                             f"update EDITS in {__file__}")
        text = text.replace(old, new, 1) if old else new + text
    path = os.path.join(folder, "test_parallel.py")
    with open(path, "w") as file:
        file.write(text)
    return path


def outcomes(report):
    """{test id: "passed" | "failed" | "skipped"} from pytest's junit XML."""
    found = {}
    for case in ElementTree.parse(report).getroot().iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            found[case.get("name")] = "failed"
        elif case.find("skipped") is not None:
            found[case.get("name")] = "skipped"
        else:
            found[case.get("name")] = "passed"
    return found


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timeout", type=float, default=300, help="seconds any one test may take (default 300)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        suite = edited_suite(folder)
        report = os.path.join(folder, "report.xml")
        command = [sys.executable, "-P", "-m", "pytest", suite, "-q", "-p", "no:cacheprovider", "-k", "mizu or loky",
                   f"--timeout={args.timeout}", f"--junitxml={report}", "-o", "junit_family=xunit1",
                   "--rootdir", folder]
        print("+", " ".join(command), flush=True)
        done = subprocess.run(command, cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        print("\n".join(done.stdout.splitlines()[-3:]))
        if not os.path.exists(report):
            print(done.stdout)
            print("pytest wrote no report")
            return 1
        found = outcomes(report)
    regressions, differences = [], []
    for name, outcome in sorted(found.items()):
        if "mizu" in name and outcome == "failed" and found.get(name.replace("mizu", "loky")) != "failed":
            (differences if name.split("[")[0] in DIFFERENCES else regressions).append(name)
    stale = sorted(set(DIFFERENCES) - {name.split("[")[0] for name in differences})
    mizu_cases = [name for name in found if "mizu" in name]
    print(f"joblib {joblib.__version__}: {len(mizu_cases)} mizu cases, "
          f"{sum(found[n] == 'passed' for n in mizu_cases)} passed, {len(differences)} listed differences, "
          f"{len(regressions)} unlisted failures")
    for name in differences:
        print(f"  listed: {name}: {DIFFERENCES[name.split('[')[0]]}")
    for name in stale:
        print(f"  listed, but no case of it fails: {name}")
    for name in regressions:
        print(f"  FAILED where loky passes: {name}")
    if not mizu_cases:
        print("no mizu case ran")
        return 1
    return 1 if regressions else 0


if __name__ == "__main__":
    sys.exit(main())
