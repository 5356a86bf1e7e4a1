"""What the joblib tests share: no reusable pool outlives a test."""

import pytest


@pytest.fixture(autouse=True)
def pools_shut_down(tmp_path, monkeypatch):
    """Neither backend's reusable pool outlives a test: the leak check after it would count their workers.

    loky's memmapping folders go to tmp_path, not /dev/shm, which its
    resource tracker cleans only later. joblib is imported once a test has
    run: a module without it skips (or fails under .ci/run) before, saying
    what to install.
    """
    monkeypatch.setenv("JOBLIB_TEMP_FOLDER", str(tmp_path))
    yield
    from joblib.externals.loky import get_reusable_executor

    from mizu import _joblib

    _joblib.shutdown()
    get_reusable_executor().shutdown(wait=True)
