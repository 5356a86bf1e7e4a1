"""The launcher protocol (mizu._launchers.Launcher): what the pool engine asks of a kind of worker."""

import mizu
from mizu._launchers import Launcher


def test_the_launcher_of_a_python_pool_follows_the_protocol():
    with mizu.ProcessPoolExecutor(1) as ex:
        launcher = ex._pool.launcher
        assert isinstance(launcher, Launcher)
        assert ex.submit(pow, 2, 5).result() == 32


def test_an_object_without_all_of_the_protocol_is_not_a_launcher():
    class Starts:
        codec = None
        on_demand = paced = safe_with_threads = False
        starting_hint = setup_name = ""

        def launch(self, index, tasks, results, rings=None):
            raise NotImplementedError

        def keep_spare(self, rings, results):
            pass

        def close(self):
            pass

    assert isinstance(Starts(), Launcher)
    del Starts.setup_name
    assert not isinstance(Starts(), Launcher)
    assert not isinstance(object(), Launcher)
