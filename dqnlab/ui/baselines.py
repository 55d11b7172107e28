"""The reference players the panels draw on every score plot: random play and the corner rule.

Their mean scores are measured, not typed: :func:`reference_scores` plays them once per process
(:func:`dqnlab.evaluate` of ``"random"`` and ``"corner"``, a fixed seed) and keeps the result.
"""

from __future__ import annotations

import functools

import numpy as np

__all__ = ["REFERENCE_GAMES", "SMOKE_GAMES", "REFERENCE_SEED", "reference_scores", "reference_results"]

#: Games each reference player plays (fewer in smoke mode, see :func:`reference_scores`): notebook 00's
#: table of them (:func:`dqnlab.experiments.game_data`) plays the same games, so both say the same numbers.
REFERENCE_GAMES = 1_000
#: The games in smoke mode.
SMOKE_GAMES = 100
#: The seed of their games, fixed: every panel draws the same lines.
REFERENCE_SEED = 0


@functools.lru_cache(maxsize=4)
def reference_results(games: int = REFERENCE_GAMES, seed: int = REFERENCE_SEED) -> dict:
    """``{"random": EvalResult, "corner": EvalResult}``: ``games`` games of each reference player (cached)."""
    from ..evaluation import REFERENCE_POLICIES, evaluate

    return {name: evaluate(name, games=games, seed=seed) for name in REFERENCE_POLICIES}


def reference_scores(games: int | None = None, seed: int = REFERENCE_SEED) -> dict[str, float]:
    """Mean score of each reference player: ``{"random": ..., "corner": ...}`` over ``games`` games
    (default :data:`REFERENCE_GAMES`, :data:`SMOKE_GAMES` in smoke mode), measured once per process."""
    from ..experiments.budgets import smoke_mode

    if games is None:
        games = SMOKE_GAMES if smoke_mode() else REFERENCE_GAMES
    return {name: float(np.mean(r.scores)) for name, r in reference_results(games, seed).items()}
