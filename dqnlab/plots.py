"""Plots for dqnlab (matplotlib, object-oriented API; works with the Agg backend)."""

from __future__ import annotations

import numpy as np

from dqnlab.game import ACTION_NAMES, draw_board, legal_actions_batch


def thousands(value: float, _pos=None) -> str:
    """A tick label: ``"750"``, ``"640k"``, ``"1.2M"``."""
    size = abs(value)
    if size >= 1e6:
        return f"{value / 1e6:.3g}M"
    return f"{value / 1e3:.3g}k" if size >= 1e3 else f"{value:.3g}"


def _rolling(y, window: int):
    import pandas as pd

    return pd.Series(y).rolling(window, min_periods=1).mean().to_numpy()


def _speed(history, smooth: int = 5, split: int | None = None):
    """(t_mid, env steps/s, updates/s) between history samples, a rolling mean over ``smooth``
    samples; with ``split``, the mean starts afresh at interval ``split`` (the end of the warm-up),
    so the fast acting-only rate does not leak into the first seconds of learning."""
    t = np.asarray(history["wall_time_s"], float)
    if len(t) < 2:
        return np.array([]), np.array([]), np.array([])
    dt = np.maximum(np.diff(t), 1e-9)

    def rate(key: str) -> np.ndarray:
        per_interval = np.diff(np.asarray(history[key], float)) / dt
        parts = np.split(per_interval, [split]) if split else [per_interval]
        return np.concatenate([_rolling(part, smooth) for part in parts])

    return (t[1:] + t[:-1]) / 2, rate("env_steps"), rate("updates")


def plot_speed(runs, ax=None, label=None):
    """Env steps/s (solid, left axis) and updates/s (dashed, right axis) against wall time, one legend for both.

    Each axis starts at 0 and ends a fifth above the fastest rate of the last four fifths of the run: a
    start-up burst (say, acting before learning starts) may leave the top rather than squash the rest.

    Parameters
    ----------
    runs : RunResult or list of RunResult
        Each run's ``history`` is plotted, labelled by ``label`` or its scheme and workers.
    ax : matplotlib.axes.Axes, optional

    Returns
    -------
    matplotlib.axes.Axes
        ``ax`` (the updates/s axis is its twin, ``ax.twinx()``'s, made here).
    """
    import matplotlib.pyplot as plt

    runs = runs if isinstance(runs, (list, tuple)) else [runs]
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 3.5))
    ax2 = ax.twinx()
    rates: dict = {ax: [], ax2: []}
    for i, run in enumerate(runs):
        t, sps, ups = _speed(run.history)
        name = label or (_run_label(run) if len(runs) > 1 else "")
        ax.plot(t, sps, color=f"C{i}", label=f"{name} env steps/s".strip())
        ax2.plot(t, ups, color=f"C{i if len(runs) > 1 else 1}", ls="--", label=f"{name} updates/s".strip())
        later = t >= 0.2 * t[-1] if len(t) else t.astype(bool)  # the start-up left out of the limits
        rates[ax].append(sps[later])
        rates[ax2].append(ups[later])
    for axis, values in rates.items():
        values = np.concatenate(values) if values else np.zeros(0)
        values = values[np.isfinite(values)]
        top = values.max() if values.size else 0.0
        axis.set_ylim(0, 1.2 * top if top > 0 else 1.0)
    for axis in (ax, ax2):
        axis.yaxis.set_major_formatter(thousands)
    ax.set_xlabel("wall time (s)")
    ax.set_ylabel("env steps / s (solid)")
    ax2.set_ylabel("updates / s (dashed)")
    lines = ax.get_lines() + ax2.get_lines()
    ax.legend(lines, [line.get_label() for line in lines], loc="lower right", fontsize="small")
    ax.set_title("speed")
    return ax


def plot_games(run, ax=None, window: int = 50, greedy=None):
    """The score of each training game against wall time (env steps on the top axis): each game faint,
    the mean of the last ``window`` games bold, and ``greedy``'s games played after training marked at the
    end of the run (their mean, and a bar over the middle half of their scores).

    Parameters
    ----------
    run : RunResult
    ax : matplotlib.axes.Axes, optional
    window : int
        Games in the rolling mean (the first ``window - 1`` points average fewer).
    greedy : EvalResult, optional
        Games of the trained player (:func:`dqnlab.evaluate`).

    Returns
    -------
    matplotlib.axes.Axes
    """
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(9, 3.5))
    ep = run.episodes.sort_values("wall_time_s", kind="stable")
    t, score = np.asarray(ep["wall_time_s"], float), np.asarray(ep["score"], float)
    if len(ep):
        ax.plot(t, score, color="C0", lw=0.6, alpha=0.3, label="each game")
        ax.plot(t, _rolling(score, window), color="C0", lw=2.0, label=f"mean of the last {window} games")
    else:
        ax.text(0.5, 0.5, "no finished game", ha="center", va="center", transform=ax.transAxes)
    if greedy is not None and len(greedy.scores):
        low, high = np.percentile(greedy.scores, [25, 75])
        mean = float(np.mean(greedy.scores))
        ax.errorbar([run.wall_time_s], [mean], yerr=[[mean - low], [high - mean]], fmt="D", color="C3",
                    capsize=4, label=f"greedy play after training, {len(greedy.scores)} games: mean {mean:,.0f} "
                                     f"(bar: middle half)")
    h = run.history
    if len(h) > 1 and h["env_steps"].iloc[-1] > 0 and h["wall_time_s"].iloc[-1] > 0:  # env steps on the top axis
        wall, steps = np.asarray(h["wall_time_s"], float), np.asarray(h["env_steps"], float)
        far, rate = 1e3 * wall[-1], steps[-1] / wall[-1]  # beyond the run: its mean speed
        wall, steps = np.r_[-far, wall, wall[-1] + far], np.r_[-far * rate, steps, steps[-1] + far * rate]
        top = ax.secondary_xaxis("top", functions=(lambda x: np.interp(x, wall, steps),
                                                   lambda y: np.interp(y, steps, wall)))
        low, high = ax.get_xlim()
        seconds = [x for x in ax.get_xticks() if low <= x <= high]
        top.set_xticks(np.interp(seconds, wall, steps))  # the env steps at the wall time's ticks
        top.xaxis.set_major_formatter(thousands)
        top.set_xlabel("env steps (all workers) at that time")
    ax.set_xlabel("wall time (s)")
    ax.set_ylabel("score of a game (points)")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="upper left", fontsize="small")
    ax.set_title("training games")
    return ax


def plot_reward(runs, ax=None, x: str = "wall_time_s", window: int = 50, per_worker: bool = False):
    """Rolling mean score of finished games against wall time or env steps.

    Parameters
    ----------
    runs : RunResult or list of RunResult
    x : {"wall_time_s", "env_steps"}
        The horizontal axis: seconds, or env steps of all workers together.
    window : int
        Episodes in the rolling mean.
    per_worker : bool
        One line per worker instead of one per run.
    """
    import matplotlib.pyplot as plt

    if x not in ("wall_time_s", "env_steps"):
        raise ValueError(f"x must be 'wall_time_s' or 'env_steps', got {x!r}")
    runs = runs if isinstance(runs, (list, tuple)) else [runs]
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 3.5))
    for run in runs:
        for label, xs, ys, colour in score_lines(run, x, window, per_worker):
            ax.plot(xs, ys, label=label, color=colour if per_worker else None)
    ax.set_xlabel("wall time (s)" if x == "wall_time_s" else "env steps")
    ax.set_ylabel(f"score (mean of last {window} games)")
    ax.legend(fontsize="small")
    ax.set_title("reward vs " + ("wall time" if x == "wall_time_s" else "env steps"))
    return ax


def score_lines(run, x: str = "wall_time_s", window: int = 50, per_worker: bool = False):
    """The lines of :func:`plot_reward` for one run: ``(label, x values, rolling mean score, colour)``, one per
    worker with ``per_worker`` (worker k in colour ``Ck``, however many of the workers have finished a game). With ``x="env_steps"`` and one line, x is the env steps of all workers
    together when each game ended (a worker's own env steps per worker)."""
    ep = run.episodes
    name = _run_label(run)
    for worker, df in (ep.groupby("worker") if per_worker else [(None, ep)]):
        if x == "env_steps" and not per_worker and len(run.history) > 1:
            xs = np.interp(df["wall_time_s"], run.history["wall_time_s"], run.history["env_steps"])
        else:
            xs = df[x]
        label = name if worker is None else f"{name} worker {worker}"
        yield label, np.asarray(xs, float), _rolling(df["score"], window), f"C{0 if worker is None else worker}"


def plot_run(run, window: int = 50, greedy=None):
    """The standard figure of a run (``run.png`` of ``python -m dqnlab train``): the training games and the
    greedy ones (:func:`plot_games`) and the speed (:func:`plot_speed`); below, the DQN diagnostics
    (:func:`plot_diagnostics`: TD loss, mean max-Q, and epsilon -- or, for a learner that does not explore,
    the share of games reaching the large tiles, its epsilon in the title -- vs wall time).

    Parameters
    ----------
    run : RunResult
    window : int
        Games in the rolling means.
    greedy : EvalResult, optional
        Games of the trained player, marked on the games' panel.

    Returns
    -------
    matplotlib.figure.Figure
        Five panels (``fig.axes[:5]``: games, speed, loss, max-Q, epsilon or tiles), then the speed
        panel's updates/s axis and the games panel's env-steps axis.
    """
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(15, 7.4), layout="constrained")
    grid = fig.add_gridspec(2, 3)
    games, speed = fig.add_subplot(grid[0, :2]), fig.add_subplot(grid[0, 2])
    plot_diagnostics(run, [fig.add_subplot(grid[1, k]) for k in range(3)], window)
    plot_games(run, games, window, greedy)
    plot_speed(run, speed)
    fig.suptitle(f"{run.scheme} x{run.workers}: {run.env_steps:,} env steps, {run.updates:,} updates, "
                 f"{run.wall_time_s:.0f} s")
    return fig


#: Reports (about a second each) in the rolling mean of a learner's loss and mean max-Q.
_REPORTS = 10

#: The panels of :func:`plot_diagnostics`: history column, title, vertical-axis label.
_DIAGNOSTIC_PANELS = (("loss", "TD loss", "TD loss of the last update"),
                      ("q_max_mean", "mean max-Q", "mean over the minibatch of max_a Q(s, a)"),
                      ("epsilon", "exploration", "epsilon"))


def plot_diagnostics(run, axes=None, window: int = 50):
    """TD loss (log scale), mean max-Q and epsilon against wall time, from ``run.history``.

    Each is sampled at the run's progress reports (about once a second; the loss and
    mean max-Q start when learning starts). With several workers (``independent``,
    ``shared``: learners; ``actors``: each actor's epsilon) each worker's line is drawn
    thin beside the run's (the mean over workers). Where epsilon never changed (the
    n-tuple presets act greedily: a flat line says nothing), the third panel is
    :func:`plot_tiles` instead, over ``window`` games, its title saying the epsilon.

    Parameters
    ----------
    run : RunResult
        A history without the diagnostics (a run saved by an older dqnlab) gets a note
        in each panel instead of a line.
    axes : sequence of 3 matplotlib.axes.Axes, optional
        Default: a new figure of three panels in a row.

    Returns
    -------
    sequence of matplotlib.axes.Axes
    """
    import re

    import matplotlib.pyplot as plt

    if axes is None:
        _, axes = plt.subplots(1, 3, figsize=(15, 3.6), layout="constrained")
    history = run.history
    t = np.asarray(history["wall_time_s"], float)
    eps = np.asarray(history["epsilon"], float) if "epsilon" in history else np.zeros(0)
    eps = eps[np.isfinite(eps)]
    flat = eps.size > 0 and np.all(eps == eps[0])
    if flat:
        plot_tiles(run, axes[2], window)
        axes[2].set_title(f"games reaching a tile (epsilon {eps[0]:g} throughout)")
    for ax, (column, title, ylabel) in zip(axes[:2] if flat else axes, _DIAGNOSTIC_PANELS):
        found = [(int(m.group(1)), name) for name in history.columns
                 if (m := re.fullmatch(rf"worker(\d+)_{column}", str(name)))]
        for k, name in sorted(found):
            ax.plot(t, np.asarray(history[name], float), lw=0.8, alpha=0.7, label=f"worker {k}")
        values = np.asarray(history[column], float) if column in history else np.full(len(t), np.nan)
        if np.isfinite(values).any():
            if found or column == "epsilon":
                ax.plot(t, values, color="k", lw=1.5, label="mean of the workers" if found else None)
            else:  # one learner's: each report faint, their rolling mean (a loss is noisy from update to update)
                ax.plot(t, values, color="k", lw=0.8, alpha=0.3, label="each report (about 1 s)")
                ax.plot(t, _rolling(values, _REPORTS), color="k", lw=1.5, label=f"mean of the last {_REPORTS} reports")
            if column == "loss" and (values[np.isfinite(values)] > 0).all():
                ax.set_yscale("log")
        else:
            ax.text(0.5, 0.5, "no update yet" if column in history else "not recorded in this run",
                    ha="center", va="center", transform=ax.transAxes)
        if len(ax.get_lines()) > 1:
            ax.legend(fontsize="small")
        ax.set_xlabel("wall time (s)")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
    return axes


#: The tiles of :func:`plot_tiles`.
TILES = (2048, 4096, 8192)


def plot_tiles(run, ax=None, window: int = 50, x: str = "wall_time_s"):
    """The share of the last ``window`` finished games (of all workers) that reached 2048, 4096 and 8192,
    against wall time (seconds) or env steps: how a greedy learner's play grows, where epsilon is flat.

    Parameters
    ----------
    run : RunResult
    ax : matplotlib.axes.Axes, optional
    window : int
        Games in the rolling share (the first ``window - 1`` points average fewer).
    x : {"wall_time_s", "env_steps"}

    Returns
    -------
    matplotlib.axes.Axes
    """
    import matplotlib.pyplot as plt

    if x not in ("wall_time_s", "env_steps"):
        raise ValueError(f"x must be 'wall_time_s' or 'env_steps', got {x!r}")
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 3.5))
    ep = run.episodes.sort_values("wall_time_s")
    if len(ep):
        xs = np.asarray(ep["wall_time_s"], float)
        if x == "env_steps":
            xs = np.interp(xs, run.history["wall_time_s"], run.history["env_steps"]) if len(run.history) > 1 else \
                np.asarray(ep["env_steps"], float)
        for tile in TILES:
            ax.plot(xs, _rolling((ep["max_tile"] >= tile).astype(float), window), label=f"{tile}")
        ax.legend(fontsize="small", title="tile", title_fontsize="small")
    else:
        ax.text(0.5, 0.5, "no finished game yet", ha="center", va="center", transform=ax.transAxes)
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("wall time (s)" if x == "wall_time_s" else "env steps")
    ax.set_ylabel(f"share of the last {window} games")
    ax.set_title("games reaching a tile")
    return ax


# ----------------------------------------------------------------------------------------------
# Figures of the notebooks and of ``python -m dqnlab reproduce`` (see :mod:`dqnlab.experiments`).

#: Colours of the time split, in the order of :data:`dqnlab.runtime.results.TIME_SPLIT_KEYS`.
TIME_SPLIT_COLOURS = {"acting": "#4c72b0", "learning": "#55a868", "communication": "#c44e52"}


def _run_label(run) -> str:
    return f"{run.scheme} x{run.workers}"


def plot_time_split(runs, ax=None, labels=None, fraction: bool = True):
    """Where each run's time went, as a stacked bar per run.

    Parameters
    ----------
    runs : RunResult or list of RunResult
    labels : list of str, optional
        One bar label per run (default: scheme and workers).
    fraction : bool
        Bars of fractions of each run's split total (True), or of seconds summed over
        workers (False).
    """
    import matplotlib.pyplot as plt

    runs = runs if isinstance(runs, (list, tuple)) else [runs]
    labels = list(labels) if labels is not None else [_run_label(r) for r in runs]
    if ax is None:
        _, ax = plt.subplots(figsize=(max(4, 1.2 * len(runs) + 2), 3.5))
    keys = list(TIME_SPLIT_COLOURS)
    keys += sorted({k for r in runs for k in r.time_split} - set(keys))
    bottom = np.zeros(len(runs))
    for i, key in enumerate(keys):
        values = np.array([float(r.time_split.get(key, 0.0)) for r in runs])
        if fraction:
            totals = np.array([sum(r.time_split.values()) for r in runs], float)
            values = np.divide(values, totals, out=np.zeros_like(values), where=totals > 0)
        ax.bar(labels, values, bottom=bottom, label=key, color=TIME_SPLIT_COLOURS.get(key, f"C{i + 3}"))
        bottom += values
    ax.set_ylabel("fraction of time" if fraction else "seconds (summed over workers)")
    ax.set_title("time split")
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.tick_params(axis="x", labelrotation=30 if len(runs) > 3 else 0)
    return ax


def plot_bars(values, labels, ax=None, ylabel: str = "", title: str | None = None, log: bool = False,
              fmt: str = "{:,.0f}", reference: float | None = None, reference_label: str | None = None,
              colors=None):
    """One labelled bar per value, with the value written on the bar.

    Parameters
    ----------
    values : sequence of float
    labels : sequence of str
    log : bool
        Logarithmic value axis (for figures that span orders of magnitude).
    fmt : str or callable
        Format of the value written above each bar (``fmt.format(v)`` or ``fmt(v)``);
        default: thousands separators, no decimals.
    reference : float, optional
        Draw a horizontal dashed line at this value (labelled ``reference_label``).
    colors : sequence of matplotlib colours, optional
        One per bar (default: the colour cycle, C0, C1, ...).
    """
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(max(4, 1.2 * len(values) + 2), 3.5))
    values = np.asarray(values, float)
    bars = ax.bar(list(labels), values, color=list(colors) if colors is not None else [f"C{i}" for i in range(len(values))])
    for bar, v in zip(bars, values):
        if np.isfinite(v):
            text = fmt(v) if callable(fmt) else fmt.format(v)
            ax.annotate(text, (bar.get_x() + bar.get_width() / 2, v), ha="center", va="bottom",
                        fontsize="small", xytext=(0, 2), textcoords="offset points")
    if log:
        from matplotlib.ticker import FuncFormatter, NullFormatter

        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:,g}"))
        ax.yaxis.set_minor_formatter(NullFormatter())
    if reference is not None:
        ax.axhline(reference, color="k", ls="--", lw=1, label=reference_label)
        if reference_label:
            ax.legend(fontsize="small")
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    if len(values) > 3 or sum(len(str(label)) for label in labels) > 36:  # names that would run into each other
        ax.tick_params(axis="x", labelrotation=30)
        for label in ax.get_xticklabels():
            label.set(ha="right", rotation_mode="anchor")
    return ax


def plot_scores(runs, labels=None, ax=None, x: str = "wall_time_s", window: int = 50):
    """Rolling mean training score of each run, labelled, against wall time or env steps.

    Like :func:`plot_reward` with one line per run and a label per run; ``x="env_steps"``
    counts the env steps of all workers together.
    """
    import matplotlib.pyplot as plt

    if x not in ("wall_time_s", "env_steps"):
        raise ValueError(f"x must be 'wall_time_s' or 'env_steps', got {x!r}")
    runs = runs if isinstance(runs, (list, tuple)) else [runs]
    labels = list(labels) if labels is not None else [_run_label(r) for r in runs]
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 3.5))
    for i, (run, label) in enumerate(zip(runs, labels)):
        ep = run.episodes
        if x == "env_steps" and len(run.history) > 1:
            xs = np.interp(ep["wall_time_s"], run.history["wall_time_s"], run.history["env_steps"])
        else:
            xs = ep[x]
        ax.plot(np.asarray(xs), _rolling(ep["score"], window), color=f"C{i}", label=label)
    ax.set_xlabel("wall time (s)" if x == "wall_time_s" else "env steps (all workers)")
    ax.set_ylabel(f"training score (mean of last {window})")
    ax.legend(fontsize="small")
    return ax


def plot_greedy(curves, labels=None, ax=None, x: str = "wall_time_s"):
    """Greedy score of checkpoints against wall time or env steps.

    Parameters
    ----------
    curves : list of pandas.DataFrame
        Columns ``wall_time_s``, ``env_steps``, ``score_mean`` and optionally ``score_sem``
        (see :func:`dqnlab.experiments.trials.greedy_curve`).
    labels : list of str
    x : {"wall_time_s", "env_steps"}
    """
    import matplotlib.pyplot as plt

    if x not in ("wall_time_s", "env_steps"):
        raise ValueError(f"x must be 'wall_time_s' or 'env_steps', got {x!r}")
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 3.5))
    labels = list(labels) if labels is not None else [None] * len(curves)
    for i, (df, label) in enumerate(zip(curves, labels)):
        xs, ys = np.asarray(df[x], float), np.asarray(df["score_mean"], float)
        ax.plot(xs, ys, "o-", color=f"C{i}", ms=3, label=label)
        if "score_sem" in df:
            sem = np.asarray(df["score_sem"], float)
            ax.fill_between(xs, ys - sem, ys + sem, color=f"C{i}", alpha=0.15, lw=0)
    ax.set_xlabel("wall time (s)" if x == "wall_time_s" else "env steps (all workers)")
    ax.set_ylabel("greedy score (mean)")
    if any(labels):
        ax.legend(fontsize="small")
    return ax


class LiveFigure:
    """The live figure of a control panel: speed, TD loss and score against wall time.

    Built once, then redrawn cheaply: :meth:`update` moves the data of the same lines (no
    new figure or axes, and fixed margins instead of a layout pass at every draw), so a
    panel can redraw about every two seconds on a machine busy training. It uses the
    object-oriented API only (no pyplot), so it is safe to draw from a training thread.

    * speed: env steps/s (solid, left axis) and updates/s (dashed, right axis), a rolling
      mean of 5 reports. The warm-up (from the start to the first update: the scheme's
      start-up and acting alone, often far faster than acting and learning) is a grey band,
      its peak rate in the axis label, and the env-steps axis is scaled to the rate after
      it, so a fast warm-up does not flatten the steady rate to a line at the bottom.
    * TD loss: ``run.history["loss"]`` (log scale) when the history has that column (NaN
      before learning starts: "no update yet"); otherwise the plot says it is not recorded.
    * reward: the rolling mean score of finished games, one line per worker with
      ``per_worker``, and the reference players' mean scores as dotted lines (``baselines``).

    A run that has ended (its status other than ``"running"``) is titled with its speed over
    the whole run, and a last report that came much sooner after the one before than the others
    (the final totals recorded as the run ends) is left out of the rates: a few env steps over a
    fraction of a second would be drawn as a spike far above the run's rate.

    Parameters
    ----------
    window : int
        Games in the rolling mean of the score (default 20).
    baselines : dict of str to float, optional
        Mean scores of reference players (``{"random": ..., "corner": ...}``, see
        :func:`dqnlab.ui.baselines.reference_scores`), drawn across the score plot; also
        :meth:`set_baselines`.

    Attributes
    ----------
    figure : matplotlib.figure.Figure
        900 x 256 pixels.
    ax_speed, ax_updates, ax_loss, ax_score : matplotlib.axes.Axes
        The env-steps/s axes and its twin of updates/s, the TD-loss axes and the score axes.
    """

    def __init__(self, window: int = 20, baselines: dict[str, float] | None = None):
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.ticker import EngFormatter

        self.window = window
        self.figure = Figure(figsize=(11.25, 3.2), dpi=80)
        FigureCanvasAgg(self.figure)
        # Fixed rectangles (figure fractions), no layout engine; the gap after the speed plot holds
        # the labels of its twin axis and of the TD-loss axis (log ticks such as 4x10^0).
        left, width, gaps = 0.065, 0.243, (0.12, 0.07)
        self.ax_speed, self.ax_loss, self.ax_score = (
            self.figure.add_axes((x, 0.16, width, 0.72)) for x in
            (left, left + width + gaps[0], left + 2 * width + sum(gaps)))
        self.ax_updates = self.ax_speed.twinx()
        for ax in (self.ax_speed, self.ax_updates, self.ax_loss, self.ax_score):
            ax.tick_params(labelsize="small")
        # Short tick labels (1.4k, 6e-01), so the fixed gaps hold them and no offset text meets a title.
        for axis in (self.ax_speed.yaxis, self.ax_updates.yaxis, self.ax_score.yaxis):
            axis.set_major_formatter(EngFormatter(sep=""))
        (self._sps,) = self.ax_speed.plot([], [], color="C0")
        (self._ups,) = self.ax_updates.plot([], [], color="C1", ls="--")
        (self._loss,) = self.ax_loss.plot([], [], color="C3")
        self._scores = {}  # label -> Line2D
        self._baselines = []  # (Line2D, Text) of each reference player
        self._warm_up = None  # the warm-up band, replaced at every update
        self._notes = {ax: ax.text(0.5, 0.5, "", ha="center", va="center", color="0.4", transform=ax.transAxes)
                       for ax in (self.ax_loss, self.ax_score)}
        self._off_scale = self.ax_speed.text(0.02, 0.97, "", ha="left", va="top", color="0.35", fontsize="x-small",
                                             transform=self.ax_speed.transAxes, zorder=5,
                                             bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.85})
        self.ax_speed.set_ylabel("env steps / s (solid)", color="C0")
        self.ax_updates.set_ylabel("updates / s (dashed)", color="C1")
        self.ax_loss.set_yscale("log")
        plain_log_labels(self.ax_loss.yaxis)  # (0.6, 1, 40, 2,000: never scientific notation)
        self.ax_score.set_ylabel(f"score (mean of last {window} games)")
        for ax in (self.ax_loss, self.ax_score):
            ax.set_xlabel("wall time (s)")
        self.set_baselines(baselines or {})

    def set_baselines(self, baselines: dict[str, float]) -> None:
        """Draw the mean score of each reference player (name -> points) across the score plot, as a
        dotted grey line named at its right end (replacing those drawn before)."""
        for line, text in self._baselines:
            line.remove()
            text.remove()
        self._baselines = []
        for name, score in baselines.items():
            line = self.ax_score.axhline(score, color="0.45", ls=":", lw=1.2, label=f"_{name}", zorder=1)
            text = self.ax_score.annotate(f"{name} {score:,.0f}", (1.0, score), xycoords=("axes fraction", "data"),
                                          ha="right", va="bottom", fontsize="x-small", color="0.35")
            self._baselines.append((line, text))

    def update(self, run, per_worker: bool = False):
        """Draw ``run`` into :attr:`figure` and return the figure.

        Parameters
        ----------
        run : RunResult
            A finished run or a snapshot of one going on.
        per_worker : bool
            One score line per worker (runs with more than one worker).

        Returns
        -------
        matplotlib.figure.Figure
            :attr:`figure`, the same object at every call.
        """
        t = np.asarray(run.history["wall_time_s"], float)
        self._update_speed(run, _without_final_burst(run.history))
        self._update_loss(run, t)
        self._update_scores(run, per_worker and run.workers > 1)
        # To the run's own clock, not its last history row: the figure and the status line say the same time.
        now = max(float(t[-1]) if len(t) else 0.0, float(getattr(run, "wall_time_s", 0.0) or 0.0), 1.0)
        for ax in (self.ax_speed, self.ax_loss, self.ax_score):
            ax.set_xlim(0, now)
        return self.figure

    def _update_speed(self, run, history) -> None:
        t = np.asarray(history["wall_time_s"], float)
        updates = np.asarray(history["updates"], float)
        learning = np.flatnonzero(updates > 0)
        first = int(learning[0]) if len(learning) else len(t)  # the first report after an update
        mid, sps, ups = _speed(history, split=first)
        self._sps.set_data(mid, sps)
        self._ups.set_data(mid, ups)
        if self._warm_up is not None:
            self._warm_up.remove()
            self._warm_up = None
        warm_end = t[min(first, len(t)) - 1] if first > 0 else 0.0  # the last report before learning
        steady = sps[first:]
        # The updates/s axis reaches higher, so that a constant replay ratio does not lay its dashed line
        # exactly over the solid one.
        for ax, values, room in ((self.ax_speed, steady if len(steady) else sps, 1.1), (self.ax_updates, ups, 1.5)):
            top = float(values.max()) if len(values) else 0.0
            ax.set_ylim(0, room * top if top > 0 else 1.0)
            ax.tick_params(axis="y", labelleft=ax is self.ax_speed and top > 0,
                           labelright=ax is self.ax_updates and top > 0)  # no ticks of an empty axis
        xlabel, off_scale = "wall time (s)", ""
        if warm_end > 0 and len(sps):
            self._warm_up = self.ax_speed.axvspan(0, warm_end, color="0.9", lw=0, zorder=0)
            # Said below the axes: the band may be too narrow to hold it, and nothing covers a line there.
            if warm_end >= 0.02 * max(float(t[-1]), 1.0):  # a band too narrow to see is not named
                xlabel += "; grey: warm-up"
            peak = float(sps[:first].max())
            if peak > self.ax_speed.get_ylim()[1]:  # a line that runs off the axis is said where it does
                off_scale = f"\u2191 warm-up peak {peak:,.0f}/s"
        self.ax_speed.set_xlabel(xlabel)
        self._off_scale.set_text(off_scale)
        if getattr(run, "status", "running") != "running" and float(getattr(run, "wall_time_s", 0.0) or 0.0) > 0:
            now = f"{run.env_steps_per_s:,.0f} env steps/s, {run.updates_per_s:,.1f} updates/s over the run"
        else:
            now = f"{sps[-1]:,.0f} env steps/s, {ups[-1]:,.1f} updates/s now" if len(sps) else "no report yet"
        _live_title(self.ax_speed, f"speed: {now}")

    def _update_loss(self, run, t: np.ndarray) -> None:
        recorded = "loss" in run.history
        loss = np.asarray(run.history["loss"], float) if recorded else np.full(len(t), np.nan)
        shown = np.isfinite(loss) & (loss > 0)
        self._loss.set_data(t[shown], loss[shown])
        self._loss.set_marker("o" if 0 < shown.sum() < 3 else "None")  # one value is a point, not a line
        self._loss.set_markersize(4)
        if shown.any():
            low, high = float(loss[shown].min()), float(loss[shown].max())
            self.ax_loss.set_ylim(low / 1.5, high * 1.5)
            note, title = "", f"TD loss (log scale): {plain_number(loss[shown][-1])}"
        else:
            self.ax_loss.set_ylim(0.1, 10.0)  # not the scale of the run before
            note = "no update yet" if recorded else "not recorded in this run"
            title = "TD loss (log scale)"
        self.ax_loss.tick_params(axis="y", which="both", labelleft=bool(shown.any()))
        self._notes[self.ax_loss].set_text(note)
        _live_title(self.ax_loss, title)

    def _update_scores(self, run, per_worker: bool) -> None:
        lines = list(score_lines(run, "wall_time_s", self.window, per_worker)) if len(run.episodes) else []
        for label in set(self._scores) - {label for label, *_ in lines}:
            self._scores.pop(label).remove()
        for label, xs, ys, colour in lines:
            if label not in self._scores:
                (self._scores[label],) = self.ax_score.plot([], [], color=colour, label=label)
            self._scores[label].set_data(xs, ys)
        if self.ax_score.get_legend() is not None:
            self.ax_score.get_legend().remove()
        if len(lines) > 1:
            self.ax_score.legend(fontsize="x-small", loc="upper left")
        if lines:
            self.ax_score.set_autoscaley_on(True)  # set_ylim of an empty run turned it off
            self.ax_score.relim()
            self.ax_score.autoscale_view(scalex=False)
        else:
            self.ax_score.set_ylim(0.0, 1.0)  # not the scale of the run before
        self.ax_score.tick_params(axis="y", labelleft=bool(lines))
        self._notes[self.ax_score].set_text("" if lines else "no finished game yet")
        recent = f"recent mean {run.episodes['score'].tail(self.window).mean():,.0f}" if lines else "no game yet"
        _live_title(self.ax_score, f"reward: {recent}")


def _without_final_burst(history):
    """``history`` without its last row where that row came less than half the usual interval after the one
    before (the final totals a run records as it ends): its env steps over a fraction of a second are no rate."""
    t = np.asarray(history["wall_time_s"], float)
    if len(t) >= 3:
        usual = float(np.median(np.diff(t[:-1])))
        if t[-1] - t[-2] < 0.5 * usual:
            return history.iloc[:-1]
    return history


def plain_number(v: float) -> str:
    """``v`` without scientific notation: from 100 up in whole units with thousands separators (9,080), below
    that in two significant digits (12, 0.6, 0.00031)."""
    if not np.isfinite(v):
        return str(v)
    if abs(v) >= 100:
        return f"{v:,.0f}"
    return np.format_float_positional(v, precision=2, unique=True, fractional=False, trim="-")


def plain_log_labels(axis, fmt=None) -> None:
    """Plain tick labels on a log-scale matplotlib ``axis`` (``ax.xaxis`` or ``ax.yaxis``): every major tick
    through ``fmt`` (default :func:`plain_number`); the minor ones (2 ... 9 x 10^k) labelled only where the view
    spans under a decade, and 2 and 5 under two decades, so that they do not crowd."""
    from matplotlib.ticker import FuncFormatter

    fmt = fmt or plain_number

    def minor(value: float, _pos: int) -> str:
        low, high = sorted(axis.get_view_interval())
        decades = np.log10(high / low) if low > 0 else np.inf
        lead = round(value / 10 ** np.floor(np.log10(value))) if value > 0 else 0
        return fmt(value) if decades < 1 or (decades < 2 and lead in (2, 5)) else ""

    axis.set_major_formatter(FuncFormatter(lambda value, _pos: fmt(value)))
    axis.set_minor_formatter(FuncFormatter(minor))


def _live_title(ax, text: str) -> None:
    """Set a title of the live figure at a fixed height (y=1: matplotlib then skips its search for
    tick labels in the way, a tenth of the cost of a redraw)."""
    ax.set_title(text, fontsize="medium", y=1.0)


def plot_divergence(runs, labels=None, ax=None, x: str = "wall_time_s", relative: bool = True):
    """How far an ``independent`` run's learners drifted apart, at every check-in.

    Reads ``run.extra["divergence"]`` (one row per check-in round, see
    :func:`dqnlab.schemes.independent.run`); rounds where the learners synced are marked
    with a filled dot, the others with an open one.

    Parameters
    ----------
    runs : RunResult or list of RunResult
    x : {"wall_time_s", "env_steps"}
    relative : bool
        Plot ``divergence_rel`` (mean L2 distance to the mean, over the mean's norm)
        instead of the absolute ``divergence``.
    """
    import matplotlib.pyplot as plt
    import pandas as pd

    runs = runs if isinstance(runs, (list, tuple)) else [runs]
    labels = list(labels) if labels is not None else [_run_label(r) for r in runs]
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 3.5))
    key = "divergence_rel" if relative else "divergence"
    for i, (run, label) in enumerate(zip(runs, labels)):
        df = pd.DataFrame(run.extra.get("divergence") or [])
        if not len(df) or key not in df:
            ax.plot([], [], color=f"C{i}", label=f"{label} (no check-in)")
            continue
        xs, ys = np.asarray(df[x], float), np.asarray(df[key], float)
        ax.plot(xs, ys, "-", color=f"C{i}", label=label)
        synced = np.asarray(df.get("synced", pd.Series(False, index=df.index)), bool)
        ax.plot(xs[synced], ys[synced], "o", color=f"C{i}", ms=4)
        ax.plot(xs[~synced], ys[~synced], "o", color=f"C{i}", ms=4, mfc="none")
    ax.set_xlabel("wall time (s)" if x == "wall_time_s" else "env steps (all learners)")
    ax.set_ylabel("divergence (relative L2)" if relative else "divergence (L2)")
    ax.set_title("divergence between learners (filled: synced)")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize="small")
    return ax


# ----------------------------------------------------------------------------------------------
# Greedy play: the figure of an evaluation, and recorded games (:func:`dqnlab.play`) as animations.

def plot_eval(result):
    """The figure of an evaluation: the largest-tile distribution and the score histogram.

    Parameters
    ----------
    result : EvalResult
        What :func:`dqnlab.evaluate` returns.

    Returns
    -------
    matplotlib.figure.Figure
        Two axes: one bar per largest tile reached (games, with their share written on
        each bar) and a histogram of the scores (points) with the mean and the median.
    """
    import matplotlib.pyplot as plt

    fig, (ax_tiles, ax_scores) = plt.subplots(1, 2, figsize=(11, 3.8), layout="constrained")
    n = len(result.scores)
    tiles, counts = np.unique(result.max_tiles, return_counts=True)
    plot_bars(counts, [f"{t:,}" for t in tiles], ax_tiles, ylabel="games", title="largest tile of each game",
              fmt=lambda c: f"{c / n:.0%}")
    ax_tiles.set_xlabel("largest tile")
    mean, median = float(result.scores.mean()), float(np.median(result.scores))
    ax_scores.hist(result.scores, bins=int(np.clip(np.sqrt(n), 10, 50)), color="C0")
    ax_scores.axvline(mean, color="k", ls="--", lw=1, label=f"mean {mean:,.0f}")
    ax_scores.axvline(median, color="k", ls=":", lw=1, label=f"median {median:,.0f}")
    ax_scores.set_xlabel("score (points)")
    ax_scores.set_ylabel("games")
    ax_scores.set_title("score of each game")
    ax_scores.legend(fontsize="small")
    fig.suptitle(f"{n:,} games: mean score {mean:,.0f}, the 2048 tile in {result.reach(2048):.0%}")
    return fig


_CHOSEN, _OTHER = "#f65e3b", "#bbada0"  # the move played, the others (the board's colours)


def _short(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.2f}"


def animate(game, every: int = 1, max_frames: int | None = None, interval_ms: float = 200.0, dpi: float = 72.0):
    """An animation of a recorded game: the board, and beside it the Q-values of the four moves.

    Frame t shows ``game.boards[t]`` and the Q-values that chose the next move (its bar
    highlighted, its name and points in the title); the last frame shows the final board.

    Parameters
    ----------
    game : RecordedGame
        From :func:`dqnlab.play`.
    every : int
        Moves between frames (>= 1); the first and the last board are always shown.
    max_frames : int, optional
        At most this many frames (>= 2): ``every`` is raised to fit (see
        :meth:`RecordedGame.frames`). A strong player's game has thousands of moves,
        and every frame is held in memory while a GIF is written (about 0.5 MB at the
        default size) and embedded in a notebook by ``to_jshtml`` (about 20 kB).
    interval_ms : float
        Milliseconds per frame (default 200: 5 frames per second, also in a saved GIF).
    dpi : float
        Resolution; the figure is 7.2 x 3.6 inches (518 x 259 pixels at the default 72).

    Returns
    -------
    matplotlib.animation.FuncAnimation
        :func:`animation_html` makes a notebook's player of it (with a progress bar while the
        frames are drawn);
        ``anim.save("game.gif", writer="pillow")`` writes a GIF of
        ``len(game.frames(every, max_frames))`` frames (the start and one per move by default).

    Raises
    ------
    ValueError
        If ``every`` < 1 or ``max_frames`` < 2.
    """
    from matplotlib.animation import FuncAnimation
    from matplotlib.figure import Figure

    frames = game.frames(every, max_frames)
    legal = legal_actions_batch(game.boards)
    scores = game.scores
    # A Figure without pyplot: nothing left open in pyplot, no stray static copy in a notebook.
    fig = Figure(figsize=(7.2, 3.6), dpi=dpi)
    ax_board = fig.add_axes((0.02, 0.03, 0.44, 0.82))
    ax_q = fig.add_axes((0.58, 0.12, 0.39, 0.7))
    title = fig.suptitle("", fontsize="large", fontweight="bold")
    bars = ax_q.bar(ACTION_NAMES, np.zeros(4), color=_OTHER)
    values = [ax_q.text(i, 0, "", ha="center", fontsize="small") for i in range(4)]
    note = ax_q.text(0.5, 0.5, "", ha="center", va="center", transform=ax_q.transAxes, color="0.4")
    ax_q.axhline(0, color="k", lw=0.8)
    ax_q.set_title("Q-values of the moves", fontsize="medium")

    def draw(t: int) -> None:
        ax_board.clear()
        draw_board(exponents=game.boards[t], ax=ax_board)
        playing = t < game.moves
        q = game.q_values[t] if playing else np.full(4, np.nan, np.float32)
        finite = np.isfinite(q)
        for i, (bar, text) in enumerate(zip(bars, values)):
            height = float(q[i]) if finite[i] else 0.0
            bar.set_height(height)
            bar.set_color(_CHOSEN if playing and i == game.actions[t] else _OTHER)
            text.set_position((i, height))
            text.set_verticalalignment("bottom" if height >= 0 else "top")
            text.set_text(_short(q[i]) if finite[i] else "illegal" if playing and not legal[t, i] else "")
        if finite.any():
            low, high = min(0.0, float(q[finite].min())), max(0.0, float(q[finite].max()))
            pad = 0.15 * (high - low) or 1.0
            ax_q.set_ylim(low - (pad if low < 0 else 0.0), high + pad)
        else:  # no values to scale: an empty panel with its note
            ax_q.set_ylim(0.0, 1.0)
        ax_q.yaxis.set_visible(bool(finite.any()))
        note.set_text("" if finite.any() else "no Q-values (not a Q-network)" if playing
                      else "stopped (max_moves)" if game.truncated else "game over")
        step = (f"   next: {ACTION_NAMES[game.actions[t]]} (+{game.rewards[t]:,})" if playing else "")
        title.set_text(f"move {t:,} of {game.moves:,}   score {scores[t]:,}{step}")

    return FuncAnimation(fig, draw, frames=frames.tolist(), interval=interval_ms, repeat=False)


def animation_html(game, every: int = 1, max_frames: int | None = None, interval_ms: float = 200.0,
                   dpi: float = 72.0, progress: bool = True) -> str:
    """:func:`animate` of ``game`` as a self-contained HTML player (what ``to_jshtml()`` gives), with a
    progress bar over the frames while they are drawn (a strong player's game takes seconds to draw).

    Parameters
    ----------
    game, every, max_frames, interval_ms, dpi
        As :func:`animate` (which raises ValueError for a bad ``every`` or ``max_frames``).
    progress : bool
        Show the progress bar (:func:`save_animation`'s: a widget in a notebook, text in a terminal).

    Returns
    -------
    str
        HTML: ``IPython.display.HTML(animation_html(game))`` shows it in a notebook.
    """
    import tempfile
    from pathlib import Path

    from matplotlib.animation import HTMLWriter

    anim = animate(game, every, max_frames, interval_ms, dpi)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder, "animation.html")
        save_animation(anim, path, len(game.frames(every, max_frames)),
                       HTMLWriter(fps=1000.0 / interval_ms, embed_frames=True, default_mode="once"),
                       progress=progress, leave=False)
        return path.read_text()


def save_animation(anim, path, frames: int, writer="pillow", progress: bool = True, leave: bool = True) -> None:
    """Save ``anim`` (:func:`animate`'s) to ``path`` with ``writer``, with a progress bar over its ``frames``
    frames and the time left while they are drawn (:func:`dqnlab.bars.progress_bar`; a strong player's game
    takes a minute to draw).

    Parameters
    ----------
    anim : matplotlib.animation.Animation
    path : str or path
        The file, e.g. ``game.gif``.
    frames : int
        Frames of ``anim`` (what the bar fills to).
    writer : str or matplotlib.animation.MovieWriter
        As :meth:`matplotlib.animation.Animation.save` takes it (``"pillow"``: a GIF).
    progress : bool
        Show the bar.
    leave : bool
        Keep the bar's last state on the screen when done.
    """
    from .bars import progress_bar

    with progress_bar(total=frames, desc="drawing frames", unit=" frames", disable=not progress, leave=leave) as bar:
        anim.save(str(path), writer=writer,
                  progress_callback=lambda frame, _total: bar.update(frame - bar.n))  # called before each frame
        bar.update(frames - bar.n)
