"""Notebook 00, the game: reference policies' scores and the game's speed."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..bench.game import bench_rules
from ..plots import thousands
from .budgets import chosen
from .reading import plain_log_ticks
from .trials import new_figure

__all__ = ["game_data", "game_figure", "REFERENCE_GAMES", "SMOKE_REFERENCE_GAMES"]

#: Games each reference player (random play, the corner rule) plays in :func:`game_data` and for the panels'
#: reference lines (:func:`dqnlab.ui.baselines.reference_scores`), and in smoke mode.
REFERENCE_GAMES, SMOKE_REFERENCE_GAMES = 1_000, 100


def game_data(seed: int = 0) -> dict[str, Any]:
    """Reference policies' scores and the game's speed.

    Returns
    -------
    dict
        ``baselines``: {"random": EvalResult, "corner": EvalResult} over ``games`` games
        (:func:`dqnlab.evaluation.reference_results`, whose means the panels draw); ``speed``: rows of
        :func:`dqnlab.bench.game.bench_rules` (16,384 boards a call, best of 5; 1,024, one, in smoke
        mode); ``games``.
    """
    from ..evaluation import reference_results

    b = chosen()
    games = b.pick(REFERENCE_GAMES, SMOKE_REFERENCE_GAMES)
    baselines = reference_results(games, seed)  # (the games the panels' reference lines are drawn from)
    speed = bench_rules(boards=b.pick(16_384, 1_024), repeats=b.pick(5, 1), min_time=b.pick(0.2, 0.02), seed=seed)
    return {"baselines": baselines, "speed": speed, "games": games}


def game_figure(data: dict[str, Any]):
    """00: score distribution and largest tile of random and corner play (legends above the bars); moves per
    second."""
    fig, axes = new_figure(1, 3, figsize=(10, 3.4), width_ratios=[1, 1, 1.3])
    ax = axes[0]
    bins = np.linspace(0, max(float(ev.scores.max()) for ev in data["baselines"].values()), 40)
    for i, (name, ev) in enumerate(data["baselines"].items()):
        ax.hist(ev.scores, bins=bins, alpha=0.6, color=f"C{i}",
                label=f"{name}: mean {ev.scores.mean():,.0f}")
    ax.set_xlabel("score")
    ax.set_ylabel("games")
    ax.set_title(f"score of {data['games']:,} games")

    ax = axes[1]
    tiles = sorted({int(t) for ev in data["baselines"].values() for t in np.unique(ev.max_tiles)})
    width = 0.8 / len(data["baselines"])
    for i, (name, ev) in enumerate(data["baselines"].items()):
        share = [float(np.mean(ev.max_tiles == t)) for t in tiles]
        ax.bar(np.arange(len(tiles)) + (i - (len(data["baselines"]) - 1) / 2) * width, share, width,
               color=f"C{i}", label=name)
    ax.set_xticks(np.arange(len(tiles)), [str(t) for t in tiles])
    ax.set_xlabel("largest tile")
    ax.set_ylabel("fraction of games")
    ax.set_title("largest tile reached")
    for ax in axes[:2]:
        ax.set_ylim(0, 1.35 * ax.get_ylim()[1])  # room for the legend above the bars
        ax.legend(fontsize="small", loc="upper right")

    ax = axes[2]
    rows = data["speed"]
    labels = [r["what"].split(" (")[0] + (f" x{r['threads']}" if r["threads"] > 1 else "") for r in rows]
    ax.barh(np.arange(len(rows)), [r["moves_per_s"] for r in rows],
            color=["C1" if r["what"].startswith("NumPy") else "C0" for r in rows])
    ax.set_yticks(np.arange(len(rows)), labels, fontsize="small")
    ax.invert_yaxis()
    ax.set_xscale("log")
    plain_log_ticks(ax, "x", fmt=thousands)
    ax.set_xlabel("env steps / s (x2: 2 threads, 2 cores)")
    ax.set_title(f"speed, {rows[0]['boards']:,} boards a call")
    fig.suptitle("00 the game: baselines and speed")
    return fig
