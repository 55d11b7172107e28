"""Plots for dqnlab (matplotlib, object-oriented API; works with the Agg backend)."""

from __future__ import annotations

import numpy as np
from matplotlib.patches import FancyBboxPatch

from dqnlab.env import board_to_tiles

# Colours of the original game, indexed by exponent (0 = empty cell).
_TILE_COLOURS = (
    "#cdc1b4", "#eee4da", "#ede0c8", "#f2b179", "#f59563", "#f67c5f", "#f65e3b",
    "#edcf72", "#edcc61", "#edc850", "#edc53f", "#edc22e",
)
_BIG_TILE_COLOUR = "#3c3a32"  # 4096 and above
_BACKGROUND = "#bbada0"
_DARK_TEXT, _LIGHT_TEXT = "#776e65", "#f9f6f2"


def draw_board(board, ax=None, title: str | None = None):
    """Draw a 2048 board as the familiar grid of coloured tiles.

    Parameters
    ----------
    board : array_like
        ``(4, 4)`` integer log2 exponents in ``0..17`` (0 = empty cell).
    ax : matplotlib.axes.Axes, optional
        Axes to draw on; a new 4 x 4 inch figure is created if None.
    title : str, optional
        Axes title.

    Returns
    -------
    matplotlib.axes.Axes
        The axes drawn on.

    Raises
    ------
    ValueError
        If ``board`` is invalid.
    """
    tiles = board_to_tiles(board)
    if ax is None:
        import matplotlib.pyplot as plt

        _, ax = plt.subplots(figsize=(4, 4))
    size = len(tiles)
    ax.set_xlim(0, size)
    ax.set_ylim(size, 0)  # row 0 at the top
    ax.set_aspect("equal")
    ax.axis("off")
    ax.add_patch(FancyBboxPatch((0, 0), size, size, boxstyle="round,pad=0,rounding_size=0.1",
                                facecolor=_BACKGROUND, edgecolor="none"))
    # Font size in points from the axes' width, so text fits any figure size.
    bbox = ax.get_window_extent()
    cell_pt = bbox.width / ax.figure.dpi * 72 / size
    for (row, col), value in np.ndenumerate(tiles):
        exponent = int(value).bit_length() - 1 if value else 0
        colour = (_TILE_COLOURS[exponent] if exponent < len(_TILE_COLOURS)
                  else _BIG_TILE_COLOUR)
        ax.add_patch(FancyBboxPatch((col + 0.06, row + 0.06), 0.88, 0.88,
                                    boxstyle="round,pad=0,rounding_size=0.06",
                                    facecolor=colour, edgecolor="none"))
        if value:
            digits = len(str(value))
            ax.text(col + 0.5, row + 0.5, str(value), ha="center", va="center",
                    fontweight="bold", fontsize=cell_pt * min(0.45, 1.1 / digits),
                    color=_DARK_TEXT if exponent <= 2 else _LIGHT_TEXT)
    if title is not None:
        ax.set_title(title)
    return ax


def _rolling(y, window: int):
    import pandas as pd

    return pd.Series(y).rolling(window, min_periods=1).mean().to_numpy()


def _speed(history):
    """(t_mid, env steps/s, updates/s) between consecutive history samples."""
    t = np.asarray(history["wall_time_s"], float)
    if len(t) < 2:
        return np.array([]), np.array([]), np.array([])
    dt = np.maximum(np.diff(t), 1e-9)
    sps = np.diff(np.asarray(history["env_steps"], float)) / dt
    ups = np.diff(np.asarray(history["updates"], float)) / dt
    return (t[1:] + t[:-1]) / 2, sps, ups


def plot_speed(runs, ax=None, label=None):
    """Env steps/s (solid) and updates/s (dashed, right axis) against wall time.

    Parameters
    ----------
    runs : RunResult or list of RunResult
        Each run's ``history`` is plotted, labelled by ``label`` or its scheme and workers.
    ax : matplotlib.axes.Axes, optional
    """
    import matplotlib.pyplot as plt

    runs = runs if isinstance(runs, (list, tuple)) else [runs]
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 3.5))
    ax2 = ax.twinx()
    for i, run in enumerate(runs):
        t, sps, ups = _speed(run.history)
        name = label or f"{run.scheme} x{run.workers}"
        colour = f"C{i}"
        ax.plot(t, sps, color=colour, label=f"{name} env steps/s")
        ax2.plot(t, ups, color=colour, ls="--", label=f"{name} updates/s")
    ax.set_xlabel("wall time (s)")
    ax.set_ylabel("env steps / s")
    ax2.set_ylabel("updates / s (dashed)")
    ax.set_ylim(bottom=0)
    ax2.set_ylim(bottom=0)
    ax.legend(loc="lower right", fontsize="small")
    ax.set_title("speed")
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
        ep = run.episodes
        name = f"{run.scheme} x{run.workers}"
        groups = ep.groupby("worker") if per_worker else [(None, ep)]
        for worker, df in groups:
            if x == "env_steps" and not per_worker:
                # total env steps of the run when each game ended (all workers together)
                xs = np.interp(df["wall_time_s"], run.history["wall_time_s"], run.history["env_steps"]) \
                    if len(run.history) > 1 else df["env_steps"]
            else:
                xs = df[x]
            label = name if worker is None else f"{name} worker {worker}"
            ax.plot(np.asarray(xs), _rolling(df["score"], window), label=label)
    ax.set_xlabel("wall time (s)" if x == "wall_time_s" else "env steps")
    ax.set_ylabel(f"score (mean of last {window} games)")
    ax.legend(fontsize="small")
    ax.set_title("reward")
    return ax


def plot_run(run, window: int = 50):
    """The standard figure of a run: reward vs wall time, reward vs env steps, speed."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 3.8), layout="constrained")
    plot_reward(run, axes[0], "wall_time_s", window)
    plot_reward(run, axes[1], "env_steps", window)
    plot_speed(run, axes[2])
    fig.suptitle(f"{run.scheme} x{run.workers}: {run.env_steps:,} env steps, {run.updates:,} updates, "
                 f"{run.wall_time_s:.0f} s")
    return fig
