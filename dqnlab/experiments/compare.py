"""Notebook 07, every scheme compared on the same budget, and the original request's claims beside what was measured."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any

import pandas as pd

from ..bench.timing import warm_up
from ..runtime.results import RunResult
from .budgets import chosen, explore_config
from .trials import RunsProgress, Trial, greedy_at, headroom, new_figure, rolling_window, run_trial

__all__ = ["USER_CLAIMS", "compare_data", "compare_figure", "claims_table"]


#: The pros and cons of each scheme as the user's original request (which came with the user's original
#: trainer, the ``seed`` preset) worded them, quoted, and what to measure for each.
USER_CLAIMS: tuple[dict[str, str], ...] = (
    {"scheme": "independent", "kind": "pro", "metric": "speedup",
     "claim": "Allows us to use process-based parallelism, which could speed my training up by maybe up to 12 times."},
    {"scheme": "independent", "kind": "con", "metric": "divergence",
     "claim": "Betrays the true nature of DQN, since they are not sharing their replay buffer nor they model weights "
              "(...) until later on when they could have a chance to diverge."},
    {"scheme": "independent", "kind": "con", "metric": "greedy_vs_serial",
     "claim": "DQN agents could create strategies that work well for them, but once mixed they will all suffer."},
    {"scheme": "shared", "kind": "pro", "metric": "speedup", "claim": "Could provide a moderate speed boost"},
    {"scheme": "shared", "kind": "con", "metric": "communication",
     "claim": "Maybe large overhead with having to share not only the replay buffer but the model too."},
    {"scheme": "shared", "kind": "con", "metric": "lock_wait",
     "claim": "May have a limited amount of value considering locks need to be obtained, blocking sibling processes."},
    {"scheme": "sharded", "kind": "pro", "metric": "updates_speedup",
     "claim": "Would significantly improve performance compared to any thread based optimizations"},
    {"scheme": "sharded", "kind": "con", "metric": "communication",
     "claim": "May be small enough processes that live short enough that the overhead of spinning them up "
              "would cut into the improvement that they could yield."},
    {"scheme": "averaged", "kind": "pro", "metric": "greedy_per_step",
     "claim": "Higher quality training; may reduce the number of episodes necessary to reach optimal result"},
    {"scheme": "averaged", "kind": "con", "metric": "speedup", "claim": "Does not improve per-episode training time."},
    {"scheme": "actors", "kind": "goal", "metric": "speedup",
     "claim": "Implement true DQN parallel training (the request's title; actors is the field's answer, not one of "
              "the request's schemes: one learner and one replay buffer, parallel acting)"},
    {"scheme": "actors", "kind": "goal", "metric": "lag",
     "claim": "Preserves the true DQN nature of single process training (the request's hope for the shared scheme)"},
)


def compare_data(workers: int = 2, seconds: float | None = None,
                 schemes: Sequence[str] | None = None, seed: int = 0) -> dict[str, Any]:
    """Every available scheme on the same wall-clock budget.

    Parameters
    ----------
    workers : int
        Workers of every parallel scheme (``serial`` always runs one).
    seconds : float, optional
        Budget of each run (default 120 s; 0.5 s in smoke mode).
    schemes : list of str, optional
        Default: every scheme in :data:`dqnlab.SCHEMES`, serial first.

    Returns
    -------
    dict
        ``trials``: one :class:`Trial` per scheme; ``skipped``: {scheme: error text}
        for schemes that could not run with these settings; ``workers``; ``seconds``;
        ``cores`` (CPU cores of this machine).
    """
    from ..schemes import SCHEMES

    b = chosen()
    seconds = b.pick(120.0, b.run_s) if seconds is None else seconds
    names = list(schemes) if schemes is not None else sorted(SCHEMES, key=lambda s: (s != "serial", s))
    config = explore_config(b, max_seconds=seconds, seed=seed)
    trials, skipped = [], {}
    with RunsProgress(seconds * len(names), f"{len(names)} scheme{'' if len(names) == 1 else 's'}") as bar:
        bar.note("starting the worker processes")
        warm_up(workers)
        for name in names:
            k = 1 if name == "serial" else workers
            try:
                trials.append(run_trial(name, config, workers=k, greedy_games=b.greedy_games,
                                        checkpoints=b.checkpoints, callback=bar.run(f"{name} x{k}", seconds)))
            except ValueError as e:  # a scheme that cannot run with these settings: say so, go on
                skipped[name] = str(e)
    return {"trials": trials, "skipped": skipped, "workers": workers, "seconds": seconds,
            "cores": os.cpu_count()}


def compare_figure(data: dict[str, Any]):
    """07: speed, time split and greedy score of every scheme on the same budget, each scheme in its colour
    (:data:`~dqnlab.experiments.reading.SCHEME_COLOURS`), the lines' legend under the figure."""
    from matplotlib.lines import Line2D

    from ..plots import plot_bars, plot_greedy, plot_scores, plot_time_split
    from .reading import SCHEME_COLOURS, fmt_number

    trials = data["trials"]
    labels = [t.label for t in trials]
    runs = [t.run for t in trials]
    colours = [SCHEME_COLOURS.get(r.scheme, "k") for r in runs]
    fig, axes = new_figure(2, 3, figsize=(10, 7.5))
    plot_bars([r.env_steps_per_s for r in runs], labels, axes[0, 0], "env steps / s", "acting throughput")
    plot_bars([r.updates_per_s for r in runs], labels, axes[0, 1], "updates / s", "learning throughput",
              fmt=fmt_number)
    plot_time_split(runs, axes[0, 2], labels)
    plot_greedy([t.greedy for t in trials], labels, axes[1, 0], "wall_time_s")
    axes[1, 0].set_title("greedy score vs wall time")
    plot_greedy([t.greedy for t in trials], labels, axes[1, 1], "env_steps")
    axes[1, 1].set_title("greedy score vs env steps")
    plot_scores(runs, labels, axes[1, 2], "wall_time_s", window=max(1, min(rolling_window(r) for r in runs)))
    axes[1, 2].set_title("training score vs wall time")
    for ax in axes[0]:  # the schemes' names slanted, so that they do not run into each other
        ax.tick_params(axis="x", labelrotation=40, labelsize="small")
        for label in ax.get_xticklabels():
            label.set(ha="right", rotation_mode="anchor")
    for ax in axes[0, :2]:
        for bar, colour in zip(ax.patches, colours):
            bar.set_color(colour)
        headroom(ax, 1.15)  # each bar's number under the title
    for ax in axes[1]:  # a line (and its band) per run, in the order drawn
        for artists in (ax.get_lines(), ax.collections):
            for artist, colour in zip(artists, colours):
                artist.set_color(colour)
        ax.get_legend().remove()
    fig.legend([Line2D([], [], color=c, marker="o", ms=3) for c in colours], labels, loc="outside lower center",
               ncol=min(len(labels), 6), fontsize="small")
    fig.suptitle(f"07 every scheme, {data['seconds']:g} s each, {data['workers']} workers "
                 f"({data['cores']} CPU cores)")
    return fig


def _fraction(run: RunResult, key: str) -> float:
    total = sum(run.time_split.values())
    return run.time_split.get(key, 0.0) / total if total > 0 else math.nan


def claims_table(data: dict[str, Any]) -> pd.DataFrame:
    """Each of the original request's pros and cons beside what the comparison measured.

    One row per claim of :data:`USER_CLAIMS` whose scheme ran: ``scheme``, ``kind``
    (pro / con), ``claim`` (the request's words) and ``measured`` (a sentence built from
    the numbers of ``data``, as returned by :func:`compare_data`).
    """
    by_scheme = {t.run.scheme: t for t in data["trials"]}
    serial = by_scheme.get("serial")
    rows = []
    for c in USER_CLAIMS:
        t = by_scheme.get(c["scheme"])
        if t is None:
            continue
        rows.append({"scheme": c["scheme"], "kind": c["kind"], "claim": c["claim"],
                     "measured": _measured(c["metric"], t, serial, data)})
    return pd.DataFrame(rows, columns=["scheme", "kind", "claim", "measured"])


def _measured(metric: str, t: Trial, serial: Trial | None, data: dict[str, Any]) -> str:
    run = t.run
    k = run.workers
    if metric in ("speedup", "updates_speedup"):
        if serial is None:
            return "no serial run to compare with"
        sps = run.env_steps_per_s / serial.run.env_steps_per_s
        ups = run.updates_per_s / serial.run.updates_per_s if serial.run.updates_per_s > 0 else math.nan
        first, second = (f"x{ups:.2f} updates/s", f"x{sps:.2f} env steps/s") if metric == "updates_speedup" \
            else (f"x{sps:.2f} env steps/s", f"x{ups:.2f} updates/s")
        return (f"{first} and {second} of serial with {k} workers on {data['cores']} cores "
                f"(ideal: x{min(k, data['cores'] or k)})")
    if metric == "communication":
        extra = ""
        if run.extra.get("round_ms_mean") is not None:
            how = {"allreduce": "over the all-reduce", "joblib": "in a joblib round trip"}.get(run.extra.get("comm"), "")
            extra = f"; communication per update {run.extra['round_ms_mean']:.1f} ms {how}".rstrip()
        return (f"{_fraction(run, 'communication'):.0%} of worker time spent communicating or waiting, "
                f"{_fraction(run, 'learning'):.0%} learning, {_fraction(run, 'acting'):.0%} acting{extra}")
    if metric == "lag":
        lag = run.extra.get("param_lag") or {}
        if not lag:
            return "this run recorded no parameter lag"
        return (f"one learner, one buffer; actors act with weights {lag.get('mean', math.nan):.0f} updates old on "
                f"average (95th percentile {lag.get('p95', math.nan):.0f}); replay ratio "
                f"{run.extra.get('achieved_replay_ratio', math.nan):.2f} samples per env step "
                f"(ceiling {run.config.replay_ratio:g})")
    if metric == "lock_wait":
        if "lock_wait_s" not in run.extra:
            return "this run recorded no lock wait"
        share = run.extra["lock_wait_s"] / max(sum(run.time_split.values()), 1e-9)
        lock = "with the lock" if run.extra.get("lock", True) else "lock-free (Hogwild)"
        return f"workers waited for the lock {share:.0%} of their time ({k} workers, {lock})"
    if metric == "divergence":
        rel = _final_divergence(run)
        if rel is None:
            return "this run recorded no divergence between learners"
        return f"learners' weights ended {rel:.1%} apart (mean L2 distance to their mean, relative to its norm)"
    if metric in ("greedy_vs_serial", "greedy_per_step"):
        if serial is None or not len(t.greedy) or not len(serial.greedy):
            return "no greedy scores to compare"
        x = "wall_time_s" if metric == "greedy_vs_serial" else "env_steps"
        at = min(float(t.greedy[x].iloc[-1]), float(serial.greedy[x].iloc[-1]))
        mine, base = greedy_at(t, x, at), greedy_at(serial, x, at)
        unit = f"{at:.0f} s" if x == "wall_time_s" else f"{at:,.0f} env steps"
        return f"greedy score {mine:,.0f} vs serial's {base:,.0f} at the same {unit}"
    raise ValueError(f"unknown metric {metric!r}")


def _final_divergence(run: RunResult) -> float | None:
    """The last relative divergence an ``independent`` run recorded (None if none)."""
    rows = run.extra.get("divergence") or []
    rel = [r.get("divergence_rel") for r in rows if isinstance(r, dict) and r.get("divergence_rel") is not None]
    return float(rel[-1]) if rel else None
