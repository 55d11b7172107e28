"""Tests of dqnlab.game.vector: VecGame2048, N games stepped together with automatic reset."""

import numpy as np
import pytest
from helpers import ALMOST_OVER, NO_LEFT_MOVE

from dqnlab.game.board import board_to_tiles, max_tile
from dqnlab.game.rules import LEFT, RIGHT, is_game_over, is_game_over_batch, legal_actions_batch, move_batch
from dqnlab.game.vector import VecGame2048


@pytest.mark.parametrize("kwargs", [{"n_envs": 0}, {"n_envs": 2, "max_moves": 0}])
def test_vec_game_rejects_bad_constructor_args(kwargs):
    with pytest.raises(ValueError, match=list(kwargs)[-1]):
        VecGame2048(**kwargs)


def test_vec_reset_and_seed():
    env = VecGame2048(8, seed=3)
    assert env.boards.shape == (8, 4, 4) and env.boards.dtype == np.uint8
    assert (np.count_nonzero(env.boards, axis=(1, 2)) == 2).all()
    first = env.boards.copy()
    np.testing.assert_array_equal(VecGame2048(8, seed=3).boards, first)
    np.testing.assert_array_equal(env.reset(seed=3), first)
    assert env.scores.dtype == env.moves.dtype == np.int64


def test_vec_game_over_reports_and_auto_resets():
    env = VecGame2048(3, seed=0, max_moves=11, invalid_move_reward=-25.0)
    env.boards[0], env.boards[1] = ALMOST_OVER, NO_LEFT_MOVE
    env.scores[0], env.moves[0] = 100, 10
    step = env.step(np.array([LEFT, LEFT, RIGHT]))
    assert step.terminated.tolist() == [True, False, False]
    assert not step.truncated.any()  # env 0 reached max_moves but terminated
    # next_boards holds the final board of the finished game, boards a new game.
    assert is_game_over(step.next_boards[0])
    np.testing.assert_array_equal(board_to_tiles(step.next_boards[0])[0, :3], [16, 32, 64])
    assert np.count_nonzero(step.boards[0]) == 2
    np.testing.assert_array_equal(step.boards[1:], step.next_boards[1:])
    assert (step.episode_scores[0], step.episode_moves[0], step.episode_max_tiles[0]) == \
        (116, 11, 128)
    assert not step.episode_scores[1:].any() and not step.episode_moves[1:].any()
    assert (env.scores[0], env.moves[0]) == (0, 0)
    # An invalid move: penalty, no spawn.
    assert step.rewards.dtype == np.float32 and step.rewards[:2].tolist() == [16.0, -25.0]
    np.testing.assert_array_equal(step.next_boards[1], NO_LEFT_MOVE)
    np.testing.assert_array_equal(step.action_masks, legal_actions_batch(step.boards))
    np.testing.assert_array_equal(env.boards, step.boards)


def test_vec_truncation_after_max_moves():
    env = VecGame2048(4, seed=1, max_moves=2)
    env.step(np.full(4, LEFT))
    step = env.step(np.full(4, LEFT))
    assert step.truncated.all() and not step.terminated.any()
    np.testing.assert_array_equal(step.episode_moves, [2, 2, 2, 2])
    assert (env.moves == 0).all() and (np.count_nonzero(step.boards, axis=(1, 2)) == 2).all()


def test_vec_random_play_is_consistent():
    env = VecGame2048(32, seed=2)
    rng = np.random.default_rng(7)
    masks = legal_actions_batch(env.boards)
    finished = 0
    for _ in range(200):
        before = env.boards.copy()
        actions = np.array([rng.choice(np.flatnonzero(mask)) for mask in masks])
        step = env.step(actions)
        moved, points, _ = move_batch(before, actions)
        # Every legal move is followed by exactly one spawn on an empty cell.
        spawned = step.next_boards != moved
        assert (spawned.sum(axis=(1, 2)) == 1).all() and (moved[spawned] == 0).all()
        np.testing.assert_array_equal(step.rewards, points.astype(np.float32))
        np.testing.assert_array_equal(step.terminated, is_game_over_batch(step.next_boards))
        done = step.terminated
        np.testing.assert_array_equal(step.boards[~done], step.next_boards[~done])
        assert (np.count_nonzero(step.boards[done], axis=(1, 2)) == 2).all()
        np.testing.assert_array_equal(step.episode_max_tiles[done],
                                      [max_tile(b) for b in step.next_boards[done]])
        assert not step.episode_scores[~done].any()
        np.testing.assert_array_equal(step.action_masks, legal_actions_batch(step.boards))
        masks = step.action_masks
        finished += done.sum()
    assert finished > 10
