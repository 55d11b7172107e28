"""Notebook 04, ``sharded``: communication against compute over batch sizes and worker counts."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from .budgets import budget, explore_config, resolve_smoke
from .trials import new_figure, run_grid

__all__ = ["sharded_data", "sharded_figure"]


def sharded_data(smoke: bool | None = None, workers: Sequence[int] | None = None,
                 batch_sizes: Sequence[int] | None = None, seconds: float | None = None,
                 seed: int = 0) -> dict[str, Any]:
    """``sharded`` over batch sizes and worker counts (one minibatch split K ways).

    The replay ratio (samples per env step) is kept, so a larger batch means fewer,
    larger updates. Returns ``trials``, ``workers``, ``batch_sizes``, ``seconds``.
    """
    smoke = resolve_smoke(smoke)
    seconds = budget(45.0, 2.0, smoke) if seconds is None else seconds
    ks = list(workers) if workers is not None else budget([1, 2, 4], [1, 2], smoke)
    bs = list(batch_sizes) if batch_sizes is not None else budget([64, 256, 1024], [64], smoke)
    config = explore_config(smoke, max_seconds=seconds, seed=seed)
    grid = [{"workers": k, "config": {"batch_size": b}} for b in bs for k in ks]
    trials = run_grid("sharded", grid, config, smoke, lambda g: f"B={g['config']['batch_size']} x{g['workers']}")
    return {"trials": trials, "workers": ks, "batch_sizes": bs, "seconds": seconds}


def _workers(k: int) -> str:
    return f"{k} worker" + ("s" if k != 1 else "")


def sharded_figure(data: dict[str, Any]):
    """04: compute vs communication per (batch, workers); round time and updates/s vs batch."""
    from ..plots import plot_time_split

    trials = data["trials"]
    fig, axes = new_figure(1, 3, figsize=(17, 4.4), width_ratios=[1.6, 1, 1])
    plot_time_split([t.run for t in trials], axes[0], [t.label for t in trials])
    for i, k in enumerate(data["workers"]):
        ts = [t for t in trials if t.settings["workers"] == k]
        b = [t.run.config.batch_size for t in ts]
        axes[1].plot(b, [t.run.extra.get("round_ms_mean") or math.nan for t in ts], "o-", color=f"C{i}",
                     label=_workers(k))
        axes[2].plot(b, [t.run.updates_per_s for t in ts], "o-", color=f"C{i}", label=_workers(k))
    for ax, title, ylabel in ((axes[1], "one update round", "ms per update"),
                              (axes[2], "learning throughput", "updates / s")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")  # worker counts beyond the cores can be orders of magnitude slower
        ax.set_xlabel("minibatch size B (split across workers)")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.legend(fontsize="small")
    fig.suptitle(f"04 sharded: communication vs compute, {data['seconds']:g} s per run")
    return fig
