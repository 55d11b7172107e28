"""The 8 symmetries of the 2048 board (the dihedral group D4) and how they permute the moves.

A symmetry ``g`` is a permutation of the 16 cells: the transformed board is
``board.reshape(16)[CELL_PERMUTATIONS[g]].reshape(4, 4)``. Because the rules of 2048
treat the four directions alike, moving the transformed board in direction
``ACTION_PERMUTATIONS[g][a]`` gives the transformed result of moving the original board
in direction ``a``, with the same points: ``move(g(b), pi_g(a)) == g(move(b, a))``.

Used as built-in weight sharing by the n-tuple network ("symmetric sampling",
Szubert & Jaskowski 2014, IEEE CIG) and as random minibatch augmentation for the
other networks (``TrainConfig.augment_symmetry``).
"""

from __future__ import annotations

import numpy as np

from ..core.bitboard import CELL_PERMUTATIONS

__all__ = ["N_SYMMETRIES", "CELL_PERMUTATIONS", "ACTION_PERMUTATIONS", "transform_boards", "transform_actions"]

N_SYMMETRIES = 8

# Direction of each action id as (row step, column step): 0 up, 1 right, 2 down, 3 left.
_DIRECTIONS = ((-1, 0), (0, 1), (1, 0), (0, -1))


def _action_permutations(perms: np.ndarray) -> np.ndarray:
    """``(8, 4)`` int64: ``[g, a]`` is the action on the transformed board that matches action ``a``.

    Cell ``perm[i]`` of the original board lands at position ``i``; a direction ``d``
    maps to the difference of the landing positions of two cells ``d`` apart.
    """
    out = np.zeros((len(perms), 4), dtype=np.int64)
    for g, perm in enumerate(perms):
        where = np.empty(16, dtype=np.int64)
        where[perm] = np.arange(16)  # original cell -> its position on the transformed board
        for a, (dr, dc) in enumerate(_DIRECTIONS):
            src, dst = where[1 * 4 + 1], where[(1 + dr) * 4 + (1 + dc)]
            step = (dst // 4 - src // 4, dst % 4 - src % 4)
            out[g, a] = _DIRECTIONS.index(step)
    return out


#: ``(8, 4)`` int64: ``ACTION_PERMUTATIONS[g, a]`` is action ``a`` seen on the board transformed by ``g``.
ACTION_PERMUTATIONS = _action_permutations(CELL_PERMUTATIONS)


def transform_boards(boards: np.ndarray, symmetries: np.ndarray) -> np.ndarray:
    """Apply symmetry ``symmetries[i]`` to board ``i``.

    Parameters
    ----------
    boards : (N, 4, 4) array
        Any dtype (uint8 exponents in dqnlab).
    symmetries : (N,) int array
        Symmetry ids in ``0..7``.

    Returns
    -------
    (N, 4, 4) array of the same dtype.
    """
    n = len(boards)
    flat = boards.reshape(n, 16)
    return np.take_along_axis(flat, CELL_PERMUTATIONS[symmetries], axis=1).reshape(n, 4, 4)


def transform_actions(actions: np.ndarray, symmetries: np.ndarray) -> np.ndarray:
    """``(N,)`` action ids -> ``(N,)`` int64 ids of the same moves on the transformed boards."""
    return ACTION_PERMUTATIONS[symmetries, actions]
