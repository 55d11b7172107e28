"""One process's DQN learner: the serial algorithm made fast.

A :class:`Learner` steps ``n_envs`` boards at once with one batched forward pass,
appends the transitions to a preallocated replay buffer, and takes batched updates
owed at a fixed replay ratio. ``serial`` runs one; the parallel schemes combine
learners (or their pieces) across processes.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Mapping
from typing import Any, TextIO

import numpy as np

from ..agent.dqn import DQNAgent, epsilon_at, priority_beta_at, transform_rewards
from ..config import TrainConfig
from ..core.compile import notice
from ..game import VecGame2048, legal_actions_batch
from ..game.rules import legal_actions_unchecked
from ..replay import NStepReturns, make_buffer, update_priorities
from .loop import ctrl_c_pressed, replay_ratio
from .native import NativeLoop, native_reason
from .progress import Progress

__all__ = ["Learner", "worker_seeds", "next_board_masks", "replay_update", "warm_up", "SLICE_S"]

#: Seconds of one call of the compiled core in :meth:`Learner.run`: how soon a run sees Ctrl-C.
SLICE_S = 0.1


def next_board_masks(out: Any, done: np.ndarray) -> np.ndarray:
    """``(N, 4)`` bool legal moves of the next boards of a :meth:`VecGame2048.step` result ``out``.

    ``out.boards == out.next_boards`` except where a finished game (``done``, ``(N,)`` bool)
    was reset, so the env's masks of ``out.boards`` serve, and only the finished games'
    next boards are looked at.
    """
    masks = out.action_masks.copy()
    if done.any():
        masks[done] = legal_actions_unchecked(out.next_boards[done])
    return masks


def replay_update(agent: DQNAgent, buffer: Any, batch_size: int) -> float:
    """One DQN update of ``agent`` (:meth:`~dqnlab.DQNAgent.update`) on ``batch_size`` transitions sampled
    from ``buffer``; a prioritized buffer then gets the update's TD errors as the sample's priorities.
    Returns the TD loss before the step (raises FloatingPointError for a non-finite one, as ``update``)."""
    batch = buffer.sample(batch_size)
    loss = agent.update(batch)
    update_priorities(buffer, batch, agent.td_errors)
    return loss


def worker_seeds(seed: int, worker: int) -> tuple[int, int, int]:
    """Independent seeds (env, replay, agent) for ``worker`` derived from ``(seed, worker)``."""
    ss = np.random.SeedSequence([seed, worker])
    return tuple(int(s.generate_state(1)[0]) for s in ss.spawn(3))  # type: ignore[return-value]


_warmed = False


def warmed() -> bool:
    """Whether :func:`warm_up` has run in this process."""
    return _warmed


def warm_up(stream: TextIO | None = None) -> None:
    """Compile the native loop's kernels (or load them from numba's cache) before a learner's first step:
    a tiny learner of the same array and setting types takes a few steps and an update, and the bodies of
    both kinds of team (:meth:`~dqnlab.runtime.native.NativeLoop.team_up`) are called on a team that has
    stopped, so they return at once; all under the compile notice (:func:`dqnlab.core.compile.notice`).
    Once per process; a learner that will run on the core calls it before it builds anything, so that
    compiling is not taken from a run's time budget (nor, in a team, spent by one member while the others
    wait for it). ``stream`` takes the notice's lines (default ``sys.stderr``)."""
    global _warmed
    if _warmed:
        return
    _warmed = True
    config = TrainConfig.preset("ntuple-small", ntuples=((0, 1),), n_envs=2, buffer_size=8, batch_size=2,
                                learning_starts=0, total_env_steps=None, max_seconds=1.0)
    with notice("the native learner loop", stream):
        tiny = Learner(config)
        tiny.run(8)
        tiny.native.learn(1)
        for average_every in (0, 1):  # (sharded's helpers, then averaged's members)
            bodies = tiny.native.team_up(2, average_every)
            tiny.native.disband()
            for body in bodies:
                body()


class Learner:
    """One DQN learner: its own ``n_envs`` boards, replay buffer and agent.

    Transitions are made n-step (``config.n_step``, :class:`~dqnlab.replay.NStepReturns`) as the
    boards are stepped; the buffer is prioritized when ``config.prioritized``
    (:func:`~dqnlab.replay.make_buffer`): each update samples at the annealed
    :func:`~dqnlab.agent.dqn.priority_beta_at` and gives the buffer its TD errors back.

    Parameters
    ----------
    config : TrainConfig
    worker : int
        Index of this learner; seeds derive from ``(config.seed, worker)`` and it is
        written in the ``worker`` column of the episodes.
    clock0 : float, optional
        ``time.perf_counter()`` value that episode wall times count from.
    device : str or torch.device
        The agent's learner device (see :class:`~dqnlab.DQNAgent`): the schemes whose learner
        may leave the CPU (``serial``, ``independent``) pass ``config.device``; acting stays on the
        CPU with a copy refreshed after each act step's updates.

    Attributes
    ----------
    env_steps : int
        Env steps taken (``n_envs`` per :meth:`act_step`).
    values : (n_envs, 4) float32
        The current boards' :meth:`DQNAgent.q_values <dqnlab.DQNAgent.q_values>`, evaluated as each board became
        current (see :meth:`act_step`); the next act chooses from them.
    episodes : list of dict
        One row per finished game (see :data:`dqnlab.runtime.results.EPISODE_COLUMNS`).
    timing : dict
        Seconds spent ``acting`` (network forward, env step, replay append) and
        ``learning`` (sampling and updates).
    samples_per_update : int
        Minibatch samples one update trains on (``config.batch_size``; a scheme whose
        update trains on more, such as ``averaged``, sets it), for the replay ratio.
    native : NativeLoop or None
        The compiled loop :meth:`advance` and :meth:`run` take where the config allows it
        (:func:`~dqnlab.runtime.native.native_reason`: afterstate n-tuple learning on the CPU, uniform
        replay); None: the Python loop.
    """

    def __init__(self, config: TrainConfig, worker: int = 0, clock0: float | None = None, device: Any = "cpu"):
        native = native_reason(config, device) is None
        if native:
            warm_up()  # (compiled or loaded from the cache now, with a notice if it takes long: not in a run's budget)
        self.config = config
        self.worker = worker
        env_seed, replay_seed, agent_seed = worker_seeds(config.seed, worker)
        self.env = VecGame2048(config.n_envs, seed=env_seed, max_moves=config.max_moves,
                               invalid_move_reward=config.invalid_move_reward)
        self.buffer = make_buffer(config, seed=replay_seed)
        self.nstep = NStepReturns(config.n_step, config.gamma, config.n_envs)
        self.agent = DQNAgent(config, seed=agent_seed, device=device)
        self.boards = self.env.reset()
        self.masks = legal_actions_batch(self.boards)
        self.values = self.agent.q_values(self.boards)
        self.env_steps = 0
        self.episodes: list[dict[str, Any]] = []
        self.timing = {"acting": 0.0, "learning": 0.0}
        self.last_loss = math.nan
        self.samples_per_update = config.batch_size
        self._credit = 0.0
        self.clock0 = time.perf_counter() if clock0 is None else clock0
        self.native = NativeLoop(self) if native else None

    @property
    def epsilon(self) -> float:
        """Current exploration rate (see :func:`dqnlab.agent.dqn.epsilon_at`)."""
        return epsilon_at(self.config, self.env_steps, self.agent.updates)

    @property
    def priority_beta(self) -> float:
        """Importance-sampling exponent now (prioritized replay; see :func:`~dqnlab.agent.dqn.priority_beta_at`)."""
        return priority_beta_at(self.config, self.env_steps, time.perf_counter() - self.clock0)

    @property
    def updates(self) -> int:
        return self.agent.updates

    def act_step(self) -> int:
        """Act on every board once, store the transitions, log finished games, and evaluate the new boards.

        A board is evaluated once, as it becomes current (:attr:`values`, with the weights before the
        updates of the step that made it), and that evaluation serves both its act and the TD targets of
        the transitions that lead to it: the order of the n-tuple field's online TD learners (Szubert and
        Jaskowski 2014), whose act on a board and update of the afterstate before it read the same values.

        Returns the number of env steps taken (``n_envs``).
        """
        if self.native is not None:
            return self.native.run(1, learn=False)
        t0 = time.perf_counter()
        actions = self.agent.act(self.boards, self.masks, self.epsilon, values=self.values)
        out = self.env.step(actions)
        done = out.terminated | out.truncated
        self.buffer.add_batch(**self.nstep.push(self.boards, actions, transform_rewards(self.config, out.rewards),
                                                out.next_boards, out.terminated, next_board_masks(out, done), done))
        self.boards, self.masks = out.boards, out.action_masks
        self.values = self.agent.q_values(self.boards)
        n = len(actions)
        self.env_steps += n
        finished = np.flatnonzero(done)
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
        if self.native is not None:
            self.native.learn(n)
        else:
            if self.config.prioritized:
                self.buffer.beta = self.priority_beta
            for _ in range(n):
                self.last_loss = replay_update(self.agent, self.buffer, self.config.batch_size)
            self.agent.refresh_acting()
        self._credit -= n
        self.timing["learning"] += time.perf_counter() - t0
        return n

    def diagnostics(self) -> dict[str, float]:
        """This learner's :data:`~dqnlab.runtime.loop.DIAGNOSTICS` now (its own replay ratio: its updates' samples
        per env step it took). Cheap: a few small reductions, made when called."""
        return {**self.agent.diagnostics(), "epsilon": self.epsilon,
                "replay_ratio": replay_ratio(self.updates * self.samples_per_update, self.env_steps)}

    def progress(self, time_split: Mapping[str, float]) -> Progress:
        """The :class:`~dqnlab.runtime.progress.Progress` of a run made of this one learner, with the
        scheme's ``time_split`` (seconds)."""
        return Progress(self.env_steps, self.updates, self.episodes, time_split, self.diagnostics())

    def advance(self, env_steps: int | None = None, deadline: float | None = None,
                update_limit: int | None = None) -> int:
        """Act and learn: :meth:`act_step` then :meth:`learn`, once; or, on the compiled core
        (:attr:`native`), as many such steps as fit before ``env_steps`` more env steps (rounded up to
        whole steps of the ``n_envs`` boards), the ``deadline`` (a ``time.perf_counter()`` value), and the
        step that brings the updates to ``update_limit``, in one call. Returns the env steps taken.

        Raises
        ------
        FloatingPointError
            If an update's TD loss is NaN or infinite (see :meth:`dqnlab.DQNAgent.gradient_step`).
        """
        if self.native is None:
            n = self.act_step()
            self.learn()
            return n
        steps = 1 << 40 if env_steps is None else max(1, -(-env_steps // self.config.n_envs))
        return self.native.run(steps, deadline, update_limit=update_limit)

    def run(self, env_steps: int, deadline: float | None = None) -> None:
        """Alternate acting and learning for ``env_steps`` env steps, until ``deadline`` (a
        ``time.perf_counter()`` value) or until Ctrl-C is pressed in a run (:func:`~dqnlab.runtime.loop.ctrl_c_pressed`,
        seen within :data:`SLICE_S`: the compiled core's calls are that long at most)."""
        target = self.env_steps + env_steps
        while self.env_steps < target and not ctrl_c_pressed():
            now = time.perf_counter()
            if deadline is not None and now >= deadline:
                break
            self.advance(target - self.env_steps, now + SLICE_S if deadline is None else min(deadline, now + SLICE_S))

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self, copy_agent: bool = True) -> dict[str, Any]:
        """Everything needed to continue exactly: agent (both networks, optimiser,
        exploration stream), replay buffer, the games in progress, counters, episodes,
        timing and the owed-update credit (copies; with ``copy_agent`` False the agent's tensors are the live
        ones, for a state serialised before the learner steps again: an n-tuple agent's are hundreds of MB)."""
        agent = self._agent_state(copy_agent)
        return {"worker": self.worker, "agent": agent, "buffer": self.buffer.state_dict(),
                "env": self.env.state_dict(), "nstep": self.nstep.state_dict(), "boards": self.boards.copy(),
                "masks": self.masks.copy(), "values": self.values.copy(),
                "env_steps": self.env_steps, "episodes": [dict(r) for r in self.episodes],
                "timing": dict(self.timing), "last_loss": self.last_loss, "credit": self._credit}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output (from a learner of the same config and worker index).

        Raises
        ------
        ValueError
            If the state is another worker's, or its parts do not fit this learner.
        """
        if state["worker"] != self.worker:
            raise ValueError(f"learner state is worker {state['worker']}'s, not worker {self.worker}'s")
        self._load_agent_state(state["agent"])
        self.buffer.load_state_dict(state["buffer"])
        self.env.load_state_dict(state["env"])
        self.nstep.load_state_dict(state["nstep"])
        self.boards = np.array(state["boards"], np.uint8)
        self.masks = np.array(state["masks"], bool)
        self.values = np.array(state["values"], np.float32)
        self.env_steps = int(state["env_steps"])
        self.episodes = [dict(r) for r in state["episodes"]]
        self.timing = {k: float(v) for k, v in state["timing"].items()}
        self.last_loss = float(state["last_loss"])
        self._credit = float(state["credit"])

    def _agent_state(self, copy_agent: bool) -> dict[str, Any]:
        state = self.agent.state_dict()
        return copy.deepcopy(state) if copy_agent else state

    def _load_agent_state(self, state: dict[str, Any]) -> None:
        self.agent.load_state_dict(state)
