"""RunResult: what a training run leaves behind, the same for every scheme."""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from ..config import TrainConfig
from .compact import dense_tensor, saved_tensor
from .files import atomic_write, read_file

__all__ = ["RunResult", "EPISODE_COLUMNS", "TIME_SPLIT_KEYS", "FORMAT_VERSION", "MODEL_FILE", "episodes_frame"]

#: Columns of :attr:`RunResult.episodes`, one row per finished game.
EPISODE_COLUMNS = ("worker", "episode", "env_steps", "wall_time_s", "score", "max_tile",
                   "moves", "epsilon", "loss")
#: Keys of :attr:`RunResult.time_split` (seconds).
TIME_SPLIT_KEYS = ("acting", "learning", "communication")
#: Version of the on-disk run format written by :meth:`RunResult.save`.
FORMAT_VERSION = 1
#: The run's weights, a PyTorch ``state_dict`` of its network, in a run directory (see :meth:`RunResult.save`).
MODEL_FILE = "model.pt"


def episodes_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """Episode rows as a DataFrame with :data:`EPISODE_COLUMNS`, sorted by wall time.

    The columns have their dtypes (int64, or float64 for ``wall_time_s``, ``epsilon``,
    ``loss``) even with no rows, so tables of runs compare and concatenate alike.
    """
    floats = {"wall_time_s", "epsilon", "loss"}
    df = pd.DataFrame(rows, columns=list(EPISODE_COLUMNS)).astype(
        {c: "float64" if c in floats else "int64" for c in EPISODE_COLUMNS})
    return df.sort_values(["wall_time_s", "worker"], kind="stable").reset_index(drop=True)


@dataclass
class RunResult:
    """The outcome of :func:`dqnlab.train`: episodes, speed, time split and weights.

    Attributes
    ----------
    scheme : str
        Scheme name (``"serial"``, ``"independent"``, ...).
    config : TrainConfig
    workers : int
        Worker processes used.
    episodes : pandas.DataFrame
        One row per finished game, columns :data:`EPISODE_COLUMNS`: ``worker`` (index),
        ``episode`` (per worker, from 0), ``env_steps`` (that worker's env steps when the
        game ended), ``wall_time_s`` (seconds since the run started), ``score`` (points),
        ``max_tile`` (tile value), ``moves`` (env steps of the game), ``epsilon``,
        ``loss`` (last TD loss of that worker, NaN before learning starts).
    env_steps, updates : int
        Totals over all workers.
    wall_time_s : float
        Seconds from start to end of training.
    time_split : dict of str to float
        Seconds spent ``acting``, ``learning`` and in ``communication`` (sending and
        receiving weights or data, waiting on locks or the slowest worker), summed
        over workers (so it can exceed ``wall_time_s`` when workers run in parallel).
    weights : dict of str to numpy.ndarray
        Final online-network parameters (float32), loadable with
        :meth:`dqnlab.DQNAgent.set_weights`.
    history : pandas.DataFrame
        Progress samples about once a second: ``wall_time_s``, ``env_steps``, ``updates``
        (the data of the speed plot) and the DQN diagnostics
        (:data:`dqnlab.runtime.loop.DIAGNOSTICS`): ``loss`` (TD loss of the last update),
        ``q_max_mean`` (mean over its minibatch of max_a Q(s, a); with afterstates, of the
        trained V), ``epsilon``, ``replay_ratio`` (minibatch samples trained so far per env
        step so far) and ``grad_norm`` (L2 norm of the last gradient before clipping); the
        loss, max-Q and norm are NaN before learning starts. With several learners or
        actors, also each worker's, as ``worker{k}_loss`` and so on (``actors``:
        ``worker{k}_epsilon``).
    status : str
        ``"completed"`` (budget reached), ``"stopped"`` (callback / Stop button),
        ``"interrupted"`` (Ctrl-C / KeyboardInterrupt) or ``"failed"`` (the partial
        result of a worker fault or a divergence, on :class:`dqnlab.schemes.WorkerError`
        / :class:`dqnlab.schemes.DivergedError`). The files a run directory gets while
        the run goes on (periodic checkpoints) say ``"running"``.
    options : dict
        The scheme's keyword arguments (workers, sync schedule, ...).
    extra : dict
        Scheme-specific measurements (per-worker time split, divergence, lag, ...);
        with a run directory, ``extra["checkpoint"]`` says what was written there.
    """

    scheme: str
    config: TrainConfig
    workers: int
    episodes: pd.DataFrame
    env_steps: int
    updates: int
    wall_time_s: float
    time_split: dict[str, float]
    weights: dict[str, np.ndarray]
    history: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(
        columns=["wall_time_s", "env_steps", "updates"]))
    status: str = "completed"
    options: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def env_steps_per_s(self) -> float:
        """Throughput in env steps per second of wall time."""
        return self.env_steps / self.wall_time_s if self.wall_time_s > 0 else math.nan

    @property
    def updates_per_s(self) -> float:
        """Updates per second of wall time."""
        return self.updates / self.wall_time_s if self.wall_time_s > 0 else math.nan

    def start_up_s(self) -> float | None:
        """Seconds of wall time from the run's start to its first report that counted an env step: an upper
        bound of its start-up (worker processes, the all-reduce group, shared memory, compiling). None if no
        env step was made (or the history holds none)."""
        h = self.history
        if not len(h) or "env_steps" not in h:
            return None
        stepped = h["wall_time_s"][h["env_steps"] > 0]
        return float(stepped.iloc[0]) if len(stepped) else None

    def summary(self) -> dict[str, Any]:
        """JSON-ready figures of the run (what ``summary.json`` holds).

        Keys: scheme, workers, status, env_steps, updates, episodes, wall_time_s,
        env_steps_per_s, updates_per_s, time_split (seconds), time_fraction (of the
        split's total), score_mean / score_median / score_max (all episodes),
        score_mean_last100, max_tile_max, options, extra, config, format_version.
        """
        scores = self.episodes["score"]
        total = sum(self.time_split.values())

        def num(x: float) -> float | None:
            return None if x is None or not math.isfinite(x) else float(x)

        return {
            "format_version": FORMAT_VERSION, "scheme": self.scheme, "workers": self.workers,
            "status": self.status, "env_steps": int(self.env_steps), "updates": int(self.updates),
            "episodes": len(self.episodes), "wall_time_s": num(self.wall_time_s),
            "env_steps_per_s": num(self.env_steps_per_s), "updates_per_s": num(self.updates_per_s),
            "time_split": {k: float(v) for k, v in self.time_split.items()},
            "time_fraction": {k: (float(v) / total if total > 0 else None) for k, v in self.time_split.items()},
            "score_mean": num(scores.mean()) if len(scores) else None,
            "score_median": num(scores.median()) if len(scores) else None,
            "score_max": int(scores.max()) if len(scores) else None,
            "score_mean_last100": num(scores.tail(100).mean()) if len(scores) else None,
            "max_tile_max": int(self.episodes["max_tile"].max()) if len(scores) else None,
            "options": self.options, "extra": _jsonable(self.extra), "config": self.config.to_dict(),
        }

    def plot(self, window: int = 50, greedy=None):
        """The run's figure (:func:`dqnlab.plots.plot_run`: its games, speed and learning), with ``greedy``, an
        :class:`~dqnlab.EvalResult` of the trained player's games, marked; a matplotlib Figure."""
        from ..plots import plot_run

        return plot_run(self, window=window, greedy=greedy)

    # ----------------------------------------------------------------- on disk
    def save(self, directory: str | os.PathLike) -> Path:
        """Write ``summary.json``, ``episodes.csv``, ``history.csv`` and ``model.pt``.

        ``model.pt`` is the run's one copy of its weights: a PyTorch ``state_dict`` of the network,
        which loads with ``weights_only=True``, also in code outside dqnlab::

            net = dqnlab.agent.networks.make_network(run.config, 1 if run.config.afterstate else 4)
            net.load_state_dict(torch.load("runs/x/model.pt", weights_only=True))

        A large table that is mostly zeros (a young n-tuple network's) is stored as a sparse COO tensor of
        its non-zero rows (:func:`~dqnlab.runtime.compact.saved_tensor`; ``t.to_dense()`` gives it back,
        and dqnlab's networks take it as it is). ``dqnlab.load_player("runs/x")`` gives a player in one
        line.

        Each file is written to a temporary name and renamed, so a crash never leaves
        a half-written file. Returns the directory.
        """
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        atomic_write(d / "summary.json", lambda f: f.write(json.dumps(self.summary(), indent=2).encode()))
        atomic_write(d / "episodes.csv", lambda f: self.episodes.to_csv(f, index=False))
        atomic_write(d / "history.csv", lambda f: self.history.to_csv(f, index=False))
        state_dict = {k: saved_tensor(v) for k, v in self.weights.items()}
        atomic_write(d / MODEL_FILE, lambda f: torch.save(state_dict, f))
        return d

    @classmethod
    def load(cls, directory: str | os.PathLike) -> RunResult:
        """Read a run written by :meth:`save`.

        Raises
        ------
        ValueError
            If ``directory`` holds no run, one of another format version, or a file of it cannot be read
            (cut short, say: :func:`~dqnlab.runtime.files.read_file`; one line naming it).
        """
        d = Path(directory)
        weights_file = d / MODEL_FILE
        if not (d / "summary.json").is_file() or not weights_file.is_file():
            raise ValueError(f"{str(d)!r} is not a dqnlab run directory (no summary.json / {MODEL_FILE})")
        s = read_file(d / "summary.json", "run summary")
        if not isinstance(s, dict) or s.get("format_version") != FORMAT_VERSION:
            version = s.get("format_version") if isinstance(s, dict) else None
            raise ValueError(f"run {str(d)!r} has format_version {version!r}; "
                             f"this dqnlab reads version {FORMAT_VERSION}")
        weights = read_file(weights_file, "file of the run's weights")
        if not isinstance(weights, dict):
            raise ValueError(f"{str(weights_file)!r} is not a file of the run's weights (not a state_dict)")
        return cls(
            scheme=s["scheme"], config=TrainConfig.from_dict(s["config"]), workers=s["workers"],
            episodes=read_file(d / "episodes.csv", "table of the run's games"), env_steps=s["env_steps"],
            updates=s["updates"], wall_time_s=s["wall_time_s"] or 0.0, time_split=s["time_split"],
            weights={k: dense_tensor(t).numpy() for k, t in weights.items()},
            history=read_file(d / "history.csv", "run history"), status=s["status"], options=s["options"],
            extra=s["extra"],
        )


def _jsonable(x: Any) -> Any:
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return _jsonable(x.tolist())
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        return float(x) if math.isfinite(x) else None
    return x
