"""What the Dask tests share: distributed's mark on pickling, kept to them."""

import pytest

from helpers import without_tblib_reducers


@pytest.fixture(scope="module", autouse=True)
def tblib_reducers_removed():
    """After each module, tblib's reducers, which distributed registers, leave copyreg's table."""
    yield
    without_tblib_reducers()
