"""Rank 0 of the all-reduce over ``torch.distributed``: the process group of ``sharded`` and ``averaged``.

With ``comm="allreduce"`` the K processes of a run form one gloo process group, the way
PyTorch DDP and Horovod run data-parallel SGD: the parent is **rank 0** (it acts, owns
the replay buffer and takes its own share of every update) and ranks 1..K-1 are
long-lived worker tasks started as the other schemes start theirs (joblib: loky
processes, or a Dask cluster; :class:`~dqnlab.parallel.tasks.TaskGroup`). Every rank
holds a :class:`~dqnlab.parallel.replica.Replica` -- a copy of the learner's agent and the
scheme's update on it -- and nothing is shipped per update but each rank's minibatch (one
scatter from rank 0: :mod:`dqnlab.parallel.parts`) and what the scheme reduces (one
all-reduce: ``sharded`` the gradients, ``averaged`` the weights; :mod:`dqnlab.parallel.collectives`).
The weights never travel. With prioritized replay each part also carries its
importance-sampling weights (and with n-step returns each transition's span), and every
rank's TD errors come back to rank 0 for the priorities in an all-reduce; without, nothing
more travels.

The pieces: :mod:`~dqnlab.parallel.parts` (what a rank's part carries),
:mod:`~dqnlab.parallel.addresses` (where the ranks meet), :mod:`~dqnlab.parallel.collectives`
(the group's operations), :mod:`~dqnlab.parallel.replica` (a rank's model and a worker rank's
loop) and here :class:`AllReduceGroup` (rank 0: start the ranks, drive every update, stop).
A rank that dies closes its connections, so the others' collective fails at once; one whose
host cannot be reached stops answering and beating (:class:`~dqnlab.parallel.messages.Heartbeat`);
either way the run ends naming the worker and its host (:meth:`AllReduceGroup.update`, through the
task group's :class:`~dqnlab.parallel.supervision.Supervisor`).
"""

from __future__ import annotations

import contextlib
import datetime
import socket
import time
import traceback
import uuid
from typing import Any, Self

import numpy as np
import torch.distributed as dist

from ..agent.dqn import DQNAgent
from ..replay import Minibatch
from ..runtime.compact import dense
from ..runtime.errors import TaskFailed
from .addresses import store_host
from .collectives import COLLECTIVE_TIMEOUT_S, Collectives
from .faults import describe
from .messages import HEARTBEAT_S, Failed, Report, StateReply
from .parts import STATE, STEP, STOP, Part, pack_minibatch, reprioritize, shipped_columns
from .replica import Replica, replica_task
from .tasks import TaskGroup

__all__ = ["AllReduceGroup"]


class AllReduceGroup:
    """Rank 0's side of a run's process group: start the worker ranks, drive each update, stop.

    Use as a context manager around the run. With one worker there is no group and no
    process: :meth:`update` is the replica's update in this process.

    Parameters
    ----------
    replica_cls : type of Replica
        The scheme's replica.
    agent : DQNAgent
        The learner's agent (rank 0's replica).
    options : dict
        The scheme's options.
    workers : int
        K ranks, this process included.
    states : list of dict, optional
        :meth:`Replica.state` of every rank to start from, agents included (a resumed run;
        default: every rank starts from ``agent``).
    stats : dict, optional
        Rank 0's :meth:`Replica.stats` to continue from (a resumed run).

    Attributes
    ----------
    replica : Replica
        Rank 0's.
    latest : list of dict
        Each rank's last known :meth:`Replica.timing` (rank 0's is live), for the time split.
    tasks : TaskGroup or None
        The worker ranks' tasks while the group is up; their supervision names a lost rank (ranks
        are named from 1: ``names_from=1``).

    Raises
    ------
    ValueError
        If ``states`` are not those of ``workers`` ranks.
    """

    def __init__(self, replica_cls: type[Replica], agent: DQNAgent, options: dict[str, Any], workers: int,
                 states: list[dict[str, Any]] | None = None, stats: dict[str, Any] | None = None):
        self.replica_cls, self.options, self.workers = replica_cls, options, workers
        self.coll = Collectives(0, workers)
        self.replica = replica_cls(agent, self.coll, options)
        if states is not None:
            if len(states) != workers:
                raise ValueError(f"a checkpoint of {len(states)} ranks cannot resume with {workers} workers")
            self.replica.load_state(states[0])
        if stats is not None:
            self.replica.load_stats(stats)
        self.start_states = states
        self.gathered: tuple[int, list[dict[str, Any]]] | None = None  # (updates, every rank's state) last gathered
        self.latest: list[dict[str, float]] = [self.replica.timing()] + [
            dict(states[r]["timing"]) if states else {"compute": 0.0, "comm": 0.0} for r in range(1, workers)]
        self.parts = [Part(agent.config.batch_size, shipped_columns(agent.config)) for _ in range(workers)]
        self.tasks: TaskGroup | None = None
        self.started_on: dict[int, str] = {}  # each worker task's host (from its hello), kept after the group ends
        self.store: Any = None  # the rendezvous TCPStore (rank 0 serves it) while the group is up
        self.updates = 0  # updates driven by this group (this session of the run)
        self.joined = False
        self.broken = False  # a collective failed: the group can no longer be used
        self._states_asked = 0

    # ------------------------------------------------------------------ start and stop
    def __enter__(self) -> Self:
        if self.workers == 1:
            return self
        timeout = datetime.timedelta(seconds=COLLECTIVE_TIMEOUT_S)
        host = store_host()
        self.store = dist.TCPStore(host, 0, self.workers, is_master=True, wait_for_workers=False, timeout=timeout)
        prefix = f"dqnlab-{uuid.uuid4().hex}/"
        start = self.replica.state(with_agent=True)
        kwargs = [dict(replica_cls=self.replica_cls, config=self.replica.agent.config, options=self.options,
                       workers=self.workers, host=host, port=self.store.port, prefix=prefix,
                       state=self.start_states[r] if self.start_states else start)
                  for r in range(1, self.workers)]
        self.tasks = TaskGroup(replica_task, kwargs, own_processes=True, names_from=1).__enter__()
        self.started_on = self.tasks.hosts
        try:
            self._rendezvous(prefix, host)
        except BaseException:
            self.close()
            raise
        return self

    def _rendezvous(self, prefix: str, host: str) -> None:
        """Wait for every worker rank to start (a failed start is named), then join the group."""
        deadline = time.perf_counter() + COLLECTIVE_TIMEOUT_S
        while len(self.tasks.pids) < self.workers - 1:
            alive = self.tasks.alive
            self._take_messages(0.1)
            self._check_lost(alive)
            if time.perf_counter() > deadline or not alive:
                raise self._failure(RuntimeError("worker ranks did not start"))
        try:
            self.coll.join(self.store, prefix, host)
        except Exception as e:  # a worker died before joining, or the rendezvous timed out
            raise self._failure(e) from e
        self.joined = True

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Tell the worker ranks to stop, take their last reports, leave the group. Idempotent."""
        if self.tasks is None:
            return
        if self.joined and not self.broken:
            try:
                self._scatter(STOP, 0)
            except TaskFailed:
                pass
        if self.joined:
            self.coll.leave()
            self.joined = False
        self.tasks.stop()  # (and the pool's spare processes)
        deadline = time.perf_counter() + (0.0 if self.tasks.lost else 10.0)  # (TaskGroup.close waits for a lost one)
        with contextlib.suppress(TaskFailed):  # (the run's error, if any, is known already)
            while self.tasks.alive and time.perf_counter() < deadline:
                self._take_messages(0.05)
            self._take_messages(0.0)
        self.tasks.close()
        self.tasks = None
        # Drop the store now, not when the garbage collector gets to this group: a process forked
        # later (the next run's multiprocessing.Manager) would otherwise inherit it, and stopping a
        # store's server thread that the fork did not copy aborts that process.
        self.store = None

    # ------------------------------------------------------------------ the run
    def update(self, parts: list[Minibatch], shares: np.ndarray, grad_norm: bool = False,
               buffer: Any = None) -> None:
        """One update at every rank: scatter ``parts`` (rank ``r`` gets ``parts[r]`` and its
        share ``shares[r]``, ``(K,)`` float64 summing to 1), then the replica's update here.

        With prioritized replay the parts carry their importance-sampling ``weights``, and
        ``buffer`` (the prioritized buffer they were sampled from; their ``indices`` its
        slots) gets every rank's TD errors as new priorities (:func:`reprioritize`), its time
        counted in rank 0's ``compute``.

        Raises
        ------
        TaskFailed
            If a collective failed (a worker rank raised, died or timed out), naming it.
        FloatingPointError
            If the update's TD loss was non-finite (the weights are not stepped, the
            priorities not set).
        """
        sizes = [len(b.actions) for b in parts]
        if self.workers > 1:
            for part, batch, share in zip(self.parts, parts, shares):
                pack_minibatch(batch, part.raw, part.columns)
                part.share[0] = share
            self._scatter(STEP, self.replica.agent.updates, sizes, grad_norm)
        self.updates += 1
        try:
            self.replica.update(parts[0], float(shares[0]), grad_norm, slots=(0, sum(sizes)))
        except RuntimeError as e:  # gloo: a peer closed its connection, or a timeout
            raise self._failure(e) from e
        if self.updates == 1 and self.workers > 1:
            self.coll.tighten()
        if buffer is not None and self.replica.td_errors is not None:
            t0 = time.perf_counter()
            reprioritize(buffer, parts, self.replica.td_errors)
            self.replica.compute_s += time.perf_counter() - t0

    def states(self) -> list[dict[str, Any]]:
        """Every rank's :meth:`Replica.state` (rank 0's first, without its agent: the learner's
        checkpoint holds it); the worker ranks' agents too unless they equal rank 0's
        (:attr:`Replica.shares_state`).

        Raises
        ------
        TaskFailed
            If a worker does not answer (it died or the group broke).
        """
        with_agents = not self.replica.shares_state
        own = self.replica.state(with_agent=False)
        if self.workers == 1:
            return [own]
        self._states_asked += 1
        ask = self._states_asked
        self._scatter(STATE, 2 * ask + with_agents)
        got: dict[int, Any] = {}
        deadline = time.perf_counter() + COLLECTIVE_TIMEOUT_S
        while len(got) < self.workers - 1:
            alive = self.tasks.alive
            for msg in self._take_messages(0.05):
                if isinstance(msg, StateReply) and msg.id == ask:
                    got[msg.worker + 1] = msg.state
            self._check_lost(alive)
            if time.perf_counter() > deadline or not alive:
                raise self._failure(RuntimeError("a worker rank did not send its state"))
        states = [own] + [got[r] for r in range(1, self.workers)]
        for r, st in enumerate(states):
            self.latest[r] = dict(st["timing"])
        if with_agents:
            self.gathered = (self.replica.agent.updates, states)
        return states

    def hosts(self) -> list[str | None]:
        """Each rank's host (rank 0: this machine's name; None for a rank not started)."""
        return [socket.gethostname()] + [self.started_on.get(r) for r in range(self.workers - 1)]

    def states_after_failure(self) -> list[dict[str, Any]] | None:
        """Every rank's :meth:`Replica.state` once a worker rank has failed, where rank 0 holds them all: the
        ranks' models equal rank 0's (:attr:`Replica.shares_state`; their agents None), their timing as they
        last reported. None where each rank's own model went with the group."""
        if not self.replica.shares_state:
            return None
        return [self.replica.state(with_agent=False)] + [{"agent": None, "timing": dict(self.latest[r])}
                                                         for r in range(1, self.workers)]

    def final_weights(self) -> dict[str, np.ndarray]:
        """The run's model: rank 0's weights, or where the ranks' models differ and were
        gathered (:meth:`states`) at the last update, the mean of every rank's."""
        own = self.replica.agent.get_weights()
        if self.gathered is None or self.gathered[0] != self.replica.agent.updates:
            return own
        others = [{k: dense(v).numpy() for k, v in st["agent"]["online"].items()} for st in self.gathered[1][1:]]
        return {k: np.mean([own[k]] + [w[k] for w in others], axis=0, dtype=np.float64).astype(np.float32)
                for k in own}

    def poll(self) -> None:
        """Take the worker ranks' reports waiting (their time split), without blocking.

        Raises
        ------
        TaskFailed
            If a rank is lost (:meth:`~dqnlab.parallel.supervision.Supervisor.lost_worker`: its process died,
            its task started again, or it has sent nothing for :data:`~dqnlab.parallel.messages.SILENCE_S`).
        """
        if self.tasks is not None:
            alive = self.tasks.alive
            self._take_messages(0.0)
            self._check_lost(alive)

    def _check_lost(self, alive: bool) -> None:
        """Raise :class:`TaskFailed` for a lost rank (call with the messages just read; ``alive``: the pool's
        call was running before)."""
        lost = self.tasks.lost_worker(alive)
        if lost is not None:
            self.broken = True
            raise TaskFailed(*lost)

    def _scatter(self, command: int, value: int, sizes: list[int] | None = None, grad_norm: bool = False) -> None:
        """Send every worker rank ``command`` with ``value`` (and its part of ``sizes[r]`` transitions,
        packed already)."""
        first, total = 0, sum(sizes) if sizes else 0
        for r, part in enumerate(self.parts):
            n = sizes[r] if sizes else 0
            part.ints[:] = command, value, n, grad_norm, first, total
            first += n
        try:
            self.coll.scatter(self.parts[0].tensor, [p.tensor for p in self.parts])
        except RuntimeError as e:
            raise self._failure(e) from e

    def _take_messages(self, timeout: float) -> list[Any]:
        """Read the worker ranks' messages (their hellos and heartbeats end in the task group's supervision):
        keep their reports' time split; return the others. (Messages name the task: rank - 1.)

        Raises
        ------
        TaskFailed
            If a rank's task started a second time (a backend ran it again after its process died).
        """
        out = []
        try:
            msg = self.tasks.get(timeout)
            while msg is not None:
                if isinstance(msg, Report):
                    self.latest[msg.worker + 1] = dict(msg.timing)
                else:
                    out.append(msg)
                msg = self.tasks.get(0.0)
        except TaskFailed:
            self.broken = True
            raise
        return out

    def _failure(self, error: BaseException) -> TaskFailed:
        """The :class:`TaskFailed` for a failed collective or start: the worker rank that raised (its
        message), whose process died, whose task started again, or that went silent (its process stopped or
        its host cannot be reached), else the collective's own error."""
        self.broken = True
        cause = describe(error)
        deadline = time.perf_counter() + 5.0  # the failing rank's report is on its way
        knock_on: TaskFailed | None = None  # a rank whose collective failed because another rank went away
        while self.tasks is not None and time.perf_counter() < deadline:
            alive = self.tasks.alive
            try:
                messages = self._take_messages(0.1)
            except TaskFailed as rerun:
                return rerun
            for msg in messages:
                if isinstance(msg, Failed):
                    failed = TaskFailed(*self.tasks.raised(msg))
                    if not _peer_went_away(msg.message):
                        return failed
                    knock_on = knock_on or failed
            # (a rank that stopped is quiet by now; the rest beat)
            lost = self.tasks.lost_worker(alive, grace_s=0.0, silence_s=3 * HEARTBEAT_S)
            if lost is not None:
                return TaskFailed(lost.worker, lost.message, f"rank 0's collective failed: {cause}\n{lost.details}")
        if knock_on is not None:
            return knock_on
        return TaskFailed(None, f"the process group failed: {cause.splitlines()[0]}", traceback.format_exc())

    # ------------------------------------------------------------------ accounting
    def time_split(self) -> tuple[np.ndarray, np.ndarray]:
        """Per rank ``(compute, comm)`` seconds, ``(K,)`` float64 each (worker ranks: as last reported)."""
        self.latest[0] = self.replica.timing()
        return (np.array([t["compute"] for t in self.latest]), np.array([t["comm"] for t in self.latest]))

    def bytes_per_update(self) -> float | None:
        """Payload bytes rank 0 moved per update (scatter + all-reduce); None before the first."""
        if self.updates == 0:
            return None
        return (self.coll.bytes_scattered + self.coll.bytes_reduced) / self.updates


def _peer_went_away(message: str) -> bool:
    """Whether a rank's failure ``message`` is gloo's for a peer that closed its connection or stopped answering
    (then the peer, not this rank, is the one to name)."""
    return "gloo" in message and any(s in message for s in ("Connection reset", "Connection closed", "Timed out",
                                                             "closed by peer", "pair closure"))

