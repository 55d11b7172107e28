"""The ``actors`` scheme: parallel actors feeding one learner (Gorila / Ape-X style).

Tiny budgets (a 32-unit network, a few thousand env steps); no test asserts a speed.
"""

from __future__ import annotations

import gc
import itertools
import json
import os
import sys

import joblib
import numpy as np
import pytest
import torch

import dqnlab
from dqnlab import RunResult, TrainConfig
from dqnlab.parallel.faults import inject
from dqnlab.runtime.results import TIME_SPLIT_KEYS
from dqnlab.schemes import WorkerError
from dqnlab.schemes.actors import SLACK_UPDATES, apex_epsilons


@pytest.fixture
def cfg() -> TrainConfig:
    # max_moves keeps games short, so that every run finishes some
    return TrainConfig(total_env_steps=3_000, n_envs=8, buffer_size=2_000, batch_size=32, learning_starts=200,
                       replay_ratio=8.0, hidden=(32,), target_update=50, epsilon_decay_steps=1_000, seed=0,
                       max_moves=60)


def test_apex_epsilons_spread_from_eps_to_eps_to_the_1_plus_alpha():
    eps = apex_epsilons(8)
    assert eps[0] == pytest.approx(0.4) and eps[-1] == pytest.approx(0.4 ** 8)
    assert all(a > b for a, b in itertools.pairwise(eps))
    assert eps[3] == pytest.approx(0.4 ** (1 + 7 * 3 / 7))
    assert apex_epsilons(1) == [pytest.approx(0.4)]
    assert apex_epsilons(2, epsilon=0.5, alpha=1.0) == [pytest.approx(0.5), pytest.approx(0.25)]


@pytest.mark.parametrize(("changes", "share"), [({}, True), ({}, False),
                                               ({"target_update": 0, "epsilon_decay_rate": 0.99}, True),
                                               ({"n_step": 3}, True)])
def test_one_actor_in_lockstep_is_serial_transition_for_transition(cfg, changes, share):
    config = cfg.replace(total_env_steps=2_000, **changes)
    serial = dqnlab.train("serial", config, progress=False)
    run = dqnlab.train("actors", config, workers=1, progress=False, lockstep=True, share_weights=share,
                       learner_threads=torch.get_num_threads())
    assert run.extra["weights"] == ("shared memory" if share else "sent as changes")
    cols = ["worker", "episode", "env_steps", "score", "moves", "max_tile", "epsilon", "loss"]
    assert len(serial.episodes) > 3 and serial.updates > 100
    assert run.episodes[cols].equals(serial.episodes[cols])
    assert (run.env_steps, run.updates) == (serial.env_steps, serial.updates)
    for name in serial.weights:
        np.testing.assert_array_equal(run.weights[name], serial.weights[name])
    assert run.extra["param_lag"]["max"] == 0  # every step acted with the learner's current weights
    # each step's transitions were stored, then trained on, before the next step's came
    assert run.extra["stored_between_slices"]["max"] == run.extra["stored_between_slices"]["mean"] == config.n_envs
    assert run.extra["stored_between_slices"]["over_buffer"] == 0


def _check_run(run: RunResult, config: TrainConfig, workers: int) -> None:
    assert run.scheme == "actors" and run.status == "completed" and run.workers == workers
    assert config.total_env_steps <= run.env_steps < config.total_env_steps + workers * config.n_envs
    assert set(run.time_split) == set(TIME_SPLIT_KEYS) and all(v >= 0 for v in run.time_split.values())
    assert run.time_split["acting"] > 0 and run.time_split["learning"] > 0
    per = run.extra["per_worker"]
    assert [w["worker"] for w in per] == list(range(workers))
    assert sum(w["env_steps"] for w in per) == run.env_steps
    assert sum(w["episodes"] for w in per) == len(run.episodes)
    assert set(run.episodes["worker"]) == set(range(workers))
    assert sum(w["acting_s"] for w in per) == pytest.approx(run.time_split["acting"])
    assert run.extra["learner"]["updates"] == run.updates
    assert run.extra["learner"]["learning_s"] == pytest.approx(run.time_split["learning"])
    lag = run.extra["param_lag"]
    assert lag["transitions"] == run.env_steps
    assert 0 <= lag["median"] <= lag["p95"] <= lag["max"] and 0 <= lag["mean"] <= lag["max"]
    stored = run.extra["stored_between_slices"]  # (batches of env steps stored between two slices of updates)
    assert config.n_envs <= stored["mean"] <= stored["max"] <= run.env_steps and 0 <= stored["over_buffer"] <= 1
    # the replay ratio is a ceiling: never more samples than replay_ratio per env step since learning began
    started = run.extra["learning_started_at"]
    assert started is not None and started <= config.learning_starts
    assert run.updates * config.batch_size <= config.replay_ratio * (run.env_steps - started)
    assert run.episodes["loss"].notna().any()  # games that ended after learning began carry the learner's loss


def test_two_actors_end_to_end(cfg, tmp_path):
    run = dqnlab.train("actors", cfg, workers=2, progress=False, weights_every=10, share_weights=False)
    _check_run(run, cfg, 2)
    assert run.extra["weights_sent"] >= 2  # at least one broadcast to both actors
    assert {w["pid"] for w in run.extra["per_worker"]}.isdisjoint({None})
    summary = json.loads((run.save(tmp_path) / "summary.json").read_text())
    assert set(summary["time_split"]) == set(TIME_SPLIT_KEYS)
    assert summary["extra"]["param_lag"]["mean"] == pytest.approx(run.extra["param_lag"]["mean"])
    assert summary["extra"]["learner"]["waiting_s"] >= 0


def test_held_ratio_throttles_the_actors(cfg):
    config = cfg.replace(total_env_steps=4_000, replay_ratio=16.0)
    run = dqnlab.train("actors", config, workers=2, progress=False, min_replay_ratio=16.0)
    _check_run(run, config, 2)
    started = run.extra["learning_started_at"]
    owed = (run.env_steps - started) * config.replay_ratio / config.batch_size
    # held: at most the throttle's slack behind (plus what the actors send while the pause travels)
    assert run.updates >= owed - 3 * SLACK_UPDATES
    assert run.extra["min_replay_ratio"] == 16.0


def test_apex_epsilon_per_actor_in_the_episodes(cfg):
    run = dqnlab.train("actors", cfg, workers=2, progress=False, actor_epsilon="apex")
    eps = apex_epsilons(2)
    for k in range(2):
        games = run.episodes[run.episodes["worker"] == k]
        assert len(games) > 0 and np.allclose(games["epsilon"], eps[k])
        assert run.extra["per_worker"][k]["epsilon"] == pytest.approx(eps[k])
    fixed = dqnlab.train("actors", cfg.replace(total_env_steps=1_000), workers=2, progress=False,
                         actor_epsilon=[1.0, 0.5])
    assert sorted(fixed.episodes.groupby("worker")["epsilon"].first()) == [0.5, 1.0]


def test_actor_exception_surfaces_with_index_traceback_and_games(cfg):
    config = cfg.replace(total_env_steps=40_000, n_envs=4)
    with pytest.raises(WorkerError) as info, inject({"worker": 1, "after_env_steps": 1_200}):
        dqnlab.train("actors", config, workers=2, progress=False)
    err = info.value
    assert err.worker == 1 and err.scheme == "actors"
    assert "injected fault in worker 1" in str(err) and "check_fault" in err.worker_traceback
    partial = err.partial
    assert isinstance(partial, RunResult) and partial.status == "failed"
    assert partial.env_steps < config.total_env_steps
    assert (partial.episodes["worker"] == 1).any()  # the failing actor's games are kept


@pytest.mark.parametrize("options,match", [
    ({"weights_every": 0}, "weights_every"),
    ({"min_replay_ratio": 9.0}, "min_replay_ratio"),
    ({"min_replay_ratio": -1.0}, "min_replay_ratio"),
    ({"actor_epsilon": "greedy"}, "actor_epsilon"),
    ({"actor_epsilon": [0.1]}, "actor_epsilon"),
    ({"actor_epsilon": [0.1, 1.5]}, "actor_epsilon"),
    ({"lockstep": "yes"}, "lockstep"),
    ({"learner_threads": 0}, "learner_threads"),
    ({"actor_nice": 20}, "actor_nice"),
    ({"actor_nice": -1}, "actor_nice"),
    ({"sync": "periodic"}, "does not take"),
])
def test_bad_actor_options_are_clear_errors(cfg, options, match):
    with pytest.raises(ValueError, match=match):
        dqnlab.train("actors", cfg, workers=2, progress=False, **options)


def test_learner_threads_are_restored(cfg):
    before = torch.get_num_threads()
    dqnlab.train("actors", cfg.replace(total_env_steps=400), workers=1, progress=False,
                 learner_threads=before + 1)
    assert torch.get_num_threads() == before


def test_bench_acting_rows():
    from dqnlab.bench import bench_acting

    config = TrainConfig(hidden=(32,), batch_size=32, buffer_size=2_000)
    rows = bench_acting([1, 4], repeats=1, min_time=0.02, config=config)
    assert [r["n_envs"] for r in rows] == [1, 4]
    assert all(r["env_steps_per_s"] > 0 and r["us_per_env_step"] > 0 for r in rows)
    assert rows[0]["speedup"] == 1.0
    with pytest.raises(ValueError, match="n_envs"):
        bench_acting([0])


def test_learner_divergence_is_a_diverged_error_with_the_games(cfg):
    from dqnlab.schemes import DivergedError

    # random moves that change nothing earn 3e38 points: the squared TD error overflows at the first update
    config = cfg.replace(mask_illegal=False, invalid_move_reward=3e38, loss="mse", total_env_steps=20_000)
    with pytest.raises(DivergedError) as info:
        dqnlab.train("actors", config, workers=1, progress=False)
    assert info.value.worker is None and "non-finite" in str(info.value)
    assert info.value.partial.status == "failed" and info.value.partial.env_steps > 0


def test_prioritized_actors_send_their_priorities_and_the_learner_samples_by_them():
    """An actor's TD errors arrive with its transitions as their priorities, and the learner's
    sampling follows them (the feed of the learner, with a prioritized buffer)."""
    from dqnlab.parallel.feed import ActorFeed
    from dqnlab.parallel.messages import ActorData
    from dqnlab.replay import PrioritizedReplayBuffer

    class Feed(ActorFeed):
        updates = 0

    feed = Feed(1, PrioritizedReplayBuffer(64, alpha=1.0, eps=1e-6, seed=0))
    n = 8
    boards = np.zeros((n, 4, 4), np.uint8)
    errors = np.array([0, 0, 0, 0, 0, 0, 1, 3], np.float32)
    transitions = dict(boards=boards, actions=np.zeros(n, np.uint8), rewards=np.arange(n, dtype=np.float32),
                       next_boards=boards, dones=np.zeros(n, bool), next_masks=np.ones((n, 4), bool),
                       steps=np.ones(n, np.uint8), td_errors=errors)
    feed.receive(ActorData(0, False, transitions, 0, 0, [], n, 0, {}, 0, 0, None, 0.0, None))
    assert np.allclose(feed.buffer.tree[np.arange(n)], errors + 1e-6)
    drawn = np.concatenate([feed.buffer.sample(100).rewards for _ in range(20)]).astype(int)
    counts = np.bincount(drawn, minlength=n)
    assert counts[:6].sum() < 5 and 0.65 < counts[7] / counts[6:].sum() < 0.85  # 3 : 1, by the priorities


def test_prioritized_n_step_actors_end_to_end(cfg):
    config = cfg.replace(prioritized=True, n_step=3, priority_beta=0.5)
    run = dqnlab.train("actors", config, workers=2, progress=False)  # (their TD errors: the learner's weights, shared)
    assert run.extra["weights"] == "shared memory" and run.extra["weights_sent"] == 0
    replay = run.extra["replay"]
    assert replay["prioritized"] and replay["alpha"] == config.priority_alpha
    # every transition came with its actor's TD error; the learner re-prioritised what it sampled
    assert replay["given_priorities"] == replay["added"] > 0
    assert replay["priority_updates"] == run.updates * config.batch_size
    assert 0.5 < replay["beta"] <= 1.0 and 0 < replay["is_weight_mean"] <= 1.0
    assert replay["priority_min"] > 0 and replay["priority_max"] <= replay["max_priority"]
    # n-step: each actor holds back at most n - 1 steps of each board
    assert run.env_steps - 2 * 2 * config.n_envs <= replay["added"] <= run.env_steps


def test_ntuple_actors_learn_on_the_core_get_only_the_changed_entries_and_resume_their_games(tmp_path):
    from dqnlab.schemes.actors import REPLAY_MESSAGES, _max_chunk

    # a replay of the last step, as the n-tuple presets have: the learner's holds REPLAY_MESSAGES messages of each
    # actor; learning starts once each actor's 16 games have drifted apart (games started together share their
    # opening boards, whose rows would take a step per sample at once)
    config = TrainConfig.preset("ntuple-small", total_env_steps=8_000, n_envs=16, buffer_size=16, batch_size=16,
                                learning_starts=2_000, seed=0)
    # (processes, where weights travel for want of shared memory: on threads the actors can end their 250 steps
    # before the learner has made 40 updates, and one CI run saw 2 broadcasts)
    run = dqnlab.train("actors", config, workers=2, progress=False, weights_every=10, share_weights=False,
                       threads=False, run_dir=tmp_path / "run")
    _check_run(run, config, 2)
    assert run.extra["weights"] == "sent as changes"
    assert run.options["weights_every"] == 10
    table = run.weights["weight"].nbytes  # 17 4-tuples: 4.5 MB
    assert run.extra["weights_sent"] >= 4
    assert 0 < run.extra["bytes_moved"] < 0.2 * run.extra["weights_sent"] * table  # changes, not tables
    chunk = _max_chunk(config, config.replay_ratio / 2, 2)
    assert run.extra["buffer_size"] == REPLAY_MESSAGES * 2 * chunk > config.buffer_size
    more = dqnlab.train(resume=tmp_path / "run", config=config.replace(total_env_steps=12_000), progress=False)
    assert more.status == "completed" and more.env_steps >= 12_000
    for k in (0, 1):  # each actor's games go on numbered after its own (the core's are renumbered)
        numbers = list(more.episodes.loc[more.episodes["worker"] == k, "episode"])
        assert numbers == list(range(len(numbers))) and len(numbers) > (run.episodes["worker"] == k).sum()


def test_ntuple_actors_on_one_machine_act_on_the_learners_weights_in_shared_memory(monkeypatch):
    from multiprocessing import shared_memory

    from dqnlab.parallel.shm import SharedParameters
    from dqnlab.runtime.native import NativeLoop

    made = []
    create = SharedParameters.create.__func__
    monkeypatch.setattr(SharedParameters, "create", classmethod(lambda cls, module: made.append(
        create(cls, module)) or made[-1]))
    counts = []  # (the block's count, the learner's updates) as each slice of the compiled core's updates ends
    learn = NativeLoop.learn

    def learn_and_look(self, updates):
        learn(self, updates)
        if made:  # (the run's learner; not the kernels' warm-up before it)
            counts.append((made[0].updates, self.learner.agent.updates))

    monkeypatch.setattr(NativeLoop, "learn", learn_and_look)
    config = TrainConfig.preset("ntuple-small", total_env_steps=8_000, n_envs=16, batch_size=16,
                                learning_starts=2_000, seed=0)
    run = dqnlab.train("actors", config, workers=2, progress=False, weights_every=10)
    _check_run(run, config, 2)
    # nothing sent: every actor read the table the learner trained, and tagged its data with the updates then
    assert run.extra["weights"] == "shared memory" and run.options["share_weights"]
    assert run.extra["weights_sent"] == 0 and run.extra["bytes_moved"] == 0
    assert all(w["weights_loads"] == 0 for w in run.extra["per_worker"])
    # each message is tagged with the learner's updates when its first step read the table (a tag stuck at the
    # start would make a transition's lag the updates before it arrived: about half of the run's, on average)
    assert run.updates > 100 and run.extra["param_lag"]["mean"] < run.updates / 4
    # and the count in the block is the weights' own all along: the kernels count each update there as they make it
    assert len(counts) > 1 and all(block == learner for block, learner in counts), counts[:5]
    # the learner's final weights: views of the block's mapping, which outlives the block (no copy at the end)
    assert len(made) == 1 and not run.weights["weight"].flags.owndata
    gc.collect()
    assert run.weights["weight"].any() and np.isfinite(run.weights["weight"]).all()
    if sys.platform.startswith("linux"):  # each actor acted at actor_nice (10) above its worker where the two actors
        base = os.getpriority(os.PRIO_PROCESS, 0)  # and the learner are more than the cores; the learner at its own
        raised = min(19, base + 10) if 3 > joblib.cpu_count() else base
        assert [w["niceness"] for w in run.extra["per_worker"]] == [raised] * 2
    with pytest.raises(FileNotFoundError):  # and the block is gone
        shared_memory.SharedMemory(name=made[0].handle[0])


def test_one_ntuple_actor_in_lockstep_acts_with_the_learners_weights_all_along():
    config = TrainConfig.preset("ntuple-small", total_env_steps=3_000, n_envs=16, buffer_size=2_000, batch_size=32,
                                learning_starts=256, seed=0)
    serial = dqnlab.train("serial", config, progress=False)
    run = dqnlab.train("actors", config, workers=1, progress=False, lockstep=True)
    assert run.extra["param_lag"]["max"] == 0 and run.updates == serial.updates > 10
    if sys.platform.startswith("linux"):  # in lockstep the actor and the learner take turns: the actor is not niced
        assert run.extra["per_worker"][0]["niceness"] == os.getpriority(os.PRIO_PROCESS, 0)
    # the same games and updates as serial: every changes message made the actor's copy the learner's
    cols = ["episode", "env_steps", "score", "max_tile"]
    assert run.episodes[cols].equals(serial.episodes[cols])
    np.testing.assert_array_equal(run.weights["weight"], serial.weights["weight"])
