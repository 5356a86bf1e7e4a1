"""Building the R package: once per library, safely when processes race, with errors that name the fix."""

import os
import subprocess
import sys

import pytest

import mizu
from mizu._r import package as rpackage
from rsession import run_rscript

_ENSURE = "from mizu._r import package; print(package.ensure_installed())"


def _python(code, cwd, **env):
    """A Python child running code, from cwd: outside the source folder."""
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=dict(os.environ, **env), cwd=cwd)


def test_processes_racing_to_build_build_once(tmp_path):
    library = tmp_path / "library"
    racers = [_python(_ENSURE, tmp_path, MIZU_R_LIBRARY=str(library)) for _ in range(2)]
    results = [racer.communicate(timeout=600) for racer in racers]
    assert [racer.returncode for racer in racers] == [0, 0], results
    assert [out.strip() for out, _ in results] == [str(library)] * 2
    building = [err for _, err in results if "mizu: building the R package into" in err]
    assert len(building) == 1, results
    assert run_rscript(library, "library(mizu); cat(mizu:::decode(mizu:::encode(41L)$message) + 1L)") == "42"
    # Built already: the command-line spelling says where, and builds nothing.
    done = subprocess.run([sys.executable, "-m", "mizu._r.package"], capture_output=True, text=True,
                          env=dict(os.environ, MIZU_R_LIBRARY=str(library)), timeout=60, cwd=tmp_path)
    assert (done.returncode, done.stdout.strip(), done.stderr) == (0, str(library), "")


def test_a_build_without_a_compiler_says_what_to_install(tmp_path):
    makevars = tmp_path / "Makevars"
    makevars.write_text("CXX17 = /nonexistent/bin/g++\n")
    racer = _python(_ENSURE, tmp_path, MIZU_R_LIBRARY=str(tmp_path / "library"), R_MAKEVARS_USER=str(makevars))
    _, err = racer.communicate(timeout=600)
    assert racer.returncode != 0
    assert "RPackageBuildError" in err and "apt-get install r-base-dev" in err, err
    assert "/nonexistent/bin/g++" in err
    assert not (tmp_path / "library" / "mizu").exists()


def test_without_r_the_error_says_how_to_install_it(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="apt-get install r-base-core r-base-dev"):
        rpackage.find_rscript()


def test_the_default_library_is_keyed_by_r_and_mizu_versions(monkeypatch, tmp_path):
    monkeypatch.delenv("MIZU_R_LIBRARY", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    r_version = run_rscript(tmp_path, "cat(as.character(getRversion()))")
    assert rpackage.library_dir() == tmp_path / "mizu" / f"R-{r_version}-mizu-{mizu.__version__}"


def test_the_r_package_s_own_tests_pass(r_library, testthat):
    """The R package's testthat tests, run by Rscript against the package as it is installed."""
    tests = os.path.join(os.path.dirname(rpackage.__file__), "rpackage", "tests", "testthat")
    code = (f"testthat::test_dir({tests!r}, package = 'mizu', load_package = 'installed', "
            "reporter = 'summary', stop_on_failure = TRUE)")
    run_rscript(r_library, code)


def test_the_sources_for_r_cmd_check_hold_the_core_and_the_tests(tmp_path):
    command = [sys.executable, "-m", "mizu._r.package", "--source", str(tmp_path)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert (done.returncode, done.stdout.strip(), done.stderr) == (0, str(tmp_path / "mizu"), "")
    written = {path.relative_to(tmp_path / "mizu").as_posix() for path in (tmp_path / "mizu").rglob("*")}
    assert {"DESCRIPTION", "src/Makevars", "src/core/wire.hpp", "src/core/wire.cpp", "tests/testthat.R"} <= written
    # The package's own headers are .h: R CMD check warns of any other suffix at the top of src/.
    assert not [name for name in written if name.startswith("src/") and name.count("/") == 1
                and name.endswith(".hpp")]
    again = subprocess.run(command, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert again.returncode == 1 and "exists already" in again.stderr
