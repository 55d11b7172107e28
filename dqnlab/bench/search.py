"""``bench search``: a trained player's moves per second and score at each depth of expectimax.

The same games (``games`` games, tile spawns seeded by ``seed``) are played by the player greedy
(depth 1) and searching 2 and 3 plies (:mod:`dqnlab.core.search`), one process, one thread: the
cost of each ply and what it buys.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from ..evaluation import evaluate
from ..parallel.threads import torch_threads_set
from ..player import MAX_SEARCH, PlayerLike, load_player

__all__ = ["bench_search"]


def bench_search(run: PlayerLike, depths: Sequence[int] = (1, 2), games: int = 100, seed: int = 1,
                 max_moves: int | None = None) -> list[dict[str, Any]]:
    """Play ``games`` games at each of ``depths`` plies and time them.

    Parameters
    ----------
    run : path, RunResult, weights, DQNAgent or Player
        A trained n-tuple afterstate player (what :func:`dqnlab.load_player` takes).
    depths : sequence of int
        Plies of expectimax, each in 1..:data:`~dqnlab.player.MAX_SEARCH` (1: greedy).
    games : int
        Games per depth (>= 1), the same games at every depth (spawns seeded by ``seed``).
    seed : int
        Seed of the tile spawns.
    max_moves : int, optional
        Cap on moves per game (a quick look at a deep search); default none.

    Returns
    -------
    list of dict
        One row per depth: ``depth``, ``games``, ``moves`` (all games'), ``seconds`` (wall),
        ``moves_per_s``, ``score_mean``, ``score_median``, ``reach_2048``, ``reach_4096``,
        ``reach_8192`` (fractions of the games).

    Raises
    ------
    ValueError
        If ``depths`` is empty or holds a depth the player cannot search, ``games`` < 1, or ``run``
        is not a player (see :func:`dqnlab.load_player`).
    """
    depths = list(depths)
    if not depths:
        raise ValueError(f"depths must name at least one depth in 1..{MAX_SEARCH}, got {depths!r}")
    base = load_player(run, search=1)
    players = []
    for d in depths:  # (every depth checked before any game)
        try:
            players.append(load_player(base, search=d))
        except ValueError as e:
            raise ValueError(f"depths: {d} plies: {e}") from None
    rows = []
    for depth, player in zip(depths, players):
        t0 = time.perf_counter()
        with torch_threads_set(1):
            ev = evaluate(player, games=games, seed=seed, max_moves=max_moves)
        seconds = time.perf_counter() - t0
        s = ev.summary()
        moves = int(ev.moves.sum())
        rows.append({"depth": depth, "games": games, "moves": moves, "seconds": seconds,
                     "moves_per_s": moves / seconds, "score_mean": s["score_mean"],
                     "score_median": s["score_median"], "reach_2048": s["reach_2048"],
                     "reach_4096": s["reach_4096"], "reach_8192": s["reach_8192"]})
    return rows
