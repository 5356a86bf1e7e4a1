"""joblib's own tests of its process backends with "mizu" among them, loky's outcome as the oracle.

Each of the installed joblib's test files in SUITES is copied to a temporary
folder with its edits: it imports mizu (which registers the backend), and
so do the scripts that its tests run in new interpreters, as a user's
script would (loky's scripts too, which then import mizu unused); its
lists of process backends gain "mizu", and its relative imports name
joblib's package. The helpers those scripts import (testutils.py) are
copied beside them. pytest then runs the cases of mizu and of loky. Every
mizu case must pass where its loky twin (the same test with "loky" for
"mizu" in its id) passes, unless the test is listed below with the reason
mizu differs; doc/user/joblib.rst lists the same. A listed test that now
passes is reported, not failed.

Usage: python tests/joblib/run_joblib_suite.py [--timeout SECONDS]
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ElementTree

import joblib

# Tests ("file::function") whose mizu cases fail where loky's pass, and why.
DIFFERENCES = {
    "test_parallel::test_auto_memmap_on_arrays_from_generator":
        "expects large arguments to arrive as np.memmap; mizu's arrive as views of shared memory",
    "test_parallel::test_memmapping_leaks":
        "expects joblib's memmapping folder; mizu's arrays never go through it",
    "test_memmapping::test_parallel_isolated_temp_folders":
        "reads the filename of the np.memmap that a large argument arrives as; mizu's is a view of shared memory",
    "test_memmapping::test_managed_backend_reuse_temp_folder":
        "reads the filename of the np.memmap that a large argument arrives as; mizu's is a view of shared memory",
    "test_memmapping::test_memmap_returned_as_regular_array":
        "its task asserts that a large argument arrives as np.memmap; mizu's is a view of shared memory",
}

IMPORT_MIZU = ("", "import mizu  # registers the 'mizu' backend\n", 1)


def import_mizu_in_scripts(count):
    """The edit that has the count scripts of a test file import mizu before joblib's Parallel."""
    return "from joblib import Parallel, delayed", "import mizu; from joblib import Parallel, delayed", count


HELPERS = ["testutils.py"]

# {test file: [(text, its replacement, how many times the file has it)]};
# "" as text puts the replacement first.
SUITES = {
    "test_parallel.py": [
        IMPORT_MIZU,
        import_mizu_in_scripts(4),
        ("    from ._openmp_test_helper.parallel_sum import parallel_sum",
         "    from joblib.test._openmp_test_helper.parallel_sum import parallel_sum", 1),
        ('    PROCESS_BACKENDS = ["multiprocessing", "loky"]',
         '    PROCESS_BACKENDS = ["multiprocessing", "loky", "mizu"]', 1),
    ],
    "test_memmapping.py": [
        IMPORT_MIZU,
        import_mizu_in_scripts(6),
        ('@parametrize("backend", ["multiprocessing", "loky"])',
         '@parametrize("backend", ["multiprocessing", "loky", "mizu"])', 7),
    ],
    "test_store_backends.py": [
        IMPORT_MIZU,
        ('@parametrize("backend", ["multiprocessing", "loky", "threading"])',
         '@parametrize("backend", ["multiprocessing", "loky", "mizu", "threading"])', 1),
    ],
}


def edited_suites(folder):
    """Write the edited copies of joblib's test files, and the helpers, into folder; return the tests' paths."""
    tests = os.path.join(os.path.dirname(joblib.__file__), "test")
    for name in HELPERS:
        shutil.copy(os.path.join(tests, name), folder)
    paths = []
    for name, edits in SUITES.items():
        with open(os.path.join(tests, name)) as file:
            text = file.read()
        for old, new, count in edits:
            if old and text.count(old) != count:
                raise SystemExit(f"joblib {joblib.__version__}'s {name} no longer has {old.strip()!r} {count} "
                                 f"time(s) but {text.count(old)}: update SUITES in {__file__}")
            text = text.replace(old, new) if old else new + text
        paths.append(os.path.join(folder, name))
        with open(paths[-1], "w") as file:
            file.write(text)
    return paths


def outcomes(report):
    """{"file::test id": "passed" | "failed" | "skipped"} from pytest's junit XML (file without .py)."""
    found = {}
    for case in ElementTree.parse(report).getroot().iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            outcome = "failed"
        elif case.find("skipped") is not None:
            outcome = "skipped"
        else:
            outcome = "passed"
        found[f"{case.get('classname').rsplit('.', 1)[-1]}::{case.get('name')}"] = outcome
    return found


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timeout", type=float, default=300, help="seconds any one test may take (default 300)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        suites = edited_suites(folder)
        report = os.path.join(folder, "report.xml")
        command = [sys.executable, "-P", "-m", "pytest", *suites, "-q", "-p", "no:cacheprovider", "-k", "mizu or loky",
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
    # A mizu case that fails where loky's twin does not, and one that does
    # not pass (fails, skips, or never ran) where loky's passes, in a test
    # that has mizu cases (others are loky's alone: its reuse of workers,
    # its own memmapping pool).
    problems = {}
    with_mizu = {name.split("[")[0] for name in found if "mizu" in name}
    for name, outcome in found.items():
        twin = name.replace("loky", "mizu")
        if "mizu" in name and outcome == "failed" and found.get(name.replace("mizu", "loky")) != "failed":
            problems[name] = outcome
        if "loky" in name and outcome == "passed" and twin.split("[")[0] in with_mizu and found.get(twin) != "passed":
            problems[twin] = found.get(twin, "not run")
    regressions, differences = [], []
    for name in sorted(problems):
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
        print(f"  {problems[name].upper()} where loky passes: {name}")
    if not mizu_cases:
        print("no mizu case ran")
        return 1
    return 1 if regressions else 0


if __name__ == "__main__":
    sys.exit(main())
