"""Notebook 04, ``sharded``: communication against compute over batch sizes, worker counts and channels."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pandas as pd

from .budgets import chosen, explore_config
from .trials import Trial, legend_or_no_data, new_figure, run_grid

__all__ = ["sharded_data", "sharded_figure", "channels_table"]


def sharded_data(workers: Sequence[int] | None = None,
                 batch_sizes: Sequence[int] | None = None, seconds: float | None = None,
                 seed: int = 0, comms: Sequence[str] = ("joblib", "allreduce")) -> dict[str, Any]:
    """``sharded`` over batch sizes, worker counts and both channels (one minibatch split K ways).

    The replay ratio (samples per env step) is kept, so a larger batch means fewer,
    larger updates. With one worker the channel plays no part, so it runs once
    (all-reduce). Each run is ``seconds`` of wall time (default 30; 0.5 in smoke mode); ``workers``
    default 1, 2 and 4, ``batch_sizes`` 64, 256 and 1,024 (in smoke mode 2 workers, batches of 64).

    Returns
    -------
    dict
        ``trials`` (labelled ``B=<batch> x<workers> <comm>``, each with ``settings``
        ``workers`` and ``comm``), ``workers``, ``batch_sizes``, ``comms``, ``seconds``.
    """
    b = chosen()
    seconds = b.pick(30.0, b.run_s) if seconds is None else seconds
    ks = list(workers) if workers is not None else b.pick([1, 2, 4], [2])
    bs = list(batch_sizes) if batch_sizes is not None else b.pick([64, 256, 1024], [64])
    config = explore_config(b, max_seconds=seconds, seed=seed)
    grid = [{"workers": k, "comm": c, "config": {"batch_size": batch}}
            for batch in bs for k in ks for c in (comms if k > 1 else comms[-1:])]
    trials = run_grid("sharded", grid, config,
                      lambda g: f"B={g['config']['batch_size']} x{g['workers']} {g['comm']}")
    return {"trials": trials, "workers": ks, "batch_sizes": bs, "comms": list(comms), "seconds": seconds}


def channels_table(trials: Sequence[Trial]) -> pd.DataFrame:
    """The two channels side by side: one row per (batch, workers) with more than one worker.

    Columns ``batch``, ``workers``, and per channel ``updates/s <comm>``, ``comm % <comm>``
    (communication's share of the workers' summed time) and ``round ms <comm>`` (one
    update's communication at rank 0 or the joblib round), then ``all-reduce / joblib``
    (the ratio of updates/s) when both ran.
    """
    rows: dict[tuple[int, int], dict[str, Any]] = {}
    for t in trials:
        k = t.run.workers
        if k < 2:
            continue
        comm = t.run.extra.get("comm", "joblib")
        row = rows.setdefault((t.run.config.batch_size, k), {"batch": t.run.config.batch_size, "workers": k})
        row[f"updates/s {comm}"] = t.run.updates_per_s
        row[f"comm % {comm}"] = 100 * t.run.summary()["time_fraction"].get("communication", math.nan)
        row[f"round ms {comm}"] = t.run.extra.get("round_ms_mean") or math.nan
    table = pd.DataFrame(list(rows.values()))
    if {"updates/s allreduce", "updates/s joblib"} <= set(table.columns):
        table["all-reduce / joblib"] = table["updates/s allreduce"] / table["updates/s joblib"]
    return table


def _workers(k: int) -> str:
    return f"{k} worker" + ("s" if k != 1 else "")


#: A channel's colour and line style in :func:`sharded_figure` (one worker, where the channel plays no part: grey).
_CHANNEL_LOOK = {"allreduce": ("C0", "-"), "joblib": ("C1", "--"), None: ("0.45", ":")}


def sharded_figure(data: dict[str, Any]):
    """04: compute vs communication per run; round time and updates/s vs batch, a colour and line style per
    channel, a marker per worker count; one legend for both."""
    from ..plots import plot_time_split
    from .reading import plain_log_ticks

    trials = data["trials"]
    fig, axes = new_figure(1, 3, figsize=(10, 4.6), width_ratios=[1.5, 1, 1])
    plot_time_split([t.run for t in trials], axes[0], [t.label for t in trials])
    axes[0].tick_params(axis="x", labelsize="small", labelrotation=60 if len(trials) > 3 else 0)
    for label in axes[0].get_xticklabels():  # slanted names end under their bars, apart
        label.set(ha="right" if len(trials) > 3 else "center", rotation_mode="anchor")
    for i, k in enumerate(data["workers"]):
        for comm in data.get("comms", ["joblib"]):
            ts = [t for t in trials if t.settings["workers"] == k and t.settings.get("comm", "joblib") == comm]
            if not ts:
                continue
            colour, line = _CHANNEL_LOOK[comm if k > 1 else None]
            b = [t.run.config.batch_size for t in ts]
            style = dict(color=colour, linestyle=line, marker="os^Dv"[i % 5],
                         label=f"{_workers(k)}, {comm}" if k > 1 else _workers(k))
            axes[1].plot(b, [t.run.extra.get("round_ms_mean") or math.nan for t in ts], **style)
            axes[2].plot(b, [t.run.updates_per_s for t in ts], **style)
    for ax, title, ylabel in ((axes[1], "communication per update", "ms per update"),
                              (axes[2], "learning throughput", "updates / s")):
        ax.set_xscale("log")
        ax.set_yscale("log")  # worker counts beyond the cores can be orders of magnitude slower
        batches = data.get("batch_sizes") or [t.run.config.batch_size for t in trials]
        ax.set_xlim(min(batches) / 1.6, max(batches) * 1.6)
        plain_log_ticks(ax, "x", ticks=batches)
        if ax.has_data():
            plain_log_ticks(ax, "y")
        ax.set_xlabel("minibatch size B")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
    handles, labels = axes[1].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="outside lower center", ncol=min(len(handles), 5), fontsize="small")
    else:
        legend_or_no_data(axes[1])
        legend_or_no_data(axes[2])
    fig.suptitle(f"04 sharded: joblib round trip vs all-reduce, B split across workers, {data['seconds']:g} s "
                 "per run")
    return fig
