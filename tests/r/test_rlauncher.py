"""The R pool's launcher follows the launcher protocol (mizu._launchers.Launcher), as the Python pool's does."""

import mizu
from mizu._launchers import Launcher
from mizu._r.launcher import RLauncher


def test_the_launcher_of_an_r_pool_follows_the_protocol(r_library):
    with mizu.RExecutor(1) as pool:
        launcher = pool._pool.launcher
        assert isinstance(launcher, RLauncher) and isinstance(launcher, Launcher)
        assert pool.submit("function(x) x * 2", 21).result() == 42
