"""Dask's distributed workers on mizu pools: mizu.dask's WorkerPlugin on a LocalCluster, its preload on `dask worker`.

The clusters listen on loopback. The oracle is the same cluster's workers
running the same tasks on Dask's own executor, before the plugin is
registered.
"""

import concurrent.futures
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from concurrent.futures.process import BrokenProcessPool

import numpy as np
import pytest

import children
import dask_children
from helpers import TESTS, child_environ, exit_all, process_state, require

try:
    import dask
    import dask.array as da
    import dask.dataframe as dd
    import pandas as pd
    from distributed import Client, LocalCluster, get_worker, rejoin, secede
except ImportError as exc:
    require(False, f"Dask's distributed is not installed ({exc}): pip install distributed", module=True)

# Outside the try: a mizu.dask that fails to import fails these tests, not skips them.
import mizu.dask  # noqa: E402

SWITCH = os.path.join(TESTS, "dask", "one_line_switch.py")


@pytest.fixture
def cluster():
    """Two workers of two threads each, in processes that nannies start, and a client of them."""
    with LocalCluster(n_workers=2, threads_per_worker=2, host="127.0.0.1", dashboard_address=":0") as local:
        with Client(local) as client:
            yield client


def task_processes(client):
    """{worker address: (worker pid, the pids of its pool's processes)}."""
    return client.run(lambda: (os.getpid(), [p.pid for p in multiprocessing.active_children()]))


def innermost_frame(exc):
    tb = exc.__traceback__
    while tb.tb_next is not None:
        tb = tb.tb_next
    return tb.tb_frame.f_code.co_name


def workload(client):
    """What the tasks return, and how they fail, with lambdas, closures, arrays and graphs that Dask builds."""
    offset = 7
    out = {
        "map": client.gather(client.map(children.double, range(200))),
        "lambda": client.submit(lambda v: v * 3, 14).result(),
        "closure": client.gather(client.map(lambda v: v + offset, range(5))),
        "keywords": client.submit(children.add, 1, b=2, c=3).result(),
    }
    # A 64 MB array that one task makes and the next takes as a dependency.
    made = client.submit(np.full, 1 << 23, 1.5)
    out["array"] = client.submit(np.sum, client.submit(np.multiply, made, 2)).result()
    x = da.random.default_rng(3).standard_normal((2000, 1000), chunks=(500, 500))
    out["dask.array"] = client.compute(((x - x.mean(axis=0)) ** 2).sum()).result()
    with pytest.raises(ValueError) as raised:
        client.submit(children.fail_at, 7).result()
    out["error"] = (type(raised.value), str(raised.value), innermost_frame(raised.value))
    with pytest.raises(ZeroDivisionError) as raised:
        client.submit(lambda: 1 / 0).result()
    out["lambda error"] = str(raised.value)
    return out


def test_tasks_run_in_mizu_processes_and_return_what_dasks_own_executor_returns(cluster):
    expected = workload(cluster)
    workers = task_processes(cluster)
    # Under fork, as the tests below read: a pool's processes are its worker's children.
    cluster.register_plugin(mizu.dask.WorkerPool(start_method="fork"))
    assert workload(cluster) == expected
    pools = task_processes(cluster)
    assert all(len(pids) == 2 for _, pids in pools.values()), "each worker's pool has one process per thread"
    ran = cluster.gather(cluster.map(dask_children.pid_and_parent, range(40), pure=False))
    pool_pids = {pid for _, pids in pools.values() for pid in pids}
    assert {pid for pid, _ in ran} <= pool_pids
    assert {parent for _, parent in ran} <= {pid for pid, _ in workers.values()}
    cluster.unregister_worker_plugin("mizu")
    assert workload(cluster) == expected
    exit_all(pool_pids, 30)
    ran = cluster.gather(cluster.map(dask_children.pid_and_parent, range(20), pure=False))
    assert {pid for pid, _ in ran} <= {pid for pid, _ in workers.values()}, "the workers run tasks in threads again"


def p2p_workload(client):
    frame = pd.DataFrame({"key": np.arange(4000) % 37, "value": np.arange(4000.0)})
    ddf = dd.from_pandas(frame, npartitions=8)
    x = da.arange(160_000, chunks=4000).reshape(400, 400).rechunk((400, 10))
    with dask.config.set({"dataframe.shuffle.method": "p2p", "array.rechunk.method": "p2p"}):
        shuffled = client.compute(ddf.shuffle("key")).result().sort_values("value").reset_index(drop=True)
        merged = client.compute(ddf.merge(ddf, on="key").value_x.sum()).result()
        rechunked = client.compute(x.rechunk((10, 400)).sum(axis=0)).result()
    return shuffled, merged, rechunked


def test_dasks_p2p_shuffles_merges_and_rechunks_run(cluster):
    """Their tasks reach the worker itself, so they run in its threads."""
    expected = p2p_workload(cluster)
    cluster.register_plugin(mizu.dask.WorkerPool())
    shuffled, merged, rechunked = p2p_workload(cluster)
    pd.testing.assert_frame_equal(shuffled, expected[0])
    assert merged == expected[1]
    np.testing.assert_array_equal(rechunked, expected[2])


@pytest.mark.parametrize("start_method", ["forkserver", "spawn"])
def test_pools_of_each_start_method_run_what_the_client_sends(cluster, start_method):
    cluster.register_plugin(mizu.dask.WorkerPool(start_method=start_method))
    offset = 5
    assert cluster.gather(cluster.map(lambda v: v + offset, range(10))) == list(range(5, 15))
    assert cluster.submit(np.sum, cluster.submit(np.full, 1 << 20, 2.0)).result() == 2.0 * (1 << 20)
    ran = cluster.gather(cluster.map(dask_children.pid_and_parent, range(20), pure=False))
    # Under forkserver, a pool's processes are the fork server's children, not the worker's.
    assert {pid for pid, _ in ran} <= {pid for _, pool in task_processes(cluster).values() for pid in pool}


def test_a_named_executor_takes_the_tasks_annotated_with_it_and_by_value_false_pickles_by_name(cluster):
    """WorkerPool(executor="pool", by_value=False): tasks annotated with the executor run in the pool's processes,
    others in the worker's threads as before. Without by_value, the pool pickles a function by its name, and a
    lambda that the client sent fails as the stdlib's pool fails on it. Removing the plugin takes the executor
    and its processes away."""
    workers = {pid for pid, _ in task_processes(cluster).values()}
    cluster.register_plugin(mizu.dask.WorkerPool(executor="pool", by_value=False, start_method="fork"))
    plain = cluster.gather(cluster.map(dask_children.pid_and_parent, range(20), pure=False))
    with dask.annotate(executor="pool"):
        pooled = cluster.gather(cluster.map(dask_children.pid_and_parent, range(20), pure=False))
    pools = {pid for _, pids in task_processes(cluster).values() for pid in pids}
    assert {pid for pid, _ in plain} <= workers
    assert {pid for pid, _ in pooled} <= pools and {parent for _, parent in pooled} <= workers
    offset = 3
    assert cluster.submit(lambda v: v + offset, 1).result() == 4
    with dask.annotate(executor="pool"):
        in_pool = cluster.submit(lambda v: v + offset, 1)
    with pytest.raises(Exception) as raised:
        in_pool.result()
    with concurrent.futures.ProcessPoolExecutor(1) as stdlib, pytest.raises(Exception) as oracle:
        stdlib.submit(lambda v: v + offset, 1).result()
    assert type(raised.value) is type(oracle.value) and "<locals>.<lambda>" in str(raised.value), raised.value
    cluster.unregister_worker_plugin("mizu-pool")
    assert set(map(tuple, cluster.run(lambda dask_worker: sorted(dask_worker.executors)).values())) == {
        ("actor", "default", "offload")}
    exit_all(pools, 30)


def test_inside_a_task_the_worker_is_not_found(cluster):
    """get_worker() raises an exception that does not pickle: the task fails with Dask's copy of it."""
    cluster.register_plugin(mizu.dask.WorkerPool())
    with pytest.raises(Exception, match="No worker found"):
        cluster.submit(get_worker).result()


def test_a_task_that_kills_its_pools_process_fails_and_the_worker_goes_on(cluster):
    cluster.register_plugin(mizu.dask.WorkerPool(1))
    victim = cluster.submit(children.die, pure=False)
    with pytest.raises(BrokenProcessPool, match="terminated abruptly with exit code 3"):
        victim.result()
    assert cluster.gather(cluster.map(children.double, range(50))) == [2 * i for i in range(50)]


def test_a_worker_killed_mid_task_is_replaced_and_its_task_rerun(cluster, tmp_path):
    cluster.register_plugin(mizu.dask.WorkerPool(start_method="fork"))
    started = tmp_path / "started"
    future = cluster.submit(children.announce_then_nap, str(started), 3, pure=False)
    deadline = time.monotonic() + 60
    while not started.exists():
        assert time.monotonic() < deadline, "the task did not start"
        time.sleep(0.01)
    worker_pid = process_state(int(started.read_text()))[1]
    killed_pool = [pid for pid in map(int, filter(str.isdigit, os.listdir("/proc")))
                   if (process_state(pid) or (None, None))[1] == worker_pid]
    os.kill(worker_pid, signal.SIGKILL)
    assert future.result(timeout=120) == 3
    # The killed worker's pool ends with it; the nanny's new worker has a pool of its own.
    exit_all(killed_pool, 30)
    cluster.wait_for_workers(2, timeout=60)
    ran = cluster.gather(cluster.map(dask_children.pid_and_parent, range(40), pure=False))
    assert worker_pid not in {parent for _, parent in ran}
    assert {parent for _, parent in ran} <= {pid for pid, _ in task_processes(cluster).values()}


def test_closing_the_cluster_leaves_no_process_behind():
    with LocalCluster(n_workers=1, threads_per_worker=2, host="127.0.0.1", dashboard_address=":0") as local:
        with Client(local) as client:
            client.register_plugin(mizu.dask.WorkerPool())
            assert client.submit(sum, range(10)).result() == 45
            pids = [pid for _, pool in task_processes(client).values() for pid in pool]
    exit_all(pids, 30)


def test_the_plugins_arguments_are_checked():
    with pytest.raises(ValueError, match="max_workers must be a positive int"):
        mizu.dask.WorkerPool(0)
    with pytest.raises(ValueError, match="start_method must be one of"):
        mizu.dask.WorkerPool(start_method="thread")
    with pytest.raises(ValueError, match="executor must name an executor other than"):
        mizu.dask.WorkerPool(executor="offload")
    with pytest.raises(ValueError, match="max_tasks_per_child needs start_method 'spawn' or 'forkserver'"):
        mizu.dask.WorkerPool(max_tasks_per_child=3, start_method="fork")


def test_removing_the_plugin_gives_the_workers_dasks_thread_pools_back(cluster):
    cluster.register_plugin(mizu.dask.WorkerPool(max_tasks_per_child=5))
    assert cluster.gather(cluster.map(children.double, range(30))) == [2 * i for i in range(30)]
    cluster.unregister_worker_plugin("mizu")
    kinds = cluster.run(lambda dask_worker: type(dask_worker.executor).__module__)
    assert set(kinds.values()) == {"distributed.threadpoolexecutor"}
    assert cluster.submit(lambda: (secede(), rejoin(), 1)[-1], pure=False).result() == 1


@pytest.fixture(scope="module")
def preloaded(tmp_path_factory):
    """A scheduler on loopback and a `dask worker --preload mizu.dask` of two threads: (address, worker's pid).

    The worker runs in a folder of its own: `python -m` puts the current
    folder first on sys.path, where a source checkout's mizu/ would shadow the
    installed package.
    """
    folder = tmp_path_factory.mktemp("worker")
    with LocalCluster(n_workers=0, host="127.0.0.1", dashboard_address=":0") as local:
        worker = subprocess.Popen(
            [sys.executable, "-m", "distributed.cli.dask_worker", local.scheduler_address, "--nthreads", "2",
             "--no-nanny", "--no-dashboard", "--host", "127.0.0.1", "--preload", "mizu.dask"],
            cwd=folder, env=child_environ(), stdout=subprocess.DEVNULL, stderr=open(folder / "stderr", "w"))
        try:
            with Client(local) as client:
                deadline = time.monotonic() + 120
                while not client.scheduler_info()["workers"]:
                    assert worker.poll() is None and time.monotonic() < deadline, \
                        f"dask worker did not start: {(folder / 'stderr').read_text()[-3000:]}"
                    time.sleep(0.1)
            yield local.scheduler_address, worker.pid
        finally:
            worker.send_signal(signal.SIGTERM)
            try:
                worker.wait(60)
            finally:
                worker.kill()
                worker.wait()


def test_a_preloaded_worker_runs_its_tasks_in_its_mizu_pool(preloaded):
    address, worker_pid = preloaded
    with Client(address) as client:
        ran = client.gather(client.map(dask_children.pid_and_parent, range(20), pure=False))
        pools = task_processes(client)
        assert [pid for pid, _ in pools.values()] == [worker_pid]
        assert {pid for pid, _ in ran} <= {pid for _, pool in pools.values() for pid in pool}
        assert worker_pid not in {pid for pid, _ in ran}


def run_switch(*argv):
    done = subprocess.run([sys.executable, SWITCH, *argv], env=child_environ(), capture_output=True, text=True,
                          timeout=120, cwd=os.path.dirname(SWITCH))
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_one_line_switches_a_program_between_mizu_and_dask(preloaded):
    """The same program prints the same with a mizu pool, and with get_executor() of a cluster of mizu workers
    and of Dask's own."""
    address, _ = preloaded
    expected = run_switch("mizu")
    assert "ZeroDivisionError" in expected and "[0, 1, 4, 9" in expected
    assert run_switch("dask", address) == expected
    with LocalCluster(n_workers=1, threads_per_worker=2, host="127.0.0.1", dashboard_address=":0") as local:
        assert run_switch("dask", local.scheduler_address) == expected
