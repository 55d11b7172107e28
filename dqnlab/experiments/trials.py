"""Trials: one training run and the greedy scores of its checkpoints; grids of them; their tables.

Also the small pieces every notebook's figure uses (the figure canvas, the rolling
window of training-score curves).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Self

import numpy as np
import pandas as pd

from ..bench.timing import warm_up
from ..config import TrainConfig
from ..runtime.results import RunResult
from .budgets import chosen

__all__ = ["Trial", "greedy_curve", "greedy_at", "run_trial", "run_grid", "summary_table", "rolling_window",
           "headroom", "legend_or_no_data", "new_figure", "RunsProgress", "serial_baseline"]


class RunsProgress:
    """A progress bar over the runs of one notebook cell, in seconds of their budgets (``tqdm.auto``: a bar
    in a notebook, text in a terminal).

    It shows as the cell starts; each run's reports (about once a second) move it, and the run going on
    is named beside it. Use it as a context manager; :meth:`run` gives the callback of the next run.

    Parameters
    ----------
    total_s : float
        Seconds of all the runs' budgets together.
    what : str
        What the cell measures (the bar's label).
    """

    def __init__(self, total_s: float, what: str):
        from tqdm.auto import tqdm

        self._bar = tqdm(total=round(float(total_s), 1), desc=what, unit="s", leave=False,
                         bar_format="{desc}: {percentage:3.0f}%|{bar}| {n:.0f}/{total:.0f} s of training "
                                    "[{elapsed}]{postfix}")
        self._done = 0.0

    def run(self, label: str, budget_s: float | None) -> Callable[[RunResult], bool]:
        """The callback of the next run (named ``label``, with ``budget_s`` seconds): it moves the bar."""
        start, self._done = self._done, self._done + (budget_s or 0.0)
        self._bar.set_postfix_str(label, refresh=False)
        self._bar.n = start
        self._bar.refresh()

        def report(snapshot: RunResult) -> bool:
            self._bar.n = min(start + snapshot.wall_time_s, self._done)
            self._bar.refresh()
            return False

        return report

    def note(self, text: str) -> None:
        """Say ``text`` beside the bar now (a step before the runs, such as starting the workers)."""
        self._bar.set_postfix_str(text)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if exc_type is None:  # every run has ended: a bar left on the page says so, not where the last report was
            self._bar.n = self._bar.total
            self._bar.set_postfix_str("done", refresh=False)
            self._bar.refresh()
        self._bar.close()


@dataclass
class Trial:
    """One training run of an experiment and the greedy scores of its checkpoints.

    Attributes
    ----------
    label : str
        Legend label (scheme, workers, the option that varies).
    run : RunResult
    greedy : pandas.DataFrame
        One row per checkpoint: ``wall_time_s``, ``env_steps``, ``updates``,
        ``score_mean``, ``score_sem`` (standard error), ``games``; the last row is the
        final weights. Empty if no greedy games were asked for.
    settings : dict
        ``workers`` and the scheme options the run was started with.
    """

    label: str
    run: RunResult
    greedy: pd.DataFrame = field(default_factory=pd.DataFrame)
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def final_greedy(self) -> float:
        """Mean greedy score of the final weights (NaN if not evaluated)."""
        return float(self.greedy["score_mean"].iloc[-1]) if len(self.greedy) else math.nan


def greedy_curve(checkpoints: Sequence[tuple[float, int, int, dict[str, np.ndarray]]], config: TrainConfig,
                 games: int, seed: int = 12_345) -> pd.DataFrame:
    """Greedy scores of checkpoints ``(wall_time_s, env_steps, updates, weights)``.

    Every checkpoint plays the same ``games`` games (same tile spawns), so differences
    between checkpoints are not the luck of the spawns.
    """
    from ..evaluation import evaluate

    rows = []
    for wall, steps, updates, weights in checkpoints:
        scores = evaluate(weights, games=games, seed=seed, config=config).scores
        rows.append({"wall_time_s": wall, "env_steps": steps, "updates": updates,
                     "score_mean": float(scores.mean()),
                     "score_sem": float(scores.std(ddof=1) / math.sqrt(len(scores))) if len(scores) > 1 else 0.0,
                     "games": len(scores)})
    return pd.DataFrame(rows, columns=["wall_time_s", "env_steps", "updates", "score_mean", "score_sem", "games"])


def greedy_at(trial: Trial, x: str, value: float) -> float:
    """A trial's greedy score interpolated at ``value`` of ``x`` ("wall_time_s" or "env_steps")."""
    g = trial.greedy
    if not len(g):
        return math.nan
    return float(np.interp(value, g[x], g["score_mean"]))


def run_trial(scheme: str, config: TrainConfig, *, workers: int = 1, label: str | None = None,
              greedy_games: int = 0, checkpoints: int = 5, callback: Callable[[RunResult], Any] | None = None,
              **options: Any) -> Trial:
    """Train once with :func:`dqnlab.train` and evaluate checkpoints greedily afterwards.

    Parameters
    ----------
    scheme, config, workers, options
        As for :func:`dqnlab.train`.
    label : str, optional
        Legend label; default ``"<scheme> x<workers>"``.
    greedy_games : int
        Games each checkpoint plays greedily after training (0 = no greedy curve).
    checkpoints : int
        About how many checkpoints to keep during the run (one every
        ``max_seconds / checkpoints`` seconds), plus the final weights. Weights are only
        copied during training; the games are played after it, so they cost no
        training time.
    callback : callable, optional
        Also called with every snapshot (return True to stop).
    """
    from ..schemes import train

    kept: list[tuple[float, int, int, dict[str, np.ndarray]]] = []
    every = (config.max_seconds / max(1, checkpoints)) if config.max_seconds else math.inf

    def on_snapshot(snap: RunResult) -> bool:
        if greedy_games and snap.wall_time_s >= (len(kept) + 1) * every - 1e-9 and snap.env_steps > 0:
            kept.append((snap.wall_time_s, snap.env_steps, snap.updates, snap.weights))
        return bool(callback(snap)) if callback is not None else False

    run = train(scheme, config, workers=workers, progress=False, callback=on_snapshot, **options)
    greedy = pd.DataFrame()
    if greedy_games:
        kept = [k for k in kept if k[1] < run.env_steps]
        kept.append((run.wall_time_s, run.env_steps, run.updates, run.weights))
        greedy = greedy_curve(kept, run.config, greedy_games)
    return Trial(label or f"{scheme} x{workers}", run, greedy, {"workers": workers, **options})


def run_grid(scheme: str, grid: Sequence[dict[str, Any]], config: TrainConfig,
             label: Callable[[dict[str, Any]], str]) -> list[Trial]:
    """One :class:`Trial` per grid point: ``workers``, scheme options, and ``config``
    (a dict of :class:`TrainConfig` fields to replace); greedy games and checkpoints of the
    :func:`~dqnlab.experiments.budgets.chosen` budget."""
    b = chosen()
    configs = [config.replace(**g["config"]) if "config" in g else config for g in grid]
    trials = []
    with RunsProgress(sum(c.max_seconds or 0.0 for c in configs), f"{scheme}: {len(grid)} runs") as bar:
        bar.note("starting the worker processes")
        warm_up(max(g.get("workers", 1) for g in grid))
        for g, cfg in zip(grid, configs):
            options = {k: v for k, v in g.items() if k != "config"}
            trials.append(run_trial(scheme, cfg, label=label(g), greedy_games=b.greedy_games,
                                    checkpoints=b.checkpoints, callback=bar.run(label(g), cfg.max_seconds),
                                    **options))
    return trials


def serial_baseline(config: TrainConfig) -> Trial:
    """The ``serial`` trial a scheme's runs are set beside (as :func:`run_grid` runs its points, with its
    progress bar)."""
    b = chosen()
    with RunsProgress(config.max_seconds or 0.0, "serial, to compare with") as bar:
        return run_trial("serial", config, label="serial", greedy_games=b.greedy_games,
                         checkpoints=b.checkpoints, callback=bar.run("serial", config.max_seconds))


def summary_table(trials: Sequence[Trial]) -> pd.DataFrame:
    """One row per trial: its settings, speed, time split (fractions), games and scores."""
    rows = []
    for t in trials:
        s = t.run.summary()
        frac = s["time_fraction"]
        rows.append({
            "run": t.label, "status": s["status"], "workers": s["workers"], "batch": t.run.config.batch_size,
            "env_steps": s["env_steps"], "updates": s["updates"], "seconds": s["wall_time_s"],
            "env_steps/s": s["env_steps_per_s"], "updates/s": s["updates_per_s"],
            **{f"{k} %": 100 * (frac.get(k) or 0.0) for k in ("acting", "learning", "communication")},
            "games": s["episodes"], "training score (last 100)": s["score_mean_last100"],
            "greedy score": t.final_greedy,
        })
    return pd.DataFrame(rows)


def rolling_window(run: RunResult) -> int:
    """Rolling window for training-score curves: 50 games, fewer for tiny runs."""
    return int(max(1, min(50, len(run.episodes) // 4)))


def headroom(ax: Any, factor: float = 1.3) -> None:
    """Room above the data of ``ax`` (a linear y axis) for a legend or the numbers on bars: its top times
    ``factor``."""
    bottom, top = ax.get_ylim()
    ax.set_ylim(bottom, bottom + (top - bottom) * factor)


def legend_or_no_data(ax: Any, **kwargs: Any) -> None:
    """A legend of ``ax``'s labelled lines (small type; ``kwargs`` for ``ax.legend``), or, if it has none,
    "no data" in the middle of the panel."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(**{"fontsize": "small", **kwargs})
    else:
        ax.text(0.5, 0.5, "no data", transform=ax.transAxes, ha="center", va="center", color="0.4")


def new_figure(*args: Any, **kwargs: Any):
    """``matplotlib.pyplot.subplots(*args, **kwargs)`` with the constrained layout: ``(figure, axes)``."""
    import matplotlib.pyplot as plt

    return plt.subplots(*args, layout="constrained", **kwargs)
