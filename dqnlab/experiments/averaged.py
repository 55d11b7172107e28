"""Notebook 05, ``averaged``: K workers, K minibatches, one averaged step, beside ``serial``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .budgets import budget, explore_config, resolve_smoke
from .trials import new_figure, run_grid, run_trial

__all__ = ["averaged_data", "averaged_figure"]


def averaged_data(smoke: bool | None = None, workers: Sequence[int] | None = None, seconds: float | None = None,
                  seed: int = 0) -> dict[str, Any]:
    """``averaged`` with 1, 2, 4 workers (effective batch K x B), and ``serial`` for reference.

    Returns ``trials`` (serial first), ``workers``, ``seconds``.
    """
    smoke = resolve_smoke(smoke)
    seconds = budget(60.0, 2.0, smoke) if seconds is None else seconds
    ks = list(workers) if workers is not None else budget([1, 2, 4], [2], smoke)
    config = explore_config(smoke, max_seconds=seconds, seed=seed)
    serial = run_trial("serial", config, label="serial", greedy_games=budget(100, 16, smoke),
                       checkpoints=budget(6, 2, smoke))
    trials = run_grid("averaged", [{"workers": k} for k in ks], config, smoke,
                     lambda g: f"averaged x{g['workers']} (batch {g['workers'] * config.batch_size})")
    return {"trials": [serial, *trials], "workers": ks, "seconds": seconds}


def averaged_figure(data: dict[str, Any]):
    """05: updates/s vs effective batch; greedy score vs env steps (sample efficiency) and vs wall time."""
    from ..plots import plot_greedy

    trials = data["trials"]
    fig, axes = new_figure(1, 3, figsize=(17, 4.4))
    eff = [t.run.extra.get("effective_batch", t.run.config.batch_size) for t in trials]
    ax = axes[0]
    ax.bar([t.label.replace(" (", "\n(") for t in trials], [t.run.updates_per_s for t in trials],
           color=[f"C{i}" for i in range(len(trials))])
    ax.set_ylabel("updates / s")
    ax2 = ax.twinx()
    ax2.plot(range(len(trials)), [e * t.run.updates_per_s for e, t in zip(eff, trials)], "k^--",
             label="samples trained on / s")
    ax2.set_ylabel("samples / s (triangles)")
    ax2.set_ylim(bottom=0)
    ax2.legend(fontsize="small", loc="upper right")
    ax.set_title("updates/s vs effective batch")
    plot_greedy([t.greedy for t in trials], [t.label for t in trials], axes[1], "env_steps")
    axes[1].set_title("sample efficiency: greedy score vs env steps")
    plot_greedy([t.greedy for t in trials], [t.label for t in trials], axes[2], "wall_time_s")
    axes[2].set_title("greedy score vs wall time")
    fig.suptitle(f"05 averaged: K workers, K minibatches, one averaged step; {data['seconds']:g} s per run")
    return fig
