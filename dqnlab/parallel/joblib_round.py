"""The joblib round of ``sharded`` and ``averaged`` (``comm="joblib"``): K workers step from copies of the state, averaged back.

Each update ships the learner's weights and optimiser state to K joblib workers; each takes one
optimiser step (:meth:`DQNAgent.gradient_step <dqnlab.DQNAgent.gradient_step>`) on its own minibatch
from that copy (:func:`train_step_task`), and the K new weights and optimiser states are averaged back
into the parent's learner (:func:`parallel_update`): parameter averaging with one local step
(Zinkevich et al. 2010, "Parallelized Stochastic Gradient Descent"). :class:`RoundStats` keeps the
rounds' time split.
"""

from __future__ import annotations

import os
import threading
import time
import traceback
from collections.abc import Sequence
from typing import Any

import joblib
import numpy as np
import torch

from ..agent.dqn import DQNAgent
from ..config import TrainConfig
from ..replay import Minibatch
from ..runtime.errors import TaskFailed
from .faults import check_fault, describe
from .parts import reprioritize
from .supervision import Supervisor
from .threads import parent_handles_sigint, pin_torch_threads
from .weights import (
    average_optimizer_states,
    average_weights,
    load_optimizer_state,
    normalised_coefficients,
    optimizer_state,
)

__all__ = ["train_step_task", "RoundStats", "parallel_update"]


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
        (:func:`~dqnlab.parallel.parts.reprioritize`). None: no priorities set.

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
        raise TaskFailed(*Supervisor(k).died(describe(e), traceback.format_exc())) from e
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

