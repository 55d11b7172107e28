"""``sharded``: one learner; each minibatch is split across K workers and their steps combined.

Data-parallel training of one learner: each process takes a share of every minibatch,
and the processes' results (gradients, or weights after one step) are combined into one
update. The parent is the single DQN learner: it acts on its ``n_envs`` boards and owns
the replay buffer. For every update it samples one minibatch of ``B`` transitions and
splits it into K shards (sizes differ by at most one, :func:`shard`), one per worker.
The replay ratio, epsilon and target schedule are serial's: only where the gradient
arithmetic happens changes. Three ways to combine the workers (the ``comm`` option; ``auto``, the
default, takes threads where the learner runs on the compiled core, else all-reduce):
* ``"threads"``: the K workers are threads of this process over the learner's own tables, on the
  compiled core: the learner acts and opens each update, every thread computes the targets and
  gradient of its shard, and each applies the summed step to the table rows it owns, meeting through
  atomics (:mod:`dqnlab.core.team`, :func:`dqnlab.schemes.serial.one_learner`). The run is serial's,
  update for update; only the time it takes differs.

* ``"allreduce"``: synchronous data-parallel SGD as PyTorch DDP runs it (Li et
  al. 2020, arXiv:2006.15704). The parent is rank 0 of a gloo process group and takes
  shard 0 itself; every rank holds a copy of the model (:class:`Replica`), computes the
  gradient of its shard's mean TD loss, an all-reduce sums the shard-weighted gradients,
  and every rank takes the same optimiser step on the same gradient. The update is
  exactly one step on the whole minibatch, Adam included, and the weights stay identical
  without being shipped: per update only the shards (one scatter) and the gradient (one
  all-reduce) travel.
* ``"joblib"``: a joblib round per update that averages weights, not gradients: the weights and
  optimiser state go out, each worker takes one step on its shard, and the K new weights
  (and Adam moments) come back and are averaged, weighted by shard size. With plain SGD
  that is exactly one step on the whole minibatch (``sum_k (n_k/B)(w - lr g_k)``; the
  parameter servers of Gorila, Nair et al. 2015, arXiv:1507.04296; Zinkevich et al. 2010
  with one local step); with Adam it is not (each worker normalises its own shard's
  gradient), and a round trip of the whole state costs more than the update.

Prioritized replay (``config.prioritized``): the minibatch is sampled once, its
importance-sampling weights normalised over all of it, and the shards carry them; after
every update the TD error of each transition, computed by the worker that trained on it,
becomes its priority (over all-reduce, carried in the gradient's all-reduce: ``B`` floats
more; over joblib, returned with the weights), so the update and the priorities are those
of one learner on the whole minibatch. n-step returns (``config.n_step``): the shards
carry each transition's span (joblib: the parent computes the targets).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ..config import TrainConfig
from ..options import SchemeOptions
from ..parallel import replica
from ..parallel.comm import comm_option
from ..parallel.rounds import run_rounds
from ..replay import Minibatch
from ..runtime.learner import Learner
from ..runtime.native import native_reason
from ..runtime.results import RunResult
from .serial import one_learner

__all__ = ["Options", "Replica", "run", "shard"]


@dataclass(frozen=True)
class Options(SchemeOptions):
    """Options of ``sharded`` (keyword arguments of :func:`dqnlab.train`)."""

    comm: str = comm_option()


def shard(batch: Minibatch, k: int) -> tuple[list[Minibatch], np.ndarray]:
    """Split a minibatch of ``B`` transitions into ``k`` contiguous shards.

    Returns
    -------
    (shards, sizes)
        ``k`` Minibatches (sizes ``B // k`` or ``B // k + 1``, as
        :func:`numpy.array_split`; every field sliced alike, those None stay None) and
        their ``(k,)`` int64 sizes.

    Raises
    ------
    ValueError
        If ``k`` exceeds ``B`` (a shard would be empty).
    """
    b = len(batch.actions)
    if not 1 <= k <= b:
        raise ValueError(f"cannot split a minibatch of {b} transitions into {k} shards: batch_size must be >= workers")
    bounds = np.cumsum([0] + [b // k + (1 if i < b % k else 0) for i in range(k)])
    shards = [Minibatch(*(None if field is None else field[lo:hi] for field in batch))
              for lo, hi in itertools.pairwise(bounds)]
    return shards, np.diff(bounds).astype(np.int64)


class Replica(replica.Replica):
    """``sharded`` at one rank of the all-reduce group (``comm="allreduce"``)."""

    def rank_update(self, batch: Minibatch, share: float, grad_norm: bool) -> None:
        """Gradient of this rank's shard, all-reduced into the whole minibatch's; the same step at every rank.

        ``batch``: this rank's shard; ``share``: its size over the minibatch's. With prioritized
        replay each transition's loss is weighted by its importance-sampling weight (normalised
        over the whole minibatch when it was sampled), and the shards' TD errors travel in the
        same all-reduce (:meth:`error_carry`: ``B`` floats more), so that rank 0 has them all.
        """
        agent = self.agent
        # 1. the TD loss of this rank's shard and its gradient (the mean over the shard)
        loss = agent.compute_gradients(batch, agent.td_targets(batch))
        q_max = agent.diagnostics(grad_norm=False)["q_max_mean"]
        # 2. all-reduce: sum over ranks of share_k * (gradient_k, loss_k, q_k) = the whole minibatch's
        #    (and, prioritized, every shard's TD errors, unweighted)
        grads = [p.grad for p in agent.online.parameters() if p.grad is not None]
        carry = self.error_carry()
        loss, q_max = self.coll.allreduce_weighted(grads, [loss, q_max], share, carry)
        self.gather_errors(carry, reduced=True)
        # 3. the same clipped optimiser step at every rank (a non-finite loss: no step anywhere)
        replica.finite_or_raise(loss, agent.updates + 1)
        norm = agent.diagnostics(grad_norm=True)["grad_norm"] if grad_norm else None
        agent.step_optimizer()
        agent.updates += 1
        if agent.config.target_update and agent.updates % agent.config.target_update == 0:
            agent.sync_target()
        agent.record_diagnostics({"loss": loss, "q_max_mean": q_max, **({"grad_norm": norm} if grad_norm else {})})


def run(config: TrainConfig, options: Options, *, workers: int = 1, progress: bool = True,
        callback: Callable[[RunResult], Any] | None = None,
        _checkpoint: Any = None) -> RunResult:
    """Train one learner whose every update is split across ``workers`` processes.

    Parameters
    ----------
    config : TrainConfig
        ``batch_size`` is the whole minibatch ``B``, split into ``workers`` shards.
    options : Options
        ``comm`` (see :class:`Options`).
    workers : int
        K workers (>= 1, <= ``batch_size``): with all-reduce this process (shard 0) and
        K - 1 worker processes; with joblib K worker processes (K = 1 runs the step in
        this process: serial plus the cost of copying the state).
    progress, callback
        As for :func:`dqnlab.train`.

    Returns
    -------
    RunResult
        ``time_split`` and ``extra`` as in :func:`dqnlab.parallel.rounds.run_rounds`, with
        ``shard_sizes``, ``effective_batch`` (= ``batch_size``) and ``optimizer``
        (with all-reduce, or joblib and ``"sgd"``, an update is one step on the whole minibatch).

    Raises
    ------
    ValueError
        If ``workers`` > ``batch_size``.
    WorkerError
        If a worker fails; ``err.partial`` holds the run so far (``status="failed"``).
    DivergedError
        If a TD loss is non-finite.
    """
    if workers > config.batch_size:
        raise ValueError(f"sharded needs batch_size >= workers (one transition per shard), "
                         f"got batch_size {config.batch_size} and {workers} workers")
    reason = native_reason(config, config.device)
    comm = options.comm if options.comm != "auto" else "allreduce" if reason else "threads"
    sizes = shard(Minibatch(*(np.zeros(config.batch_size),) * 6), workers)[1]
    extra = {"shard_sizes": sizes.tolist(), "effective_batch": config.batch_size, "optimizer": config.optimizer}
    if comm == "threads":
        if reason:
            raise ValueError(f"sharded with comm='threads' runs on the compiled core, and {reason}; "
                             f"use comm='allreduce'")
        return one_learner("sharded", config, replace(options, comm="threads"), team=workers, progress=progress,
                           callback=callback, checkpoint=_checkpoint, extra=extra)
    options = replace(options, comm=comm)

    def sample(learner: Learner) -> list[Minibatch]:
        return [learner.buffer.sample(config.batch_size)]

    def split(batches: list[Minibatch]) -> tuple[list[Minibatch], np.ndarray]:
        return shard(batches[0], workers)  # joblib: the shards, averaged weighted by their sizes

    return run_rounds("sharded", config, workers, progress, callback, options, Replica, sample, split, extra,
                      _checkpoint)
