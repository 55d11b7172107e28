"""The compiled act-and-learn loop (dqnlab.runtime.native on dqnlab.core.loops) leaves a Learner exactly as
the Python loop does: boards, scores, games, replay, n-step ring, random streams, counters, weights."""

import math

import numpy as np
import pytest

from dqnlab import TrainConfig
from dqnlab.core.ntuple import afterstate_rows
from dqnlab.runtime.learner import Learner

N_ENVS = 16
STEPS = 150  # act steps: 2,400 env steps, ~60 updates after learning_starts, a wrapped buffer
WEIGHT_TOL = dict(rtol=1e-5, atol=1e-5)


def config(seed=0, **overrides):
    return TrainConfig.preset("ntuple-small", **{**dict(total_env_steps=None, max_seconds=60, seed=seed, n_envs=N_ENVS,
                                                      buffer_size=2000, batch_size=32, learning_starts=500), **overrides})


def pair(cfg):
    """Two learners of ``cfg``: the first on the compiled loop, the second forced onto the Python loop."""
    a, b = Learner(cfg), Learner(cfg)
    assert a.native is not None and b.native is not None
    b.native = None
    return a, b


def rng_state(rng):
    return rng.bit_generator.state


def assert_same_state(a, b):
    """Everything a learner holds, equal (weights and float diagnostics to float32 tolerance)."""
    np.testing.assert_array_equal(a.env.boards, b.env.boards)
    np.testing.assert_array_equal(a.boards, b.boards)
    np.testing.assert_array_equal(a.masks, b.masks)
    np.testing.assert_array_equal(a.env.scores, b.env.scores)
    np.testing.assert_array_equal(a.env.moves, b.env.moves)
    assert a.env_steps == b.env_steps
    assert a.updates == b.updates
    assert a.owed_updates() == b.owed_updates() and a._credit == pytest.approx(b._credit)
    # the games
    assert len(a.episodes) == len(b.episodes)
    for ea, eb in zip(a.episodes, b.episodes):
        assert ea.keys() == eb.keys()
        for key in ea:
            if key in ("epsilon", "loss"):
                assert (math.isnan(ea[key]) and math.isnan(eb[key])) or ea[key] == pytest.approx(eb[key], rel=1e-5)
            elif key != "wall_time_s":
                assert ea[key] == eb[key] and type(ea[key]) is type(eb[key]), key
    # the replay buffer
    assert (a.buffer.pos, a.buffer.size, a.buffer.added) == (b.buffer.pos, b.buffer.size, b.buffer.added)
    assert a.buffer.arrays.keys() == b.buffer.arrays.keys()
    for name in a.buffer.arrays:
        np.testing.assert_array_equal(a.buffer.arrays[name], b.buffer.arrays[name], err_msg=name)
    # the n-step ring
    sa, sb = a.nstep.state_dict(), b.nstep.state_dict()
    assert sa.keys() == sb.keys()
    for key in sa:
        np.testing.assert_array_equal(sa[key], sb[key], err_msg=key)
    # the random streams: exploration, spawns, replay sampling
    assert rng_state(a.agent.rng) == rng_state(b.agent.rng)
    assert rng_state(a.env.rng) == rng_state(b.env.rng)
    assert rng_state(a.buffer.rng) == rng_state(b.buffer.rng)
    # the weights
    np.testing.assert_allclose(a.agent.online.weight.detach().numpy(), b.agent.online.weight.detach().numpy(),
                               **WEIGHT_TOL)
    np.testing.assert_allclose(a.agent.target.weight.detach().numpy(), b.agent.target.weight.detach().numpy(),
                               **WEIGHT_TOL)
    assert (a.agent.target is a.agent.online) == (b.agent.target is b.agent.online)
    if a.config.optimizer == "tc":  # temporal coherence's sums and step count
        sa, sb = a.agent.optimizer.state[a.agent.online.weight], b.agent.optimizer.state[b.agent.online.weight]
        np.testing.assert_allclose(sa["sums"].numpy(), sb["sums"].numpy(), **WEIGHT_TOL)
        assert float(sa["step"]) == float(sb["step"]) == b.updates
    if not math.isnan(b.last_loss):
        assert a.last_loss == pytest.approx(b.last_loss, rel=1e-4)
    # what the schemes report: the last update's loss, mean trained value and gradient norm, epsilon, replay ratio
    da, db = a.diagnostics(), b.diagnostics()
    assert da.keys() == db.keys()
    for key in da:
        assert (math.isnan(da[key]) and math.isnan(db[key])) or da[key] == pytest.approx(db[key], rel=1e-4, abs=1e-6), key


# (The preset's lr of 0.05 makes a separate target, or gamma < 1 with n-step returns, diverge within ~20
# updates on both loops here -- early boards share most of their rows -- so those variants take a smaller lr.)
VARIANTS = {
    "base": {},
    "n_step=3": dict(n_step=3),
    "target_update=50, double": dict(target_update=50, double_dqn=True, lr=0.005),
    "huber": dict(loss="huber"),
    "max_moves=40": dict(max_moves=40),
    "epsilon decay": dict(epsilon_start=0.3, epsilon_end=0.05, epsilon_decay_steps=2000),
    "log rewards": dict(reward_transform="log"),
    # more of what the loop reads
    "n_step=3, gamma=0.9, max_moves=40": dict(n_step=3, gamma=0.9, max_moves=40, lr=0.01),
    "target synced per episode": dict(target_update=0, max_moves=40, lr=0.005),
    "target_update=50, not double": dict(target_update=50, double_dqn=False, loss="huber", lr=0.005),
    "epsilon decay rate": dict(epsilon_start=0.5, epsilon_end=0.02, epsilon_decay_rate=0.97),
    "replay_ratio=4": dict(replay_ratio=4.0),
    "own tuples": dict(ntuples=((0, 1, 4, 5), (1, 2, 3, 9, 10, 11)), lr=0.1),
    # a replay of the last step alone (the ntuple preset's): most rows come from the row cache
    "replay of the last step": dict(buffer_size=N_ENVS, batch_size=N_ENVS),
    "last step, n_step=3, exploring, max_moves=40": dict(buffer_size=N_ENVS, batch_size=N_ENVS, n_step=3,
                                                         epsilon_start=0.3, epsilon_end=0.3, max_moves=40, lr=0.01),
    # the n-tuple field's learning methods
    "temporal coherence": dict(optimizer="tc", lr=0.2),
    "TD then TC, optimistic": dict(optimizer="tc", lr=0.2, tc_start=30, tc_td_lr=0.02, initial_value=2000.0),
    "multi-stage": dict(stages=(32, 128), lr=0.02),
}


@pytest.mark.parametrize("overrides", VARIANTS.values(), ids=VARIANTS.keys())
def test_native_steps_equal_the_python_loop(overrides):
    a, b = pair(config(seed=3, **overrides))
    for _ in range(STEPS):
        assert a.advance(N_ENVS) == N_ENVS
        assert b.advance(N_ENVS) == N_ENVS
    assert a.updates > 20 and a.buffer.added > a.buffer.capacity  # it learned, and the buffer wrapped
    assert_same_state(a, b)


def test_the_board_cache_holds_the_rows_of_every_board_the_next_act_plays():
    """Each board's four afterstates are computed once, as it becomes current, and serve the act and the
    updates: the cache holds every board's rows, and with a replay of the last step alone an update reads
    each live sample's next board from it (the loops stay equal above, so what it holds is what is used)."""
    a, _ = pair(config(seed=3, buffer_size=N_ENVS, batch_size=N_ENVS))
    a.advance(N_ENVS * 60)  # past learning_starts
    work = a.native.work
    assert work.cached_ok.all()
    layout = a.agent.online.placements
    rows, rewards, legal = np.empty_like(work.rows[0]), np.empty_like(work.rewards[0]), np.empty_like(work.legal[0])
    for i, board in enumerate(a.env.boards.reshape(N_ENVS, 16)):
        np.testing.assert_array_equal(work.cached[i], board)
        afterstate_rows(board, layout, False, np.empty(16, np.uint8), rows, rewards, legal)
        np.testing.assert_array_equal(work.legal[i], legal)
        np.testing.assert_array_equal(a.masks[i], legal)
        np.testing.assert_array_equal(work.rows[i][legal], rows[legal])
        np.testing.assert_array_equal(work.rewards[i][legal], rewards[legal])
    # the last update: its samples' next boards are this step's boards, read from the cache
    live = work.alive & ~a.buffer.arrays["dones"][work.slots]
    assert live.sum() > N_ENVS // 2
    np.testing.assert_array_equal(work.cached[work.src[live]], a.buffer.arrays["next_boards"].reshape(-1, 16)[
        work.slots[live]])


def test_native_games_finish():
    a, b = pair(config(seed=5, max_moves=40))
    for _ in range(STEPS):
        a.advance(N_ENVS)
        b.advance(N_ENVS)
    assert len(a.episodes) >= N_ENVS * 3  # truncated games at 40 moves
    assert_same_state(a, b)


@pytest.mark.parametrize("overrides", [{}, dict(n_step=3, max_moves=40)], ids=["base", "n_step=3, max_moves=40"])
def test_one_native_chunk_equals_many_python_steps(overrides):
    a, b = pair(config(seed=7, **overrides))
    assert a.advance(N_ENVS * 50) == N_ENVS * 50  # one call: 50 act steps and their updates
    for _ in range(50):
        b.advance(N_ENVS)
    assert_same_state(a, b)
    # and on from there, still together
    assert a.advance(N_ENVS * 100) == N_ENVS * 100
    for _ in range(100):
        b.advance(N_ENVS)
    assert a.updates > 20
    assert_same_state(a, b)


def test_act_step_and_learn_on_the_native_loop():
    a, b = pair(config(seed=9))
    for _ in range(80):
        a.act_step()
        a.learn()
        b.act_step()
        b.learn()
    assert a.updates > 0
    assert_same_state(a, b)


def advance_until_error(learner, steps=300):
    """Advance one act step at a time until an update raises; returns (weights, updates) before that call."""
    for _ in range(steps):
        weights, updates = learner.agent.online.weight.detach().numpy().copy(), learner.updates
        try:
            learner.advance(N_ENVS)
        except FloatingPointError as e:
            assert "non-finite TD loss" in str(e)
            return weights, updates
    raise AssertionError("no FloatingPointError")


@pytest.mark.parametrize("lr", [1e30, 1e36])
def test_native_loop_raises_for_a_non_finite_loss_without_applying_it(lr):
    a = Learner(config(seed=1, lr=lr))
    assert a.native is not None
    weights, updates = advance_until_error(a)
    # at most one update per act step here (replay ratio 1, 32 samples, 16 boards): the failing one
    assert a.updates == updates
    np.testing.assert_array_equal(a.agent.online.weight.detach().numpy(), weights)
    with pytest.raises(FloatingPointError, match="non-finite TD loss"):  # the weights stay broken
        for _ in range(10):
            a.advance(N_ENVS)


def test_native_and_python_loops_fail_at_the_same_update():
    a, b = pair(config(seed=1, lr=1e36))
    advance_until_error(a)
    advance_until_error(b)
    assert a.updates == b.updates
    np.testing.assert_array_equal(a.agent.online.weight.detach().numpy(), b.agent.online.weight.detach().numpy())
    np.testing.assert_array_equal(a.env.boards, b.env.boards)


@pytest.mark.parametrize("overrides", [dict(lr=1e30), dict(target_update=50, double_dqn=True)],
                         ids=["lr=1e30", "the preset's lr, target_update=50"])
def test_native_loop_catches_a_float32_overflow_as_the_python_loop_does(overrides):
    a, b = pair(config(seed=3, **overrides))
    advance_until_error(a)
    advance_until_error(b)
    assert a.updates == b.updates
    assert np.isfinite(a.agent.online.weight.detach().numpy()).all()


def test_warm_up_compiles_the_team_kernels_too():
    """A team's member compiling its kernel in a run would take the run's time while the others wait for it:
    warm_up leaves them compiled (a fresh process, where nothing else has called them)."""
    import subprocess
    import sys

    code = ("from dqnlab.core import loops; from dqnlab.runtime.learner import warm_up; warm_up(); "
            "print(len(loops.help_updates.signatures), len(loops.help_average.signatures))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, check=True)
    assert out.stdout.split() == ["1", "1"]
