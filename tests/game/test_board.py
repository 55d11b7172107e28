"""Tests of dqnlab.game.board: tile values <-> exponents, and boards handed over by keyword naming their form."""

import functools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from dqnlab.game.board import board_from_tiles, board_to_tiles, max_tile
from dqnlab.game.draw import draw_board
from dqnlab.game.env import Game2048
from dqnlab.game.rules import DOWN, LEFT, MAX_EXPONENT, RIGHT, UP


@given(hnp.arrays(np.uint8, (4, 4), elements=st.integers(0, MAX_EXPONENT)))
@settings(max_examples=50, deadline=None, database=None)
def test_board_tiles_round_trip(board):
    tiles = board_to_tiles(board)
    assert tiles.dtype == np.int64
    np.testing.assert_array_equal(board_from_tiles(tiles.tolist()), board)
    assert max_tile(board) == tiles.max()


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
