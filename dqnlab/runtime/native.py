"""A :class:`~dqnlab.runtime.learner.Learner`'s act-and-learn loop on the compiled core.

For afterstate DQN on an n-tuple network on the CPU with uniform replay (the ``ntuple`` presets),
:meth:`NativeLoop.run` hands a whole chunk of the learner's steps -- acting, the env, n-step
returns, the replay buffer and the updates owed -- to :func:`dqnlab.core.loops.run_chunk`, which
does what ``Learner.act_step`` and ``Learner.learn`` do, with the same draws, on the learner's own
arrays and random streams. After the chunk everything the learner holds (its env, buffer, n-step
ring, agent, counters, games) is as the Python loop leaves it, so checkpoints, diagnostics,
TensorBoard and every scheme see no difference but speed.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from ..config import TrainConfig
from ..core import loops
from ..core.memory import zeros
from ..core.ntuple import placements, sparse_grad_norm
from ..core.team import AVERAGES, STOP, new_team

__all__ = ["NativeLoop", "native_reason"]

#: Episode records one chunk may fill before it returns to Python.
RECORDS = 4096

#: The sums of temporal coherence where there are none.
_NONE = np.zeros((0, 2), np.float32)

#: The boards' values where an update may not read them (:meth:`NativeLoop.learn`: the weights may have
#: changed since the boards were evaluated).
_NO_VALUES = np.zeros((0, 4), np.float32)


def native_reason(config: TrainConfig, device: Any = "cpu") -> str | None:
    """Why a learner of ``config`` cannot run on the compiled core (None: it can).

    The core runs afterstate learning with an n-tuple network (``network="ntuple"``, ``afterstate=True``)
    on the CPU with uniform replay; prioritized replay and the other networks take the Python loop (the
    n-tuple network's features and values are the core's there too)."""
    if config.network != "ntuple" or not config.afterstate:
        return "the native loop runs afterstate n-tuple networks"
    if config.prioritized:
        return "prioritized replay takes the Python loop"
    if str(device) not in ("cpu", "auto") or (str(device) == "auto" and _cuda()):
        return "a learner on a GPU takes the Python loop"
    return None


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def _flat(weight: Any, width: int = 1) -> np.ndarray:
    """An n-tuple network's ``(R, 1)`` float32 weight as the ``(R,)`` array it is (the same memory); with
    ``width`` 2, temporal coherence's ``(R, 1, 2)`` sums as ``(R, 2)``."""
    w = weight.detach().numpy()
    flat = w.reshape(-1) if width == 1 else w.reshape(-1, width)
    assert np.shares_memory(flat, w)
    return flat


class NativeLoop:
    """The compiled act-and-learn loop of one :class:`~dqnlab.runtime.learner.Learner` (see the module).

    Parameters
    ----------
    learner : Learner
        Its config must pass :func:`native_reason`.
    steps_of_all : (K,) int64 array, optional
        Every learner's env steps (``shared``: the block's; entry ``me`` is written): epsilon and
        ``learning_starts`` count them all. Default: this learner alone.
    totals : tuple of two (1,) int64 arrays, optional
        All learners' updates and the target syncs (``shared``: the block's). Default: this learner's.
    me : int
        This learner's entry of ``steps_of_all``.
    own_segment : bool
        Draw minibatches from this learner's own replay segment only (``shared`` with ``sample="own"``).
    team : (TEAM_SLOTS,) int64 array, optional
        A :mod:`~dqnlab.core.team` array this learner shares with others (``shared``: the block's, whose
        ``LOCKED`` slot puts each update under its lock). Default: this learner's own.
    """

    def __init__(self, learner: Any, steps_of_all: np.ndarray | None = None,
                 totals: tuple[np.ndarray, np.ndarray] | None = None, me: int = 0, own_segment: bool = False,
                 team: np.ndarray | None = None):
        c = learner.config
        self.learner = learner
        agent = learner.agent
        self.hp = loops.Hyper(
            gamma=float(c.gamma), lr=float(c.lr), tc=c.optimizer == "tc", tc_start=int(c.tc_start),
            sgd_lr=float(c.tc_td_lr if c.optimizer == "tc" else c.lr), updates_per_env_step=float(c.updates_per_env_step),
            epsilon_start=float(c.epsilon_start), epsilon_end=float(c.epsilon_end),
            epsilon_decay_steps=float(c.epsilon_decay_steps), epsilon_decay_rate=float(c.epsilon_decay_rate or 0.0),
            invalid_move_reward=float(c.invalid_move_reward), huber=c.loss == "huber",
            log_rewards=c.reward_transform == "log", double_dqn=bool(c.double_dqn),
            separate_target=agent.target is not agent.online, target_update=int(c.target_update),
            learning_starts=int(c.learning_starts), batch_size=int(c.batch_size), max_moves=int(c.max_moves or 0),
            n_step=int(c.n_step), own_segment=bool(own_segment))
        self.own_steps = steps_of_all is None
        self.steps_of_all = np.zeros(1, np.int64) if steps_of_all is None else steps_of_all
        self.own_totals = totals is None
        self.totals = (np.zeros(1, np.int64), np.zeros(1, np.int64)) if totals is None else totals
        self.me = me
        self.records = np.empty((max(RECORDS, c.n_envs), len(loops.RECORD_COLUMNS)), np.float64)  # (a step's games fit)
        self.rows = np.zeros((c.batch_size, placements(agent.online.placements)), np.int64)
        self.slopes = np.zeros(c.batch_size, np.float32)
        self.work: loops.Work | None = None  # (made for the replay the learner has when it first runs)
        self.ctr = np.zeros(len(loops.COUNTERS), np.int64)
        self.times = np.zeros(len(loops.TIMES), np.float64)
        self.team = new_team(1) if team is None else team  # (alone: :meth:`team_up` makes it a team's leader)
        self.waited = 0.0  # seconds waiting for the team's update lock, all calls together
        self.crew: tuple | None = None  # (averaging: every member's table; else the learner's own, read at each call)

    def run(self, act_steps: int, deadline: float | None = None, learn: bool = True,
            update_limit: int | None = None) -> int:
        """Act ``act_steps`` times on every board (each followed, with ``learn``, by the updates owed), or
        fewer: until ``deadline`` (a ``time.perf_counter()`` value), or the step that brings the learner's
        updates to ``update_limit``. Returns the env steps taken.

        Raises
        ------
        FloatingPointError
            If an update's TD loss is NaN or infinite (its weights unchanged, as ``DQNAgent.gradient_step``).
        """
        ln = self.learner
        env, n = ln.env, ln.config.n_envs
        env.boards = np.ascontiguousarray(env.boards)
        ln.masks = np.ascontiguousarray(ln.masks)
        ln.values = np.ascontiguousarray(ln.values, np.float32)
        nstep = ln.nstep
        ring = (nstep.boards.reshape(nstep.n, n, 16), nstep.actions, nstep.rewards, nstep.pending)
        replay, segments = self._begin()
        done_steps = 0
        while True:
            self.ctr[4] = 0
            status, steps = loops.run_chunk(
                act_steps - done_steps, learn, math.inf if deadline is None else deadline,
                np.iinfo(np.int64).max if update_limit is None else update_limit,
                (env.boards.reshape(n, 16), env.scores, env.moves, ln.masks, ln.values), env.rng, ln.agent.rng, replay,
                ln.buffer.rng, ring, self._net(), self.hp, self.ctr, self.totals, self.times, self.records,
                self.steps_of_all, self.rows, self.slopes, self.work, self.team, self._crew())
            done_steps += steps
            self._log(int(self.ctr[4]))
            if status != loops.RECORDS_FULL or done_steps >= act_steps:
                break
        ln.boards = env.boards.copy()
        self._end(segments, status)
        return done_steps * n

    def team_up(self, members: int, average_every: int = 0) -> list[Callable[[], None]]:
        """Lead a team of ``members`` threads (:mod:`dqnlab.core.team`): returns the bodies of the ``members - 1``
        helpers, each to run in a thread of its own until :meth:`disband`.

        ``average_every`` 0 (``sharded``): the helpers compute shares of every update's minibatch
        (:func:`dqnlab.core.loops.help_updates`), and the updates are this learner's alone, the same ones.
        Else (``averaged``): every member steps a table of its own, a copy of the learner's, on a minibatch of
        its own (the learner draws them all, its own first, from its buffer), and the rows they changed are averaged
        every ``average_every`` updates (:func:`dqnlab.core.loops.help_average`); the learner's table is member
        0's, which it acts with. Needs ``target_update == 1`` (the target is each member's online table).
        """
        ln = self.learner
        replay, _ = self._begin()
        ln.values = np.ascontiguousarray(ln.values, np.float32)  # (as :meth:`run` keeps it: the helpers read it)
        self.team = new_team(members, average_every)
        if average_every == 0:
            return [functools.partial(loops.help_updates, self.team, k, replay, self._net(), self.hp, self.rows,
                                      self.slopes, loops.helper_work(self.work), ln.values)
                    for k in range(1, members)]
        assert ln.agent.target is ln.agent.online, "averaged threads: the target is each member's online table"
        online, _, layout, sums = self._net()
        # (every member's table and sums, a copy of the learner's, on huge pages: they are read at random)
        tables = zeros((members, *online.shape), online.dtype, inherit=False)
        member_sums = zeros((members, *sums.shape), sums.dtype, inherit=False)
        tables[:], member_sums[:] = online, sums
        self._bind(tables[0], member_sums[0])
        b = self.rows.shape[0]
        self.crew = loops.crew_of(tables, member_sums, average_every * b, self.rows.shape[1], b)
        # (averaging every update, every table equals the learner's when an update opens: the members read it)
        return [functools.partial(loops.help_average, self.team, k, self.crew, replay,
                                  (tables[0 if average_every == 1 else k],) * 2 + (layout, member_sums[k]), self.hp,
                                  np.zeros_like(self.rows), np.zeros_like(self.slopes),
                                  loops.member_work(self.work, self.crew[4][k]), ln.values)
                for k in range(1, members)]

    def _bind(self, table: np.ndarray, sums: np.ndarray) -> None:
        """Make the learner's online weight (and temporal coherence's sums) views of ``table`` (``sums``)."""
        agent = self.learner.agent
        weight = agent.online.weight
        weight.data = torch.from_numpy(table).view(weight.shape)
        if self.hp.tc:
            state = agent.optimizer.state[weight]
            state["sums"] = torch.from_numpy(sums).view(state["sums"].shape)

    def _crew(self) -> tuple:
        """The kernels' ``crew``: an averaging team's, else the learner's own table, read now."""
        if self.crew is not None:
            return self.crew
        online, _, _, sums = self._net()
        return loops.crew_of(online[None], sums[None])

    def team_state(self) -> dict[str, Any]:
        """An averaging team's own state for a checkpoint (the helpers' tables and sums, the rows
        changed since the last average, the averages made; the views as they are: the helpers wait between
        updates while it is written); {} for any other team."""
        if self.crew is None:
            return {}
        tables, sums, logs, logged, *_ = self.crew
        return {"tables": tables[1:], "sums": sums[1:], "logs": logs[:, :int(logged.max())], "logged": logged,
                "averages": int(self.team[AVERAGES])}

    def load_team_state(self, state: dict[str, Any]) -> None:
        """Continue from :meth:`team_state` output (after :meth:`team_up` with the same team)."""
        if self.crew is None:
            return
        tables, sums, logs, logged, *_ = self.crew
        tables[1:], sums[1:] = state["tables"], state["sums"]
        logs[:, :state["logs"].shape[1]] = state["logs"]
        logged[:] = state["logged"]
        self.team[AVERAGES] = state["averages"]

    def team_weights(self, weights: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """``weights`` (the learner's, a copy) with an averaging team's rows changed since its last average set to
        the members' mean: the run's model (as the average every member would reach next)."""
        if self.crew is None:
            return weights
        tables, _, logs, logged, *_ = self.crew
        rows = np.unique(np.concatenate([logs[k, :logged[k]].ravel() for k in range(len(logged))]))
        flat = weights["weight"].reshape(-1)
        flat[rows] = tables[:, rows].mean(axis=0, dtype=np.float64).astype(np.float32)
        return weights

    @property
    def averages(self) -> int:
        """Averages an averaging team has made."""
        return int(self.team[AVERAGES])

    def disband(self) -> None:
        """Tell the helpers of :meth:`team_up` to return (a helper waiting for an update returns at once)."""
        self.team[STOP] = 1

    def count_updates_in(self, counter: np.ndarray | None) -> None:
        """Count this learner's updates in ``counter`` ``(1,)`` int64 one by one, as the kernels make them (a
        reader in another process then sees the count of the weights it reads: ``actors``' shared weights);
        None: in an array of this loop's own again. The count is set to the learner's at every call."""
        assert self.own_totals, "a learner among several counts in its scheme's block already"
        self.totals = (np.zeros(1, np.int64) if counter is None else counter, self.totals[1])

    def learn(self, updates: int) -> None:
        """``updates`` DQN updates on minibatches of the learner's buffer (its owed-update credit and
        timing are the caller's).

        Raises
        ------
        FloatingPointError
            If an update's TD loss is NaN or infinite (its weights unchanged, as ``DQNAgent.gradient_step``).
        """
        replay, segments = self._begin()
        status = loops.learn_updates(updates, replay, self.learner.buffer.rng, self._net(), self.hp, self.ctr,
                                     self.totals, self.times, self.rows, self.slopes, self.work, _NO_VALUES,
                                     self.team, self._crew())
        self._end(segments, status)

    def _begin(self) -> tuple[tuple, tuple]:
        """The kernels' view of the learner now: its replay (columns and segments) and counters."""
        ln, agent, c = self.learner, self.learner.agent, self.learner.config
        lo, cap, pos, size, me = segments = ln.buffer.segments()
        a = ln.buffer.arrays
        if self.work is None or len(self.work.slot_env) != len(a["actions"]):
            self.work = loops.workspace(c.n_envs, c.batch_size, self.rows.shape[1], len(a["actions"]), c.n_step)
        replay = (a["boards"].reshape(-1, 16), a["actions"], a["rewards"], a["next_boards"].reshape(-1, 16),
                  a["dones"], a["next_masks"], a["steps"], lo, cap, pos, size)
        self.ctr[:] = (ln.env_steps, agent.updates, 0, ln.nstep.t, 0, 0 if self.own_steps else me)
        self.times[:] = (ln._credit, ln.last_loss, 0.0, 0.0, math.nan, 0.0)
        if self.own_steps:
            self.steps_of_all[0] = ln.env_steps
        if self.own_totals:
            self.totals[0][0] = agent.updates
            self.totals[1][0] = agent.updates // c.target_update if c.target_update > 1 else 0
        return replay, segments

    def _end(self, segments: tuple, status: int) -> None:
        """Write the kernels' counters back into the learner; raise for a non-finite loss."""
        ln, agent, ctr, times = self.learner, self.learner.agent, self.ctr, self.times
        updates_before = agent.updates
        ln.env_steps, agent.updates = int(ctr[0]), int(ctr[1])
        ln.buffer.added += int(ctr[2])
        ln.buffer.set_segments(segments[2], segments[3])
        ln.nstep.t = int(ctr[3])
        ln._credit, ln.last_loss = float(times[0]), float(times[1])
        ln.timing["acting"] += float(times[2])
        ln.timing["learning"] += float(times[3] - times[5])
        self.waited += float(times[5])
        if self.hp.tc:  # (the optimiser's step count, as its own steps keep it)
            agent.optimizer.state[agent.online.weight]["step"] += agent.updates - updates_before
        if status == loops.NON_FINITE:
            raise FloatingPointError(f"non-finite TD loss ({float(times[1])}) at update {agent.updates + 1}")
        if agent.updates > updates_before:
            agent.record_diagnostics({"loss": ln.last_loss, "q_max_mean": float(times[4]),
                                      "grad_norm": sparse_grad_norm(self.rows, self.slopes)})

    def _net(self) -> tuple:
        """The weights (online, target: the same array when the target is the online network), the
        placements and temporal coherence's sums (``optimizer = "tc"``), read now (``shared`` binds them to
        its block after the learner is made)."""
        agent = self.learner.agent
        online = agent.online.weight
        sums = _flat(agent.optimizer.state[online]["sums"], 2) if self.hp.tc else _NONE
        return _flat(online), _flat(agent.target.weight), agent.online.placements, sums

    def _log(self, count: int) -> None:
        """Append the chunk's ``count`` episode records to the learner's episodes."""
        ln = self.learner
        for rec in self.records[:count]:
            ln.episodes.append({
                "worker": ln.worker, "episode": len(ln.episodes), "env_steps": int(rec[0]),
                "wall_time_s": float(rec[1]) - ln.clock0, "score": int(rec[2]), "max_tile": int(rec[3]),
                "moves": int(rec[4]), "epsilon": float(rec[5]), "loss": float(rec[6])})
