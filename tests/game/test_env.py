"""Tests of dqnlab.game.env: the gymnasium environment Game2048 and its registration."""

import warnings

import gymnasium
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from helpers import ALMOST_OVER, NO_LEFT_MOVE

from dqnlab.game.board import board_to_tiles, max_tile
from dqnlab.game.env import Game2048, register_env
from dqnlab.game.rules import LEFT, is_game_over, legal_actions


@pytest.mark.parametrize("kwargs", [{"max_moves": 0}, {"render_mode": "human"}])
def test_game_rejects_bad_constructor_args(kwargs):
    with pytest.raises(ValueError, match=list(kwargs)[-1]):
        Game2048(**kwargs)


@pytest.mark.filterwarnings("ignore:.*not having a spec")  # a bare instance has no spec
def test_check_env_passes():
    check_env(Game2048())
    register_env()  # an env made by gymnasium has a spec, so all checks run
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(gymnasium.make("dqnlab/Game2048-v0").unwrapped)


def play(env, seed, actions):
    trajectory = [env.reset(seed=seed)[0]]
    for action in actions:
        obs, reward, *_ = env.step(action)
        trajectory += [obs, reward]
    return trajectory


def test_reset_seed_reproduces_the_trajectory():
    actions = np.random.default_rng(5).integers(0, 4, 50)
    first = play(Game2048(), 7, actions)
    second = play(Game2048(), 7, actions)
    for a, b in zip(first, second, strict=True):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(first[0], Game2048().reset(seed=8)[0])


def test_step_info_and_action_mask():
    env = Game2048()
    obs, info = env.reset(seed=1)
    rng = np.random.default_rng(6)
    score = 0
    for moves in range(1, 41):
        obs, reward, terminated, truncated, info = env.step(int(rng.integers(4)))
        assert set(info) >= {"board", "action_mask", "score", "max_tile", "moves"}
        assert obs.dtype == np.uint8 and obs.shape == (4, 4) and obs in env.observation_space
        assert isinstance(reward, float)
        assert isinstance(terminated, bool) and isinstance(truncated, bool)
        np.testing.assert_array_equal(info["board"], obs)
        assert info["board"] is not obs
        np.testing.assert_array_equal(info["action_mask"].astype(bool), legal_actions(obs))
        score += int(reward)
        assert info["score"] == score and type(info["score"]) is int
        assert info["max_tile"] == max_tile(obs) and type(info["max_tile"]) is int
        assert info["moves"] == moves
        assert terminated == is_game_over(obs)


def test_repeated_invalid_move_is_truncated_and_penalised():
    env = Game2048(max_moves=3, invalid_move_reward=-25.0)
    env.reset(seed=0)
    env.set_board(exponents=NO_LEFT_MOVE)
    for moves in range(1, 4):
        obs, reward, terminated, truncated, info = env.step(LEFT)
        np.testing.assert_array_equal(obs, NO_LEFT_MOVE)  # no spawn either
        assert reward == -25.0 and not terminated
        assert truncated == (moves == 3)
        assert info["moves"] == moves and info["score"] == 0


def test_game_over_step_terminates():
    env = Game2048(max_moves=1)
    env.reset(seed=0)
    env.set_board(exponents=ALMOST_OVER)
    obs, reward, terminated, truncated, info = env.step(LEFT)
    assert terminated and not truncated  # truncation only when not terminated
    assert reward == 16.0 and info["score"] == 16
    assert not info["action_mask"].any()
    np.testing.assert_array_equal(board_to_tiles(obs)[0, :3], [16, 32, 64])


def test_render_modes():
    env = Game2048(render_mode="ansi")
    env.reset(seed=0)
    env.set_board(tiles=[[2048, 0, 0, 0], [0, 131072, 0, 0], [0] * 4, [4, 0, 0, 0]])
    text = env.render()
    assert isinstance(text, str)
    assert all(value in text for value in ("2048", "131072", "4"))
    env = Game2048(render_mode="rgb_array")
    env.reset(seed=0)
    image = env.render()
    assert image.dtype == np.uint8 and image.ndim == 3 and image.shape[2] == 3
    assert len(np.unique(image.reshape(-1, 3), axis=0)) > 2
    assert Game2048().render() is None


def test_gymnasium_make_after_register():
    register_env()
    register_env()  # idempotent
    env = gymnasium.make("dqnlab/Game2048-v0", max_moves=5)
    obs, info = env.reset(seed=0)
    assert obs in env.observation_space
    for _ in range(5):
        obs, _, _, truncated, info = env.step(env.action_space.sample(mask=info["action_mask"]))
    assert truncated
    env.close()
