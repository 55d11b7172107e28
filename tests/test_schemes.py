"""The four parallel schemes: their maths, their degenerate cases, end-to-end runs, faults, CLI.

Budgets are tiny (a few thousand env steps of a 32-unit network) and no test asserts
a speed: the machine is small and shared.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import joblib
import numpy as np
import pytest
import torch

import dqnlab
from dqnlab import DQNAgent, RunResult, TrainConfig
from dqnlab.cli import main
from dqnlab.runtime.results import TIME_SPLIT_KEYS
from dqnlab.schemes import SCHEMES, WorkerError
from dqnlab.schemes.averaged import draw_minibatches
from dqnlab.parallel import threads
from dqnlab.parallel.rounds import parallel_update
from dqnlab.parallel.shm import SharedArrays, SharedReplay
from dqnlab.parallel.weights import average_optimizer_states, average_weights, divergence, optimizer_state
from dqnlab.runtime.learner import Learner
from dqnlab.schemes.independent import SyncSchedule, combine_weights, score_coefficients
from dqnlab.schemes.shared import shared_layout
from dqnlab.schemes.sharded import shard

PARALLEL = ("independent", "shared", "sharded", "averaged")


@pytest.fixture
def cfg() -> TrainConfig:
    return TrainConfig(total_env_steps=3_000, n_envs=8, buffer_size=2_000, batch_size=32,
                       learning_starts=200, replay_ratio=8.0, hidden=(32,), target_update=50,
                       epsilon_decay_steps=1_000, seed=0)


def _filled_learner(config: TrainConfig, steps: int = 40) -> Learner:
    learner = Learner(config)
    for _ in range(steps):
        learner.act_step()
    return learner


def _max_diff(a: dict, b: dict) -> float:
    """Largest absolute difference between two (possibly nested) dicts of arrays."""
    assert a.keys() == b.keys()
    return max(_max_diff(a[k], b[k]) if isinstance(a[k], dict)
               else float(np.abs(np.asarray(a[k], np.float64) - np.asarray(b[k], np.float64)).max()) for k in a)


# ----------------------------------------------------------------------------- averaging maths
def test_plain_and_weighted_average_of_known_vectors():
    w = [{"a": np.array([0.0, 2.0], np.float32), "b": np.array([[1.0]], np.float32)},
         {"a": np.array([4.0, 6.0], np.float32), "b": np.array([[3.0]], np.float32)}]
    mean = average_weights(w)
    np.testing.assert_allclose(mean["a"], [2.0, 4.0])
    np.testing.assert_allclose(mean["b"], [[2.0]])
    assert mean["a"].dtype == np.float32
    weighted = average_weights(w, [3.0, 1.0])  # normalised to 0.75 / 0.25
    np.testing.assert_allclose(weighted["a"], [1.0, 3.0])
    with pytest.raises(ValueError, match="coefficients"):
        average_weights(w, [1.0, -1.0])
    with pytest.raises(ValueError, match="same names"):
        average_weights([w[0], {"a": w[1]["a"]}])


def test_softmax_score_coefficients():
    c = score_coefficients([0.0, 500.0], temperature=500.0)
    np.testing.assert_allclose(c, [1 / (1 + np.e), np.e / (1 + np.e)])
    np.testing.assert_allclose(score_coefficients([1e6, 1e6 + 10], 1.0).sum(), 1.0)  # no overflow
    np.testing.assert_allclose(score_coefficients([np.nan, np.nan], 10.0), [0.5, 0.5])
    nan_low = score_coefficients([np.nan, 100.0, 0.0], 100.0)  # NaN counts as the lowest score
    assert nan_low[0] == pytest.approx(nan_low[2]) and nan_low[1] > nan_low[0]


def test_combine_weights_per_schedule():
    w = [{"x": np.full(3, float(i), np.float32)} for i in range(3)]
    scores = [10.0, 30.0, 20.0]
    best, c = combine_weights("best", w, scores)
    np.testing.assert_array_equal(best["x"], w[1]["x"])
    np.testing.assert_array_equal(c, [0, 1, 0])
    best["x"][0] = 99  # a copy, not the learner's own array
    assert w[1]["x"][0] == 1.0
    mean, c = combine_weights("periodic", w, scores)
    np.testing.assert_allclose(mean["x"], 1.0)
    weighted, c = combine_weights("weighted", w, scores, temperature=10.0)
    expected = score_coefficients(scores, 10.0)
    np.testing.assert_allclose(weighted["x"], np.dot(expected, [0, 1, 2]), rtol=1e-6)
    assert c.argmax() == 1


def test_divergence_of_known_vectors():
    same = [{"x": np.ones(4, np.float32)}] * 3
    assert divergence(same) == (0.0, 0.0)
    d, rel = divergence([{"x": np.array([0.0, 0.0])}, {"x": np.array([2.0, 0.0])}])
    assert d == pytest.approx(1.0) and rel == pytest.approx(1.0)


def test_optimizer_state_average_and_roundtrip(cfg):
    learner = _filled_learner(cfg)
    learner.agent.update(learner.buffer.sample(cfg.batch_size))
    st = optimizer_state(learner.agent)
    assert set(st) == set(learner.agent.get_weights())
    assert all(set(v) == {"step", "exp_avg", "exp_avg_sq"} for v in st.values())
    doubled = {n: {k: (v * 3 if isinstance(v, np.ndarray) else v) for k, v in s.items()} for n, s in st.items()}
    avg = average_optimizer_states([st, doubled])
    name = next(iter(st))
    np.testing.assert_allclose(avg[name]["exp_avg"], 2 * st[name]["exp_avg"], rtol=1e-6)
    assert avg[name]["step"] == st[name]["step"] == 1.0


# ----------------------------------------------------------------------------- sync schedules
def test_periodic_schedule_fires_at_every_multiple_even_across_jumps():
    s = SyncSchedule("periodic", sync_every=10)
    fired = [u for u in range(0, 101) if s.check(u, 0.5)]
    assert fired == [10, 20, 30, 40, 50, 60, 70, 80, 90, 100]
    s = SyncSchedule("periodic", sync_every=10)
    assert [s.check(u, 0.5) for u in (9, 12, 15, 31, 33)] == [None, (1, True), None, (3, True), None]


def test_none_schedule_checks_in_but_never_syncs():
    s = SyncSchedule("none", sync_every=5)
    checks = [s.check(u, u / 50) for u in range(51)]
    assert [c for c in checks if c] == [(r, False) for r in range(1, 11)]


def _simulate(schedule: SyncSchedule, budget: int, n_envs: int, updates_per_step: float, learning_starts: int):
    """Drive a schedule like a Learner does: returns (env_steps, active) at each check-in."""
    env, credit, updates, out = 0, 0.0, 0, []
    while env < budget:
        env += n_envs
        if env >= learning_starts:
            credit += n_envs * updates_per_step
        updates += int(credit) - updates if int(credit) > updates else 0
        due = schedule.check(updates, env / budget)
        if due:
            out.append((env, due[1]))
    return out


@pytest.mark.parametrize("fraction", [0.25, 0.5, 0.1])
def test_final_schedule_never_syncs_before_its_fraction(fraction):
    budget = 100_000
    checks = _simulate(SyncSchedule("final", sync_every=50, final_fraction=fraction), budget, 32, 1 / 32, 5_000)
    active = [env for env, a in checks if a]
    inactive = [env for env, a in checks if not a]
    assert active and inactive
    assert min(active) >= (1 - fraction) * budget
    assert max(inactive) < (1 - fraction) * budget
    # every check-in in the final phase syncs: ~ fraction x (updates / sync_every)
    assert len(active) == pytest.approx(fraction * budget / 32 / 50, abs=2)


def test_final_schedule_default_starts_at_75_percent():
    s = SyncSchedule("final", sync_every=1)
    assert not s.active(0.7499) and s.active(0.75) and s.active(1.0)


# ----------------------------------------------------------------------------- sharded / averaged update maths
@pytest.mark.parametrize("batch_size,workers", [(32, 2), (33, 2)])
def test_sharded_sgd_step_equals_one_big_batch_step(batch_size, workers):
    config = TrainConfig(total_env_steps=1_000, n_envs=8, buffer_size=1_000, batch_size=batch_size,
                         learning_starts=0, hidden=(32,), max_grad_norm=None, lr=0.05, seed=3, optimizer="sgd")
    learner = _filled_learner(config)
    reference = DQNAgent(config, seed=99)
    reference.set_weights(learner.agent.get_weights(), target=True)
    batch = learner.buffer.sample(batch_size)
    reference.update(batch)
    shards, sizes = shard(batch, workers)
    assert sizes.sum() == batch_size and sizes.max() - sizes.min() <= 1
    with joblib.Parallel(n_jobs=workers) as parallel:  # real worker processes, as the scheme uses
        parallel_update(parallel, learner.agent, shards, sizes)
    moved = _max_diff(learner.agent.get_weights(), DQNAgent(config, seed=99).get_weights())
    assert moved > 1e-3  # the step did something
    assert _max_diff(learner.agent.get_weights(), reference.get_weights()) < 1e-6
    assert learner.agent.updates == 1


def test_sharded_adam_is_not_a_big_batch_step(cfg):
    """With Adam the averaged shard steps differ from one big step (the documented cost)."""
    config = cfg.replace(max_grad_norm=None, learning_starts=0)
    learner = _filled_learner(config)
    reference = DQNAgent(config, seed=5)
    reference.set_weights(learner.agent.get_weights(), target=True)
    batch = learner.buffer.sample(config.batch_size)
    reference.update(batch)
    with joblib.Parallel(n_jobs=1) as parallel:
        parallel_update(parallel, learner.agent, *shard(batch, 2))
    assert _max_diff(learner.agent.get_weights(), reference.get_weights()) > 1e-6


def test_averaged_with_one_worker_equals_serial_updates(cfg):
    serial, averaged = _filled_learner(cfg), _filled_learner(cfg)
    assert _max_diff(serial.agent.get_weights(), averaged.agent.get_weights()) == 0
    with joblib.Parallel(n_jobs=1) as parallel:
        for _ in range(3):  # several updates: the Adam state must carry over too
            loss_serial = serial.agent.update(serial.buffer.sample(cfg.batch_size))
            loss_avg = parallel_update(parallel, averaged.agent, draw_minibatches(averaged, 1), None)
            assert loss_avg == pytest.approx(loss_serial, rel=1e-6)
    assert _max_diff(serial.agent.get_weights(), averaged.agent.get_weights()) < 1e-6
    assert _max_diff(optimizer_state(serial.agent), optimizer_state(averaged.agent)) < 1e-6
    assert averaged.agent.updates == serial.agent.updates == 3


def test_averaged_two_workers_is_the_mean_of_two_steps(cfg):
    config = cfg.replace(learning_starts=0)
    learner = _filled_learner(config)
    start = learner.agent.get_weights()
    batches = [learner.buffer.sample(config.batch_size) for _ in range(2)]
    expected = []
    for b in batches:
        a = DQNAgent(config, seed=1)
        a.set_weights(start, target=True)
        a.update(b)
        expected.append(a.get_weights())
    with joblib.Parallel(n_jobs=2) as parallel:
        parallel_update(parallel, learner.agent, batches, None)
    assert _max_diff(learner.agent.get_weights(), average_weights(expected)) < 1e-6


# ----------------------------------------------------------------------------- shared memory
def _write_marker(handle, worker, workers):
    arrays = SharedArrays.attach(handle)
    replay = SharedReplay(arrays, worker, workers, seed=worker)
    n = 3
    replay.add_batch(np.full((n, 4, 4), 5, np.uint8), np.full(n, 2), np.full(n, 12345.0, np.float32),
                     np.full((n, 4, 4), 6, np.uint8), np.zeros(n, bool), np.ones((n, 4), bool))
    del replay
    arrays.close()
    return os.getpid()


def test_shared_replay_transition_written_by_one_worker_is_sampled_by_another(cfg):
    config = cfg.replace(buffer_size=64)
    arrays = SharedArrays.create(shared_layout(config, 2, n_params=10, n_tensors=2))
    try:
        pid = joblib.Parallel(n_jobs=2)(joblib.delayed(_write_marker)(arrays.handle, 1, 2) for _ in range(1))[0]
        assert pid != os.getpid()  # written by another process
        assert list(arrays["seg_size"]) == [0, 3]  # into worker 1's segment only
        reader = SharedReplay(arrays, 0, 2, seed=0)
        assert len(reader) == 3
        batch = reader.sample(50)
        assert np.all(batch.rewards == 12345.0) and np.all(batch.actions == 2)
        assert np.all(batch.boards == 5) and np.all(batch.next_boards == 6)
        # worker 0 writes too: samples now come from both segments
        reader.add_batch(np.zeros((4, 4, 4), np.uint8), np.zeros(4), np.ones(4, np.float32),
                         np.zeros((4, 4, 4), np.uint8), np.zeros(4, bool), np.ones((4, 4), bool))
        rewards = set(reader.sample(200).rewards.tolist())
        assert rewards == {1.0, 12345.0}
        del reader, batch
    finally:
        arrays.close()
        arrays.unlink()


def test_shared_memory_is_removed_after_a_run(cfg, monkeypatch):
    created = []
    original = SharedArrays.create.__func__

    def spy(cls, spec):
        arrays = original(cls, spec)
        created.append(arrays.shm.name)
        return arrays

    monkeypatch.setattr(SharedArrays, "create", classmethod(spy))
    dqnlab.train("shared", cfg.replace(total_env_steps=400), workers=1, progress=False)
    assert created
    from multiprocessing import shared_memory

    with pytest.raises(FileNotFoundError):
        shared_memory.SharedMemory(name=created[0])


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
    assert _max_diff(run.weights, serial.weights) < 1e-5


# ----------------------------------------------------------------------------- end to end, 2 workers
def _check_totals(run: RunResult, config: TrainConfig, workers: int) -> None:
    assert isinstance(run, RunResult) and run.status == "completed" and run.workers == workers
    assert run.env_steps >= config.total_env_steps
    assert run.updates > 0 and len(run.episodes) > 0
    assert set(run.time_split) == set(TIME_SPLIT_KEYS) and all(v >= 0 for v in run.time_split.values())
    assert run.time_split["acting"] > 0 and run.time_split["learning"] > 0
    per = run.extra["per_worker"]
    assert [w["worker"] for w in per] == list(range(workers))
    if "env_steps" in per[0]:  # long-lived workers: totals are the workers' sums
        assert sum(w["env_steps"] for w in per) == run.env_steps
        assert sum(w["updates"] for w in per) == run.updates
        assert sum(w["episodes"] for w in per) == len(run.episodes)
        assert set(run.episodes["worker"]) == set(range(workers))
        for key in ("acting", "learning", "communication"):
            assert sum(w[f"{key}_s"] for w in per) == pytest.approx(run.time_split[key])
    else:  # one learner, K helpers: one update = one round
        assert run.extra["rounds"] == run.updates
        assert sum(w["communication_s"] for w in per) == pytest.approx(run.time_split["communication"])
    assert run.episodes["wall_time_s"].between(0, run.wall_time_s + 1).all()
    json.dumps(run.summary())  # summary.json-ready
    assert run.summary()["time_fraction"]["acting"] > 0
    assert set(run.weights) == set(DQNAgent(config).get_weights())


def test_independent_final_schedule_end_to_end(cfg):
    run = dqnlab.train("independent", cfg, workers=2, progress=False, sync="final", sync_every=10)
    _check_totals(run, cfg, 2)
    rounds = run.extra["divergence"]
    synced = [r for r in rounds if r["synced"]]
    assert synced and len(synced) < len(rounds)
    assert all(r["env_steps"] >= 0.75 * cfg.total_env_steps for r in synced)  # never before 75% of the budget
    assert all(r["divergence"] > 0 for r in rounds)
    assert run.extra["syncs"] == len(synced)
    assert run.options == {"sync": "final", "sync_every": 10, "final_fraction": 0.25, "temperature": 500.0}
    assert {w["env_steps"] for w in run.extra["per_worker"]} == {1504}  # 3000 split in two, in steps of 8


def test_independent_best_makes_learners_identical_after_each_sync(cfg):
    run = dqnlab.train("independent", cfg.replace(total_env_steps=2_000), workers=2, progress=False,
                       sync="best", sync_every=10)
    rounds = run.extra["divergence"]
    assert all(r["synced"] for r in rounds) and len(rounds) >= 3
    assert all(sorted(r["coefficients"]) == [0.0, 1.0] for r in rounds)
    # After a sync both learners continue from one model: divergence stays small (10 updates apart)
    none = dqnlab.train("independent", cfg.replace(total_env_steps=2_000), workers=2, progress=False,
                        sync="none", sync_every=10)
    assert rounds[-1]["divergence"] < none.extra["divergence"][-1]["divergence"]


def test_shared_with_lock_counts_every_update(cfg):
    run = dqnlab.train("shared", cfg, workers=2, progress=False, lock=True)
    _check_totals(run, cfg, 2)
    per = run.extra["per_worker"]
    assert all(w["updates"] > 0 for w in per)
    assert run.extra["updates_counter"] == sum(w["updates"] for w in per) == run.updates
    assert run.extra["lost_increments"] == 0
    assert run.extra["lock_wait_s"] >= 0 and run.extra["optimizer_state"] == "shared"
    assert run.extra["target_syncs"] == run.updates // cfg.target_update


def test_shared_hogwild_runs(cfg):
    run = dqnlab.train("shared", cfg.replace(total_env_steps=2_000), workers=2, progress=False, lock=False)
    assert run.status == "completed" and run.updates > 0 and run.extra["lock_wait_s"] == 0
    assert run.extra["updates_counter"] <= run.updates


@pytest.mark.parametrize("scheme", ["sharded", "averaged"])
def test_synchronous_schemes_end_to_end(cfg, scheme):
    config = cfg.replace(total_env_steps=2_000, replay_ratio=4.0)  # one joblib round per update: keep them few
    run = dqnlab.train(scheme, config, workers=2, progress=False)
    _check_totals(run, config, 2)
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
    with pytest.raises(WorkerError) as info:
        dqnlab.train(scheme, config, workers=2, progress=False, _fault=fault)
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
    with pytest.raises(WorkerError) as info:
        dqnlab.train("independent", cfg.replace(total_env_steps=40_000), workers=2, progress=False,
                     _fault={"worker": 0, "after_env_steps": 800, "kind": "exit"})
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


def test_private_hooks_are_not_advertised():
    with pytest.raises(ValueError) as info:
        dqnlab.train("sharded", TrainConfig(total_env_steps=100), workers=1, progress=False, sync="none")
    assert "_fault" not in str(info.value) and "takes none" in str(info.value)
    assert set(SCHEMES) >= {"serial", *PARALLEL}


# ----------------------------------------------------------------------------- command line
def test_cli_wrong_option_for_scheme_is_one_line_exit_2():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-m", "dqnlab", "train", "--scheme", "sharded", "--workers", "2",
                           "--sync", "periodic"], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "--sync" in lines[0] and "sharded" in lines[0]


@pytest.mark.parametrize("argv,match", [
    (["--scheme", "independent", "--sync", "sometimes"], "sync must be one of"),
    (["--scheme", "shared", "--sync-every", "5"], "--sync-every does not apply to --scheme shared"),
    (["--scheme", "serial", "--no-lock"], "--lock/--no-lock does not apply"),
    (["--scheme", "independent", "--temperature", "10"], "--temperature applies only with --sync weighted"),
    (["--scheme", "independent", "--sync", "periodic", "--final-fraction", "0.5"], "--final-fraction applies only"),
])
def test_cli_option_errors(capsys, tmp_path, argv, match):
    code = main(["train", "--preset", "mlp", "--env-steps", "100", "--eval-games", "0", "--no-progress",
                 "--out", str(tmp_path / "r"), *argv])
    err = capsys.readouterr().err
    assert code == 2 and match in err and len(err.strip().splitlines()) == 1


def test_cli_trains_independent_and_writes_summary(capsys, tmp_path):
    out = tmp_path / "run"
    code = main(["train", "--preset", "mlp", "--scheme", "independent", "--workers", "2", "--env-steps", "3000",
                 "--n-envs", "8",
                 "--batch-size", "32", "--sync", "periodic", "--sync-every", "20", "--eval-games", "0",
                 "--no-progress", "--out", str(out)])
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["scheme"] == "independent" and summary["workers"] == 2
    assert set(summary["time_split"]) == set(TIME_SPLIT_KEYS) and summary["time_split"]["acting"] > 0
    assert summary["options"]["sync"] == "periodic" and summary["options"]["sync_every"] == 20
    assert len(summary["extra"]["per_worker"]) == 2
    assert summary["env_steps"] >= 3000


def test_cli_worker_fault_saves_partial_run(capsys, tmp_path, monkeypatch):
    import dqnlab.schemes.sharded as sharded

    real = sharded.run
    monkeypatch.setitem(SCHEMES, "sharded", lambda config, **kw: real(
        config, **kw, _fault={"worker": 1, "after_updates": 30}))
    monkeypatch.setattr(sharded, "run", real)
    out = tmp_path / "run"
    code = main(["train", "--preset", "mlp", "--scheme", "sharded", "--workers", "2", "--env-steps", "20000",
                 "--n-envs", "4",
                 "--batch-size", "32", "--eval-games", "0", "--no-progress", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 1 and "worker 1 failed" in err and len(err.strip().splitlines()) == 1
    assert "injected fault" in (out / "worker_error.txt").read_text()
    assert json.loads((out / "summary.json").read_text())["status"] == "failed"


def test_bench_scaling_rows(monkeypatch):
    from dqnlab.bench.core import bench_scaling

    config = TrainConfig(n_envs=8, buffer_size=2_000, batch_size=32, learning_starts=200, hidden=(32,))
    rows = bench_scaling(["serial", "averaged"], [1, 2], seconds=0.8, config=config)
    assert [(r["scheme"], r["workers"]) for r in rows] == [("serial", 1), ("averaged", 1), ("averaged", 2)]
    for r in rows:
        assert r["env_steps_per_s"] > 0 and r["updates_per_s"] >= 0
        assert r["acting"] + r["learning"] + r["communication"] == pytest.approx(1.0)
    assert rows[0]["speedup_vs_serial"] == 1.0
    with pytest.raises(ValueError, match="schemes"):
        bench_scaling(["nope"], [1], 1.0)


def test_torch_threads_left_alone_by_in_process_runs(cfg):
    before = torch.get_num_threads()
    dqnlab.train("averaged", cfg.replace(total_env_steps=300), workers=1, progress=False)
    assert torch.get_num_threads() == before


@pytest.mark.parametrize("policy,expected", [("PASSIVE", 1), ("passive", 1), ("ACTIVE", 3), (None, 3)])
def test_learner_threads_follow_the_openmp_wait_policy(monkeypatch, policy, expected):
    if policy is None:
        monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    else:
        monkeypatch.setenv("OMP_WAIT_POLICY", policy)
    monkeypatch.setattr(threads.joblib, "cpu_count", lambda: 6)
    assert threads.torch_threads(2) == expected
    assert threads.torch_threads(12) == 1


@pytest.mark.parametrize("policy", ["PASSIVE", "ACTIVE"])
def test_a_run_learns_on_the_learner_thread_count_and_restores_the_callers(cfg, monkeypatch, policy):
    monkeypatch.setenv("OMP_WAIT_POLICY", policy)  # read when the run starts (torch's own pool is already set up)
    seen = []
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        dqnlab.train("serial", cfg.replace(total_env_steps=400), progress=False,
                     callback=lambda snapshot: seen.append(torch.get_num_threads()))
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    assert seen and set(seen) == {threads.torch_threads(1)}
