"""Notebook 01, serial, why so slow: the legacy per-transition loop against the batched update,
and what that makes of the original request's projection of 550 days for 10,000 episodes."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from ..bench.update import bench_update
from ..config import TrainConfig
from .budgets import chosen, explore_config
from .trials import RunsProgress, new_figure

__all__ = ["USER_PROJECTION_DAYS", "USER_EPISODES", "user_play_moves", "project_days", "serial_data",
           "serial_figure"]


#: The original request's projection for the user's original trainer (the ``seed`` preset), quoted as the
#: figure the notebook tests: 10,000 episodes would take 550 days.
USER_PROJECTION_DAYS = 550.0
USER_EPISODES = 10_000


def user_play_moves(games: int = 200, seed: int = 0, max_moves: int = 1_000) -> np.ndarray:
    """Moves per game of the original trainer's setup under uniform random play of all four moves.

    The original trainer (the ``seed`` preset) picked among all four moves (a move that changes nothing was
    rewarded -25 and the game went on) and capped games at 1,000 moves; an agent that
    explores does about this. Returns the ``(games,)`` moves of each game.
    """
    from ..game import VecGame2048

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


def serial_data(seconds: float | None = None, seed: int = 0) -> dict[str, Any]:
    """The legacy per-transition loop vs the batched update, and two serial runs.

    ``seconds`` is the budget of each serial run (default 60 s; 0.5 s in smoke mode).

    Returns
    -------
    dict
        ``bench``: :func:`dqnlab.bench.update.bench_update` (Keras only outside smoke mode);
        ``random_moves``: moves per game of random play under the original trainer's rules (500 games;
        64 in smoke mode);
        ``seed_run``: a serial run of the ``seed`` preset (the original trainer's hyperparameters,
        batched update); ``fast_run``: a serial run of :func:`explore_config`;
        ``projection``: a DataFrame of projected days for 10,000 episodes.
    """
    from ..schemes import train

    b = chosen()
    bench = bench_update(repeats=b.pick(5, 1), min_time=b.pick(0.5, 0.05), seed=seed, keras=not b.smoke)
    random_moves = user_play_moves(games=b.pick(500, 64), seed=seed)
    seconds = b.run_s if seconds is None else seconds
    seed_cfg = TrainConfig.preset("seed", total_env_steps=None, max_seconds=seconds, seed=seed)
    with RunsProgress(2 * seconds, "2 serial runs") as bar:
        seed_run = train("serial", seed_cfg, progress=False, callback=bar.run("the seed preset", seconds))
        fast_run = train("serial", explore_config(b, max_seconds=seconds, seed=seed), progress=False,
                         callback=bar.run("dqnlab's explore_config", seconds))
    data = {"bench": bench, "random_moves": random_moves, "seed_run": seed_run, "fast_run": fast_run}
    data["projection"] = _projection(data)
    return data


def _projection(data: dict[str, Any]) -> pd.DataFrame:
    """Projected days for 10,000 games, one row per way of training.

    Moves per game: the games played by the run with the original trainer's hyperparameters
    (the ``seed`` preset), or random play under its rules if that run finished no
    game; dqnlab's own serial run uses its own games.
    """
    per_step = {r["method"]: r["seconds_per_env_step"] for r in data["bench"]["rows"]}
    seed_run, fast_run = data["seed_run"], data["fast_run"]
    played = seed_run.episodes["moves"]
    if len(played):
        moves, source = float(played.mean()), "games of the seed preset (measured run)"
    else:
        moves, source = float(np.mean(data["random_moves"])), "random play under the seed preset's rules"
    rows = [{"how": "the original request's projection", "seconds_per_move": math.nan, "moves_per_episode": math.nan,
             "moves_from": "the request's games and machine", "days": USER_PROJECTION_DAYS}]
    ways = ([("per-transition loop, Keras (the original code)", per_step["legacy_keras"])]
            if "legacy_keras" in per_step else [])
    ways += [("per-transition loop, PyTorch", per_step["legacy_torch"]),
             ("batched update only", per_step["batched"]),
             ("seed preset's hyperparameters, batched (serial run)",
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
                     "moves_from": "its own games" if own else "random play under the seed preset's rules",
                     "days": project_days(spm, fast_moves)})
    return pd.DataFrame(rows)


def serial_figure(data: dict[str, Any]):
    """01: seconds per move of each update, projected days for 10,000 episodes, time split."""
    fig, axes = new_figure(1, 3, figsize=(10, 3.8), width_ratios=[1, 1.9, 0.85])
    from ..plots import plot_bars, plot_time_split

    names = {"legacy_keras": "loop,\nKeras", "legacy_torch": "loop,\nPyTorch", "batched": "batched"}
    rows = data["bench"]["rows"]
    plot_bars([r["seconds_per_env_step"] * 1e3 for r in rows], [names.get(r["method"], r["method"]) for r in rows],
              axes[0], "ms per env step (replay step of 64)", "one replay step", log=True, fmt=_sig)
    proj = data["projection"]
    short = ["request's\nprojection"] + [_short_how(h) for h in proj["how"][1:]]
    plot_bars(proj["days"], short, axes[1], "days", f"{USER_EPISODES:,} episodes would take", log=True,
              fmt=_sig, reference=USER_PROJECTION_DAYS, reference_label="the request's 550 days")
    for ax in axes[:2]:  # names in two short lines, side by side; room above the tallest bar for its number
        ax.tick_params(axis="x", labelrotation=0, labelsize="small")
        bottom, top = ax.get_ylim()
        ax.set_ylim(bottom, top * (top / bottom) ** 0.15)
    plot_time_split([data["seed_run"], data["fast_run"]], axes[2],
                    labels=["seed\npreset", "dqnlab\nmlp preset"])
    axes[2].set_title("where a serial run's time goes")
    fig.suptitle("01 serial: why so slow")
    return fig


def _sig(v: float) -> str:
    """A number for a bar label: no decimals from 100 up, else two significant digits."""
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.2g}"


def _short_how(how: str) -> str:
    return {"per-transition loop, Keras (the original code)": "loop,\nKeras",
            "per-transition loop, PyTorch": "loop,\nPyTorch",
            "batched update only": "batched\nupdate",
            "seed preset's hyperparameters, batched (serial run)": "seed,\nbatched",
            "dqnlab serial (batched, 32 boards at once, masked moves)": "dqnlab\nserial"}.get(how, how)
