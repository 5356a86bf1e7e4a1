"""Fixtures for the R side: its library, and an Rscript serving requests over shared memory.

Every test here runs real Rscript processes with the installed mizu's R
package; they are skipped only when R itself is missing.
"""

import pytest

import mizu
from mizu._r import package as rpackage

from helpers import require
from rsession import RSession, r_has_package

try:
    rpackage.find_rscript()
    _NO_R = None
except FileNotFoundError as exc:
    _NO_R = str(exc)


@pytest.fixture(scope="session", autouse=True)
def _r_is_installed():
    """Each test here skips without R, saying why. (A skip at import, from a conftest, would abort pytest when
    it is given tests/r.)"""
    require(_NO_R is None, _NO_R)


@pytest.fixture(scope="session")
def r_library(_r_is_installed):
    """The R library holding the R package, built on first use."""
    return rpackage.ensure_installed()


def _r_package(library, name, what):
    require(r_has_package(library, name), f"R's {name} package is not installed (on Debian or Ubuntu: apt-get "
                                          f"install r-cran-{name}), which {what}")


@pytest.fixture(scope="session")
def bit64(r_library):
    """R's bit64, without which int64 columns reach R as doubles: skips (or fails under .ci/run) without it."""
    _r_package(r_library, "bit64", "int64 columns need as R's integer64")


@pytest.fixture(scope="session")
def testthat(r_library):
    """R's testthat, which runs the R package's own tests: skips (or fails under .ci/run) without it."""
    _r_package(r_library, "testthat", "runs the R package's own tests")


@pytest.fixture(scope="module")
def r_session(r_library):
    """An R session that inherits the default arena's first segment."""
    block, _, _ = mizu.arena_block(mizu.empty(1))
    session = RSession(r_library, [block.fd])
    try:
        yield session
    finally:
        session.close()
