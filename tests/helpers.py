"""Helpers shared by several test modules (importable because pytest puts tests/ on sys.path)."""

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

from dqnlab import DQNAgent, ReplayBuffer, RunResult, TrainConfig, VecGame2048
from dqnlab.game import board_from_tiles, legal_actions_batch
from dqnlab.runtime.learner import Learner
from dqnlab.runtime.results import TIME_SPLIT_KEYS

# The settings of the fuzz tests (tests/test_replay_fuzz.py, tests/game/test_fuzz_game.py).
FUZZ = settings(max_examples=150, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# A full board with no move left but LEFT, after which it is over whatever spawns:
# row 0 becomes 16 32 64 _ and the empty corner sits next to 64 and 128.
ALMOST_OVER = board_from_tiles([[8, 8, 32, 64],
                                [2, 4, 8, 128],
                                [4, 2, 4, 2],
                                [2, 4, 2, 4]])
NO_LEFT_MOVE = board_from_tiles([[2, 0, 0, 0],
                                 [4, 2, 0, 0],
                                 [0, 0, 0, 0],
                                 [8, 0, 0, 0]])


def filled_buffer(n: int, seed: int = 0) -> ReplayBuffer:
    """A replay buffer of capacity ``n`` filled with ``n`` transitions of uniformly random moves on 32 boards."""
    buf = ReplayBuffer(n, seed=seed)
    env = VecGame2048(32, seed=seed)
    rng = np.random.default_rng(seed)
    boards = env.boards
    while len(buf) < n:
        actions = rng.integers(0, 4, 32)
        out = env.step(actions)
        buf.add_batch(boards, actions, out.rewards, out.next_boards, out.terminated,
                      legal_actions_batch(out.next_boards))
        boards = out.boards
    return buf


def filled_learner(config: TrainConfig, steps: int = 40) -> Learner:
    """A :class:`Learner` of ``config`` after ``steps`` act steps (its buffer partly filled)."""
    learner = Learner(config)
    for _ in range(steps):
        learner.act_step()
    return learner


def unequal_priorities(learner: Learner, beta: float = 0.5) -> Learner:
    """``learner`` (prioritized replay) with random priorities on its buffer's transitions, so that a
    sample's importance weights differ, drawn at ``beta``."""
    slots = np.arange(len(learner.buffer))
    learner.buffer.update_priorities(slots, np.random.default_rng(0).random(len(slots)))
    learner.buffer.beta = beta
    return learner


def assert_priorities(buffer, indices: np.ndarray, td_errors: np.ndarray) -> None:
    """Assert that each slot of ``indices`` has the priority of its TD error in ``td_errors``
    (``(B,)`` each; a slot drawn twice: its last), to 1e-6."""
    last = dict(zip(indices.tolist(), buffer.priorities(td_errors).tolist()))
    assert np.abs(buffer.tree[np.array(list(last))] - np.array(list(last.values()))).max() < 1e-6


def max_diff(a: dict, b: dict) -> float:
    """Largest absolute difference between two (possibly nested) dicts of arrays."""
    assert a.keys() == b.keys()
    return max(max_diff(a[k], b[k]) if isinstance(a[k], dict)
               else float(np.abs(np.asarray(a[k], np.float64) - np.asarray(b[k], np.float64)).max()) for k in a)


def check_totals(run: RunResult, config: TrainConfig, workers: int) -> None:
    """Assert what every completed run of ``workers`` workers must hold: totals, time split, per-worker sums."""
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
