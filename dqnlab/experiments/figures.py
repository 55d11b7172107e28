"""The experiments and figures of the notebooks, one pair of functions per notebook.

Each notebook in ``notebooks/`` gathers its data with a ``*_data`` function and ends
with the figure drawn by the matching ``*_figure`` function; ``python -m dqnlab
reproduce`` calls the same two functions (see :data:`NOTEBOOKS` and :func:`reproduce`),
so a figure in a notebook and the PNG written by the command line come from the same code.

Every ``*_data`` function takes ``smoke``: ``True`` shrinks every budget to seconds so
that the test suite can execute every notebook end to end (the notebooks read it from
the environment variable ``DQNLAB_SMOKE=1``, see :func:`smoke_mode`). Numbers measured in
smoke mode are real measurements of tiny runs: fine to check that the code works, too
short to conclude anything from.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..config import TrainConfig, family_preset
from ..runtime.results import RunResult

__all__ = [
    "SMOKE_ENV", "smoke_mode", "budget", "explore_config", "setup",
    "Trial", "run_trial", "greedy_curve", "greedy_at",
    "game_data", "game_figure",
    "user_play_moves", "project_days", "serial_data", "serial_figure",
    "warm_up", "summary_table",
    "independent_data", "independent_figure", "shared_data", "shared_figure",
    "sharded_data", "sharded_figure", "averaged_data", "averaged_figure", "actors_data", "actors_figure",
    "compare_data", "compare_figure", "claims_table", "USER_CLAIMS",
    "learning_config", "learning_data", "learning_figure",
    "Notebook", "NOTEBOOKS", "reproduce",
]

#: Environment variable that turns on smoke mode (tiny budgets) when set to 1.
SMOKE_ENV = "DQNLAB_SMOKE"

#: The user's projection (their request): 10,000 episodes would take 550 days.
USER_PROJECTION_DAYS = 550.0
USER_EPISODES = 10_000


# ------------------------------------------------------------------------------------- budgets
def smoke_mode() -> bool:
    """Whether smoke mode is on: ``DQNLAB_SMOKE`` is set to 1 (or true / yes / on)."""
    return os.environ.get(SMOKE_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def _smoke(smoke: bool | None) -> bool:
    return smoke_mode() if smoke is None else bool(smoke)


def budget(full: Any, smoke_value: Any, smoke: bool | None = None) -> Any:
    """``smoke_value`` in smoke mode, else ``full`` (``smoke=None`` reads :func:`smoke_mode`)."""
    return smoke_value if _smoke(smoke) else full


def setup(smoke: bool | None = None) -> bool:
    """The first cell of every notebook: read the smoke flag and prepare the process.

    In smoke mode PyTorch is pinned to one intra-op thread (the test machines are
    small and shared). Returns whether smoke mode is on.
    """
    smoke = _smoke(smoke)
    if smoke:
        import torch

        torch.set_num_threads(1)
    return smoke


def explore_config(smoke: bool | None = None, **overrides: Any) -> TrainConfig:
    """The configuration the notebooks and control panels train with.

    The ``mlp`` preset with a faster exploration schedule (epsilon reaches its final
    value after 50,000 env steps per learner, learning starts after 5,000), so that
    runs of a minute or two already show learning. In smoke mode: a small network
    (one hidden layer of 64 units), a 5,000-transition buffer, minibatches of 64 and
    learning after 500 env steps. The budget is ``max_seconds`` (60 s; 2 s in smoke
    mode) with no env-step limit; ``overrides`` replace any field.
    """
    if _smoke(smoke):
        base = dict(hidden=(64,), buffer_size=5_000, batch_size=64, learning_starts=500, n_envs=16,
                    epsilon_decay_steps=5_000, target_update=200, max_seconds=2.0)
    else:
        base = dict(learning_starts=5_000, epsilon_decay_steps=50_000, max_seconds=60.0)
    return TrainConfig.preset("mlp", total_env_steps=None, **{**base, **overrides})


# -------------------------------------------------------------------------------------- trials
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
    from .. import train

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


def _window(run: RunResult) -> int:
    """Rolling window for training-score curves: 50 games, fewer for tiny runs."""
    return int(max(1, min(50, len(run.episodes) // 4)))


def _new_figure(*args: Any, **kwargs: Any):
    import matplotlib.pyplot as plt

    return plt.subplots(*args, layout="constrained", **kwargs)


# ----------------------------------------------------------------------------- 00 the game
def game_data(smoke: bool | None = None, seed: int = 0) -> dict[str, Any]:
    """Reference policies' scores and the game's speed.

    Returns
    -------
    dict
        ``baselines``: {"random": EvalResult, "corner": EvalResult} of greedy play over
        ``games`` games (1,000; 100 in smoke mode); ``speed``: rows of
        :func:`dqnlab.bench.core.bench_env`; ``games``.
    """
    from ..bench.core import bench_env
    from ..evaluation import evaluate

    smoke = _smoke(smoke)
    games = budget(1_000, 100, smoke)
    baselines = {name: evaluate(name, games=games, seed=seed) for name in ("random", "corner")}
    speed = bench_env(sizes=budget((1, 16, 256, 4096, 16384), (1, 256, 4096), smoke),
                      repeats=budget(5, 1, smoke), min_time=budget(0.2, 0.02, smoke), seed=seed)
    return {"baselines": baselines, "speed": speed, "games": games}


def game_figure(data: dict[str, Any]):
    """00: score distribution and largest tile of random and corner play; moves per second."""
    fig, axes = _new_figure(1, 3, figsize=(15, 3.8))
    ax = axes[0]
    bins = np.linspace(0, max(float(ev.scores.max()) for ev in data["baselines"].values()), 40)
    for i, (name, ev) in enumerate(data["baselines"].items()):
        ax.hist(ev.scores, bins=bins, alpha=0.6, color=f"C{i}",
                label=f"{name}: mean {ev.scores.mean():,.0f}")
    ax.set_xlabel("score")
    ax.set_ylabel("games")
    ax.set_title(f"score of {data['games']:,} games")
    ax.legend(fontsize="small")

    ax = axes[1]
    tiles = sorted({int(t) for ev in data["baselines"].values() for t in np.unique(ev.max_tiles)})
    width = 0.8 / len(data["baselines"])
    for i, (name, ev) in enumerate(data["baselines"].items()):
        share = [float(np.mean(ev.max_tiles == t)) for t in tiles]
        ax.bar(np.arange(len(tiles)) + (i - (len(data["baselines"]) - 1) / 2) * width, share, width,
               color=f"C{i}", label=name)
    ax.set_xticks(np.arange(len(tiles)), [str(t) for t in tiles])
    ax.set_xlabel("largest tile")
    ax.set_ylabel("fraction of games")
    ax.set_title("largest tile reached")
    ax.legend(fontsize="small")

    ax = axes[2]
    rows = [r for r in data["speed"] if r["what"] == "move_batch"]
    ax.plot([r["boards"] for r in rows], [r["moves_per_s"] for r in rows], "o-", label="move_batch (vectorised)")
    single = [r for r in data["speed"] if r["what"] == "Game2048.step"]
    if single:
        ax.axhline(single[0]["moves_per_s"], color="C1", ls="--", label="Game2048.step (one board, gymnasium)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("boards moved at once")
    ax.set_ylabel("env steps / s")
    ax.set_title("how fast the game runs")
    ax.legend(fontsize="small")
    fig.suptitle("00 the game: baselines and speed")
    return fig


# ----------------------------------------------------------------------- 01 serial, why slow
def user_play_moves(games: int = 200, seed: int = 0, max_moves: int = 1_000) -> np.ndarray:
    """Moves per game of the user's setup under uniform random play of all four moves.

    The user's trainer picked among all four moves (a move that changes nothing was
    rewarded -25 and the game went on) and capped games at 1,000 moves; an agent that
    explores does about this. Returns the ``(games,)`` moves of each game.
    """
    from ..game.env import VecGame2048

    env = VecGame2048(games, seed=seed, max_moves=max_moves, invalid_move_reward=-25.0)
    rng = np.random.default_rng(seed)
    env.reset()
    done = np.zeros(games, bool)
    moves = np.zeros(games, np.int64)
    while not done.all():
        out = env.step(rng.integers(0, 4, games))
        ended = (out.terminated | out.truncated) & ~done
        moves[ended] = out.episode_moves[ended]
        done |= ended
    return moves


def project_days(seconds_per_move: float, moves_per_episode: float, episodes: int = USER_EPISODES) -> float:
    """Days of wall time for ``episodes`` games at the given speed."""
    return seconds_per_move * moves_per_episode * episodes / 86_400.0


def serial_data(smoke: bool | None = None, seconds: float | None = None, seed: int = 0) -> dict[str, Any]:
    """The user's per-transition loop vs the batched update, and two serial runs.

    ``seconds`` is the budget of each serial run (default 60 s; 2 s in smoke mode).

    Returns
    -------
    dict
        ``bench``: :func:`dqnlab.bench.core.bench_update` (Keras only outside smoke mode);
        ``random_moves``: moves per game of random play under the user's rules;
        ``seed_run``: a serial run of the ``seed`` preset (the user's hyperparameters,
        batched update); ``fast_run``: a serial run of :func:`explore_config`;
        ``projection``: a DataFrame of projected days for 10,000 episodes.
    """
    from .. import train
    from ..bench.core import bench_update

    smoke = _smoke(smoke)
    bench = bench_update(repeats=budget(5, 1, smoke), min_time=budget(0.5, 0.05, smoke), seed=seed,
                         keras=not smoke)
    random_moves = user_play_moves(games=budget(500, 64, smoke), seed=seed)
    seconds = budget(60.0, 2.0, smoke) if seconds is None else seconds
    seed_cfg = TrainConfig.preset("seed", total_env_steps=None, max_seconds=seconds, seed=seed)
    seed_run = train("serial", seed_cfg, progress=False)
    fast_run = train("serial", explore_config(smoke, max_seconds=seconds, seed=seed), progress=False)
    data = {"bench": bench, "random_moves": random_moves, "seed_run": seed_run, "fast_run": fast_run}
    data["projection"] = _projection(data)
    return data


def _projection(data: dict[str, Any]) -> pd.DataFrame:
    """Projected days for 10,000 games, one row per way of training.

    Moves per game: the games played by the run with the user's hyperparameters (the
    ``seed`` preset), or random play under the user's rules if that run finished no
    game; dqnlab's own serial run uses its own games.
    """
    per_step = {r["method"]: r["seconds_per_env_step"] for r in data["bench"]["rows"]}
    seed_run, fast_run = data["seed_run"], data["fast_run"]
    played = seed_run.episodes["moves"]
    if len(played):
        moves, source = float(played.mean()), "games of the user's hyperparameters (measured run)"
    else:
        moves, source = float(np.mean(data["random_moves"])), "random play under the user's rules"
    rows = [{"how": "the user's projection", "seconds_per_move": math.nan, "moves_per_episode": math.nan,
             "moves_from": "their games, their machine", "days": USER_PROJECTION_DAYS}]
    ways = ([("per-transition loop, Keras (the user's code)", per_step["legacy_keras"])]
            if "legacy_keras" in per_step else [])
    ways += [("per-transition loop, PyTorch", per_step["legacy_torch"]),
             ("batched update only", per_step["batched"]),
             ("user's hyperparameters, batched (serial run)",
              1.0 / seed_run.env_steps_per_s if seed_run.env_steps else math.nan)]
    for how, spm in ways:
        rows.append({"how": how, "seconds_per_move": spm, "moves_per_episode": moves, "moves_from": source,
                     "days": project_days(spm, moves)})
    if fast_run.env_steps:
        own = len(fast_run.episodes) > 0
        fast_moves = float(fast_run.episodes["moves"].mean()) if own else float(np.mean(data["random_moves"]))
        spm = 1.0 / fast_run.env_steps_per_s
        rows.append({"how": "dqnlab serial (batched, 32 boards at once, masked moves)", "seconds_per_move": spm,
                     "moves_per_episode": fast_moves,
                     "moves_from": "its own games" if own else "random play under the user's rules",
                     "days": project_days(spm, fast_moves)})
    return pd.DataFrame(rows)


def serial_figure(data: dict[str, Any]):
    """01: seconds per move of each update, projected days for 10,000 episodes, time split."""
    fig, axes = _new_figure(1, 3, figsize=(16, 4.2), width_ratios=[1, 1.4, 1])
    from ..plots import plot_bars, plot_time_split

    names = {"legacy_keras": "loop, Keras", "legacy_torch": "loop, PyTorch", "batched": "batched"}
    rows = data["bench"]["rows"]
    plot_bars([r["seconds_per_env_step"] * 1e3 for r in rows], [names.get(r["method"], r["method"]) for r in rows],
              axes[0], "ms per env step (one replay step of 64)", "one replay step", log=True, fmt=_sig)
    proj = data["projection"]
    short = ["user's projection"] + [_short_how(h) for h in proj["how"][1:]]
    plot_bars(proj["days"], short, axes[1], "days", f"{USER_EPISODES:,} episodes would take", log=True,
              fmt=_sig, reference=USER_PROJECTION_DAYS, reference_label="the user's 550 days")
    axes[1].tick_params(axis="x", labelrotation=25)
    plot_time_split([data["seed_run"], data["fast_run"]], axes[2],
                    labels=["user's hyper-\nparameters", "dqnlab\ndefaults"])
    axes[2].set_title("where a serial run's time goes")
    fig.suptitle("01 serial: why so slow")
    return fig


def _sig(v: float) -> str:
    """A number for a bar label: no decimals from 100 up, else two significant digits."""
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.2g}"


def _short_how(how: str) -> str:
    return {"per-transition loop, Keras (the user's code)": "loop, Keras",
            "per-transition loop, PyTorch": "loop, PyTorch",
            "batched update only": "batched update",
            "user's hyperparameters, batched (serial run)": "user's setup,\nbatched",
            "dqnlab serial (batched, 32 boards at once, masked moves)": "dqnlab\nserial"}.get(how, how)


# ------------------------------------------------------------------------ shared helpers
def warm_up(workers: int) -> float:
    """Start joblib's worker processes once, before the runs that need them.

    joblib keeps its process pool between calls, so only the first parallel run of a
    session pays for starting Python and importing PyTorch in ``workers`` new
    processes and importing dqnlab there (seconds on a small machine). Warming up first keeps that one-off cost
    out of every run's wall-clock budget, so that runs compare on their steady state.
    Returns the seconds it took.
    """
    import joblib

    t0 = time.perf_counter()
    if workers > 1:
        joblib.Parallel(n_jobs=workers, batch_size=1)(joblib.delayed(_import_dqnlab)() for _ in range(workers))
    return time.perf_counter() - t0


def _import_dqnlab() -> int:
    import torch

    import dqnlab.schemes  # noqa: F401 - what a worker imports to run a task
    from dqnlab.runtime.learner import Learner

    # First use of the network and the game in this process (allocator, kernels, tables).
    learner = Learner(TrainConfig(total_env_steps=64, n_envs=8, hidden=(8,), buffer_size=64, batch_size=8,
                                  learning_starts=8, replay_ratio=8.0))
    learner.run(64)
    return torch.get_num_threads()


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


def _trials(scheme: str, grid: Sequence[dict[str, Any]], config: TrainConfig, smoke: bool,
            label: Callable[[dict[str, Any]], str]) -> list[Trial]:
    """One :class:`Trial` per grid point: ``workers``, scheme options, and ``config``
    (a dict of :class:`TrainConfig` fields to replace)."""
    warm_up(max(g.get("workers", 1) for g in grid))
    trials = []
    for g in grid:
        options = {k: v for k, v in g.items() if k != "config"}
        cfg = config.replace(**g["config"]) if "config" in g else config
        trials.append(run_trial(scheme, cfg, label=label(g), greedy_games=budget(100, 16, smoke),
                                checkpoints=budget(6, 2, smoke), **options))
    return trials


# --------------------------------------------------------------------------- 02 independent
def independent_data(smoke: bool | None = None, workers: int = 2, seconds: float | None = None,
                     seed: int = 0) -> dict[str, Any]:
    """``independent`` with each sync schedule, and (outside smoke mode) three sync intervals.

    Returns
    -------
    dict
        ``schedules``: one :class:`Trial` per schedule (``none`` first); ``intervals``:
        ``periodic`` trials with ``sync_every`` of 50, 250 and 1,000 updates (empty in
        smoke mode); ``sync_every``; ``workers``; ``seconds``.
    """
    smoke = _smoke(smoke)
    seconds = budget(60.0, 2.0, smoke) if seconds is None else seconds
    config = explore_config(smoke, max_seconds=seconds, seed=seed)
    every = budget(250, 20, smoke)
    schedules = budget(("none", "periodic", "final", "weighted", "best"), ("none", "periodic"), smoke)
    grid = [{"workers": workers, "sync": s, "sync_every": every} for s in schedules]
    trials = _trials("independent", grid, config, smoke, lambda g: f"sync={g['sync']}")
    intervals = [] if smoke else _trials(
        "independent", [{"workers": workers, "sync": "periodic", "sync_every": n} for n in (50, 250, 1000)],
        config, smoke, lambda g: f"every {g['sync_every']} updates")
    return {"schedules": trials, "intervals": intervals, "sync_every": every, "workers": workers,
            "seconds": seconds}


def independent_figure(data: dict[str, Any]):
    """02: per-learner curves without and with sharing, divergence, greedy score per schedule."""
    from ..plots import plot_bars, plot_divergence, plot_reward

    trials = data["schedules"]
    fig, axes = _new_figure(2, 2, figsize=(14, 8))
    for ax, t in zip(axes[0], trials[:2]):
        plot_reward(t.run, ax, "wall_time_s", window=_window(t.run) // 2 or 1, per_worker=True)
        ax.set_title(f"each learner's training score, {t.label}")
    div = trials + list(data["intervals"])
    plot_divergence([t.run for t in div], [t.label for t in div], axes[1, 0])
    plot_bars([t.final_greedy for t in trials], [t.label for t in trials], axes[1, 1], "greedy score (mean)",
              "final greedy score (shared weights)")
    fig.suptitle(f"02 independent: {data['workers']} learners, {data['seconds']:g} s each, "
                 f"check-in every {data['sync_every']} updates")
    return fig


# ------------------------------------------------------------------------------- 03 shared
def shared_data(smoke: bool | None = None, workers: Sequence[int] | None = None, seconds: float | None = None,
                seed: int = 0) -> dict[str, Any]:
    """``shared`` with and without the lock as the worker count grows.

    Returns
    -------
    dict
        ``trials`` (one per workers x lock; one worker runs once, with the lock);
        ``workers``; ``seconds``.
    """
    smoke = _smoke(smoke)
    seconds = budget(60.0, 2.0, smoke) if seconds is None else seconds
    ks = list(workers) if workers is not None else budget([1, 2, 4], [1, 2], smoke)
    config = explore_config(smoke, max_seconds=seconds, seed=seed)
    grid = [{"workers": k, "lock": lock} for k in ks for lock in (True, False) if k > 1 or lock]
    trials = _trials("shared", grid, config, smoke,
                     lambda g: f"x{g['workers']} " + ("lock" if g["lock"] else "lock-free"))
    return {"trials": trials, "workers": ks, "seconds": seconds}


def _workers(k: int) -> str:
    return f"{k} worker" + ("s" if k != 1 else "")


def _worker_seconds(run: RunResult) -> float:
    return float(sum(run.time_split.values()))


def shared_figure(data: dict[str, Any]):
    """03: lock wait as workers grow; updates/s and env steps/s; greedy score."""
    fig, axes = _new_figure(1, 4, figsize=(18, 4.2))
    for lock, style in ((True, "o-"), (False, "s--")):
        ts = [t for t in data["trials"] if t.settings.get("lock", True) == lock or t.settings["workers"] == 1]
        ks = [t.settings["workers"] for t in ts]
        name = "lock" if lock else "lock-free (Hogwild)"
        wait = [100 * t.run.extra.get("lock_wait_s", 0.0) / max(_worker_seconds(t.run), 1e-9) for t in ts]
        axes[0].plot(ks, wait, style, label=name)
        axes[1].plot(ks, [t.run.updates_per_s for t in ts], style, label=name)
        axes[2].plot(ks, [t.run.env_steps_per_s for t in ts], style, label=name)
        axes[3].plot(ks, [t.final_greedy for t in ts], style, label=name)
    for ax, title, ylabel in zip(axes, ("waiting for the lock", "learning throughput", "acting throughput",
                                        "final greedy score"),
                                 ("lock wait, % of worker time", "updates / s", "env steps / s",
                                  "greedy score (mean)")):
        ax.set_xlabel("workers")
        ax.set_xticks(data["workers"])
        ax.set_ylim(bottom=0)
        ax.set_title(title)
        ax.set_ylabel(ylabel)
        ax.legend(fontsize="small")
    fig.suptitle(f"03 shared: one buffer and one model, {data['seconds']:g} s per run")
    return fig


# ------------------------------------------------------------------------------ 04 sharded
def sharded_data(smoke: bool | None = None, workers: Sequence[int] | None = None,
                 batch_sizes: Sequence[int] | None = None, seconds: float | None = None,
                 seed: int = 0) -> dict[str, Any]:
    """``sharded`` over batch sizes and worker counts (one minibatch split K ways).

    The replay ratio (samples per env step) is kept, so a larger batch means fewer,
    larger updates. Returns ``trials``, ``workers``, ``batch_sizes``, ``seconds``.
    """
    smoke = _smoke(smoke)
    seconds = budget(45.0, 2.0, smoke) if seconds is None else seconds
    ks = list(workers) if workers is not None else budget([1, 2, 4], [1, 2], smoke)
    bs = list(batch_sizes) if batch_sizes is not None else budget([64, 256, 1024], [64], smoke)
    config = explore_config(smoke, max_seconds=seconds, seed=seed)
    grid = [{"workers": k, "config": {"batch_size": b}} for b in bs for k in ks]
    trials = _trials("sharded", grid, config, smoke, lambda g: f"B={g['config']['batch_size']} x{g['workers']}")
    return {"trials": trials, "workers": ks, "batch_sizes": bs, "seconds": seconds}


def sharded_figure(data: dict[str, Any]):
    """04: compute vs communication per (batch, workers); round time and updates/s vs batch."""
    from ..plots import plot_time_split

    trials = data["trials"]
    fig, axes = _new_figure(1, 3, figsize=(17, 4.4), width_ratios=[1.6, 1, 1])
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


# ----------------------------------------------------------------------------- 05 averaged
def averaged_data(smoke: bool | None = None, workers: Sequence[int] | None = None, seconds: float | None = None,
                  seed: int = 0) -> dict[str, Any]:
    """``averaged`` with 1, 2, 4 workers (effective batch K x B), and ``serial`` for reference.

    Returns ``trials`` (serial first), ``workers``, ``seconds``.
    """
    smoke = _smoke(smoke)
    seconds = budget(60.0, 2.0, smoke) if seconds is None else seconds
    ks = list(workers) if workers is not None else budget([1, 2, 4], [2], smoke)
    config = explore_config(smoke, max_seconds=seconds, seed=seed)
    serial = run_trial("serial", config, label="serial", greedy_games=budget(100, 16, smoke),
                       checkpoints=budget(6, 2, smoke))
    trials = _trials("averaged", [{"workers": k} for k in ks], config, smoke,
                     lambda g: f"averaged x{g['workers']} (batch {g['workers'] * config.batch_size})")
    return {"trials": [serial, *trials], "workers": ks, "seconds": seconds}


def averaged_figure(data: dict[str, Any]):
    """05: updates/s vs effective batch; greedy score vs env steps (sample efficiency) and vs wall time."""
    from ..plots import plot_greedy

    trials = data["trials"]
    fig, axes = _new_figure(1, 3, figsize=(17, 4.4))
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


# ------------------------------------------------------------------------------- 06 actors
def actors_data(smoke: bool | None = None, workers: Sequence[int] | None = None, seconds: float | None = None,
                seed: int = 0) -> dict[str, Any]:
    """``actors`` as the actor count grows and with three replay-ratio floors, beside ``serial``.

    Returns
    -------
    dict
        ``workers_trials``: serial, then ``actors`` with each worker count (default
        floor); ``ratio_trials``: ``actors`` with the largest worker count and
        ``min_replay_ratio`` 0 (never throttle, Ape-X), the scheme's default floor and
        ``replay_ratio`` (held exactly) -- in smoke mode only 0 and the default;
        ``trials``: every run once; ``replay_ratio`` (the ceiling); ``workers``; ``seconds``.
    """
    smoke = _smoke(smoke)
    seconds = budget(60.0, 2.0, smoke) if seconds is None else seconds
    ks = list(workers) if workers is not None else budget([1, 2, 4], [2], smoke)
    config = explore_config(smoke, max_seconds=seconds, seed=seed)
    ratio = config.replay_ratio
    serial = run_trial("serial", config, label="serial", greedy_games=budget(100, 16, smoke),
                       checkpoints=budget(6, 2, smoke))
    by_k = _trials("actors", [{"workers": k} for k in ks], config, smoke, lambda g: f"actors x{g['workers']}")
    floors = budget([0.0, ratio], [0.0], smoke)  # the default floor ran above
    by_floor = _trials("actors", [{"workers": ks[-1], "min_replay_ratio": f} for f in floors], config, smoke,
                       lambda g: f"x{g['workers']} floor {g['min_replay_ratio']:g}")
    default = by_k[-1]
    default_floor = default.run.extra.get("min_replay_ratio", math.nan)
    default = Trial(f"x{ks[-1]} floor {default_floor:g}", default.run, default.greedy, default.settings)
    ratio_trials = sorted([default, *by_floor], key=lambda t: t.run.extra.get("min_replay_ratio", 0.0))
    return {"workers_trials": [serial, *by_k], "ratio_trials": ratio_trials, "trials": [serial, *by_k, *by_floor],
            "replay_ratio": ratio, "workers": ks, "seconds": seconds}


def actors_figure(data: dict[str, Any]):
    """06: throughput as actors grow; achieved replay ratio and parameter lag per floor; greedy score."""
    from ..plots import plot_greedy

    wt, rt = data["workers_trials"], data["ratio_trials"]
    fig, axes = _new_figure(1, 4, figsize=(20, 4.4))
    ax = axes[0]
    x = np.arange(len(wt))
    ax.bar(x - 0.2, [t.run.env_steps_per_s for t in wt], 0.4, color="C0", label="env steps/s (left)")
    ax2 = ax.twinx()
    ax2.bar(x + 0.2, [t.run.updates_per_s for t in wt], 0.4, color="C1", label="updates/s (right)")
    ax.set_xticks(x, [t.label for t in wt])
    ax.set_ylabel("env steps / s", color="C0")
    ax2.set_ylabel("updates / s", color="C1")
    ax.set_ylim(0, 1.25 * max([t.run.env_steps_per_s for t in wt] + [1.0]))  # room for the legend
    ax2.set_ylim(0, 1.25 * max([t.run.updates_per_s for t in wt] + [1.0]))
    ax.legend(handles=[*ax.patches[:1], *ax2.patches[:1]], labels=["env steps/s (left)", "updates/s (right)"],
              fontsize="small", loc="upper left", ncol=2)
    ax.set_title("throughput as actors grow")

    labels = [t.label for t in rt]
    ax = axes[1]
    achieved = [t.run.extra.get("achieved_replay_ratio", math.nan) for t in rt]
    floor = [t.run.extra.get("min_replay_ratio", math.nan) for t in rt]
    ax.bar(labels, achieved, color="C2", label="achieved")
    ax.plot(labels, floor, "kv", ms=8, label="floor (min_replay_ratio)")
    ax.axhline(data["replay_ratio"], color="k", ls="--", lw=1, label="ceiling (replay_ratio)")
    ax.set_ylabel("samples trained on per env step")
    ax.set_title("replay ratio")
    ax.legend(fontsize="small")

    ax = axes[2]
    lag = [t.run.extra.get("param_lag") or {} for t in rt]
    ax.bar(labels, [g.get("mean", math.nan) for g in lag], color="C4", label="mean")
    ax.plot(labels, [g.get("p95", math.nan) for g in lag], "k_", ms=20, mew=2, label="95th percentile")
    ax.set_ylabel("learner updates behind")
    ax.set_title("parameter lag of the actors' transitions")
    ax.legend(fontsize="small")

    trials = [wt[0], *rt]
    plot_greedy([t.greedy for t in trials], [t.label for t in trials], axes[3], "wall_time_s")
    axes[3].set_title("greedy score vs wall time")
    for a in axes[:3]:
        a.tick_params(axis="x", labelrotation=20)
    fig.suptitle(f"06 actors: parallel acting, one learner; {data['seconds']:g} s per run")
    return fig


# ----------------------------------------------------------------------- 07 compare schemes
#: The user's pros and cons (their words, from the request) and what to measure for each.
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
              "the user's ideas: one learner and one replay buffer, parallel acting)"},
    {"scheme": "actors", "kind": "goal", "metric": "lag",
     "claim": "Preserves the true DQN nature of single process training (the user's hope for the shared scheme)"},
)


def compare_data(smoke: bool | None = None, workers: int = 2, seconds: float | None = None,
                 schemes: Sequence[str] | None = None, seed: int = 0) -> dict[str, Any]:
    """Every available scheme on the same wall-clock budget.

    Parameters
    ----------
    workers : int
        Workers of every parallel scheme (``serial`` always runs one).
    seconds : float, optional
        Budget of each run (default 120 s; 2 s in smoke mode).
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

    smoke = _smoke(smoke)
    seconds = budget(120.0, 2.0, smoke) if seconds is None else seconds
    names = list(schemes) if schemes is not None else sorted(SCHEMES, key=lambda s: (s != "serial", s))
    config = explore_config(smoke, max_seconds=seconds, seed=seed)
    warm_up(workers)
    trials, skipped = [], {}
    for name in names:
        k = 1 if name == "serial" else workers
        try:
            trials.append(run_trial(name, config, workers=k, greedy_games=budget(100, 16, smoke),
                                    checkpoints=budget(6, 2, smoke)))
        except ValueError as e:  # a scheme that cannot run with these settings: say so, go on
            skipped[name] = str(e)
    return {"trials": trials, "skipped": skipped, "workers": workers, "seconds": seconds,
            "cores": os.cpu_count()}


def compare_figure(data: dict[str, Any]):
    """07: speed, time split and greedy score of every scheme on the same budget."""
    from ..plots import plot_bars, plot_greedy, plot_scores, plot_time_split

    trials = data["trials"]
    labels = [t.label for t in trials]
    runs = [t.run for t in trials]
    fig, axes = _new_figure(2, 3, figsize=(17, 8))
    plot_bars([r.env_steps_per_s for r in runs], labels, axes[0, 0], "env steps / s", "acting throughput")
    plot_bars([r.updates_per_s for r in runs], labels, axes[0, 1], "updates / s", "learning throughput",
              fmt="{:,.1f}")
    plot_time_split(runs, axes[0, 2], labels)
    plot_greedy([t.greedy for t in trials], labels, axes[1, 0], "wall_time_s")
    axes[1, 0].set_title("greedy score vs wall time")
    plot_greedy([t.greedy for t in trials], labels, axes[1, 1], "env_steps")
    axes[1, 1].set_title("greedy score vs env steps")
    plot_scores(runs, labels, axes[1, 2], "wall_time_s", window=max(1, min(_window(r) for r in runs)))
    axes[1, 2].set_title("training score vs wall time")
    fig.suptitle(f"07 every scheme, {data['seconds']:g} s each, {data['workers']} workers "
                 f"({data['cores']} CPU cores)")
    return fig


def _fraction(run: RunResult, key: str) -> float:
    total = sum(run.time_split.values())
    return run.time_split.get(key, 0.0) / total if total > 0 else math.nan


def claims_table(data: dict[str, Any]) -> pd.DataFrame:
    """Each of the user's pros and cons beside what the comparison measured.

    One row per claim of :data:`USER_CLAIMS` whose scheme ran: ``scheme``, ``kind``
    (pro / con), ``claim`` (the user's words) and ``measured`` (a sentence built from
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
        if "round_ms_mean" in run.extra:
            extra = f"; one update round takes {run.extra['round_ms_mean']:.1f} ms"
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


# ----------------------------------------------------------------------------- 08 learning
def learning_config(network: str = "ntuple", afterstate: bool | None = None, augment_symmetry: bool | None = None,
                    smoke: bool | None = None, **overrides: Any) -> TrainConfig:
    """The configuration notebook 08 and its panel train: the family's preset
    (:func:`dqnlab.config.family_preset`) with ``afterstate`` and ``augment_symmetry`` as given (None: the
    preset's; symmetry augmentation is built into ``ntuple``, so it is off there).

    In smoke mode: the small 17x4-tuple set, small networks and buffers, learning from
    the first few hundred env steps, and a 2 s budget. ``overrides`` replace any field.

    Raises
    ------
    ValueError
        For an unknown network or a combination :class:`~dqnlab.TrainConfig` rejects.
    """
    base = TrainConfig.preset(family_preset(network, afterstate))
    fields: dict[str, Any] = {"total_env_steps": None, "max_seconds": 60.0}
    if afterstate is not None:
        fields["afterstate"] = afterstate
    if augment_symmetry is not None:
        fields["augment_symmetry"] = augment_symmetry and network != "ntuple"
    if network == "ntuple" and afterstate is False:  # Q-values from lookup tables: one table row per action
        fields["lr"] = base.lr / 4
    if _smoke(smoke):
        fields.update(ntuples="17x4", hidden=(32,), channels=8, buffer_size=4_000, batch_size=64,
                      learning_starts=256, n_envs=16, epsilon_decay_steps=2_000, max_seconds=2.0)
        if network == "ntuple":
            fields["lr"] = 0.01
    return base.replace(**{**fields, **overrides})


def learning_data(smoke: bool | None = None, minutes: float | None = None, games: int | None = None,
                  seed: int = 0) -> dict[str, Any]:
    """Learning curves of the network families (serial: ``ntuple``, ``cnn``, ``mlp`` with
    and without afterstates) and of ``ntuple`` on the ``shared`` scheme with 2 workers
    (lock-free, as Jaskowski 2018 trains n-tuple networks).

    A small :func:`dqnlab.bench.learning.bench_learning`: each run stops at several points
    of its budget (``minutes``, default 3; 0.05 in smoke mode, with the smoke settings of
    :func:`learning_config`, and without ``cnn`` and the plain ``mlp``) and plays ``games``
    greedy games there (default 1,000; 32).
    Returns its result dict (``rows``, ``time_to_player``, ``machine``, ...).
    """
    from ..bench.core import machine_info
    from ..bench.learning import POINTS, learning_curve, time_to_player

    smoke = _smoke(smoke)
    minutes = budget(3.0, 0.05, smoke) if minutes is None else minutes
    games = budget(1_000, 32, smoke) if games is None else games
    points = POINTS if not smoke else (0.5, 1.0)
    machine = machine_info()
    runs = [("ntuple", True, "serial", 1, {}), ("cnn", True, "serial", 1, {}), ("mlp", True, "serial", 1, {}),
            ("mlp", False, "serial", 1, {}), ("ntuple", True, "shared", 2, {"lock": False})]
    if smoke:  # seconds each: enough to see that every kind of run works
        runs = [r for r in runs if r[0] == "ntuple" or r[:2] == ("mlp", True)]
    rows: list[dict[str, Any]] = []
    for network, afterstate, scheme, workers, options in runs:
        cfg = learning_config(network, afterstate, smoke=smoke)
        overrides = {k: v for k, v in cfg.to_dict().items() if k not in ("seed", "max_seconds", "total_env_steps")}
        rows += learning_curve(family_preset(network, afterstate), scheme, workers, minutes, points, games,
                               seed=seed, options=options, overrides=overrides)
    return {"machine": machine, "minutes": minutes, "games": games, "rows": rows,
            "time_to_player": time_to_player(rows)}


def learning_figure(data: dict[str, Any]):
    """08: greedy mean score and the share of games reaching 1024, 2048 and 4096 against
    minutes of training, one line per network family (and ``ntuple`` on 2 workers)."""
    from ..bench.learning import learning_figure as draw

    _, axes = _new_figure(1, 4, figsize=(15, 3.8))
    return draw(data, axes)


# ------------------------------------------------------------------------------- reproduce
@dataclass(frozen=True)
class Notebook:
    """A notebook's final figure: how to gather its data and draw it."""

    name: str
    data: Callable[..., Any]
    figure: Callable[[Any], Any]
    schemes: tuple[str, ...] = ()
    """Schemes it needs (it is skipped while one is missing from :data:`dqnlab.SCHEMES`)."""


#: Notebook name -> its final figure, in the order of the series.
NOTEBOOKS: dict[str, Notebook] = {nb.name: nb for nb in (
    Notebook("00_the_game", game_data, game_figure),
    Notebook("01_serial_why_so_slow", serial_data, serial_figure, ("serial",)),
    Notebook("02_independent", independent_data, independent_figure, ("independent",)),
    Notebook("03_shared", shared_data, shared_figure, ("shared",)),
    Notebook("04_sharded", sharded_data, sharded_figure, ("sharded",)),
    Notebook("05_averaged", averaged_data, averaged_figure, ("serial", "averaged")),
    Notebook("06_actors", actors_data, actors_figure, ("serial", "actors")),
    Notebook("07_compare_schemes", compare_data, compare_figure, ("serial",)),
    Notebook("08_learning", learning_data, learning_figure, ("serial", "shared")),
)}


def reproduce(out: str | os.PathLike = "figures", smoke: bool | None = None, names: Sequence[str] | None = None,
              log: Callable[[str], Any] = print, dpi: int = 100) -> dict[str, Path | None]:
    """Regenerate the final figure of each notebook into ``out/<notebook>.png``.

    Parameters
    ----------
    out : path
        Directory to write to (created if missing).
    smoke : bool, optional
        Tiny budgets (default: :func:`smoke_mode`).
    names : list of str, optional
        Notebooks to do (default: all of :data:`NOTEBOOKS`).
    log : callable
        Receives one line per figure.

    Returns
    -------
    dict
        Notebook name -> PNG path, or None where it was skipped (a scheme it needs is
        not available).

    Raises
    ------
    ValueError
        For an unknown notebook name.
    """
    import matplotlib.pyplot as plt

    from ..schemes import SCHEMES

    smoke = _smoke(smoke)
    names = list(NOTEBOOKS) if names is None else list(names)
    unknown = sorted(set(names) - set(NOTEBOOKS))
    if unknown:
        raise ValueError(f"unknown notebook(s) {unknown}; choose from {list(NOTEBOOKS)}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    setup(smoke)
    written: dict[str, Path | None] = {}
    for name in names:
        nb = NOTEBOOKS[name]
        missing = [s for s in nb.schemes if s not in SCHEMES]
        if missing:
            log(f"{name}: skipped, needs scheme(s) {missing} not in this dqnlab")
            written[name] = None
            continue
        t0 = time.perf_counter()
        fig = nb.figure(nb.data(smoke=smoke))
        path = out / f"{name}.png"
        fig.savefig(path, dpi=dpi)
        plt.close(fig)
        written[name] = path
        log(f"{name}: {path} ({time.perf_counter() - t0:.1f} s)")
    return written
