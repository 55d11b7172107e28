"""Tests of dqnlab.core.search: expectimax at depth 1 is the greedy afterstate move; at depths 2 and 3 its
values equal a plain-Python expectimax over every spawn; the transposition table changes no value."""

import math

import numpy as np
import pytest
import torch

from dqnlab.agent.networks import NTupleNetwork
from dqnlab.core import search
from dqnlab.core.ntuple import afterstate_values
from dqnlab.game.rules import move


@pytest.fixture(scope="module")
def net():
    """A 2x4+2x6 network (small tables) with random weights in [-1, 1)."""
    net = NTupleNetwork("2x4+2x6")
    w = net.weight.detach().numpy()
    w[:] = np.random.default_rng(3).uniform(-1, 1, w.shape).astype(np.float32)
    return net


def mid_game_boards(n, seed, empty=0.45):
    """``(n, 16)`` uint8 boards of exponents 1..11, about ``empty`` of the cells empty."""
    rng = np.random.default_rng(seed)
    boards = rng.integers(1, 12, (n, 16)).astype(np.uint8)
    boards[rng.random(boards.shape) < empty] = 0
    return boards


def run(net, boards, depth, log_rewards=False, gamma=1.0, table=None, generation=1):
    actions, q = np.empty(len(boards), np.int64), np.empty((len(boards), 4))
    table = search.transposition_table(16) if table is None else table
    search.expectimax(boards, depth, net.weight.detach().numpy().reshape(-1), net.placements, log_rewards, gamma,
                      table, generation, actions, q)
    return actions, q


def reference_q(net, board, depth, log_rewards, gamma):
    """Plain-Python expectimax: ``r + C(afterstate, depth)`` of each move of a ``(16,)`` board."""

    def reward(points):
        return float(np.float32(math.log2(1 + points))) if log_rewards else float(points)

    def value(after):
        with torch.no_grad():
            return float(net(torch.from_numpy(after.reshape(1, 4, 4)))[0, 0])

    def chance(after, plies):
        if plies == 1:
            return value(after)
        cells = np.flatnonzero(after.reshape(-1) == 0)
        total = 0.0
        for c in cells:
            for tile, p in ((1, 0.9), (2, 0.1)):
                s = after.reshape(-1).copy()
                s[c] = tile
                best = -math.inf
                for a in range(4):
                    nxt, points, changed = move(s.reshape(4, 4), a)
                    if changed:
                        best = max(best, reward(points) + chance(nxt, plies - 1))
                total += p * (best if best > -math.inf else 0.0)
        return gamma * total / len(cells)

    q = np.full(4, -math.inf)
    for a in range(4):
        after, points, changed = move(board.reshape(4, 4), a)
        if changed:
            q[a] = reward(points) + chance(after, depth)
    return q


def test_depth_one_is_the_greedy_afterstate_move(net):
    boards = mid_game_boards(200, 0)
    actions, q = run(net, boards, 1)
    scratch, greedy = np.empty(16, np.uint8), np.empty(4, np.float32)
    for i, board in enumerate(boards):
        afterstate_values(board, net.weight.detach().numpy().reshape(-1), net.placements, False, scratch, greedy)
        assert np.array_equal(q[i], greedy.astype(np.float64))
        if np.isfinite(greedy).any():
            assert actions[i] == int(np.argmax(greedy))


@pytest.mark.parametrize(("depth", "log_rewards", "gamma"), [(2, False, 1.0), (2, True, 0.9), (3, False, 1.0)])
def test_deeper_values_equal_a_plain_python_expectimax_over_every_spawn(net, depth, log_rewards, gamma):
    boards = mid_game_boards(4 if depth == 2 else 1, depth, empty=0.55 if depth == 2 else 0.7)
    actions, q = run(net, boards, depth, log_rewards, gamma)
    for i, board in enumerate(boards):
        ref = reference_q(net, board, depth, log_rewards, gamma)
        np.testing.assert_allclose(q[i], ref, rtol=1e-9, atol=1e-9)
        assert actions[i] == int(np.argmax(ref))
    assert not np.array_equal(q, run(net, boards, 1)[1])  # the lookahead changed the values


def test_a_board_with_no_move_gets_move_zero_and_no_values(net):
    full = np.array([[1, 2, 1, 2, 2, 1, 2, 1, 1, 2, 1, 2, 2, 1, 2, 1]], np.uint8)
    actions, q = run(net, full, 2)
    assert actions[0] == 0 and np.isneginf(q).all()


def test_the_transposition_table_changes_no_value_and_a_new_generation_ignores_old_entries(net):
    boards = mid_game_boards(40, 7)
    tiny = search.transposition_table(1)  # two slots: nearly every store replaces another
    _, q_tiny = run(net, boards, 3, table=tiny)
    big = search.transposition_table(18)
    _, q_big = run(net, boards, 3, table=big)
    np.testing.assert_array_equal(q_tiny, q_big)
    assert (big[1] > 0).sum() > 100  # it was used
    # entries of generation 1 are stale once the weights change: generation 2 does not read them
    w = net.weight.detach().numpy()
    saved = w.copy()
    try:
        w *= 2
        _, fresh = run(net, boards, 3)
        _, reused = run(net, boards, 3, table=big, generation=2)
        np.testing.assert_array_equal(reused, fresh)
    finally:
        w[:] = saved


@pytest.mark.parametrize("bits", [0, 31, 2.5, True])
def test_a_bad_table_size_is_named(bits):
    with pytest.raises(ValueError, match="bits must be an integer in 1..30"):
        search.transposition_table(bits)
