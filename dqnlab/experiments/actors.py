"""Notebook 06, ``actors``: parallel acting and one learner, as actors grow and per replay-ratio floor."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .budgets import chosen, explore_config
from .trials import Trial, new_figure, run_grid, serial_baseline

__all__ = ["actors_data", "actors_figure"]


def actors_data(workers: Sequence[int] | None = None, seconds: float | None = None,
                seed: int = 0) -> dict[str, Any]:
    """``actors`` as the actor count grows and with three replay-ratio floors, beside ``serial``.

    Each run is ``seconds`` of wall time (default 60; 0.5 in smoke mode); ``workers`` default 1, 2 and 4
    (2 in smoke mode).

    Returns
    -------
    dict
        ``workers_trials``: serial, then ``actors`` with each worker count (default
        floor); ``ratio_trials``: ``actors`` with the largest worker count and
        ``min_replay_ratio`` 0 (never throttle, Ape-X), the scheme's default floor and
        ``replay_ratio`` (held exactly) -- in smoke mode only 0 and the default;
        ``trials``: every run once; ``replay_ratio`` (the ceiling); ``workers``; ``seconds``.
    """
    b = chosen()
    seconds = b.run_s if seconds is None else seconds
    ks = list(workers) if workers is not None else b.pick([1, 2, 4], [2])
    config = explore_config(b, max_seconds=seconds, seed=seed)
    ratio = config.replay_ratio
    serial = serial_baseline(config)
    by_k = run_grid("actors", [{"workers": k} for k in ks], config, lambda g: f"actors x{g['workers']}")
    floors = b.pick([0.0, ratio], [0.0])  # the default floor ran above
    by_floor = run_grid("actors", [{"workers": ks[-1], "min_replay_ratio": f} for f in floors], config,
                       lambda g: f"x{g['workers']} floor {g['min_replay_ratio']:g}")
    default = by_k[-1]
    default_floor = default.run.extra.get("min_replay_ratio", math.nan)
    default = Trial(f"x{ks[-1]} floor {default_floor:g}", default.run, default.greedy, default.settings)
    ratio_trials = sorted([default, *by_floor], key=lambda t: t.run.extra.get("min_replay_ratio", 0.0))
    return {"workers_trials": [serial, *by_k], "ratio_trials": ratio_trials, "trials": [serial, *by_k, *by_floor],
            "replay_ratio": ratio, "workers": ks, "seconds": seconds}


def actors_figure(data: dict[str, Any]):
    """06: throughput as actors grow; achieved replay ratio and parameter lag per floor; greedy score."""
    from ..plots import plot_greedy

    wt, rt = data["workers_trials"], data["ratio_trials"]
    fig, axes = new_figure(2, 2, figsize=(10, 7.5))
    axes = axes.ravel()
    ax = axes[0]
    x = np.arange(len(wt))
    ax.bar(x - 0.2, [t.run.env_steps_per_s for t in wt], 0.4, color="C0", label="env steps/s (left)")
    ax2 = ax.twinx()
    ax2.bar(x + 0.2, [t.run.updates_per_s for t in wt], 0.4, color="C1", label="updates/s (right)")
    ax.set_xticks(x, [t.label for t in wt])
    ax.set_ylabel("env steps / s", color="C0")
    ax2.set_ylabel("updates / s", color="C1")
    ax.set_ylim(0, 1.25 * max([t.run.env_steps_per_s for t in wt] + [1.0]))  # room for the legend
    ax2.set_ylim(0, 1.25 * max([t.run.updates_per_s for t in wt] + [1.0]))
    ax.legend(handles=[*ax.patches[:1], *ax2.patches[:1]], labels=["env steps/s (left)", "updates/s (right)"],
              fontsize="small", loc="upper left", ncol=2)
    ax.set_title("throughput as actors grow")

    labels = [t.label for t in rt]
    ax = axes[1]
    achieved = [t.run.extra.get("achieved_replay_ratio", math.nan) for t in rt]
    floor = [t.run.extra.get("min_replay_ratio", math.nan) for t in rt]
    ax.bar(labels, achieved, color="C2", label="achieved")
    ax.plot(labels, floor, "kv", ms=8, label="floor (min_replay_ratio)")
    ax.axhline(data["replay_ratio"], color="k", ls="--", lw=1, label="ceiling (replay_ratio)")
    ax.set_ylabel("samples trained on per env step")
    ax.set_title("replay ratio")
    ax.legend(fontsize="small")

    ax = axes[2]
    lag = [t.run.extra.get("param_lag") or {} for t in rt]
    ax.bar(labels, [g.get("mean", math.nan) for g in lag], color="C4", label="mean")
    ax.plot(labels, [g.get("p95", math.nan) for g in lag], "k_", ms=20, mew=2, label="95th percentile")
    ax.set_ylabel("learner updates behind")
    ax.set_title("parameter lag of the actors' transitions")
    ax.legend(fontsize="small")

    trials = [wt[0], *rt]
    plot_greedy([t.greedy for t in trials], [t.label for t in trials], axes[3], "wall_time_s")
    axes[3].set_title("greedy score vs wall time")
    for a in axes[:3]:
        a.tick_params(axis="x", labelrotation=20)
    fig.suptitle(f"06 actors: parallel acting, one learner; {data['seconds']:g} s per run")
    return fig
