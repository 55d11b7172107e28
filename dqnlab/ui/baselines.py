"""The reference players the panels draw on every score plot: random play and the corner rule.

Their mean scores are measured, not typed: :func:`reference_scores` plays them once per process
(:func:`dqnlab.evaluate` of ``"random"`` and ``"corner"``, a fixed seed) and keeps the result.
"""

from __future__ import annotations

import numpy as np

from ..evaluation import reference_results
from ..experiments.game import REFERENCE_GAMES, SMOKE_REFERENCE_GAMES

__all__ = ["REFERENCE_SEED", "reference_scores"]

#: The seed of their games, fixed: every panel draws the same lines.
REFERENCE_SEED = 0


def reference_scores(games: int | None = None, seed: int = REFERENCE_SEED) -> dict[str, float]:
    """Mean score of each reference player: ``{"random": ..., "corner": ...}`` over ``games`` games
    (default :data:`~dqnlab.experiments.game.REFERENCE_GAMES`, fewer in smoke mode: the games of notebook 00's
    table, :func:`~dqnlab.experiments.game_data`), measured once per process."""
    from ..experiments.budgets import smoke_mode

    if games is None:
        games = SMOKE_REFERENCE_GAMES if smoke_mode() else REFERENCE_GAMES
    return {name: float(np.mean(r.scores)) for name, r in reference_results(games, seed).items()}
