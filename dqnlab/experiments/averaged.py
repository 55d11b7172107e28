"""Notebook 05, ``averaged``: K workers, K minibatches, averaged weights, beside ``serial``; local SGD."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from .budgets import chosen, explore_config
from .trials import new_figure, run_grid, serial_baseline

__all__ = ["averaged_data", "averaged_figure", "local_sgd_table"]


def averaged_data(workers: Sequence[int] | None = None, seconds: float | None = None,
                  seed: int = 0, average_every: Sequence[int] | None = None) -> dict[str, Any]:
    """``serial``; ``averaged`` over all-reduce with 1, 2, 4 workers (effective batch K x B);
    ``averaged`` x2 over the joblib round trip; and x2 with each ``average_every`` (local SGD).

    Each run is ``seconds`` of wall time (default 60; 0.5 in smoke mode); ``workers`` default 1, 2 and 4,
    ``average_every`` 1, 4 and 16 (in smoke mode 2 workers, and 1 and 8).

    Returns
    -------
    dict
        ``trials`` (serial first, then the worker counts, then the joblib run),
        ``sweep`` (the x2 all-reduce runs by ``average_every``, 1 first: the same run as
        in ``trials``), ``workers``, ``average_every``, ``seconds``.
    """
    b = chosen()
    seconds = b.run_s if seconds is None else seconds
    ks = list(workers) if workers is not None else b.pick([1, 2, 4], [2])
    everies = sorted(set(average_every) | {1}) if average_every is not None else b.pick([1, 4, 16], [1, 8])
    config = explore_config(b, max_seconds=seconds, seed=seed)
    serial = serial_baseline(config)
    grid = ([{"workers": k} for k in ks] + [{"workers": 2, "comm": "joblib"}]
            + [{"workers": 2, "average_every": e} for e in everies if e != 1 or 2 not in ks])
    trials = run_grid("averaged", grid, config, _label)
    main = [t for t in trials if t.settings.get("average_every", 1) == 1]
    sweep = [t for t in trials if t.settings["workers"] == 2 and t.settings.get("comm", "allreduce") == "allreduce"]
    sweep.sort(key=lambda t: t.settings.get("average_every", 1))
    return {"trials": [serial, *main], "sweep": sweep, "workers": ks, "average_every": everies,
            "seconds": seconds}


def _label(g: dict[str, Any]) -> str:
    if g.get("comm") == "joblib":
        return f"averaged x{g['workers']} joblib"
    every = g.get("average_every", 1)
    return f"averaged x{g['workers']}" + (f", average every {every}" if every != 1 else "")


def local_sgd_table(data: dict[str, Any]) -> pd.DataFrame:
    """The ``average_every`` sweep: one row per run of :func:`averaged_data`'s ``sweep``.

    Columns ``average_every`` (updates), ``updates/s``, ``comm %`` (communication's share
    of the workers' time), ``MB per update`` (payload rank 0 moved per update),
    ``divergence`` (median over the run of the workers' relative distance before an
    average: rank 0's L2 distance to the mean over the mean's norm), ``greedy score``.
    """
    rows = []
    for t in data["sweep"]:
        div = [r["divergence_rel"] for r in t.run.extra.get("divergence", [])]
        rows.append({"average_every": t.settings.get("average_every", 1), "updates/s": t.run.updates_per_s,
                     "comm %": 100 * t.run.summary()["time_fraction"].get("communication", math.nan),
                     "MB per update": (t.run.extra.get("comm_bytes_per_update") or math.nan) / 1e6,
                     "divergence": float(np.median(div)) if div else math.nan,
                     "greedy score": t.final_greedy})
    return pd.DataFrame(rows)


def averaged_figure(data: dict[str, Any]):
    """05: updates/s vs effective batch; greedy score vs env steps (sample efficiency) and vs
    wall time; local SGD: communication and divergence against ``average_every``."""
    from ..plots import plot_greedy

    trials = data["trials"]
    fig, axes = new_figure(2, 2, figsize=(10, 7.5))
    axes = axes.ravel()
    eff = [t.run.extra.get("effective_batch", t.run.config.batch_size) for t in trials]
    ax = axes[0]
    ax.bar([t.label.replace(" (", "\n(").replace(" joblib", "\njoblib") for t in trials],
           [t.run.updates_per_s for t in trials], color=[f"C{i}" for i in range(len(trials))])
    ax.set_ylabel("updates / s")
    ax.tick_params(axis="x", labelsize="small")
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
    table = local_sgd_table(data)
    ax = axes[3]
    x = table["average_every"]
    ax.plot(x, table["comm %"], "o-", color="C0", label="communication % of worker time")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("average_every (updates between averages)")
    ax.set_ylabel("communication %", color="C0")
    ax.set_ylim(bottom=0)
    ax3 = ax.twinx()
    ax3.plot(x, table["divergence"], "s--", color="C3", label="divergence before an average")
    ax3.set_ylabel("relative divergence (median)", color="C3")
    ax3.set_ylim(bottom=0)
    ax.set_title("local SGD, 2 workers: less communication, more drift\n(greedy scores: the table above)")
    fig.suptitle(f"05 averaged: K workers, K minibatches, averaged weights; {data['seconds']:g} s per run")
    return fig
