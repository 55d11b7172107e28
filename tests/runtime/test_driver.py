"""The driver: how every run ends, and the run's clock in another process."""

from __future__ import annotations

import time

import pytest

from dqnlab.runtime.driver import RunClock, run_to_end
from dqnlab.runtime.errors import DivergedError, TaskFailed, WorkerError
from dqnlab.runtime.loop import RunLoop


def test_the_run_clock_puts_the_start_and_deadline_on_this_process_clock():
    t0 = time.perf_counter() - 2.0
    clock = RunClock(time.time() - (time.perf_counter() - t0), max_seconds=10.0)
    start, deadline = clock.local()
    assert start == pytest.approx(t0, abs=0.05) and deadline == pytest.approx(t0 + 10.0, abs=0.05)
    assert RunClock(time.time(), None).local()[1] is None


@pytest.mark.parametrize("raised,expected,worker", [
    (KeyboardInterrupt(), None, None),
    (FloatingPointError("non-finite TD loss (nan) at update 7"), DivergedError, None),
    (TaskFailed(1, "RuntimeError: boom", "tb"), WorkerError, 1),
    (TaskFailed(0, "FloatingPointError: non-finite TD loss (inf) at update 3", "tb"), DivergedError, 0),
])
def test_every_way_a_run_ends(tiny_config, raised, expected, worker):
    loop = RunLoop(tiny_config, progress=False)
    statuses = []

    def result(status=None):
        statuses.append(status or loop.status)
        return statuses[-1]

    def body():
        raise raised

    if expected is None:
        assert run_to_end("serial", loop, body, result) == "interrupted"
        return
    with pytest.raises(expected) as info:
        run_to_end("serial", loop, body, result)
    assert info.value.partial == "failed" and info.value.worker == worker
    if expected is DivergedError:
        assert info.value.update in (3, 7)


def test_the_run_directory_is_written_once_at_the_end(tiny_config, tmp_path, monkeypatch):
    import dqnlab
    from dqnlab.runtime.checkpoint import Checkpointer

    writes = []
    real_write, real_save = Checkpointer.write, Checkpointer.save_results
    monkeypatch.setattr(Checkpointer, "write", lambda self, *a: writes.append("checkpoint") or real_write(self, *a))
    monkeypatch.setattr(Checkpointer, "save_results", lambda self, r: writes.append("results") or real_save(self, r))
    run = dqnlab.train("serial", tiny_config.replace(total_env_steps=400), progress=False, run_dir=tmp_path)
    assert writes == ["checkpoint", "results"]  # the final checkpoint writes the result files with it, once
    assert run.extra["checkpoint"]["checkpoints_written"] == 1 and (tmp_path / "model.pt").exists()


def test_the_run_clock_stops_when_the_run_ends_so_result_and_checkpoint_agree(tiny_config):
    loop = RunLoop(tiny_config.replace(total_env_steps=None, max_seconds=0.01), progress=False)
    time.sleep(0.02)
    assert loop.done and loop.status == "completed"
    ended = loop.elapsed
    time.sleep(0.05)
    assert loop.elapsed == ended and loop.state_dict()["elapsed"] == ended
    assert ended >= 0.01


@pytest.mark.parametrize("stop", [False, True])
def test_the_bar_left_on_the_page_is_full_when_the_budget_is_spent(tiny_config, stop):
    loop = RunLoop(tiny_config.replace(total_env_steps=None, max_seconds=0.05), progress=True)
    loop.bar.update(0.3 - loop.bar.n)  # the last report came before the budget's end
    if stop:
        loop.status = "stopped"
    else:
        time.sleep(0.06)
        assert loop.done
    loop.close()
    assert (loop.bar.n == loop.bar.total) is not stop  # a stopped run's bar stays where it stopped


def test_a_notebook_cells_runs_bar_is_full_once_every_run_ended():
    from types import SimpleNamespace

    from dqnlab.experiments.trials import RunsProgress

    with RunsProgress(10.0, "two runs") as bar:
        bar.run("first", 5.0)(SimpleNamespace(wall_time_s=1.0))
        bar.run("second", 5.0)(SimpleNamespace(wall_time_s=0.5))  # smoke mode: runs end before their budgets
    assert bar._bar.n == bar._bar.total == 10.0
