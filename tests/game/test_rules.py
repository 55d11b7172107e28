"""Tests of dqnlab.game.rules: moves, legal moves, game over, spawning, new boards and their input checks."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from dqnlab.game import rules
from dqnlab.game.board import board_from_tiles, board_to_tiles, max_tile
from dqnlab.game.env import Game2048
from dqnlab.game.rules import (
    DOWN,
    LEFT,
    MAX_EXPONENT,
    N_ACTIONS,
    RIGHT,
    UP,
    is_game_over,
    is_game_over_batch,
    legal_actions,
    legal_actions_batch,
    move,
    move_batch,
    new_board,
    new_boards,
    spawn,
    spawn_batch,
)
from dqnlab.game.vector import VecGame2048

PROPERTY = settings(max_examples=200, deadline=None, database=None)

# Exponents biased toward small values (many merges) and big ones (fallback path).
EXPONENTS = st.one_of(st.integers(0, 3), st.integers(14, MAX_EXPONENT),
                      st.integers(0, MAX_EXPONENT))
BOARDS = hnp.arrays(np.uint8, (4, 4), elements=EXPONENTS)
ACTIONS = st.integers(0, N_ACTIONS - 1)


def reference_move(board, action):
    """Textbook 2048 move, one line at a time, for cross-checking."""
    turns = action + 1  # counter-clockwise quarter turns that make the move "left"
    rotated = np.rot90(np.asarray(board, dtype=np.int64), turns)
    out, reward = np.zeros((4, 4), np.int64), 0
    for r, line in enumerate(rotated):
        tiles, merged = [t for t in line if t], []
        while tiles:
            if len(tiles) > 1 and tiles[0] == tiles[1] and tiles[0] < MAX_EXPONENT:
                merged.append(tiles[0] + 1)
                reward += 2 ** (tiles[0] + 1)
                tiles = tiles[2:]
            else:
                merged.append(tiles.pop(0))
        out[r, :len(merged)] = merged
    return np.rot90(out, -turns).astype(np.uint8), reward


def tile_mass(board):
    return int(board_to_tiles(board).sum())


def potential(board):
    """Sum of (k - 1) * 2**k over tiles 2**k: the points needed to build them from 2s."""
    exps = np.asarray(board, dtype=np.int64)
    return int(np.where(exps > 0, (exps - 1) << exps, 0).sum())


def embed(line, action):
    """Board holding tile values ``line`` (listed wall first) in the line moved by ``action``."""
    board = np.zeros((4, 4), np.int64)
    values = list(line)
    if action == LEFT:
        board[1] = values
    elif action == RIGHT:
        board[1] = values[::-1]
    elif action == UP:
        board[:, 2] = values
    else:
        board[:, 2] = values[::-1]
    return board_from_tiles(board)


# --------------------------------------------------------------------------
# Moves
# --------------------------------------------------------------------------

@pytest.mark.parametrize("action", [UP, RIGHT, DOWN, LEFT])
@pytest.mark.parametrize("line, expected, points", [
    ([2, 2, 2, 2], [4, 4, 0, 0], 8),              # each tile merges once
    ([4, 4, 8, 0], [8, 8, 0, 0], 8),              # a merged 8 does not merge again
    ([2, 2, 4, 4], [4, 8, 0, 0], 12),
    ([0, 4, 4, 4], [8, 4, 0, 0], 8),              # the pair nearest the wall merges
    ([2, 0, 0, 2], [4, 0, 0, 0], 4),
    ([0, 0, 0, 2], [2, 0, 0, 0], 0),
    ([32768, 32768, 2, 2], [65536, 4, 0, 0], 65540),
    ([65536, 65536, 0, 0], [131072, 0, 0, 0], 131072),   # beyond the lookup tables
    ([2, 65536, 65536, 2], [2, 131072, 2, 0], 131072),
])
def test_line_moves_in_every_direction(action, line, expected, points):
    board = embed(line, action)
    before = board.copy()
    new, reward, changed = move(board, action)
    np.testing.assert_array_equal(new, embed(expected, action))
    assert reward == points and type(reward) is int
    assert changed is True
    np.testing.assert_array_equal(board, before)  # input untouched


def test_three_equal_tiles_moved_right_merge_at_the_far_end():
    board = board_from_tiles([[4, 4, 4, 0], [0] * 4, [0] * 4, [0] * 4])
    new, reward, _ = move(board, RIGHT)
    np.testing.assert_array_equal(board_to_tiles(new)[0], [0, 0, 4, 8])
    assert reward == 8


def test_whole_board_moves_up_and_down_on_columns():
    board = board_from_tiles([[2, 2, 2, 2],
                              [4, 4, 8, 0],
                              [2, 2, 4, 4],
                              [4, 4, 4, 0]])
    up, up_points, _ = move(board, UP)
    np.testing.assert_array_equal(board_to_tiles(up), [[2, 2, 2, 2],
                                                       [4, 4, 8, 4],
                                                       [2, 2, 8, 0],
                                                       [4, 4, 0, 0]])
    assert up_points == 8
    down, down_points, _ = move(board, DOWN)
    np.testing.assert_array_equal(board_to_tiles(down), [[2, 2, 0, 0],
                                                         [4, 4, 2, 0],
                                                         [2, 2, 8, 2],
                                                         [4, 4, 8, 4]])
    assert down_points == 8


@pytest.mark.parametrize("line", [[2, 4, 8, 16], [131072, 131072, 0, 0], [4, 0, 0, 0]])
@pytest.mark.parametrize("action", [UP, RIGHT, DOWN, LEFT])
def test_move_that_changes_nothing(action, line):
    board = embed(line, action)
    new, reward, changed = move(board, action)
    np.testing.assert_array_equal(new, board)
    assert reward == 0 and changed is False
    assert not legal_actions(board)[action]


@PROPERTY
@given(BOARDS, ACTIONS)
def test_move_matches_reference_and_invariants(board, action):
    new, reward, changed = move(board, action)
    expected, expected_reward = reference_move(board, action)
    np.testing.assert_array_equal(new, expected)
    assert new.dtype == np.uint8 and new.shape == (4, 4)
    assert reward == expected_reward
    assert changed == (not np.array_equal(new, board))
    assert changed == legal_actions(board)[action]
    assert tile_mass(new) == tile_mass(board)
    # Merging two 2**k into 2**(k+1) raises the potential by exactly 2**(k+1).
    assert reward == potential(new) - potential(board)
    assert (reward > 0) == (np.count_nonzero(new) < np.count_nonzero(board))


@PROPERTY
@given(BOARDS)
def test_mirror_and_transpose_symmetry(board):
    left, left_points, _ = move(board, LEFT)
    right, right_points, _ = move(board[:, ::-1], RIGHT)
    np.testing.assert_array_equal(left, right[:, ::-1])
    assert left_points == right_points
    up, up_points, _ = move(board, UP)
    left_t, left_t_points, _ = move(board.T, LEFT)
    np.testing.assert_array_equal(up, left_t.T)
    assert up_points == left_t_points


@st.composite
def board_batches(draw):
    n = draw(st.integers(0, 24))
    boards = draw(hnp.arrays(np.uint8, (n, 4, 4), elements=EXPONENTS))
    actions = draw(hnp.arrays(np.int64, (n,), elements=ACTIONS))
    return boards, actions


@PROPERTY
@given(board_batches())
def test_batch_functions_agree_with_single_board_functions(batch):
    boards, actions = batch
    before = boards.copy()
    new, rewards, changed = move_batch(boards, actions)
    assert new.shape == boards.shape and new.dtype == np.uint8
    assert rewards.dtype == np.int64 and changed.dtype == bool
    legal = legal_actions_batch(boards)
    over = is_game_over_batch(boards)
    assert legal.shape == (len(boards), N_ACTIONS) and over.shape == (len(boards),)
    for i, (board, action) in enumerate(zip(boards, actions)):
        one_new, one_reward, one_changed = move(board, action)
        np.testing.assert_array_equal(new[i], one_new)
        assert (rewards[i], changed[i]) == (one_reward, one_changed)
        np.testing.assert_array_equal(legal[i], legal_actions(board))
        assert over[i] == is_game_over(board) == (not legal[i].any())
    np.testing.assert_array_equal(boards, before)


@PROPERTY
@given(BOARDS, ACTIONS, st.integers(0, 2**32 - 1))
def test_one_board_step_matches_the_batched_step(board, action, seed):
    # an env step of a single board (rules.advance, one compiled kernel) gives the same boards,
    # points, legal moves and random draws as move_batch then a spawn (which reference_move checks)
    board[np.random.default_rng(seed).random((4, 4)) < 0.3] = 0  # room for moves and spawns
    one_rng, batch_rng = np.random.default_rng(seed), np.random.default_rng(seed)
    one = rules.advance(board[None], np.array([action]), one_rng)
    new, points, changed = move_batch(board[None], np.array([action]))
    rules._spawn_unchecked(new, batch_rng, changed)
    for got, expected in zip(one, (new, points, changed, legal_actions_batch(new))):
        assert got.dtype == expected.dtype and got.flags.writeable
        np.testing.assert_array_equal(got, expected)
    assert one_rng.random() == batch_rng.random()  # the streams are at the same place


def test_one_board_step_merges_big_tiles_exactly():
    # a single board whose move leaves 4 bits a cell (32768 + 32768) takes the core's exact path
    rng = np.random.default_rng(0)
    for tiles, action, points in (([2**15, 2**15, 0, 0], LEFT, 2**16), ([2**16, 2**16, 2, 2], UP, 2**17 + 4),
                                  ([2**17, 2**17, 0, 0], RIGHT, 0)):
        board = embed(tiles, action)
        new, got_points, changed, legal = rules.advance(board[None], np.array([action]), rng)
        expected, expected_points = reference_move(board, action)
        assert got_points[0] == points == expected_points and changed[0] == (points > 0)
        spawned = new[0] != expected
        assert spawned.sum() == changed[0] and (expected[spawned] == 0).all()
        np.testing.assert_array_equal(legal[0], legal_actions(new[0]))


def test_move_batch_handles_mixed_actions_and_big_tiles():
    boards = np.stack([embed([65536, 65536, 2, 2], LEFT), embed([2, 2, 0, 0], UP),
                       embed([16, 16, 0, 0], DOWN), embed([65536, 65536, 0, 0], RIGHT)])
    new, rewards, changed = move_batch(boards, np.array([LEFT, UP, DOWN, RIGHT]))
    np.testing.assert_array_equal(rewards, [131076, 4, 32, 131072])
    np.testing.assert_array_equal(new[0], embed([131072, 4, 0, 0], LEFT))
    np.testing.assert_array_equal(new[2], embed([32, 0, 0, 0], DOWN))
    assert changed.all()


# --------------------------------------------------------------------------
# Game over
# --------------------------------------------------------------------------

def test_full_board_without_equal_neighbours_is_over():
    board = board_from_tiles([[2, 4, 2, 4], [4, 2, 4, 2], [2, 4, 2, 4], [4, 2, 4, 2]])
    assert is_game_over(board)
    assert not legal_actions(board).any()


@pytest.mark.parametrize("cell, neighbour", [((1, 1), (1, 2)), ((2, 3), (3, 3))])
def test_full_board_with_one_equal_pair_is_not_over(cell, neighbour):
    board = np.arange(1, 17, dtype=np.uint8).reshape(4, 4)  # 16 distinct tiles
    assert is_game_over(board)
    board[neighbour] = board[cell]
    assert not is_game_over(board)
    assert legal_actions(board).sum() == 2  # the two moves along the pair's axis


def test_board_with_an_empty_cell_is_not_over():
    board = board_from_tiles([[2, 4, 2, 4], [4, 2, 4, 2], [2, 4, 0, 4], [4, 2, 4, 2]])
    assert not is_game_over(board)
    assert legal_actions(board).all()


# --------------------------------------------------------------------------
# Spawning
# --------------------------------------------------------------------------

@PROPERTY
@given(BOARDS.filter(lambda b: not b.all()), st.integers(0, 2**32 - 1))
def test_spawn_fills_one_empty_cell_with_a_2_or_4(board, seed):
    before = board.copy()
    new = spawn(board, np.random.default_rng(seed))
    changed = new != board
    assert changed.sum() == 1
    assert board[changed] == 0 and new[changed] in (1, 2)
    np.testing.assert_array_equal(board, before)


def test_spawn_frequencies_and_uniform_cell():
    n = 5000
    boards = np.zeros((n, 4, 4), np.uint8)
    spawn_batch(boards, np.random.default_rng(0))
    values = boards[boards != 0]
    assert values.size == n and set(values.tolist()) <= {1, 2}
    assert 0.08 < np.mean(values == 2) < 0.12
    counts = np.count_nonzero(boards, axis=0).ravel()
    expected = n / 16
    chi2 = ((counts - expected) ** 2 / expected).sum()
    assert chi2 < 45  # 15 degrees of freedom: P(chi2 > 45) ~ 1e-4


def test_spawn_lands_only_and_uniformly_on_empty_cells():
    board = board_from_tiles([[2, 4, 8, 16], [0, 2, 4, 8], [2, 0, 8, 16], [4, 8, 16, 0]])
    boards = np.repeat(board[None], 3000, axis=0)
    spawn_batch(boards, np.random.default_rng(1))
    added = (boards != board).sum(axis=0)
    assert added[board != 0].sum() == 0
    assert np.all(np.abs(added[board == 0] - 1000) < 150)


def test_spawn_batch_respects_mask_and_skips_full_boards():
    full = board_from_tiles([[2, 4, 2, 4], [4, 2, 4, 2], [2, 4, 2, 4], [4, 2, 4, 2]])
    boards = np.stack([np.zeros((4, 4), np.uint8), np.zeros((4, 4), np.uint8), full])
    spawn_batch(boards, np.random.default_rng(2), mask=np.array([False, True, True]))
    np.testing.assert_array_equal(np.count_nonzero(boards, axis=(1, 2)), [0, 1, 16])
    np.testing.assert_array_equal(boards[2], full)


def test_spawn_on_full_board_raises():
    with pytest.raises(ValueError, match="empty cell"):
        spawn(np.ones((4, 4), np.uint8), np.random.default_rng())


def test_new_boards_have_two_tiles_and_are_reproducible():
    boards = new_boards(100, np.random.default_rng(3))
    assert boards.shape == (100, 4, 4) and boards.dtype == np.uint8
    assert (np.count_nonzero(boards, axis=(1, 2)) == 2).all()
    assert set(np.unique(boards).tolist()) <= {0, 1, 2}
    np.testing.assert_array_equal(boards, new_boards(100, np.random.default_rng(3)))
    assert np.count_nonzero(new_board(np.random.default_rng(4))) == 2


# --------------------------------------------------------------------------
# Input validation
# --------------------------------------------------------------------------

BAD_BOARDS = [
    (np.zeros((3, 4), np.uint8), "shape"),
    (np.zeros((4, 4), np.float64), "dtype"),
    (np.full((4, 4), MAX_EXPONENT + 1), "0..17"),
    (np.full((4, 4), -1), "0..17"),
]


@pytest.mark.parametrize("board, problem", BAD_BOARDS)
@pytest.mark.parametrize("function", [
    lambda b: move(b, LEFT), legal_actions, is_game_over, board_to_tiles, max_tile,
    lambda b: spawn(b, np.random.default_rng()),
])
def test_bad_board_raises(function, board, problem):
    with pytest.raises(ValueError, match=rf"board.*{problem}"):
        function(board)


@pytest.mark.parametrize("board, problem", BAD_BOARDS)
@pytest.mark.parametrize("function", [
    lambda b: move_batch(b, np.zeros(len(b), int)), legal_actions_batch, is_game_over_batch,
])
def test_bad_batch_raises(function, board, problem):
    with pytest.raises(ValueError, match=rf"boards.*{problem}"):
        function(board[None])


@pytest.mark.parametrize("action", [4, -1, 1.0, "up"])
def test_bad_action_raises(action):
    with pytest.raises(ValueError, match="action"):
        move(np.zeros((4, 4), np.uint8), action)
    env = Game2048()
    env.reset(seed=0)
    with pytest.raises(ValueError, match="action"):
        env.step(action)


@pytest.mark.parametrize("actions", [np.array([0, 4]), np.array([-1, 0]),
                                     np.array([0.0, 1.0]), np.array([0, 1, 2])])
def test_bad_batch_actions_raise(actions):
    boards = np.zeros((2, 4, 4), np.uint8)
    with pytest.raises(ValueError, match="actions"):
        move_batch(boards, actions)
    with pytest.raises(ValueError, match="actions"):
        VecGame2048(2, seed=0).step(actions)


def test_spawn_batch_rejects_non_uint8_and_bad_mask():
    rng = np.random.default_rng()
    with pytest.raises(ValueError, match="boards"):
        spawn_batch(np.zeros((2, 4, 4), np.int64), rng)
    with pytest.raises(ValueError, match="mask"):
        spawn_batch(np.zeros((2, 4, 4), np.uint8), rng, mask=np.array([True]))
    with pytest.raises(ValueError, match="rng"):
        spawn_batch(np.zeros((2, 4, 4), np.uint8), 0)
