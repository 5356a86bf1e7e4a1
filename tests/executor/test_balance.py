"""Tasks queued behind a running one move to a worker that idles, and each still runs once: the stdlib's pool is the oracle.

Each task appends a line to a log; read once the pool has shut down, it
shows a task that ran twice even when that run's result was dropped.
"""

import concurrent.futures as cf
import random

import children
import executor_children


def ran(log):
    with open(log) as lines:
        return sorted(int(line) for line in lines)


def test_no_task_waits_behind_a_running_one_while_a_worker_idles(executor_type, tmp_path):
    started, gate, log = str(tmp_path / "started"), str(tmp_path / "gate"), str(tmp_path / "log")
    with executor_type(2) as ex:
        running = ex.submit(executor_children.announce_then_wait, started, gate)
        children.wait_for_file(started)
        # Each wave sends a second task behind the running one; every wave
        # ends while it still runs.
        for wave in range(5):
            short = [ex.submit(executor_children.record, log, 20 * wave + i, 0.001) for i in range(20)]
            done, late = cf.wait(short, timeout=60)
            assert not late, f"wave {wave}: {len(late)} of 20 short tasks waited behind the running one"
            assert [f.result() for f in short] == list(range(20 * wave, 20 * wave + 20))
        assert not running.done()
        open(gate, "w").close()
        assert running.result(timeout=60) > 0
        # The worker that ran the long task takes tasks again.
        assert list(ex.map(executor_children.record, [log] * 20, range(100, 120))) == list(range(100, 120))
    assert ran(log) == list(range(120))


def test_tasks_of_uneven_lengths_each_run_once_and_in_full(executor_type, tmp_path):
    # Tasks of 0 to 3 ms on 4 workers: queues empty at different times, and
    # tasks are taken back from busy workers while they may be starting them.
    seconds = random.Random(7).choices([0.0, 0.0, 0.0005, 0.003], k=400)
    log = str(tmp_path / "log")
    with executor_type(4) as ex:
        for burst in range(4):
            futures = [ex.submit(executor_children.record, log, 1000 * burst + i, s) for i, s in enumerate(seconds)]
            assert [f.result(timeout=60) for f in futures] == [1000 * burst + i for i in range(len(seconds))]
    assert ran(log) == [1000 * burst + i for burst in range(4) for i in range(len(seconds))]
