"""``averaged``: one learner; K workers each step on their own minibatch, models averaged.

Model averaging: separate processes each take a different minibatch, train a copy of the
model on it and return the weights, and the copies are averaged. The parent is the
single DQN learner (its boards, its replay buffer). Each update it draws K independent
minibatches of ``B`` transitions (uniform, with replacement, :func:`draw_minibatches`),
one per worker; each worker takes one optimiser step on its own, and the K models are
averaged with equal weights: local SGD / FedAvg (Zinkevich et al. 2010; McMahan et al.
2017) on an effective minibatch of K x B. The number of updates per env step is serial's
(``replay_ratio / batch_size``), so each env step is trained on K times as many samples:
more learning per game, not faster games (every update still costs a local step and then
the average, so an episode takes about serial's wall time or more).

Three ways to combine the workers (the ``comm`` option; ``auto``, the default, takes threads where the
learner runs on the compiled core with ``target_update == 1``, else all-reduce):

* ``"threads"``: the K workers are threads of this process on the compiled core, each with a table of its
  own (member 0's is the learner's, which acts): the learner draws the K minibatches, every member steps
  its own table on one and logs the rows it changed, and every ``average_every`` updates each member sets
  the logged rows it owns to the members' mean in every table (:mod:`dqnlab.core.team`,
  :meth:`~dqnlab.runtime.native.NativeLoop.team_up`). Temporal coherence's sums stay each member's.
  Averaging every update, every table equals the learner's when an update opens, so the members compute
  their targets on the learner's table, which its acting keeps in the cache, and step their own.

* ``"allreduce"``: the parent is rank 0 of a gloo process group and every rank
  keeps its own copy of the model (:class:`Replica`): it steps on its own minibatch, and
  every ``average_every`` updates an all-reduce replaces every rank's weights by the mean
  (with ``average_moments``, Adam's moments too; otherwise each rank keeps its own, as
  local SGD does). ``average_every = 1`` averages after every step (synchronous model
  averaging); more is **local SGD** (Stich 2019, arXiv:1805.09767; Lin et al. 2020,
  "Don't use large mini-batches, use local SGD"): less communication, at the price of
  workers that drift apart between averages (the ``divergence`` recorded before each average).
  An n-tuple network's tables (sparse gradients) are averaged by their changes: the ranks held
  the same tables at the last average, so the mean is those tables plus the mean of each rank's
  changes since, and only the rows its local steps touched travel (:func:`changes_since`, a
  sparse all-reduce), not the 268 MB tables.
* ``"joblib"``: a joblib round per update that ships the weights and optimiser state out
  and the K new weights and moments back, averaged every update.

Prioritized replay (``config.prioritized``): each minibatch carries its importance-sampling
weights (normalised over itself) and, after every update, each of the ``K x B`` sampled
transitions gets its priority from the TD error of the rank that trained on it (over all-reduce
gathered every update, with ``average_every > 1`` by a small all-reduce of its own:
:meth:`Replica.update`). n-step returns (``config.n_step``): the minibatches carry each
transition's span.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import torch

from ..config import TrainConfig
from ..options import SchemeOptions, option, unless
from ..parallel import replica
from ..parallel.comm import comm_option
from ..parallel.rounds import run_rounds
from ..replay import Minibatch
from ..runtime.learner import Learner
from ..runtime.native import native_reason
from ..runtime.results import RunResult
from .serial import one_learner

__all__ = ["Options", "Replica", "run", "draw_minibatches", "changes_since"]


@dataclass(frozen=True)
class Options(SchemeOptions):
    """Options of ``averaged`` (keyword arguments of :func:`dqnlab.train`)."""

    comm: str = comm_option()
    average_every: int = option(1, "Updates between two averages of the workers' weights (1: every update, "
                                "synchronous model averaging; more: local SGD).", unit="updates", low=1,
                                applies=unless("comm", "joblib"))
    average_moments: bool = option(False, "Average Adam's moments with the weights too (3x the data; "
                                   "no effect with SGD). Off: each worker keeps its own moments, as local SGD does.",
                                   applies=unless("comm", "joblib"))


class Replica(replica.Replica):
    """``averaged`` at one rank of the all-reduce group (``comm="allreduce"``): local steps, periodic averages."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.every = int(self.options["average_every"])
        self.averages = 0
        self.divergence: list[dict[str, float]] = []  # rank 0: one row per report period (see stats)
        self.last_divergence: dict[str, float] | None = None
        # n-tuple tables (sparse gradients) average only the rows changed since the last average: each local
        # step's rows and their values before it, per parameter (kept only where there is a group to average)
        self.sparse = self.agent.config.network == "ntuple" and self.coll.world > 1
        self.pending: list[list[tuple[torch.Tensor, torch.Tensor]]] = [[] for _ in self.agent.online.parameters()]

    @property
    def shares_state(self) -> bool:
        """Every rank's model equals rank 0's after each update only when every update averages it all."""
        return self.every == 1 and (self.options["average_moments"] or self.agent.config.optimizer == "sgd")

    def rank_update(self, batch: Minibatch, share: float, grad_norm: bool) -> None:
        """One step on this rank's own minibatch ``batch``; every ``average_every`` updates, the
        average over ranks (each rank's model weighted by its ``share``: 1/K).

        With prioritized replay, every update gathers the K minibatches' TD errors at every rank
        (:meth:`error_carry`, ``K x B`` floats): in the average's all-reduce when the update
        averages, else (``average_every > 1``) in a small all-reduce of their own, so that rank 0
        sets every sampled transition's priority after every update, as serial does. The
        alternative, accumulating the errors until the next average, saves that collective but
        lets priorities lag by up to ``average_every - 1`` updates, would set some on slots that
        acting has overwritten meanwhile, and needs every rank's pending errors in a checkpoint
        for an exact resume. The small all-reduce carries only ``K x B`` floats, so its cost is
        latency rather than bandwidth, and it is small beside a rank's local step; ``python -m
        dqnlab bench scaling`` reports the time spent communicating.
        A non-finite TD error at any rank ends the run at that update at every rank.
        """
        agent, coll = self.agent, self.coll
        # 1. one local DQN step on this rank's own minibatch (a non-finite loss: no step)
        loss = agent.compute_gradients(batch, agent.td_targets(batch))
        q_max = agent.diagnostics(grad_norm=False)["q_max_mean"]
        norm = agent.diagnostics(grad_norm=True)["grad_norm"] if grad_norm else math.nan
        finite = math.isfinite(loss)
        if finite:
            self.remember_rows()
            agent.step_optimizer()
        agent.updates += 1
        carry = self.error_carry()  # (prioritized replay: this rank's TD errors, to gather)
        # 2. every average_every updates: all-reduce the weights (and moments), and the diagnostics
        averaging = coll.world > 1 and agent.updates % self.every == 0
        if averaging:
            loss, q_max, norm, bad = self.average([loss if finite else 0.0, q_max, norm, float(not finite)], share,
                                                  carry)
            finite = bad == 0
        finite = self.gather_errors(carry, reduced=averaging) and finite
        if agent.config.target_update and agent.updates % agent.config.target_update == 0:
            agent.sync_target()
        agent.record_diagnostics({"loss": loss, "q_max_mean": q_max, **({"grad_norm": norm} if grad_norm else {})})
        replica.finite_or_raise(loss if finite else math.nan, agent.updates)

    def remember_rows(self) -> None:
        """Before a local step on sparse gradients: each table's rows the step will change, and their values."""
        if self.sparse:
            for record, p in zip(self.pending, self.agent.online.parameters()):
                if p.grad is not None:
                    rows = p.grad._indices()[0]
                    record.append((rows, p.detach()[rows]))

    def average(self, values: list[float], share: float, carry: torch.Tensor | None = None) -> list[float]:
        """Replace this rank's weights (and moments) by the ``share``-weighted mean over ranks; return
        the means of ``values``; sum ``carry`` over ranks along (:meth:`Collectives.allreduce_weighted
        <dqnlab.parallel.collectives.Collectives.allreduce_weighted>`). Records the divergence (rank 0's
        L2 distance to the mean).

        Dense weights travel whole. An n-tuple network's tables travel as their changes: every rank
        held the same tables at the last average, so the mean is those tables plus the mean of the
        ranks' changes since, a sparse all-reduce of the rows each rank's local steps touched
        (:func:`changes_since`) -- a few hundred rows an update where the tables have 67M.
        """
        agent = self.agent
        params = list(agent.online.parameters())
        if self.sparse:
            changes = [changes_since(p, record) for p, record in zip(params, self.pending)]
            for record in self.pending:
                record.clear()
            own = [c.clone() for c in changes]
            out = self.coll.allreduce_weighted(changes, values, share, carry)
            with torch.no_grad():
                for p, mean in zip(params, changes):
                    p.index_add_(0, mean._indices()[0], mean._values())
            d = math.sqrt(sum(float(torch.linalg.vector_norm((o - m).coalesce()._values())) ** 2
                              for o, m in zip(own, changes)))
        else:
            moments = ([agent.optimizer.state[p][m] for p in params for m in ("exp_avg", "exp_avg_sq")
                        if p in agent.optimizer.state]
                       if self.options["average_moments"] and agent.config.optimizer == "adam" else [])
            own_flat = torch.cat([p.detach().reshape(-1) for p in params])
            out = self.coll.allreduce_weighted(params + moments, values, share, carry)
            d = float(torch.linalg.vector_norm(own_flat - torch.cat([p.detach().reshape(-1) for p in params])))
        self.last_divergence = {"update": agent.updates, "divergence": d}
        self.averages += 1
        return out

    def stats(self) -> dict[str, Any]:
        """``averages`` made and ``divergence``: the last one measured before each report
        (``update``, ``divergence`` = rank 0's L2 distance to the mean of the ranks' parameters
        -- with 2 workers, every worker's -- and ``divergence_rel`` = that over the norm of rank 0's
        parameters at the report: the mean's, where the last update averaged)."""
        if self.last_divergence is not None and (not self.divergence
                                                 or self.divergence[-1]["update"] != self.last_divergence["update"]):
            norm = math.sqrt(sum(float(torch.linalg.vector_norm(p.detach())) ** 2
                                 for p in self.agent.online.parameters()))
            d = self.last_divergence["divergence"]
            self.divergence.append({**self.last_divergence, "divergence_rel": d / norm if norm > 0 else 0.0})
        return {"averages": self.averages, "divergence": [dict(r) for r in self.divergence]}

    def load_stats(self, stats: dict[str, Any]) -> None:
        """Continue :meth:`stats` from a checkpoint."""
        self.averages = int(stats["averages"])
        self.divergence = [dict(r) for r in stats["divergence"]]

    def state(self, with_agent: bool) -> dict[str, Any]:
        """:meth:`Replica.state <dqnlab.parallel.replica.Replica.state>` with the rows this rank's local steps
        changed since the last average (``pending``: per parameter, each step's rows and their values before
        it), which the next average needs."""
        return {**super().state(with_agent), "pending": [[(r.clone(), v.clone()) for r, v in record]
                                                         for record in self.pending]}

    def load_state(self, state: dict[str, Any]) -> None:
        """Continue :meth:`state` (a resumed run)."""
        super().load_state(state)
        self.pending = [[(r.clone(), v.clone()) for r, v in record] for record in state["pending"]]


def changes_since(p: torch.Tensor, records: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
    """How table ``p`` changed since ``records`` began, and ``p`` set back to then.

    ``records``: each change's rows of ``p`` (``(n,)`` int64, repeats allowed) and their values before it
    (``(n, *p.shape[1:])``), in order. Returns a coalesced sparse COO tensor shaped like ``p``: on every row
    any record names, ``p`` now minus ``p`` before the first record; those rows of ``p`` get their values
    before the first record back (in place).
    """
    if records:
        rows, before = torch.cat([r for r, _ in records]), torch.cat([v for _, v in records])
    else:
        rows, before = torch.empty(0, dtype=torch.long), p.new_empty((0, *p.shape[1:]))
    unique, inverse = torch.unique(rows, return_inverse=True)
    first = torch.full((len(unique),), len(rows)).scatter_reduce_(0, inverse, torch.arange(len(rows)), "amin")
    w, then = p.detach(), before[first]
    change = w[unique] - then
    w[unique] = then
    return torch.sparse_coo_tensor(unique[None], change, p.shape, is_coalesced=True, check_invariants=False)


def draw_minibatches(learner: Learner, k: int) -> list[Minibatch]:
    """``k`` independent minibatches of ``config.batch_size`` from the learner's buffer.

    Drawn one after the other from the buffer's own random stream, so with ``k = 1``
    the minibatch is exactly the one the serial learner would sample.
    """
    return [learner.buffer.sample(learner.config.batch_size) for _ in range(k)]


def run(config: TrainConfig, options: Options, *, workers: int = 1, progress: bool = True,
        callback: Callable[[RunResult], Any] | None = None,
        _checkpoint: Any = None) -> RunResult:
    """Train one learner whose every update averages K workers' steps on K minibatches.

    Parameters
    ----------
    config : TrainConfig
        ``batch_size`` is each worker's minibatch ``B``; the effective batch is K x B.
    options : Options
        ``comm``, and with all-reduce ``average_every`` and ``average_moments`` (see :class:`Options`).
    workers : int
        K workers (>= 1): with all-reduce this process and K - 1 worker processes; with
        joblib K worker processes. With K = 1 the step runs in this process and the
        update equals serial's (same minibatch, same step).
    progress, callback
        As for :func:`dqnlab.train`.

    Returns
    -------
    RunResult
        ``time_split`` and ``extra`` as in :func:`dqnlab.parallel.rounds.run_rounds`, with
        ``effective_batch`` (K x B), ``effective_replay_ratio`` (samples trained on per env
        step, K x ``replay_ratio``), ``optimizer``; with all-reduce also ``averages`` and
        ``divergence`` (:meth:`Replica.stats`). The weights are the mean of the ranks'
        (rank 0's equal it when the last update averaged them).

    Raises
    ------
    WorkerError
        If a worker fails; ``err.partial`` holds the run so far (``status="failed"``).
    DivergedError
        If a TD loss is non-finite.
    """

    reason = native_reason(config, config.device) or (
        "its threads need target_update=1 (each member's online table is its target)" if config.target_update != 1
        else None)
    comm = options.comm if options.comm != "auto" else "allreduce" if reason else "threads"
    extra = {"effective_batch": workers * config.batch_size, "effective_replay_ratio": workers * config.replay_ratio,
             "optimizer": config.optimizer}
    if comm == "threads":
        if reason:
            raise ValueError(f"averaged with comm='threads' runs on the compiled core, and {reason}; "
                             f"use comm='allreduce'")
        return one_learner("averaged", config, replace(options, comm="threads"), team=workers,
                           average_every=options.average_every, progress=progress, callback=callback,
                           checkpoint=_checkpoint, extra=extra)
    options = replace(options, comm=comm)

    def sample(learner: Learner) -> list[Minibatch]:
        return draw_minibatches(learner, workers)

    def split(batches: list[Minibatch]) -> tuple[list[Minibatch], None]:
        return batches, None  # one minibatch per worker, averaged with equal weights

    return run_rounds("averaged", config, workers, progress, callback, options, Replica, sample, split, extra,
                      _checkpoint)
