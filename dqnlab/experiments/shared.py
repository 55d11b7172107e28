"""Notebook 03, ``shared``: with and without the lock as the worker count grows; processes vs threads."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..config import TrainConfig
from ..plots import thousands
from ..runtime.results import RunResult
from .budgets import chosen, explore_config
from .trials import new_figure, run_grid

__all__ = ["shared_data", "shared_figure"]


def shared_data(workers: Sequence[int] | None = None, seconds: float | None = None,
                seed: int = 0) -> dict[str, Any]:
    """``shared`` with and without the lock as the worker count grows.

    Then the workers as processes and as threads (``threads=True``), two of them lock-free on the n-tuple
    ``default`` preset (in smoke mode ``ntuple-small`` with a small replay), whose compiled core releases
    the GIL. Each run is ``seconds`` of wall time (default 60; 0.5 in smoke mode); ``workers`` default
    1, 2 and 4 (2 in smoke mode).

    Returns
    -------
    dict
        ``trials`` (one per workers x lock; one worker runs once, with the lock); ``threads`` (processes,
        threads); ``workers``; ``seconds``.
    """
    b = chosen()
    seconds = b.run_s if seconds is None else seconds
    ks = list(workers) if workers is not None else b.pick([1, 2, 4], [2])
    config = explore_config(b, max_seconds=seconds, seed=seed)
    grid = [{"workers": k, "lock": lock} for k in ks for lock in (True, False) if k > 1 or lock]
    trials = run_grid("shared", grid, config,
                     lambda g: f"x{g['workers']} " + ("lock" if g["lock"] else "lock-free"))
    ntuple = (TrainConfig.preset("ntuple-small", total_env_steps=None, max_seconds=seconds, seed=seed, n_envs=16,
                                 buffer_size=2_000, batch_size=32, learning_starts=500) if b.smoke else
              TrainConfig.preset("default", total_env_steps=None, max_seconds=seconds, seed=seed))
    threads = run_grid("shared", [{"workers": 2, "lock": False, "threads": t} for t in (False, True)], ntuple,
                       lambda g: "x2 lock-free, " + ("threads" if g["threads"] else "processes"))
    return {"trials": trials, "threads": threads, "workers": ks, "seconds": seconds}


def _worker_seconds(run: RunResult) -> float:
    return float(sum(run.time_split.values()))


def shared_figure(data: dict[str, Any]):
    """03: lock wait as workers grow; updates/s and env steps/s; greedy score; processes vs threads. The
    legends in the sixth panel's place, off the data."""
    fig, grid = new_figure(2, 3, figsize=(10, 6.8))
    axes = grid.ravel()[:5]
    for lock, style in ((True, "o-"), (False, "s--")):
        ts = [t for t in data["trials"] if t.settings.get("lock", True) == lock or t.settings["workers"] == 1]
        ks = [t.settings["workers"] for t in ts]
        name = "lock" if lock else "lock-free (Hogwild)"
        wait = [100 * t.run.extra.get("lock_wait_s", 0.0) / max(_worker_seconds(t.run), 1e-9) for t in ts]
        axes[0].plot(ks, wait, style, label=name)
        axes[1].plot(ks, [t.run.updates_per_s for t in ts], style, label=name)
        axes[2].plot(ks, [t.run.env_steps_per_s for t in ts], style, label=name)
        axes[3].plot(ks, [t.final_greedy for t in ts], style, label=name)
    ax = axes[4]
    pair = data["threads"]
    for i, t in enumerate(pair):
        ax.bar([i - 0.2], [t.run.env_steps_per_s], 0.4, color="C0", label="env steps / s" if i == 0 else None)
        ax.bar([i + 0.2], [t.run.updates_per_s * t.run.config.batch_size], 0.4, color="C1",
               label="samples trained / s" if i == 0 else None)
    ax.set_xticks(range(len(pair)), [t.label.split(", ")[-1] for t in pair])
    ax.set_title(f"processes vs threads\n({pair[0].run.config.network}, x2 lock-free)")
    ax.yaxis.set_major_formatter(thousands)
    for ax, title, ylabel in zip(axes[:4], ("waiting for the lock", "learning throughput", "acting throughput",
                                        "final greedy score"),
                                 ("lock wait, % of worker time", "updates / s", "env steps / s",
                                  "greedy score (mean)")):
        ax.set_xlabel("workers")
        ax.set_xticks(data["workers"])
        ax.set_xlim(min(data["workers"]) - 0.5, max(data["workers"]) + 0.5)
        top = max((y for line in ax.get_lines() for y in line.get_ydata() if np.isfinite(y)), default=1.0)
        ax.set_ylim(-0.05 * top, 1.1 * top)  # every marker inside, 0 too
        ax.set_title(title)
        ax.set_ylabel(ylabel)
    grid[1, 2].axis("off")
    grid[1, 2].legend(*axes[0].get_legend_handles_labels(), loc="upper left")
    grid[1, 2].add_artist(grid[1, 2].get_legend())
    grid[1, 2].legend(*axes[4].get_legend_handles_labels(), title="processes vs threads", loc="lower left")
    fig.suptitle(f"03 shared: one buffer and one model, {data['seconds']:g} s per run")
    return fig
