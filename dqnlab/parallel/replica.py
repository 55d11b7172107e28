"""One rank of an all-reduce group: its copy of the model and the scheme's update on it, and a worker rank's loop.

Every rank holds a :class:`Replica` -- a copy of the learner's agent and the scheme's update on it --
rank 0 in the parent (:class:`~dqnlab.parallel.allreduce.AllReduceGroup`), ranks 1..K-1 each in a
long-lived worker task (:func:`replica_task`) that follows rank 0's scatters. Nothing is shipped per
update but each rank's part (:mod:`dqnlab.parallel.parts`) and what the scheme reduces
(:mod:`dqnlab.parallel.collectives`): the weights never travel. With prioritized replay every rank's TD
errors come back to rank 0 in an all-reduce (:meth:`Replica.error_carry`).
"""

from __future__ import annotations

import datetime
import math
import time
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from ..agent.dqn import DQNAgent
from ..config import TrainConfig
from ..replay import Minibatch
from .collectives import COLLECTIVE_TIMEOUT_S, Collectives
from .faults import check_fault
from .messages import Report, StateReply
from .parts import STATE, STOP, Part, shipped_columns, unpack_minibatch
from .tasks import Channel

__all__ = ["Replica", "replica_task", "finite_or_raise"]

#: Seconds between a worker rank's reports of its time split to the parent.
_REPORT_EVERY_S = 1.0


class Replica:
    """One rank's copy of the learner's agent and the scheme's update on it.

    The same class runs at every rank: in the parent (rank 0) on the learner's own agent,
    in each worker on a copy made from the parent's state. A scheme subclasses it with
    :meth:`update`, which must make the same collectives in the same order at every rank
    (and raise only after the last of them), and may keep counters in :meth:`stats`.

    Parameters
    ----------
    agent : DQNAgent
        This rank's agent.
    coll : Collectives
        This rank's end of the group.
    options : dict
        The scheme's options (``dataclasses.asdict`` of its ``Options``).

    Attributes
    ----------
    slots : (int, int)
        This rank's part of the update being made: its first transition among the ``total``
        transitions of all the ranks' parts, in rank order (set by :meth:`step`).
    td_errors : (total,) float32 array or None
        With prioritized replay (``config.prioritized``), ``|Q(s, a) - y|`` of every rank's
        transitions of the last update, in rank order (gathered by :meth:`gather_errors`;
        rank 0 hands them to the buffer); None otherwise.
    """

    def __init__(self, agent: DQNAgent, coll: Collectives, options: dict[str, Any]):
        self.agent, self.coll, self.options = agent, coll, options
        self.compute_s = 0.0  # seconds of this rank's own update work (collectives excluded)
        self.slots = (0, 0)
        self.td_errors: np.ndarray | None = None

    def update(self, batch: Minibatch, share: float, grad_norm: bool, slots: tuple[int, int] | None = None) -> None:
        """:meth:`rank_update`, its time outside collectives added to this rank's ``compute`` seconds.
        ``slots``: :attr:`slots` (default ``(0, n)``: ``batch``'s ``n`` transitions are the whole update)."""
        self.slots = (0, len(batch.actions)) if slots is None else slots
        t0, comm0 = time.perf_counter(), self.coll.comm_s
        try:
            self.rank_update(batch, share, grad_norm)
        finally:
            self.compute_s += time.perf_counter() - t0 - (self.coll.comm_s - comm0)

    def error_carry(self) -> torch.Tensor | None:
        """With prioritized replay, a ``(total,)`` float32 vector: zeros but this rank's TD errors
        (:meth:`DQNAgent.td_errors <dqnlab.DQNAgent.td_errors>` of its last gradient) at its
        :attr:`slots` -- the ``carry`` of :meth:`Collectives.allreduce_weighted`, whose sum over ranks is
        every rank's errors. None without (nothing more is computed or sent)."""
        if not self.agent.config.prioritized:
            return None
        first, total = self.slots
        errors = self.agent.td_errors()
        carry = torch.zeros(total)
        carry[first:first + len(errors)] = torch.from_numpy(errors)
        return carry

    def gather_errors(self, carry: torch.Tensor | None, reduced: bool) -> bool:
        """Keep the update's TD errors of all ranks (:attr:`td_errors`) from :meth:`error_carry`'s
        ``carry``, all-reducing it here unless it was ``reduced`` already (in the update's own
        all-reduce). Returns whether they are all finite (the same verdict at every rank: a
        non-finite error at any rank is in every rank's sum); True without a carry."""
        if carry is None:
            return True
        if not reduced:
            self.coll.allreduce([carry])
        self.td_errors = carry.numpy()
        return bool(torch.isfinite(carry).all())

    def rank_update(self, batch: Minibatch, share: float, grad_norm: bool) -> None:
        """One update of the scheme at this rank, from this rank's part of it (``sharded``: its
        shard of the minibatch; ``averaged``: its own minibatch), already augmented by rank 0.
        ``share``: the part's weight in the update (the shares of all ranks sum to 1). Counts
        the update and syncs the target network when due.

        Raises
        ------
        FloatingPointError
            After the update's last collective, if a TD loss was non-finite (the same
            verdict at every rank).
        """
        raise NotImplementedError

    @property
    def shares_state(self) -> bool:
        """Whether every rank's agent equals rank 0's after each update (then a checkpoint
        needs rank 0's alone)."""
        return True

    def stats(self) -> dict[str, Any]:
        """The scheme's counters, at rank 0 (in the run's ``extra`` and its checkpoint)."""
        return {}

    def load_stats(self, stats: dict[str, Any]) -> None:
        """Restore :meth:`stats` output (a resumed run)."""

    def timing(self) -> dict[str, float]:
        """Seconds of ``compute`` and ``comm`` at this rank so far."""
        return {"compute": self.compute_s, "comm": self.coll.comm_s}

    def load_timing(self, timing: dict[str, float]) -> None:
        """Continue :meth:`timing` from a checkpoint."""
        self.compute_s, self.coll.comm_s = float(timing["compute"]), float(timing["comm"])

    def state(self, with_agent: bool) -> dict[str, Any]:
        """This rank's checkpoint state: its ``timing`` and, ``with_agent``, its agent's ``state_dict``."""
        return {"agent": self.agent.state_dict() if with_agent else None, "timing": self.timing()}

    def load_state(self, state: dict[str, Any]) -> None:
        """Continue from a :meth:`state` (its ``timing``; a scheme may keep more); the agent is loaded apart."""
        self.load_timing(state["timing"])


def replica_task(ch: Channel, *, replica_cls: type[Replica], config: TrainConfig, options: dict[str, Any],
                 workers: int, host: str, port: int, prefix: str, state: dict[str, Any]) -> None:
    """A worker rank's whole run (a :class:`~dqnlab.parallel.tasks.TaskGroup` task): join the
    group, then follow rank 0's scatters -- an update, a state request, or the stop.

    Rank ``ch.worker + 1`` of ``workers``. ``host``, ``port``, ``prefix``: rank 0's rendezvous store and
    the group's keys in it. ``state``: a :meth:`Replica.state` to start from (the parent's own at the
    start of a run). Reports its time split (:class:`~dqnlab.parallel.messages.Report`) about once a
    second and when it stops.

    Raises
    ------
    RuntimeError
        If the group cannot be joined within :data:`~dqnlab.parallel.collectives.COLLECTIVE_TIMEOUT_S`,
        or a collective fails (a peer went away); the task wrapper reports it to the parent.
    """
    rank = ch.worker + 1
    agent = DQNAgent(config, seed=0)
    agent.load_state_dict(state["agent"])
    coll = Collectives(rank, workers)
    replica = replica_cls(agent, coll, options)
    replica.load_state(state)
    part = Part(config.batch_size, shipped_columns(config))

    def report(done: bool = False) -> None:  # (messages name the task: rank - 1)
        ch.send(Report(ch.worker, done, [], 0, agent.updates, replica.timing(), coll.comm_s, {}, {}))

    coll.join(dist.TCPStore(host, port, workers, is_master=False,
                            timeout=datetime.timedelta(seconds=COLLECTIVE_TIMEOUT_S)), prefix, host)
    try:
        next_report = time.perf_counter() + _REPORT_EVERY_S
        while True:
            coll.scatter(part.tensor, None)
            command, update, n, grad_norm, first, total = (int(v) for v in part.ints)
            if command == STOP:
                break
            if command == STATE:  # (update = the request's number * 2 + whether the agent is wanted)
                ch.send(StateReply(ch.worker, update // 2, replica.state(with_agent=bool(update % 2))))
                continue
            check_fault(ch.fault, rank, updates=update)
            try:
                replica.update(unpack_minibatch(part.raw, n, part.columns), float(part.share[0]),
                               grad_norm=bool(grad_norm), slots=(first, total))
            except FloatingPointError:  # rank 0 has the same verdict and ends the run
                pass
            if time.perf_counter() >= next_report:
                next_report = time.perf_counter() + _REPORT_EVERY_S
                report()
    finally:
        coll.leave()  # a peer waiting on this rank fails at once
    report(done=True)


def finite_or_raise(value: float, update: int) -> None:
    """Raise FloatingPointError for a non-finite TD loss ``value`` of update ``update`` (the message of
    :meth:`DQNAgent.gradient_step <dqnlab.DQNAgent.gradient_step>`, which the run's driver turns into
    :class:`~dqnlab.runtime.errors.DivergedError`)."""
    if not math.isfinite(value):
        raise FloatingPointError(f"non-finite TD loss ({value}) at update {update}")
