"""Tests of dqnlab.game.symmetry: the 8 symmetries of the board and how they permute the moves."""

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from dqnlab.game.rules import move_batch
from dqnlab.game.symmetry import ACTION_PERMUTATIONS, CELL_PERMUTATIONS, transform_actions, transform_boards


def test_the_eight_symmetries_are_distinct_permutations_closed_under_composition():
    perms = {tuple(p) for p in CELL_PERMUTATIONS}
    assert len(perms) == 8 and all(sorted(p) == list(range(16)) for p in perms)
    assert tuple(CELL_PERMUTATIONS[0]) == tuple(range(16))
    for p, q in itertools.product(CELL_PERMUTATIONS, repeat=2):
        assert tuple(p[q]) in perms
    assert all(sorted(a) == [0, 1, 2, 3] for a in ACTION_PERMUTATIONS)


@settings(max_examples=60, deadline=None)
@given(board=hnp.arrays(np.uint8, (4, 4), elements=st.integers(0, 11)))
def test_symmetries_commute_with_the_move_function(board):
    """move(g(b), pi_g(a)) == g(move(b, a)) with the same points, for every g and a."""
    n = 8 * 4
    g = np.repeat(np.arange(8), 4)
    a = np.tile(np.arange(4), 8)
    boards = np.repeat(board[None], n, axis=0)
    moved, points, changed = move_batch(boards, a)
    moved_t, points_t, changed_t = move_batch(transform_boards(boards, g), transform_actions(a, g))
    np.testing.assert_array_equal(moved_t, transform_boards(moved, g))
    np.testing.assert_array_equal(points_t, points)
    np.testing.assert_array_equal(changed_t, changed)
