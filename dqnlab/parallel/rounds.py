"""Synchronous rounds: the loop of ``sharded`` and ``averaged``.

The parent acts and owns the replay buffer; every update is one round of the K workers over
the run's ``comm`` channel (:mod:`dqnlab.parallel.comm`): the all-reduce group (each rank a
replica of the model; the scheme's :class:`~dqnlab.parallel.replica.Replica` says what is
reduced), or a joblib round that averages K stepped copies of the state back into the parent's
learner (:func:`~dqnlab.parallel.joblib_round.parallel_update`). :func:`run_rounds` is the whole run.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from ..config import TrainConfig
from ..options import SchemeOptions
from ..replay import Minibatch
from ..runtime.driver import build_result, run_to_end
from ..runtime.learner import Learner
from ..runtime.loop import RunLoop
from ..runtime.results import RunResult
from .comm import Comm, open_comm
from .replica import Replica
from .threads import torch_threads

__all__ = ["run_rounds"]


def run_rounds(scheme: str, config: TrainConfig, workers: int, progress: bool,
               callback: Callable[[RunResult], Any] | None, options: SchemeOptions, replica: type[Replica],
               sample: Callable[[Learner], list[Minibatch]],
               split: Callable[[list[Minibatch]], tuple[list[Minibatch], np.ndarray | None]],
               extra: dict[str, Any], checkpoint: Any = None) -> RunResult:
    """The loop of the synchronous schemes (``sharded``, ``averaged``).

    The parent is the single learner (:class:`~dqnlab.runtime.learner.Learner`: ``n_envs``
    boards, the replay buffer, epsilon, the replay ratio). Every owed update draws
    ``sample(learner)`` (augmented by the learner's agent when ``config.augment_symmetry``;
    with ``config.prioritized``, at the learner's annealed importance-sampling exponent,
    the minibatches carrying their weights) and is, by ``options.comm``:

    * ``"allreduce"``: one update of the :class:`~dqnlab.parallel.allreduce.AllReduceGroup`
      of ``replica`` (rank 0 is this process; :class:`~dqnlab.parallel.comm.AllReduceComm`);
    * ``"joblib"``: one :func:`~dqnlab.parallel.joblib_round.parallel_update` round
      (:class:`~dqnlab.parallel.comm.JoblibComm`)

    over ``split(batches)``: the parts of the K workers and their weights in the update (None: equal).

    Budget, progress, callback and Ctrl-C as in :class:`~dqnlab.runtime.loop.RunLoop`;
    the end of the run as :func:`~dqnlab.runtime.driver.run_to_end`.

    Time split: ``acting`` is the parent's acting; ``learning`` is every worker's
    update work (summed) plus the parent's sampling and, with joblib, its packing and
    averaging; ``communication`` is, per worker, the time in collectives (all-reduce)
    or the round's wall time minus its step time (joblib: pickling, transfer, dispatch),
    waiting for the slowest included, summed.

    Diagnostics: the loss and mean max-Q of every update's whole minibatch (joblib and
    ``averaged``: the workers' weighted mean); their gradient norm is measured on the
    first update after each report only (an n-tuple table's sparse gradient makes it
    cost about as much as the step).

    Prioritized replay: after every update the TD errors of every worker's transitions
    (gathered at rank 0 by the all-reduce, or returned by the joblib workers) become their
    priorities, as serial's learner sets its own.

    ``extra`` goes into the result's ``extra`` (``effective_batch``: the samples one
    update trains on), with ``comm``, ``per_worker``, ``rounds`` (updates),
    ``round_ms_mean`` (ms per update of the joblib round, or of rank 0's collectives),
    with all-reduce ``comm_bytes_per_update`` (bytes rank 0 broadcast and all-reduced
    per update), the replica's counters and ``replay`` (the buffer's
    :meth:`~dqnlab.replay.ReplayBuffer.statistics`). ``checkpoint`` (a
    :class:`~dqnlab.runtime.checkpoint.Checkpointer`): the learner, the round statistics
    and, where the ranks' models differ, each rank's state, so that a resumed run
    continues exactly, with the same number of workers.

    Raises
    ------
    ValueError
        If ``checkpoint`` was made with the other ``comm``, or (all-reduce) with another number of workers.
    WorkerError, DivergedError
        As :func:`~dqnlab.runtime.driver.run_to_end` (a worker failed or was lost; a non-finite TD loss).
    """
    learner = Learner(config, worker=0)
    learner.samples_per_update = extra["effective_batch"]  # sharded: B, in shards; averaged: K minibatches of B
    saved = checkpoint.take_state() if checkpoint is not None else None
    if saved is not None:
        learner.load_state_dict(saved["learner"])
    comm = open_comm(options, replica, learner.agent, workers, saved)
    return _Rounds(scheme, learner, comm, options, workers, sample, split, extra, progress, callback, checkpoint).run()


class _Rounds:
    """One run of :func:`run_rounds`: the learner acts, and every update it owes is one round over ``comm``.

    Attributes
    ----------
    loop : RunLoop
        The run's loop (its result is :meth:`result`, its checkpoint state :meth:`state`).
    final : dict or None
        The final checkpoint state, taken while the channel is open (a run that checkpoints, or whose
        model is spread over the workers: :attr:`~dqnlab.parallel.comm.Comm.spread`).
    """

    def __init__(self, scheme: str, learner: Learner, comm: Comm, options: SchemeOptions, workers: int,
                 sample: Callable[[Learner], list[Minibatch]],
                 split: Callable[[list[Minibatch]], tuple[list[Minibatch], np.ndarray | None]],
                 extra: dict[str, Any], progress: bool, callback: Callable[[RunResult], Any] | None,
                 checkpoint: Any):
        self.scheme, self.learner, self.comm, self.options, self.workers = scheme, learner, comm, options, workers
        self.sample, self.split, self.extra = sample, split, extra
        self.checkpointing = checkpoint is not None
        self.final: dict[str, Any] | None = None
        self.loop = RunLoop(learner.config, progress=progress, callback=callback, snapshot=self.result,
                            checkpointer=checkpoint, state=self.state)
        learner.clock0 = self.loop.t0

    def run(self) -> RunResult:
        """The run, ended as every run is (:func:`~dqnlab.runtime.driver.run_to_end`)."""
        return run_to_end(self.scheme, self.loop, self.body, self.result, final_state=lambda: self.final,
                          failure_state=self.failure_state)

    def body(self) -> None:
        """Chunks of acting and updating, a report after each, until the budget or a stop."""
        loop, learner = self.loop, self.learner
        with self.comm:
            while not loop.done:
                self.chunk(learner.env_steps + loop.chunk_steps(learner.config.n_envs))
                self.comm.poll()
                loop.report(learner.progress(self.time_split()))
            if self.checkpointing or self.comm.spread:
                self.final = self.state()  # every worker's state while the channel is open (and the final weights)

    def chunk(self, target: int) -> None:
        """Act until ``target`` env steps (or the time budget), making every update owed on the way. The
        gradient norm reported is the chunk's first update's (a sparse one costs about a step)."""
        learner, deadline = self.learner, self.loop.deadline
        grad_norm = True
        while learner.env_steps < target and (deadline is None or time.perf_counter() < deadline):
            learner.act_step()
            for _ in range(learner.owed_updates()):
                self.update(grad_norm)
                grad_norm = False
                learner.spend_updates(1)

    def update(self, grad_norm: bool) -> None:
        """One update: sample (and augment) the minibatches, split them, one round of the workers."""
        learner = self.learner
        t0 = time.perf_counter()
        if learner.config.prioritized:
            learner.buffer.beta = learner.priority_beta
        batches = [learner.agent.augment(b) for b in self.sample(learner)]  # (augment_symmetry) by the learner's stream
        learner.timing["learning"] += time.perf_counter() - t0
        parts, shares = self.split(batches)
        learner.last_loss = self.comm.update(parts, shares, grad_norm, learner.buffer)

    def time_split(self) -> dict[str, float]:
        """Seconds of ``acting``, ``learning`` and ``communication`` so far (see :func:`run_rounds`)."""
        compute, comm_s, parent = self.comm.time_split()
        return {"acting": self.learner.timing["acting"],
                "learning": float(compute.sum() + parent + self.learner.timing["learning"]),
                "communication": float(comm_s.sum())}

    def result(self, status: str | None = None) -> RunResult:
        """The run so far (``status``: ``"failed"`` for a failed run's partial result)."""
        learner, workers = self.learner, self.workers
        compute, comm_s, _ = self.comm.time_split()
        hosts = self.comm.hosts()
        per_worker = [{"worker": i, "learning_s": float(compute[i]), "communication_s": float(comm_s[i]),
                       "host": hosts[i]} for i in range(workers)]
        return build_result(self.scheme, learner.config, workers, self.loop, learner.progress(self.time_split()),
                            self.comm.final_weights(), status, self.options.to_dict(),
                            extra={**self.extra, "comm": self.comm.name, **self.comm.extra(), "per_worker": per_worker,
                                   "torch_threads_per_worker": torch_threads(workers),
                                   "replay": learner.buffer.statistics()})

    def state(self) -> dict[str, Any]:
        """The run's checkpoint state: the channel's name, the learner and the channel's own part."""
        return {"comm": self.comm.name, "learner": self.learner.state_dict(copy_agent=False), **self.comm.state()}

    def failure_state(self) -> dict[str, Any] | None:
        """After a worker failed: the checkpoint, where this process holds the whole run (joblib rounds keep
        nothing in the workers; an all-reduce group whose ranks' models equal rank 0's)."""
        part = self.comm.failure_state()
        return None if part is None else {"comm": self.comm.name, "learner": self.learner.state_dict(copy_agent=False), **part}
