"""The tasks of the Dask tests that the other layers' do not share."""

import os


def pid_and_parent(*_):
    """(this process's pid, its parent's): where a task ran."""
    return os.getpid(), os.getppid()
