"""Expectimax search over an n-tuple afterstate network: the move of a player that looks ahead.

A greedy afterstate player takes the move of largest ``r(s, a) + V(afterstate(s, a))``. Expectimax
(Michie 1966; the search of every strong 2048 player: nneonneo's 2048-ai, Yeh et al. 2016,
Jaśkowski 2018, Guei, Chen & Wu 2022's 2- and 3-ply figures) replaces ``V`` of the afterstate
by the expectation, over the tile the game spawns, of the best move after it, ``depth`` plies deep:

* a **move node** (a board ``s``, ``d`` plies left) is worth ``max_a r(s, a) + C(afterstate(s, a), d)``
  over its legal moves, and 0 with none (the game is over);
* a **chance node** (an afterstate ``s'``) is worth ``C(s', 1) = V(s')`` at the last ply, else
  ``C(s', d) = gamma * sum_c sum_t p_t / E * M(s' + t at c, d - 1)`` over its ``E`` empty cells ``c``
  and the spawned tile ``t`` (a 2 with probability 0.9, a 4 with 0.1: :data:`~dqnlab.core.bitboard.P_FOUR`),
  the same expectation the TD target of ``V(s')`` estimates.

So depth 1 is the greedy player (the same float32 sums, the same move), and each further ply
multiplies the work by about ``8 E`` (two tiles on each empty cell, four moves each). A
**transposition table** keeps the value of each chance node searched (keyed by its bitboard and
plies left; one slot per hash, the newest kept): the same afterstate reached by different move
orders is not searched twice. Its entries are tagged with a *generation*: a call with a new
generation ignores every older entry, so a table is reused without clearing (its values hold only
for the weights they were computed with).

The lookahead sees boards as the network does, exponents above 15 read as 15
(:mod:`dqnlab.core.bitboard`); the root's moves and their rewards are exact for every exponent.
Rewards are the learner's (``log2(1 + points)`` with ``log_rewards``), values in its units.
"""

from __future__ import annotations

import numpy as np

from .bitboard import P_FOUR, afterstate, inline, kernel, move_bits, move_exact, pack, transpose, unpack
from .ntuple import features, gather

__all__ = ["transposition_table", "expectimax"]

_HASH = np.uint64(0x9E3779B97F4A7C15)  # Fibonacci hashing: the golden ratio's 64-bit odd multiplier


def transposition_table(bits: int = 20) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """An empty table of ``2 ** bits`` slots: ``(keys (T,) uint64, tags (T,) int64, values (T,) float64)``,
    a tag being ``4 * generation + plies`` (0: an empty slot); ``bits`` 20: 1,048,576 slots, 24 MiB.

    Raises
    ------
    ValueError
        If ``bits`` is not an integer in 1..30.
    """
    if not isinstance(bits, (int, np.integer)) or isinstance(bits, bool) or not 1 <= bits <= 30:
        raise ValueError(f"bits must be an integer in 1..30, got {bits!r}")
    n = 1 << int(bits)
    return np.zeros(n, np.uint64), np.zeros(n, np.int64), np.zeros(n, np.float64)


@inline
def _reward(points, log_rewards):
    r = np.float32(points)
    if log_rewards:
        r = np.float32(np.log2(np.float32(1.0) + r))
    return r


@inline
def _move(b, action, cells, scratch):
    """A bitboard's move: ``(new bitboard, points)``, through the exact path when two 15s merge."""
    nb, points, wrap = move_bits(b, action)
    if wrap:
        unpack(b, cells)
        points = move_exact(cells, action, scratch)
        nb = pack(scratch)[0]
    return nb, points


@kernel
def _chance(after, plies, weights, layout, log_rewards, gamma, table, generation, rows, cells, scratch):
    """``C(after, plies)`` of the module: V at the last ply, else the expectation over the spawns."""
    if plies == 1:
        features(after, layout, rows)
        return np.float64(gather(weights, rows))
    keys, tags, values = table
    slot = ((after * _HASH) >> np.uint64(32)) & np.uint64(keys.shape[0] - 1)  # (a power of two)
    tag = 4 * generation + plies
    if tags[slot] == tag and keys[slot] == after:
        return values[slot]
    total = 0.0
    empty = 0
    for c in range(16):
        shift = np.uint64(4 * c)
        if (after >> shift) & np.uint64(0xF) != 0:
            continue
        empty += 1
        for tile, p in ((1, 1.0 - P_FOUR), (2, P_FOUR)):
            s = after | (np.uint64(tile) << shift)
            best = -np.inf
            for a in range(4):
                nb, points = _move(s, a, cells, scratch)
                if nb != s:
                    best = max(best, np.float64(_reward(points, log_rewards))
                               + _chance(nb, plies - 1, weights, layout, log_rewards, gamma, table, generation,
                                         rows, cells, scratch))
            total += p * (best if best > -np.inf else 0.0)  # no legal move: the game is over, worth 0
    v = gamma * total / empty  # (an afterstate has an empty cell: a move that changes a board frees one)
    keys[slot], tags[slot], values[slot] = after, tag, v
    return v


@kernel
def expectimax(boards, depth, weights, layout, log_rewards, gamma, table, generation, actions, q):
    """The expectimax move of each board, ``depth`` plies deep (1: the greedy move).

    Parameters
    ----------
    boards : (N, 16) uint8
        Exponent boards (any exponent the rules allow).
    depth : int
        Plies, 1..3 (checked by the caller: :func:`dqnlab.player.check_search`).
    weights : (R,) float32
        The afterstate value tables (one value a row).
    layout : tuple
        The :func:`dqnlab.core.ntuple.layout` of the network.
    log_rewards : bool
        Rewards as ``log2(1 + points)`` (the learner's ``reward_transform = "log"``).
    gamma : float
        The learner's discount per move.
    table : tuple
        A :func:`transposition_table`, read and filled.
    generation : int
        >= 1: the table's entries of this generation are read, older ones ignored (a new generation
        for new weights).
    actions : (N,) int64
        Out: the legal move of largest value (0 where no move is legal).
    q : (N, 4) float64
        Out: each move's value ``r(s, a) + C(afterstate(s, a), depth)``; ``-inf`` for an illegal move.
    """
    rows = np.empty(8 * layout[2].shape[1], np.int64)
    cells = np.empty(16, np.uint8)
    scratch = np.empty(16, np.uint8)
    for n in range(boards.shape[0]):
        b, big = pack(boards[n])
        t = transpose(b)
        actions[n] = 0
        best = -np.inf
        for a in range(4):
            after, points, changed = afterstate(boards[n], b, t, big, a, scratch)
            if not changed:
                q[n, a] = -np.inf
                continue
            r = _reward(points, log_rewards)
            if depth == 1:  # the greedy player's float32 sum, so that its move is the same
                features(after, layout, rows)
                q[n, a] = gather(weights, rows) + r
            else:
                q[n, a] = r + _chance(after, depth, weights, layout, log_rewards, gamma, table, generation, rows,
                                      cells, scratch)
            if q[n, a] > best:
                best = q[n, a]
                actions[n] = a
