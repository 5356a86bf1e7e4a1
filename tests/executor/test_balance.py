"""Tasks queued behind a running one move to a worker that idles, and each still runs once: the stdlib's pool is the oracle."""

import concurrent.futures as cf
import os
import random

import children


def test_no_task_waits_behind_a_running_one_while_a_worker_idles(executor_type, tmp_path):
    started, gate, marks = str(tmp_path / "started"), str(tmp_path / "gate"), tmp_path / "marks"
    marks.mkdir()
    with executor_type(2) as ex:
        running = ex.submit(children.announce_then_wait, started, gate)
        children.wait_for_file(started)
        # Each worker is sent a second task behind the one it runs; the
        # running one ends only once every short task is done.
        short = [ex.submit(children.mark_once, str(marks), i, 0.001) for i in range(20)]
        done, late = cf.wait(short, timeout=60)
        assert not late, f"{len(late)} of 20 short tasks waited behind the running one while a worker was idle"
        assert not running.done()
        open(gate, "w").close()
        assert running.result(timeout=60) > 0
    assert [f.result() for f in short] == list(range(20))
    assert sorted(os.listdir(marks), key=int) == [str(i) for i in range(20)]


def test_tasks_of_uneven_lengths_each_run_once_and_in_full(executor_type, tmp_path):
    # Tasks of 0 to 3 ms on 4 workers: queues empty at different times, and
    # tasks are taken back from busy workers while they may be starting them.
    seconds = random.Random(7).choices([0.0, 0.0, 0.0005, 0.003], k=400)
    with executor_type(4) as ex:
        for burst in range(4):
            folder = tmp_path / str(burst)
            folder.mkdir()
            futures = [ex.submit(children.mark_once, str(folder), i, s) for i, s in enumerate(seconds)]
            assert [f.result(timeout=60) for f in futures] == list(range(len(seconds)))
            assert len(os.listdir(folder)) == len(seconds)
