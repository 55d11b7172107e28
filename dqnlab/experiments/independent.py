"""Notebook 02, ``independent``: each sync schedule, and sync intervals."""

from __future__ import annotations

from typing import Any

from ..schemes.independent import SYNC_SCHEDULES
from .budgets import chosen, explore_config
from .trials import headroom, legend_or_no_data, new_figure, rolling_window, run_grid

__all__ = ["independent_data", "independent_figure"]


def independent_data(workers: int = 2, seconds: float | None = None,
                     seed: int = 0) -> dict[str, Any]:
    """``independent`` with each sync schedule, and (outside smoke mode) three sync intervals.

    Returns
    -------
    dict
        ``schedules``: one :class:`Trial` per schedule (``none`` first); ``intervals``:
        ``periodic`` trials with ``sync_every`` of 50, 250 and 1,000 updates (empty in
        smoke mode); ``sync_every`` (250 updates; 20); ``workers``; ``seconds`` (of each run: default 60;
        0.5 in smoke mode, which runs only ``none`` and ``periodic``).
    """
    b = chosen()
    seconds = b.run_s if seconds is None else seconds
    config = explore_config(b, max_seconds=seconds, seed=seed)
    every = b.pick(250, 20)
    schedules = b.pick(SYNC_SCHEDULES, ("none", "periodic"))
    grid = [{"workers": workers, "sync": s, "sync_every": every} for s in schedules]
    trials = run_grid("independent", grid, config, lambda g: f"sync={g['sync']}")
    intervals = [] if b.smoke else run_grid(
        "independent", [{"workers": workers, "sync": "periodic", "sync_every": n} for n in (50, 250, 1000)],
        config, lambda g: f"every {g['sync_every']} updates")
    return {"schedules": trials, "intervals": intervals, "sync_every": every, "workers": workers,
            "seconds": seconds}


def independent_figure(data: dict[str, Any]):
    """02: per-learner curves without and with sharing, divergence, greedy score per schedule."""
    from ..plots import plot_bars, plot_divergence, score_lines

    trials = data["schedules"]
    fig, axes = new_figure(2, 2, figsize=(10, 7.5))
    for ax, t in zip(axes[0], trials[:2]):
        window = rolling_window(t.run) // 2 or 1
        for label, xs, ys, colour in score_lines(t.run, "wall_time_s", window, per_worker=True):
            ax.plot(xs, ys, "o-" if len(xs) < 20 else "-", ms=3, color=colour, label=label)  # a dot: one game
        ax.set(xlabel="wall time (s)", ylabel=f"score (mean of last {window} games)",
               title=f"each learner's training score, {t.label}")
    div = trials + list(data["intervals"])
    plot_divergence([t.run for t in div], [t.label for t in div], axes[1, 0])
    plot_bars([t.final_greedy for t in trials], [t.label for t in trials], axes[1, 1], "greedy score (mean)",
              "final greedy score (shared weights)")
    for ax in axes.ravel():
        if ax.has_data():
            headroom(ax)
    for ax in axes.ravel()[:3]:
        legend_or_no_data(ax)  # (placed again, above the data)
    fig.suptitle(f"02 independent: {data['workers']} learners, {data['seconds']:g} s each, "
                 f"check-in every {data['sync_every']} updates")
    return fig
