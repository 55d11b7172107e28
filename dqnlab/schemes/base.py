"""Machinery every scheme shares: one process's learner, the budget loop, the result.

A :class:`Learner` is the serial DQN algorithm made fast: ``n_envs`` boards stepped
at once with one batched forward pass, transitions appended to a preallocated replay
buffer, and batched updates owed at a fixed replay ratio. Schemes combine learners
(or their pieces) across processes; :class:`RunLoop` enforces the budget, draws the
progress bar, calls the user's callback and turns Ctrl-C or a Stop into a clean end.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from ..agent import DQNAgent, epsilon_at, transform_rewards
from ..config import TrainConfig
from ..env import VecGame2048, legal_actions_batch
from ..replay import ReplayBuffer
from ..results import EPISODE_COLUMNS, RunResult

__all__ = ["Learner", "RunLoop", "worker_seeds"]


def worker_seeds(seed: int, worker: int) -> tuple[int, int, int]:
    """Independent seeds (env, replay, agent) for ``worker`` derived from ``(seed, worker)``."""
    ss = np.random.SeedSequence([seed, worker])
    return tuple(int(s.generate_state(1)[0]) for s in ss.spawn(3))  # type: ignore[return-value]


class Learner:
    """One DQN learner: its own ``n_envs`` boards, replay buffer and agent.

    Parameters
    ----------
    config : TrainConfig
    worker : int
        Index of this learner; seeds derive from ``(config.seed, worker)`` and it is
        written in the ``worker`` column of the episodes.
    clock0 : float, optional
        ``time.perf_counter()`` value that episode wall times count from.

    Attributes
    ----------
    env_steps : int
        Env steps taken (``n_envs`` per :meth:`act_step`).
    episodes : list of dict
        One row per finished game (see :data:`dqnlab.results.EPISODE_COLUMNS`).
    timing : dict
        Seconds spent ``acting`` (network forward, env step, replay append) and
        ``learning`` (sampling and updates).
    """

    def __init__(self, config: TrainConfig, worker: int = 0, clock0: float | None = None):
        self.config = config
        self.worker = worker
        env_seed, replay_seed, agent_seed = worker_seeds(config.seed, worker)
        self.env = VecGame2048(config.n_envs, seed=env_seed, max_moves=config.max_moves,
                               invalid_move_reward=config.invalid_move_reward)
        self.buffer = ReplayBuffer(config.buffer_size, seed=replay_seed)
        self.agent = DQNAgent(config, seed=agent_seed)
        self.boards = self.env.reset()
        self.masks = legal_actions_batch(self.boards)
        self.env_steps = 0
        self.episodes: list[dict[str, Any]] = []
        self.timing = {"acting": 0.0, "learning": 0.0}
        self.last_loss = math.nan
        self._credit = 0.0
        self.clock0 = time.perf_counter() if clock0 is None else clock0

    @property
    def epsilon(self) -> float:
        """Current exploration rate (see :func:`dqnlab.agent.epsilon_at`)."""
        return epsilon_at(self.config, self.env_steps, self.agent.updates)

    @property
    def updates(self) -> int:
        return self.agent.updates

    def act_step(self) -> int:
        """Act on every board once, store the transitions, log finished games.

        Returns the number of env steps taken (``n_envs``).
        """
        t0 = time.perf_counter()
        actions = self.agent.act(self.boards, self.masks, self.epsilon)
        out = self.env.step(actions)
        next_masks = legal_actions_batch(out.next_boards)
        self.buffer.add_batch(self.boards, actions, transform_rewards(self.config, out.rewards),
                              out.next_boards, out.terminated, next_masks)
        self.boards, self.masks = out.boards, out.action_masks
        n = len(actions)
        self.env_steps += n
        finished = np.flatnonzero(out.terminated | out.truncated)
        if len(finished):
            self._log_episodes(out, finished)
            if self.config.target_update == 0:
                self.agent.sync_target()
        if self.learning_ready():
            self._credit += n * self.config.updates_per_env_step
        self.timing["acting"] += time.perf_counter() - t0
        return n

    def _log_episodes(self, out: Any, finished: np.ndarray) -> None:
        now = time.perf_counter() - self.clock0
        eps = self.epsilon
        for i in finished:
            self.episodes.append({
                "worker": self.worker, "episode": len(self.episodes), "env_steps": self.env_steps,
                "wall_time_s": now, "score": int(out.episode_scores[i]),
                "max_tile": int(out.episode_max_tiles[i]), "moves": int(out.episode_moves[i]),
                "epsilon": eps, "loss": self.last_loss,
            })

    def learning_ready(self) -> bool:
        """Whether updates are owed for new env steps: ``learning_starts`` env steps taken
        and a full minibatch in the buffer (schemes may redefine what counts)."""
        return self.env_steps >= self.config.learning_starts and len(self.buffer) >= self.config.batch_size

    def spend_updates(self, n: int) -> None:
        """Mark ``n`` owed updates as done by the caller (schemes that update the agent
        themselves, e.g. across worker processes, instead of calling :meth:`learn`)."""
        self._credit -= n

    def owed_updates(self) -> int:
        """Updates due at the replay ratio for the env steps taken so far."""
        return int(self._credit)

    def learn(self, max_updates: int | None = None) -> int:
        """Do the updates owed (at most ``max_updates``); returns how many were done."""
        n = self.owed_updates() if max_updates is None else min(max_updates, self.owed_updates())
        if n <= 0:
            return 0
        t0 = time.perf_counter()
        for _ in range(n):
            self.last_loss = self.agent.update(self.buffer.sample(self.config.batch_size))
        self._credit -= n
        self.timing["learning"] += time.perf_counter() - t0
        return n

    def run(self, env_steps: int, deadline: float | None = None) -> None:
        """Alternate acting and learning for ``env_steps`` env steps or until ``deadline``.

        ``deadline`` is a ``time.perf_counter()`` value.
        """
        target = self.env_steps + env_steps
        while self.env_steps < target and (deadline is None or time.perf_counter() < deadline):
            self.act_step()
            self.learn()


class RunLoop:
    """Budget, progress bar, history, callback and interruption for one run.

    A scheme calls :meth:`chunk_steps` to know how many env steps to do next, does
    them, then :meth:`report` with the totals; it stops when :attr:`done` is true.

    Parameters
    ----------
    config : TrainConfig
        ``total_env_steps`` and ``max_seconds`` are the budget.
    progress : bool
        Show a tqdm progress bar (env steps/s and the recent mean score).
    callback : callable, optional
        Called as ``callback(snapshot)`` after each report with a :class:`RunResult`
        of what is gathered so far; returning True stops the run cleanly.
    report_every_s : float
        Seconds between reports (and callback calls).
    """

    def __init__(self, config: TrainConfig, progress: bool = True,
                 callback: Callable[[RunResult], Any] | None = None, report_every_s: float = 1.0,
                 snapshot: Callable[[], RunResult] | None = None):
        self.config = config
        self.callback = callback
        self.snapshot = snapshot
        self.report_every_s = report_every_s
        self.t0 = time.perf_counter()
        self.deadline = None if config.max_seconds is None else self.t0 + config.max_seconds
        self.env_steps = 0
        self.updates = 0
        self.history: list[dict[str, float]] = [{"wall_time_s": 0.0, "env_steps": 0, "updates": 0}]
        self.status = "running"
        self._steps_per_s = 1000.0
        self.bar = tqdm(total=config.total_env_steps, unit="step", disable=not progress,
                        dynamic_ncols=True, leave=True)

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    @property
    def done(self) -> bool:
        if self.status != "running":
            return True
        if self.config.total_env_steps is not None and self.env_steps >= self.config.total_env_steps:
            self.status = "completed"
        if self.deadline is not None and time.perf_counter() >= self.deadline:
            self.status = "completed"
        return self.status != "running"

    def chunk_steps(self, granularity: int = 1) -> int:
        """Env steps to do before the next report: about ``report_every_s`` of work,
        never past the step budget, a multiple of ``granularity`` (at least one)."""
        n = int(self._steps_per_s * self.report_every_s)
        if self.config.total_env_steps is not None:
            n = min(n, self.config.total_env_steps - self.env_steps)
        return max(granularity, (n // granularity) * granularity)

    def report(self, env_steps: int, updates: int, score_mean: float = math.nan) -> None:
        """Record new totals, redraw the bar and call the callback (which may stop the run)."""
        elapsed = self.elapsed
        self.bar.update(env_steps - self.env_steps)
        self.env_steps, self.updates = env_steps, updates
        self._steps_per_s = max(1.0, env_steps / max(elapsed, 1e-9))
        self.history.append({"wall_time_s": elapsed, "env_steps": env_steps, "updates": updates})
        self.bar.set_postfix({"sps": f"{self._steps_per_s:,.0f}", "ups": f"{updates / max(elapsed, 1e-9):,.0f}",
                              "score": f"{score_mean:,.0f}"}, refresh=False)
        if self.callback is not None and self.snapshot is not None and self.callback(self.snapshot()):
            self.status = "stopped"

    def interrupt(self) -> None:
        """Mark the run as interrupted (Ctrl-C / KeyboardInterrupt); the scheme keeps its data."""
        self.status = "interrupted"

    def close(self) -> None:
        self.bar.close()
        if self.status == "running":
            self.status = "completed"


def episodes_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """Episode rows as a DataFrame with :data:`EPISODE_COLUMNS`, sorted by wall time."""
    df = pd.DataFrame(rows, columns=list(EPISODE_COLUMNS))
    return df.sort_values(["wall_time_s", "worker"], kind="stable").reset_index(drop=True)


def recent_score(rows: list[dict[str, Any]], n: int = 100) -> float:
    """Mean score of the last ``n`` episodes in ``rows`` (NaN if none)."""
    return float(np.mean([r["score"] for r in rows[-n:]])) if rows else math.nan
