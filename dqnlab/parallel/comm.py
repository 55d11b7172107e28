"""The two ``comm`` channels of ``sharded`` and ``averaged``: how the K workers' steps of an update are combined.

Both are one interface (:class:`Comm`), so that the loop of the synchronous rounds
(:func:`~dqnlab.parallel.rounds.run_rounds`) is written once:

* :class:`AllReduceComm` (``"allreduce"``): the gloo process group of
  :class:`~dqnlab.parallel.allreduce.AllReduceGroup`, rank 0 in this process; every rank holds a
  replica of the model, and only the minibatch parts and what the scheme reduces travel;
* :class:`JoblibComm` (``"joblib"``): a joblib round per update
  (:func:`~dqnlab.parallel.joblib_round.parallel_update`): the whole state goes out and the K
  stepped copies come back, averaged.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Self

import joblib
import numpy as np

from ..agent.dqn import DQNAgent
from ..options import SchemeOptions, option
from ..replay import Minibatch
from .allreduce import AllReduceGroup
from .faults import injected
from .joblib_round import RoundStats, parallel_update
from .replica import Replica
from .weights import normalised_coefficients

__all__ = ["COMM_CHANNELS", "THREADED_CHANNELS", "comm_option", "Comm", "AllReduceComm", "JoblibComm", "open_comm"]

#: The ways ``sharded`` and ``averaged`` combine their workers' steps across processes (``comm`` option).
COMM_CHANNELS = ("allreduce", "joblib")
#: The ``comm`` option's values: also threads of this process over the compiled core (``sharded``), and ``auto``
#: (threads where the scheme has them and the learner runs on the compiled core, else allreduce).
THREADED_CHANNELS = ("auto", "threads", *COMM_CHANNELS)


def comm_option() -> Any:
    """The ``comm`` option of ``sharded`` and ``averaged`` (declared here once for both: one flag)."""
    return option("auto", "How the workers' steps of every update are combined: threads (sharded: helper threads "
                  "of this process compute shares of each minibatch on the compiled core, and the learner applies "
                  "them as one step; n-tuple networks on the CPU), allreduce (a torch.distributed gloo process "
                  "group; only the minibatch and the reduced tensors travel), joblib (a round trip of the whole "
                  "state per update), or auto (threads where the scheme has them and the learner runs on the "
                  "compiled core, else allreduce).", choices=THREADED_CHANNELS,
                  tip="How the workers combine their steps at every update: threads (in this process, on the "
                      "compiled core: the fastest), allreduce (worker processes that add up their gradients), "
                      "joblib (the whole learner sent to each worker and back, every update: far slower) or auto.")


class Comm:
    """How K workers combine their steps of every update: what the loop of the rounds calls.

    Use as a context manager around the run: its :attr:`engine` is up inside.

    Attributes
    ----------
    name : str
        The ``comm`` option's value (one of :data:`COMM_CHANNELS`).
    engine : context manager
        What runs the workers (the joblib pool, or the process group).
    spread : bool
        Whether the run's model is spread over the workers (each rank's own): then the final weights and a
        checkpoint need every worker's state, gathered while the channel is open.
    """

    name = ""
    spread = False
    engine: Any = None

    def __enter__(self) -> Self:
        self.engine.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.engine.__exit__(*exc)

    def update(self, parts: list[Minibatch], shares: np.ndarray | None, grad_norm: bool, buffer: Any) -> float:
        """One update of the learner's agent from K ``parts`` (one per worker, augmented already).

        Parameters
        ----------
        parts : list of Minibatch
            Worker ``k``'s part of the update (``sharded``: its shard; ``averaged``: its own minibatch).
        shares : (K,) array or None
            The parts' weights in the update (non-negative, normalised here; None: equal).
        grad_norm : bool
            Also measure the gradient norm (it costs about a step with a sparse gradient).
        buffer : PrioritizedReplayBuffer or None
            The buffer a prioritized sample was drawn from: it gets every part's TD errors as priorities.

        Returns
        -------
        float
            The update's TD loss (of the whole minibatch, or the parts' weighted mean).

        Raises
        ------
        TaskFailed
            If a worker raised or was lost, naming it.
        FloatingPointError
            If the TD loss was non-finite (the update is not applied).
        """
        raise NotImplementedError

    def poll(self) -> None:
        """Between chunks of acting: take the workers' news (raises TaskFailed for a lost one)."""

    def time_split(self) -> tuple[np.ndarray, np.ndarray, float]:
        """Per worker ``(compute, comm)`` seconds, ``(K,)`` float64 each, and the parent's own update seconds."""
        raise NotImplementedError

    def hosts(self) -> list[str | None]:
        """Each worker's host (None where not known)."""
        raise NotImplementedError

    def final_weights(self) -> dict[str, np.ndarray]:
        """The run's model (float32 arrays by parameter name)."""
        raise NotImplementedError

    def extra(self) -> dict[str, Any]:
        """The channel's part of the result's ``extra``: ``rounds`` (updates), ``round_ms_mean`` and its own."""
        raise NotImplementedError

    def state(self) -> dict[str, Any]:
        """The channel's part of the run's checkpoint state."""
        raise NotImplementedError

    def failure_state(self) -> dict[str, Any] | None:
        """:meth:`state` after a worker failed, where this process holds it all; None where it went with the
        workers."""
        return self.state()


def _round_ms(rounds: int, seconds: float) -> dict[str, Any]:
    return {"rounds": rounds, "round_ms_mean": 1000 * seconds / rounds if rounds else None}


class JoblibComm(Comm):
    """``comm="joblib"``: a :func:`~dqnlab.parallel.joblib_round.parallel_update` round per update.

    Parameters
    ----------
    agent : DQNAgent
        The learner's agent (the workers step copies of its state).
    workers : int
        K joblib workers.
    saved : dict, optional
        The run's checkpoint state to continue from (its ``rounds``: the :class:`RoundStats`).
    """

    name = "joblib"

    def __init__(self, agent: DQNAgent, workers: int, saved: dict[str, Any] | None):
        self.agent, self.workers = agent, workers
        self.fault = injected()  # (a test's, for the rounds' workers: faults.inject)
        self.stats = RoundStats(workers)
        if saved is not None:
            self.stats.load_state_dict(saved["rounds"])
        self.engine = joblib.Parallel(n_jobs=workers, batch_size=1)

    def update(self, parts: list[Minibatch], shares: np.ndarray | None, grad_norm: bool, buffer: Any) -> float:
        return parallel_update(self.engine, self.agent, parts, shares, self.stats, self.fault, grad_norm, buffer)

    def time_split(self) -> tuple[np.ndarray, np.ndarray, float]:
        return self.stats.compute, self.stats.comm, self.stats.parent

    def hosts(self) -> list[str | None]:
        return [None] * self.workers

    def final_weights(self) -> dict[str, np.ndarray]:
        return self.agent.get_weights()

    def extra(self) -> dict[str, Any]:
        return _round_ms(self.stats.rounds, self.stats.round_s)

    def state(self) -> dict[str, Any]:
        return {"rounds": self.stats.state_dict()}


class AllReduceComm(Comm):
    """``comm="allreduce"``: the :class:`~dqnlab.parallel.allreduce.AllReduceGroup` of the scheme's replica.

    Parameters
    ----------
    replica : type of Replica
        The scheme's replica.
    agent : DQNAgent
        The learner's agent (rank 0's replica).
    options : SchemeOptions
        The scheme's options (every rank's replica reads them).
    workers : int
        K ranks, this process included.
    saved : dict, optional
        The run's checkpoint state to continue from (its ``ranks`` and the replica's ``stats``).
    """

    name = "allreduce"

    def __init__(self, replica: type[Replica], agent: DQNAgent, options: SchemeOptions, workers: int,
                 saved: dict[str, Any] | None):
        ranks = None if saved is None else [{**r, "agent": r["agent"] or saved["learner"]["agent"]}
                                            for r in saved["ranks"]]  # (a rank equal to rank 0 saved none)
        self.group = self.engine = AllReduceGroup(replica, agent, dataclasses.asdict(options), workers, ranks,
                                                  None if saved is None else saved["stats"])
        self.agent, self.workers = agent, workers

    @property
    def spread(self) -> bool:
        return not self.group.replica.shares_state

    def update(self, parts: list[Minibatch], shares: np.ndarray | None, grad_norm: bool, buffer: Any) -> float:
        self.group.update(parts, normalised_coefficients(self.workers, shares), grad_norm, buffer)
        return self.agent.diagnostics(grad_norm=False)["loss"]

    def poll(self) -> None:
        self.group.poll()

    def time_split(self) -> tuple[np.ndarray, np.ndarray, float]:
        compute, comm = self.group.time_split()
        return compute, comm, 0.0

    def hosts(self) -> list[str | None]:
        return self.group.hosts()

    def final_weights(self) -> dict[str, np.ndarray]:
        return self.group.final_weights()

    def extra(self) -> dict[str, Any]:
        return {**_round_ms(self.agent.updates, self.group.coll.comm_s),
                "comm_bytes_per_update": self.group.bytes_per_update(), **self.group.replica.stats()}

    def state(self) -> dict[str, Any]:
        return {"ranks": self.group.states(), "stats": self.group.replica.stats()}

    def failure_state(self) -> dict[str, Any] | None:
        ranks = self.group.states_after_failure()
        return None if ranks is None else {"ranks": ranks, "stats": self.group.replica.stats()}


def open_comm(options: SchemeOptions, replica: type[Replica], agent: DQNAgent, workers: int,
              saved: dict[str, Any] | None) -> Comm:
    """The channel ``options.comm`` names (arguments as :class:`AllReduceComm`'s; :class:`JoblibComm` takes
    no replica).

    Raises
    ------
    ValueError
        If a checkpoint ``saved`` was made with the other channel, or (all-reduce) with another number of
        workers.
    """
    made_with = saved["comm"] if saved is not None else options.comm
    if made_with != options.comm:
        raise ValueError(f"the checkpoint was made with comm={made_with!r}; resume it with that")
    if options.comm == "joblib":
        return JoblibComm(agent, workers, saved)
    return AllReduceComm(replica, agent, options, workers, saved)
