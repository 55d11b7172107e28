"""Synchronous rounds: the loop of ``sharded`` and ``averaged``.

The parent acts and owns the replay buffer; every update is one round of the K workers:
over all-reduce (:mod:`dqnlab.parallel.allreduce`: each rank a replica of the model, the
scheme's :class:`~dqnlab.parallel.allreduce.Replica` says what is reduced), or one joblib
round in which each worker takes one optimiser step (:meth:`DQNAgent.gradient_step
<dqnlab.DQNAgent.gradient_step>`) from a copy of the current state, and the K results are averaged
back into the parent's learner (:func:`parallel_update`). :func:`run_rounds` is the whole run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any

import joblib
import numpy as np
import torch

from ..agent.dqn import DQNAgent
from ..config import TrainConfig
from ..options import SchemeOptions, option
from ..replay import Minibatch
from ..runtime.driver import build_result, run_to_end
from ..runtime.errors import TaskFailed
from ..runtime.learner import Learner
from ..runtime.loop import RunLoop
from ..runtime.results import RunResult
from .allreduce import COMM_CHANNELS, AllReduceGroup, Replica, reprioritize
from .faults import check_fault, describe
from .procwatch import exit_from_pool_error
from .threads import parent_handles_sigint, pin_torch_threads, torch_threads
from .weights import (
    average_optimizer_states,
    average_weights,
    load_optimizer_state,
    normalised_coefficients,
    optimizer_state,
)

__all__ = ["train_step_task", "RoundStats", "parallel_update", "comm_option", "run_rounds"]


_STEP_AGENT = threading.local()


def _step_agent(config: TrainConfig) -> DQNAgent:
    """This thread's scratch agent for :func:`train_step_task` (built once per config)."""
    cache = vars(_STEP_AGENT)  # this thread's
    if cache.get("key") != config:
        cache.update(key=config, agent=DQNAgent(config, seed=0))
    return cache["agent"]


def train_step_task(worker: int, workers: int, parent_pid: int, config: TrainConfig,
                    state: dict[str, Any], boards: np.ndarray, actions: np.ndarray, targets: np.ndarray,
                    update: int, fault: dict[str, Any] | None = None, grad_norm: bool = False,
                    weights: np.ndarray | None = None) -> dict[str, Any]:
    """One optimiser step from a copy of the learner's state, in a worker (errors are returned, not raised).

    Loads ``state`` (``online`` weights and optimiser state ``opt``) into a scratch
    agent, computes the TD loss and its gradient (:meth:`DQNAgent.compute_gradients`,
    the mean over the ``n`` transitions, each weighted by ``weights`` ``(n,)`` float32 when
    given: a prioritized sample's importance-sampling weights) of ``boards`` ``(n, 4, 4)``
    uint8 and ``actions`` ``(n,)`` int64 against the precomputed ``targets`` ``(n,)`` float32
    (:meth:`DQNAgent.td_targets`, computed by the parent, which holds the same weights and
    the transitions' other columns, n-step ``steps`` included: no need to ship the target
    network), backpropagates, clips the gradient norm (``config.max_grad_norm``) and
    takes one step of the config's optimiser.

    Returns
    -------
    dict
        ``ok`` True with ``weights``, ``opt`` (new optimiser state), ``diagnostics``
        (:meth:`DQNAgent.diagnostics` of the step: the loss before it and mean max-Q; with
        ``grad_norm``, the gradient norm too, which an n-tuple table's sparse gradient
        makes cost about a step), ``compute_s`` (seconds of the step) and, with ``weights``,
        ``td_errors`` (``(n,)`` float32 ``|Q(s, a) - y|`` before the step: the new priorities);
        or ``ok`` False with ``message`` and ``traceback`` text of the exception.
    """
    try:
        with parent_handles_sigint(parent_pid):
            return _train_step(worker, workers, parent_pid, config, state, boards, actions, targets,
                               update, fault, grad_norm, weights)
    except Exception as e:  # noqa: BLE001 - reported to the parent, which raises WorkerError
        return {"ok": False, "message": describe(e), "traceback": traceback.format_exc()}


def _train_step(worker: int, workers: int, parent_pid: int, config: TrainConfig,
                state: dict[str, Any], boards: np.ndarray, actions: np.ndarray, targets: np.ndarray,
                update: int, fault: dict[str, Any] | None, grad_norm: bool,
                weights: np.ndarray | None) -> dict[str, Any]:
    pin_torch_threads(workers, parent_pid)
    check_fault(fault, worker, updates=update)
    t0 = time.perf_counter()
    agent = _step_agent(config)
    agent.set_weights(state["online"])
    load_optimizer_state(agent, state["opt"])
    agent.gradient_step(Minibatch(boards, actions, None, None, None, None, weights=weights), torch.from_numpy(targets),
               update=update + 1)
    out = {"ok": True, "weights": agent.get_weights(), "opt": optimizer_state(agent),
           "diagnostics": agent.diagnostics(grad_norm)}
    if weights is not None:
        out["td_errors"] = agent.td_errors()
    out["compute_s"] = time.perf_counter() - t0
    return out


class RoundStats:
    """Time accounting of :func:`parallel_update` rounds, per worker (seconds): ``compute`` and
    ``comm`` ``(K,)`` float64, the parent's own ``parent`` seconds, ``rounds`` and their ``round_s``."""

    def __init__(self, workers: int):
        self.compute = np.zeros(workers)
        self.comm = np.zeros(workers)
        self.parent = 0.0
        self.rounds = 0
        self.round_s = 0.0

    def state_dict(self) -> dict[str, Any]:
        """The statistics as a checkpoint holds them (copies)."""
        return {"compute": self.compute.copy(), "comm": self.comm.copy(), "parent": self.parent,
                "rounds": self.rounds, "round_s": self.round_s}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output (of as many workers)."""
        if len(state["compute"]) != len(self.compute):
            raise ValueError(f"round stats of {len(state['compute'])} workers, not {len(self.compute)}")
        self.compute, self.comm = np.array(state["compute"], float), np.array(state["comm"], float)
        self.parent, self.rounds, self.round_s = float(state["parent"]), int(state["rounds"]), float(state["round_s"])


def parallel_update(parallel: joblib.Parallel, agent: DQNAgent, batches: Sequence[Minibatch],
                    coefficients: Sequence[float] | np.ndarray | None,
                    stats: RoundStats | None = None, fault: dict[str, Any] | None = None,
                    grad_norm: bool = False, buffer: Any = None) -> float:
    """One update of ``agent`` by K workers, each stepping on one of ``batches``; the
    returned weights (and optimiser states) are averaged into ``agent``.

    This is the update of the ``sharded`` scheme (``batches`` = shards of one
    minibatch, ``coefficients`` = shard sizes) and of ``averaged`` (K independent
    minibatches, equal coefficients). With plain SGD, one step and coefficients
    proportional to shard sizes, the result equals one SGD step on the concatenated
    minibatch: ``sum_k (n_k/B) (w - lr g_k) = w - lr sum_k (n_k/B) g_k``.

    The targets are computed here (n-step ``steps`` included); with prioritized replay
    each worker also gets its batch's importance-sampling ``weights`` and returns its TD
    errors, which become the new priorities in ``buffer``.

    Parameters
    ----------
    parallel : joblib.Parallel
        An open pool (``with joblib.Parallel(n_jobs=K) as parallel``).
    agent : DQNAgent
        The learner; its weights, optimiser state and update count are updated, its
        target network is synced when ``config.target_update`` says so, and its
        :meth:`~DQNAgent.diagnostics` become the coefficient-weighted means of the workers'.
    batches : sequence of Minibatch
        One per worker (already augmented, with ``config.augment_symmetry``).
    coefficients : sequence of float, optional
        Averaging weights (normalised); None = equal.
    stats : RoundStats, optional
        Accumulates per-worker compute and communication seconds.
    grad_norm : bool
        Also measure the workers' gradient norms (the agent's ``grad_norm`` keeps the
        last one measured otherwise); default False.
    buffer : PrioritizedReplayBuffer, optional
        The buffer a prioritized sample (``weights`` and ``indices`` set) was drawn from:
        its slots get the workers' TD errors as priorities
        (:func:`~dqnlab.parallel.allreduce.reprioritize`). None: no priorities set.

    Returns
    -------
    float
        The coefficient-weighted mean of the workers' TD losses before the step.

    Raises
    ------
    TaskFailed
        If a worker raised or its process died (the caller turns it into WorkerError).
    """
    t0 = time.perf_counter()
    k = len(batches)
    targets = [agent.td_targets(b).numpy() for b in batches]
    state = {"online": agent.get_weights(), "opt": optimizer_state(agent)}
    t1 = time.perf_counter()
    try:
        results = parallel(joblib.delayed(train_step_task)(i, k, os.getpid(), agent.config, state,
                                                           batches[i].boards, batches[i].actions, targets[i],
                                                           agent.updates, fault, grad_norm, batches[i].weights)
                           for i in range(k))
    except Exception as e:  # a dead process (TerminatedWorkerError) or a broken pool
        how = exit_from_pool_error(str(e)) or describe(e).splitlines()[0]
        raise TaskFailed(None, f"a worker process died ({how})", traceback.format_exc()) from e
    t2 = time.perf_counter()
    for i, r in enumerate(results):
        if not r["ok"]:
            raise TaskFailed(i, r["message"], r["traceback"])
    c = normalised_coefficients(k, coefficients)
    agent.set_weights(average_weights([r["weights"] for r in results], c))
    load_optimizer_state(agent, average_optimizer_states([r["opt"] for r in results], c))
    agent.record_diagnostics({name: np.dot(c, [r["diagnostics"][name] for r in results])
                              for name in results[0]["diagnostics"]})
    agent.updates += 1
    if agent.config.target_update and agent.updates % agent.config.target_update == 0:
        agent.sync_target()
    if "td_errors" in results[0]:
        reprioritize(buffer, batches, np.concatenate([r["td_errors"] for r in results]))
    t3 = time.perf_counter()
    if stats is not None:
        compute = np.array([r["compute_s"] for r in results])
        stats.compute += compute
        stats.comm += np.maximum(0.0, (t2 - t1) - compute)
        stats.parent += (t1 - t0) + (t3 - t2)
        stats.rounds += 1
        stats.round_s += t2 - t1
    return agent.diagnostics()["loss"]


def comm_option() -> Any:
    """The ``comm`` option of ``sharded`` and ``averaged`` (declared here once for both)."""
    return option("allreduce", "How the workers' steps are combined: allreduce (a torch.distributed gloo process "
                  "group; only the minibatch and the reduced tensors travel) or joblib (a round trip of the "
                  "whole state per update).", choices=COMM_CHANNELS)


def run_rounds(scheme: str, config: TrainConfig, workers: int, progress: bool,
               callback: Callable[[RunResult], Any] | None, options: SchemeOptions, replica: type[Replica],
               sample: Callable[[Learner], list[Minibatch]],
               split: Callable[[list[Minibatch]], tuple[list[Minibatch], np.ndarray | None]],
               extra: dict[str, Any], fault: dict[str, Any] | None = None,
               checkpoint: Any = None) -> RunResult:
    """The loop of the synchronous schemes (``sharded``, ``averaged``).

    The parent is the single learner (:class:`~dqnlab.runtime.learner.Learner`: ``n_envs``
    boards, the replay buffer, epsilon, the replay ratio). Every owed update draws
    ``sample(learner)`` (augmented by the learner's agent when ``config.augment_symmetry``;
    with ``config.prioritized``, at the learner's annealed importance-sampling exponent,
    the minibatches carrying their weights) and is, by ``options.comm``:

    * ``"allreduce"``: one update of the :class:`~dqnlab.parallel.allreduce.AllReduceGroup`
      of ``replica`` (rank 0 is this process);
    * ``"joblib"``: one :func:`parallel_update` round over ``split(batches)`` (the
      minibatches of the K workers and their averaging coefficients).

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
    """
    comm = options.comm
    learner = Learner(config, worker=0)
    learner.samples_per_update = extra["effective_batch"]  # sharded: B, in shards; averaged: K minibatches of B
    stats = RoundStats(workers)
    saved = checkpoint.state if checkpoint is not None and checkpoint.state is not None else None
    if saved is not None:
        if saved.get("comm", "joblib") != comm:
            raise ValueError(f"the checkpoint was made with comm={saved.get('comm', 'joblib')!r}; resume it with that")
        learner.load_state_dict(saved["learner"])
        if comm == "joblib":
            stats.load_state_dict(saved["rounds"])
    group = None
    if comm == "allreduce":
        ranks = None if saved is None else [{**r, "agent": r["agent"] or saved["learner"]["agent"]}
                                            for r in saved["ranks"]]
        group = AllReduceGroup(replica, learner.agent, dataclasses.asdict(options), workers, fault, ranks,
                               None if saved is None else saved["stats"])
    agent = learner.agent

    def split_s() -> tuple[np.ndarray, np.ndarray, float]:
        """Per worker (compute, comm) seconds and the parent's own update seconds."""
        if group is None:
            return stats.compute, stats.comm, stats.parent
        compute, comm_s = group.time_split()
        return compute, comm_s, 0.0

    def time_split() -> dict[str, float]:
        compute, comm_s, parent = split_s()
        return {"acting": learner.timing["acting"],
                "learning": float(compute.sum() + parent + learner.timing["learning"]),
                "communication": float(comm_s.sum())}

    def result(status: str | None = None) -> RunResult:
        compute, comm_s, _ = split_s()
        hosts = [None] * workers if group is None else group.hosts()
        per_worker = [{"worker": i, "learning_s": float(compute[i]), "communication_s": float(comm_s[i]),
                       "host": hosts[i]} for i in range(workers)]
        if group is None:
            rounds, round_s, own = stats.rounds, stats.round_s, {}
        else:
            rounds, round_s = agent.updates, group.coll.comm_s
            own = {"comm_bytes_per_update": group.bytes_per_update(), **group.replica.stats()}
        return build_result(scheme, config, workers, loop, learner.progress(time_split()),
                            agent.get_weights() if group is None else group.final_weights(), status,
                            options.to_dict(), extra={**extra, "comm": comm, **own, "per_worker": per_worker,
                                   "torch_threads_per_worker": torch_threads(workers), "rounds": rounds,
                                   "round_ms_mean": 1000 * round_s / rounds if rounds else None,
                                   "replay": learner.buffer.statistics()})

    def state() -> dict[str, Any]:
        out = {"comm": comm, "learner": learner.state_dict()}
        if group is None:
            return {**out, "rounds": stats.state_dict()}
        return {**out, "ranks": group.states(), "stats": group.replica.stats()}

    loop = RunLoop(config, progress=progress, callback=callback, snapshot=result, checkpointer=checkpoint,
                   state=state)
    learner.clock0 = loop.t0

    def one_update(parallel: joblib.Parallel | None, grad_norm: bool) -> None:
        t0 = time.perf_counter()
        if config.prioritized:
            learner.buffer.beta = learner.priority_beta
        batches = [agent.augment(b) for b in sample(learner)]  # (config.augment_symmetry) by the learner's stream
        learner.timing["learning"] += time.perf_counter() - t0
        parts, coefficients = split(batches)
        if group is not None:
            group.update(parts, normalised_coefficients(workers, coefficients), grad_norm, learner.buffer)
            learner.last_loss = agent.diagnostics(grad_norm=False)["loss"]
        else:
            learner.last_loss = parallel_update(parallel, agent, parts, coefficients, stats, fault, grad_norm,
                                                learner.buffer)

    def rounds() -> None:
        with contextlib.ExitStack() as stack:
            parallel = None
            if group is None:
                parallel = stack.enter_context(joblib.Parallel(n_jobs=workers, batch_size=1))
            else:
                stack.enter_context(group)
            while not loop.done:
                target = learner.env_steps + loop.chunk_steps(config.n_envs)
                norm_measured = False  # the gradient norm reported is the chunk's first (a sparse one costs a step)
                while learner.env_steps < target and (loop.deadline is None or time.perf_counter() < loop.deadline):
                    learner.act_step()
                    for _ in range(learner.owed_updates()):
                        one_update(parallel, grad_norm=not norm_measured)
                        norm_measured = True
                        learner.spend_updates(1)
                if group is not None:
                    group.poll()
                loop.report(learner.progress(time_split()))
            if group is not None and (checkpoint is not None or not group.replica.shares_state):
                final["state"] = state()  # every rank's state while the group is up (and the final weights)

    def failure_state() -> dict[str, Any] | None:
        """After a worker failed: the checkpoint, where this process holds the whole run (joblib rounds keep
        nothing in the workers; an all-reduce group whose ranks' models equal rank 0's)."""
        if group is None:
            return state()
        ranks = group.states_after_failure()
        return None if ranks is None else {"comm": comm, "learner": learner.state_dict(), "ranks": ranks,
                                           "stats": group.replica.stats()}

    final: dict[str, Any] = {}
    return run_to_end(scheme, loop, rounds, result,
                      final_state=None if group is None else lambda: final.get("state"), failure_state=failure_state)
