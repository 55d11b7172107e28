"""Tests of dqnlab.game.env: 2048 rules, spawning, the Gymnasium env and the vector env."""

import functools
import warnings

import gymnasium
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from dqnlab.game.env import (
    DOWN,
    LEFT,
    MAX_EXPONENT,
    N_ACTIONS,
    RIGHT,
    UP,
    Game2048,
    VecGame2048,
    board_from_tiles,
    board_to_tiles,
    is_game_over,
    is_game_over_batch,
    legal_actions,
    legal_actions_batch,
    max_tile,
    move,
    move_batch,
    new_board,
    new_boards,
    register_env,
    spawn,
    spawn_batch,
)
from dqnlab.game import env as env_module
from dqnlab.plots import draw_board

PROPERTY = settings(max_examples=200, deadline=None, database=None)

# Exponents biased toward small values (many merges) and big ones (fallback path).
EXPONENTS = st.one_of(st.integers(0, 3), st.integers(14, MAX_EXPONENT),
                      st.integers(0, MAX_EXPONENT))
BOARDS = hnp.arrays(np.uint8, (4, 4), elements=EXPONENTS)
ACTIONS = st.integers(0, N_ACTIONS - 1)

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
    # env steps of a single board take a pure-Python path: same boards, points, legal moves
    # and random draws as the NumPy path of many boards (which reference_move checks)
    board[np.random.default_rng(seed).random((4, 4)) < 0.3] = 0  # room for moves and spawns
    one_rng, batch_rng = np.random.default_rng(seed), np.random.default_rng(seed)
    one = env_module._advance(board[None], np.array([action]), one_rng)
    new, points, changed = move_batch(board[None], np.array([action]))
    env_module._spawn_unchecked(new, batch_rng, changed)
    for got, expected in zip(one, (new, points, changed, legal_actions_batch(new))):
        assert got.dtype == expected.dtype and got.flags.writeable
        np.testing.assert_array_equal(got, expected)
    assert one_rng.random() == batch_rng.random()  # the streams are at the same place


def test_one_board_path_takes_every_board_without_big_tiles():
    rng = np.random.default_rng(0)
    boards = np.minimum(rng.integers(0, 15, (200, 4, 4)), rng.integers(0, 15, (200, 4, 4))).astype(np.uint8)
    taken = [env_module._advance_one(b, int(a), rng) is not None for b, a in zip(boards, rng.integers(0, 4, 200))]
    assert all(taken)  # the comparison above is not vacuous
    assert env_module._advance_one(embed([2**15, 2**15, 0, 0], LEFT), LEFT, rng) is None  # 65536: tables end


def test_move_batch_handles_mixed_actions_and_big_tiles():
    boards = np.stack([embed([65536, 65536, 2, 2], LEFT), embed([2, 2, 0, 0], UP),
                       embed([16, 16, 0, 0], DOWN), embed([65536, 65536, 0, 0], RIGHT)])
    new, rewards, changed = move_batch(boards, np.array([LEFT, UP, DOWN, RIGHT]))
    np.testing.assert_array_equal(rewards, [131076, 4, 32, 131072])
    np.testing.assert_array_equal(new[0], embed([131072, 4, 0, 0], LEFT))
    np.testing.assert_array_equal(new[2], embed([32, 0, 0, 0], DOWN))
    assert changed.all()


# --------------------------------------------------------------------------
# Game over and board helpers
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


@given(hnp.arrays(np.uint8, (4, 4), elements=st.integers(0, MAX_EXPONENT)))
@settings(max_examples=50, deadline=None, database=None)
def test_board_tiles_round_trip(board):
    tiles = board_to_tiles(board)
    assert tiles.dtype == np.int64
    np.testing.assert_array_equal(board_from_tiles(tiles.tolist()), board)
    assert max_tile(board) == tiles.max()


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


@pytest.mark.parametrize("rows", [[[3] * 4] * 4, [[2] * 4] * 3, [[-2] * 4] * 4,
                                  [[262144] * 4] * 4, [[2.0] * 4] * 4])
def test_board_from_tiles_rejects_bad_values(rows):
    with pytest.raises(ValueError, match="tiles"):
        board_from_tiles(rows)


# --------------------------------------------------------------------------
# Boards as people write them
# --------------------------------------------------------------------------

PERSONS_BOARD = [[2, 4, 8, 16],
                 [0, 0, 2, 2],
                 [0, 0, 0, 0],
                 [2048, 0, 0, 4]]
SAME_AS_EXPONENTS = [[1, 2, 3, 4],
                     [0, 0, 1, 1],
                     [0, 0, 0, 0],
                     [11, 0, 0, 2]]


def _play_from(**board):
    env = Game2048()
    env.reset(seed=5)
    env.set_board(**board)
    return [env.step(action) for action in (LEFT, UP, RIGHT, DOWN, LEFT)]


def test_set_board_with_tiles_and_with_exponents_gives_the_same_game():
    from_tiles, from_exponents = _play_from(tiles=PERSONS_BOARD), _play_from(exponents=SAME_AS_EXPONENTS)
    for (obs_t, reward_t, *_, info_t), (obs_e, reward_e, *_, info_e) in zip(from_tiles, from_exponents):
        np.testing.assert_array_equal(obs_t, obs_e)
        assert reward_t == reward_e and info_t["score"] == info_e["score"]
    obs, reward, *_ = from_tiles[0]  # LEFT: row 1 merges 2 + 2; the 2048 stays a 2048
    assert reward == 4.0
    np.testing.assert_array_equal(board_to_tiles(obs)[[0, 1, 3], 0], [2, 4, 2048])
    np.testing.assert_array_equal(board_from_tiles(PERSONS_BOARD), SAME_AS_EXPONENTS)


@pytest.mark.parametrize("board, error, message", [
    ({"tiles": [[3, 0, 0, 0], [0] * 4, [0] * 4, [0, 0, 6, 2]]}, ValueError,
     r"tiles must hold 0 \(empty\) or powers of two from 2 to 131072, got \[3, 6\]"),
    ({"tiles": SAME_AS_EXPONENTS}, ValueError, r"tiles must hold .* got \[1, 3, 11\]"),  # exponents as tiles
    ({"tiles": [[2] * 4] * 3}, ValueError, r"tiles must be 4 x 4 integer tile values .* shape \(3, 4\)"),
    ({"tiles": [[2.0] * 4] * 4}, ValueError, r"tiles must be 4 x 4 integer tile values .* float64"),
    ({"exponents": PERSONS_BOARD}, ValueError,  # tiles as exponents: a 2048 is no exponent
     r"exponents must hold log2 exponents in 0\.\.17 \(0 = empty, k = the tile 2\*\*k\), got values in 0\.\.2048"),
    ({"exponents": [[18] * 4] * 4}, ValueError, r"exponents must hold log2 exponents in 0\.\.17.* 18\.\.18"),
    ({"exponents": np.zeros((4, 5), int)}, ValueError, r"exponents must have shape \(4, 4\), got shape \(4, 5\)"),
    ({}, TypeError, r"exactly one of tiles= and exponents=, got neither: tiles=\[\[2, 4, 8, 16\], \.\.\.\]"),
    ({"tiles": PERSONS_BOARD, "exponents": SAME_AS_EXPONENTS}, TypeError, "exactly one .* got both"),
])
def test_a_board_not_of_the_form_named_is_a_clear_error(board, error, message):
    from matplotlib.figure import Figure

    for function in (Game2048().set_board, functools.partial(draw_board, ax=Figure().add_subplot())):
        with pytest.raises(error, match=message):
            function(**board)


def test_a_board_without_its_form_is_refused():
    from matplotlib.figure import Figure

    with pytest.raises(TypeError, match=r"Game2048\.set_board takes the board by keyword, naming its form: "
                                        r"tiles=.* for tile values .* or exponents=obs for log2 exponents"):
        Game2048().set_board(PERSONS_BOARD)
    with pytest.raises(TypeError, match="draw_board takes the board by keyword"):
        draw_board(SAME_AS_EXPONENTS, Figure().add_subplot())


def test_board_helpers_are_exported_at_the_top_level():
    import dqnlab

    assert dqnlab.board_from_tiles is board_from_tiles and dqnlab.board_to_tiles is board_to_tiles
    assert {"board_from_tiles", "board_to_tiles"} <= set(dqnlab.__all__)


def test_spawn_batch_rejects_non_uint8_and_bad_mask():
    rng = np.random.default_rng()
    with pytest.raises(ValueError, match="boards"):
        spawn_batch(np.zeros((2, 4, 4), np.int64), rng)
    with pytest.raises(ValueError, match="mask"):
        spawn_batch(np.zeros((2, 4, 4), np.uint8), rng, mask=np.array([True]))
    with pytest.raises(ValueError, match="rng"):
        spawn_batch(np.zeros((2, 4, 4), np.uint8), 0)


@pytest.mark.parametrize("kwargs", [{"max_moves": 0}, {"render_mode": "human"}])
def test_game_rejects_bad_constructor_args(kwargs):
    with pytest.raises(ValueError, match=list(kwargs)[-1]):
        Game2048(**kwargs)


@pytest.mark.parametrize("kwargs", [{"n_envs": 0}, {"n_envs": 2, "max_moves": 0}])
def test_vec_game_rejects_bad_constructor_args(kwargs):
    with pytest.raises(ValueError, match=list(kwargs)[-1]):
        VecGame2048(**kwargs)


# --------------------------------------------------------------------------
# Game2048
# --------------------------------------------------------------------------

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


def test_draw_board_labels_each_tile():
    from matplotlib.figure import Figure

    ax = Figure().add_subplot()
    board = board_from_tiles([[2, 0, 0, 0], [0, 1024, 0, 0], [0] * 4, [0, 0, 0, 65536]])
    assert draw_board(exponents=board, ax=ax, title="t") is ax
    assert sorted(t.get_text() for t in ax.texts) == ["1024", "2", "65536"]
    same = Figure().add_subplot()
    draw_board(tiles=board_to_tiles(board), ax=same)
    assert [t.get_text() for t in same.texts] == [t.get_text() for t in ax.texts]


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


# --------------------------------------------------------------------------
# VecGame2048
# --------------------------------------------------------------------------

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
