"""The parallel schemes end to end: one worker equals serial, totals, callbacks, faults, options, CLI.

Budgets are tiny (a few thousand env steps of a 32-unit network) and no test asserts
a speed: the machine is small and shared.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from helpers import check_totals, max_diff

import dqnlab
from dqnlab import RunResult, TrainConfig
from dqnlab.parallel.faults import inject
from dqnlab.schemes import SCHEMES, WorkerError

PARALLEL = ("independent", "shared", "sharded", "averaged")


# ----------------------------------------------------------------------------- one worker degenerates to serial
@pytest.mark.parametrize("scheme,options", [
    ("independent", {"sync": "none"}), ("independent", {"sync": "periodic", "sync_every": 10}),
    ("shared", {}), ("sharded", {}), ("averaged", {}),
])


def test_one_worker_plays_the_same_games_as_serial(cfg, scheme, options):
    config = cfg.replace(total_env_steps=2_000)
    serial = dqnlab.train("serial", config, progress=False)
    run = dqnlab.train(scheme, config, workers=1, progress=False, **options)
    cols = ["worker", "episode", "env_steps", "score", "moves", "max_tile"]
    assert len(serial.episodes) > 3
    assert run.episodes[cols].equals(serial.episodes[cols])
    assert run.updates == serial.updates and run.env_steps == serial.env_steps
    assert max_diff(run.weights, serial.weights) < 1e-5


# ----------------------------------------------------------------------------- end to end, 2 workers
@pytest.mark.parametrize("scheme", ["sharded", "averaged"])
def test_synchronous_schemes_end_to_end(cfg, scheme):
    config = cfg.replace(total_env_steps=2_000, replay_ratio=4.0)  # one joblib round per update: keep them few
    run = dqnlab.train(scheme, config, workers=2, progress=False)
    check_totals(run, config, 2)
    assert run.extra["effective_batch"] == (cfg.batch_size if scheme == "sharded" else 2 * cfg.batch_size)
    assert run.time_split["communication"] > 0


def test_callback_can_stop_a_parallel_run(cfg):
    seen = []

    def stop(snapshot: RunResult) -> bool:
        seen.append(snapshot.env_steps)
        return True

    run = dqnlab.train("independent", cfg.replace(total_env_steps=1_000_000), workers=2, progress=False,
                       callback=stop)
    assert run.status == "stopped" and seen
    assert run.env_steps < 1_000_000 and len(run.extra["per_worker"]) == 2


# ----------------------------------------------------------------------------- worker faults
@pytest.mark.parametrize("scheme", PARALLEL)
def test_worker_exception_surfaces_with_index_traceback_and_data(cfg, scheme):
    # 2 boards per worker: games end after fewer env steps, so a short run has some to keep
    config = cfg.replace(total_env_steps=40_000, n_envs=2, learning_starts=400)
    # long-lived workers count their env steps; round workers see the update number
    fault = {"worker": 1, **({"after_env_steps": 1_000} if scheme in ("independent", "shared")
                             else {"after_updates": 100})}
    with pytest.raises(WorkerError) as info, inject(fault):
        dqnlab.train(scheme, config, workers=2, progress=False)
    err = info.value
    assert err.worker == 1 and err.scheme == scheme
    assert "injected fault in worker 1" in str(err) and "worker 1" in str(err)
    assert "Traceback" in err.worker_traceback and "check_fault" in err.worker_traceback
    partial = err.partial
    assert isinstance(partial, RunResult) and partial.status == "failed"
    assert len(partial.episodes) > 0 and partial.env_steps < config.total_env_steps
    if scheme in ("independent", "shared"):  # the failing worker's own games are kept too
        assert (partial.episodes["worker"] == 1).any()


def test_worker_process_crash_does_not_hang(cfg):
    with pytest.raises(WorkerError) as info, inject({"worker": 0, "after_env_steps": 800, "kind": "exit"}):
        dqnlab.train("independent", cfg.replace(total_env_steps=40_000), workers=2, progress=False)
    assert "died" in str(info.value)
    assert info.value.partial is not None


# ----------------------------------------------------------------------------- options
@pytest.mark.parametrize("scheme,options,match", [
    ("independent", {"sync": "sometimes"}, "sync must be one of"),
    ("independent", {"sync_every": 0}, "sync_every"),
    ("independent", {"final_fraction": 1.5}, "final_fraction"),
    ("independent", {"temperature": -1.0}, "temperature"),
    ("shared", {"lock": "yes"}, "lock"),
    ("averaged", {"lock": True}, "does not take"),
    ("sharded", {"sync": "none"}, "does not take"),
])


def test_bad_scheme_options_are_clear_errors(cfg, scheme, options, match):
    with pytest.raises(ValueError, match=match):
        dqnlab.train(scheme, cfg, workers=2, progress=False, **options)


def test_private_hooks_are_not_advertised_nor_taken():
    with pytest.raises(ValueError) as info:
        dqnlab.train("serial", TrainConfig(total_env_steps=100), workers=1, progress=False, sync="none")
    assert "_fault" not in str(info.value) and "_checkpoint" not in str(info.value) and "takes none" in str(info.value)
    with pytest.raises(ValueError) as info:
        dqnlab.train("sharded", TrainConfig(total_env_steps=100), workers=1, progress=False, sync="none")
    assert "_fault" not in str(info.value) and "it takes ['comm']" in str(info.value)
    with pytest.raises(ValueError, match="_fault"):  # (a test injects a fault: faults.inject)
        dqnlab.train("shared", TrainConfig(total_env_steps=100), workers=2, progress=False, _fault={"worker": 1})
    assert set(SCHEMES) >= {"serial", *PARALLEL}


# ----------------------------------------------------------------------------- command line
def test_cli_wrong_option_for_scheme_is_one_line_exit_2():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-m", "dqnlab", "train", "--scheme", "sharded", "--workers", "2",
                           "--sync", "periodic"], check=False, capture_output=True, text=True, env=env,
                          timeout=120)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "--sync" in lines[0] and "sharded" in lines[0]


@pytest.mark.slow  # seven timed runs, each with its own pool
def test_bench_scaling_rows(monkeypatch):
    from dqnlab.bench import bench_scaling

    config = TrainConfig(n_envs=8, buffer_size=2_000, batch_size=32, learning_starts=200, hidden=(32,))
    rows = bench_scaling(["serial", "averaged", "sharded:joblib", "averaged:average_every=3"], [1, 2], seconds=0.8,
                         config=config)
    assert [(r["spec"], r["workers"]) for r in rows] == [
        ("serial", 1), ("averaged", 1), ("averaged", 2), ("sharded:joblib", 1), ("sharded:joblib", 2),
        ("averaged:average_every=3", 1), ("averaged:average_every=3", 2)]
    for r in rows:
        assert r["env_steps_per_s"] > 0 and r["updates_per_s"] >= 0
        assert r["acting"] + r["learning"] + r["communication"] == pytest.approx(1.0)
    assert rows[0]["speedup_vs_serial"] == 1.0
    assert rows[2]["options"]["comm"] == "allreduce" and rows[4]["options"]["comm"] == "joblib"
    assert rows[6]["options"]["average_every"] == 3
    for bad, match in [("nope", "schemes must be scheme names"), ("serial:joblib", "serial takes options none"),
                       ("averaged:average_every=0", "average_every"), ("sharded:udp", "comm")]:
        with pytest.raises(ValueError, match=match):
            bench_scaling([bad], [1], 1.0)
