"""All-reduce over ``torch.distributed``: the process group of ``sharded`` and ``averaged``.

With ``comm="allreduce"`` the K processes of a run form one gloo process group, the way
PyTorch DDP and Horovod run data-parallel SGD: the parent is **rank 0** (it acts, owns
the replay buffer and takes its own share of every update) and ranks 1..K-1 are
long-lived worker tasks started as the other schemes start theirs (joblib: loky
processes, or a Dask cluster; :class:`~dqnlab.parallel.tasks.TaskGroup`). Every rank
holds a :class:`Replica` -- a copy of the learner's agent and the scheme's update on it
-- and nothing is shipped per update but each rank's minibatch (one scatter from rank 0)
and what the scheme reduces (one all-reduce: ``sharded`` the gradients, ``averaged`` the
weights). The weights never travel. With prioritized replay each part also carries its
importance-sampling weights (and with n-step returns each transition's span,
:func:`shipped_columns`), and every rank's TD errors come back to rank 0 for the priorities
in an all-reduce (:meth:`Replica.error_carry`); without, nothing more travels.

The all-reduce of dense tensors in a group of a power-of-two size is recursive doubling
(log2 K pairwise exchanges, each rank adding what its partner sent; Thakur, Rabenseifner
& Gropp 2005, "Optimization of collective communication operations in MPICH") on
the group's point-to-point operations. Each of its log2 K steps sends the whole tensor, where
gloo's ring all-reduce takes 2 (K - 1) steps of a K-th of it: for small tensors (an MLP's
weights or gradients) the time is the steps' latency, not bandwidth, so fewer steps win
(``bench scaling`` reports the time spent communicating; see the README's Results section).
Every rank adds the same two numbers in each round (``a + b == b + a`` in IEEE arithmetic),
so every rank gets bit-identical sums. Other sizes, and sparse tensors, use the group's own
all-reduce.

The group is a ``ProcessGroupGloo`` of the run's own (:class:`Collectives`), not the
process's default group. Rendezvous: a ``torch.distributed.TCPStore`` served by the parent on a free port of
:func:`store_host` (127.0.0.1 for local workers; on a Dask cluster the address by
which this machine reaches the scheduler, or ``DQNLAB_STORE_HOST``); gloo then opens
one TCP connection between every pair of ranks on ephemeral ports, each rank listening on its
address on the route to the store's host (:meth:`Collectives.join`; ``GLOO_SOCKET_IFNAME`` names an
interface instead). Joining times out after :data:`COLLECTIVE_TIMEOUT_S`, and rank 0's collectives,
once the first update is done, after :data:`PEER_TIMEOUT_S`. A rank that dies closes its connections,
so the others' collective fails at once; one whose host cannot be reached stops answering and beating
(:class:`~dqnlab.parallel.messages.Heartbeat`); either way the run ends naming the worker and its host
(:class:`AllReduceGroup`).
"""

from __future__ import annotations

import contextlib
import datetime
import math
import os
import socket
import time
import traceback
import uuid
from collections.abc import Sequence
from typing import Any, Self
from urllib.parse import urlparse

import numpy as np
import torch
import torch.distributed as dist

from ..agent.dqn import DQNAgent
from ..config import TrainConfig
from ..replay import BATCH_COLUMNS, Minibatch
from ..runtime.errors import TaskFailed
from .dask import active_dask_client
from .faults import check_fault, describe
from .messages import HEARTBEAT_S, Failed, Hello, Report, StateReply
from .procwatch import exit_from_pool_error
from .tasks import Channel, TaskGroup

__all__ = ["COLLECTIVE_TIMEOUT_S", "PEER_TIMEOUT_S", "COMM_CHANNELS", "Collectives", "Replica", "AllReduceGroup", "store_host",
           "pack_minibatch", "unpack_minibatch", "shipped_columns", "reprioritize"]

#: The two ways ``sharded`` and ``averaged`` combine their workers' steps (``comm`` option).
COMM_CHANNELS = ("allreduce", "joblib")
#: Seconds a collective (or the rendezvous) may wait for a peer before the run ends with an error.
COLLECTIVE_TIMEOUT_S = 60.0
#: Seconds a collective at rank 0 waits for the other ranks once the first update is done (each takes
#: milliseconds; a rank that is silent this long stopped, or its host cannot be reached).
PEER_TIMEOUT_S = 5.0
#: Seconds between a worker rank's reports of its time split to the parent.
_REPORT_EVERY_S = 1.0

# The commands rank 0 scatters, in the header of every rank's part: command, update number,
# transitions that follow, whether to measure the gradient norm, the part's first slot in the
# update's transitions and their number (int64 each), and this rank's share of the update (float64).
_STEP, _STATE, _STOP = 1, 2, 3
_INTS = 6
_HEADER = 8 * _INTS + 8

# A part carries columns of :data:`dqnlab.replay.BATCH_COLUMNS` (those of a sampled minibatch: shape
# per transition and dtype), one after the other in the order its ``columns`` name them.
#: The columns every part carries (a uniform one-step minibatch's: all but ``steps`` and ``weights``).
BASE_COLUMNS = tuple(c for c in BATCH_COLUMNS if c not in ("steps", "weights"))


def shipped_columns(config: TrainConfig) -> tuple[str, ...]:
    """The :class:`~dqnlab.replay.Minibatch` columns a rank's part carries under ``config``:
    :data:`BASE_COLUMNS`, ``steps`` with n-step returns (``n_step > 1``) and ``weights`` with
    prioritized replay (importance-sampling weights). Slots (``indices``) stay at rank 0."""
    return BASE_COLUMNS + (("steps",) if config.n_step > 1 else ()) + (("weights",) if config.prioritized else ())


def _bytes_per_transition(columns: tuple[str, ...]) -> int:
    return sum(int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
               for shape, dtype in (BATCH_COLUMNS[c] for c in columns))


def pack_minibatch(batch: Minibatch, out: np.ndarray, columns: tuple[str, ...] = BASE_COLUMNS) -> None:
    """Write the ``columns`` of ``batch`` (``n`` transitions, a :class:`~dqnlab.replay.Minibatch`)
    into the uint8 buffer ``out`` after the header, column after column
    (:func:`unpack_minibatch` reads it back); ``out`` holds at least ``n`` transitions of them.

    Raises
    ------
    ValueError
        If one of ``columns`` is None in ``batch``.
    """
    at = _HEADER
    for name in columns:
        column = getattr(batch, name)
        if column is None:
            raise ValueError(f"the minibatch has no {name} to send")
        raw = np.ascontiguousarray(column, dtype=BATCH_COLUMNS[name][1]).view(np.uint8).reshape(-1)
        out[at:at + raw.size] = raw
        at += raw.size


def unpack_minibatch(buf: np.ndarray, n: int, columns: tuple[str, ...] = BASE_COLUMNS) -> Minibatch:
    """The minibatch of ``n`` transitions in ``buf`` (:func:`pack_minibatch` of the same
    ``columns``), as views of it (read-only use: the next scatter overwrites them); the
    columns not sent are None."""
    at, fields = _HEADER, {}
    for name in columns:
        shape, dtype = BATCH_COLUMNS[name]
        size = n * int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        fields[name] = buf[at:at + size].view(dtype).reshape((n, *shape))
        at += size
    return Minibatch(**fields)


class _Part:
    """One rank's part of a scatter: a uint8 tensor of the header and up to ``n`` transitions
    of ``columns``, with numpy views of it."""

    def __init__(self, n: int, columns: tuple[str, ...]):
        self.columns = columns
        self.tensor = torch.zeros(_HEADER + n * _bytes_per_transition(columns), dtype=torch.uint8)
        self.raw = self.tensor.numpy()
        self.ints = self.raw[:8 * _INTS].view(np.int64)  # command, update, transitions, grad_norm, first, total
        self.share = self.raw[8 * _INTS:_HEADER].view(np.float64)


def reprioritize(buffer: Any, parts: Sequence[Minibatch], td_errors: np.ndarray | None) -> None:
    """Give a prioritized ``buffer`` the new TD errors of every part of an update: ``td_errors``
    ``(total,)`` float32 ``|Q(s, a) - y|`` of the parts' transitions one part after the other
    (:attr:`Replica.td_errors`), the parts' ``indices`` their slots. Nothing when ``buffer`` or
    ``td_errors`` is None (uniform replay).

    Raises
    ------
    ValueError
        As :meth:`~dqnlab.replay.PrioritizedReplayBuffer.update_priorities` (a TD error not finite).
    """
    if buffer is not None and td_errors is not None:
        buffer.update_priorities(np.concatenate([p.indices for p in parts]), td_errors)


def store_host() -> str:
    """The address of this machine that every rank can reach, for the rendezvous store.

    ``DQNLAB_STORE_HOST`` if set; on a Dask cluster (joblib's active backend), the
    address this machine uses to reach the scheduler (127.0.0.1 for a local one);
    otherwise 127.0.0.1 (loky workers are local processes).
    """
    if os.environ.get("DQNLAB_STORE_HOST"):
        return os.environ["DQNLAB_STORE_HOST"]
    client = active_dask_client()
    if client is None:
        return "127.0.0.1"
    scheduler = urlparse(client.scheduler.address)
    if scheduler.hostname in (None, "localhost", "127.0.0.1"):
        return "127.0.0.1"
    return route_address(scheduler.hostname, scheduler.port or 8786)


def route_address(host: str, port: int = 9) -> str:
    """The address of this machine on its route to ``host`` (``host`` itself when it is one of this machine's).

    No packet is sent: a UDP socket's ``connect`` only picks the route.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((host, port))
        return s.getsockname()[0]


class Collectives:
    """This process's end of a run's process group: all-reduce and scatter, timed.

    The group is a ``torch.distributed.ProcessGroupGloo`` of its own, not the process's
    default group: a worker process serves run after run, and a user's own default group
    is left alone. With ``world == 1`` there is no group and the all-reduce is the identity.

    Attributes
    ----------
    rank, world : int
    comm_s : float
        Seconds spent in collectives (waiting for the slowest rank included).
    bytes_reduced, bytes_scattered : int
        Payload bytes this rank has all-reduced, and received (rank 0: sent) by scatter.
    """

    def __init__(self, rank: int, world: int):
        self.rank, self.world = rank, world
        self.pg: Any = None
        self.comm_s = 0.0
        self.bytes_reduced = 0
        self.bytes_scattered = 0

    def join(self, store: Any, prefix: str, store_host: str) -> None:
        """Connect to every other rank through ``store`` (keys under ``prefix``); blocks until all have.

        Gloo listens on this machine's address on its route to ``store_host`` (the rendezvous store's host,
        which every rank reaches), so that ranks on other hosts reach it: gloo's own default, the address
        of the host's name, is 127.0.0.1 on many machines (``/etc/hosts``). ``GLOO_SOCKET_IFNAME`` names an
        interface instead.

        Raises
        ------
        RuntimeError
            If a rank does not join within :data:`COLLECTIVE_TIMEOUT_S` (torch's ``DistStoreError``).
        """
        options = dist.ProcessGroupGloo._Options()
        options._timeout = datetime.timedelta(seconds=COLLECTIVE_TIMEOUT_S)
        interface = os.environ.get("GLOO_SOCKET_IFNAME")
        options._devices = [dist.ProcessGroupGloo.create_device(interface=interface) if interface else
                            dist.ProcessGroupGloo.create_device(hostname=route_address(store_host))]
        self.pg = dist.ProcessGroupGloo(dist.PrefixStore(prefix, store), self.rank, self.world, options)

    def tighten(self) -> None:
        """From now on a collective fails after :data:`PEER_TIMEOUT_S` without an answer (a rank cut off on
        another host ends the run in seconds, not gloo's minute). Rank 0 calls it after the first update,
        which may compile kernels at every rank."""
        self.pg.set_timeout(datetime.timedelta(seconds=PEER_TIMEOUT_S))

    def leave(self) -> None:
        """Close this rank's connections (a peer waiting on one of them fails at once). Idempotent."""
        if self.pg is not None:
            pg, self.pg = self.pg, None
            pg.shutdown()

    def allreduce(self, tensors: list[torch.Tensor]) -> None:
        """Sum each tensor (dense float32, or sparse COO) over all ranks, in place (every rank
        gets the same bits)."""
        if self.world == 1:
            return
        t0 = time.perf_counter()
        for t in tensors:
            if t.is_sparse or self.world & (self.world - 1):
                self.pg.allreduce([t]).wait()
            else:
                self._recursive_doubling(t)
            self.bytes_reduced += (t._values().nbytes + t._indices().nbytes) if t.is_sparse else t.nbytes
        self.comm_s += time.perf_counter() - t0

    def allreduce_weighted(self, tensors: list[torch.Tensor], values: list[float], weight: float,
                           carry: torch.Tensor | None = None) -> list[float]:
        """Replace each of ``tensors`` by the sum over ranks of ``weight`` x it, in place, and return
        the same sums of ``values`` (floats carried along: a loss, a diagnostic).

        The dense tensors and ``values`` travel as one flat float32 buffer (one all-reduce, as
        DDP buckets gradients); sparse COO tensors (an n-tuple table's gradient rows) on their own.
        ``carry``: a dense float32 vector summed over ranks *unweighted* in the same buffer, in place
        (each rank's values in slots of its own, zeros elsewhere: a gather by all-reduce, exact since
        adding zeros is).
        """
        dense = [t for t in tensors if not t.is_sparse]
        sparse = [t for t in tensors if t.is_sparse]
        flat = torch.cat([t.detach().reshape(-1) for t in dense] + [torch.tensor(values, dtype=torch.float32)]
                         + ([carry] if carry is not None else []))
        weighted = flat.numel() - (carry.numel() if carry is not None else 0)
        flat[:weighted].mul_(weight)
        for t in sparse:
            t.mul_(weight)
        self.allreduce([flat] + sparse)
        if dense:
            with torch.no_grad():
                torch._foreach_copy_(dense, [v.view_as(t) for v, t in
                                             zip(flat[:weighted - len(values)].split([t.numel() for t in dense]),
                                                 dense)])
        if carry is not None:
            carry.copy_(flat[weighted:])
        return flat[weighted - len(values):weighted].tolist()

    def _recursive_doubling(self, t: torch.Tensor) -> None:
        """All-reduce (sum) of a dense tensor in a power-of-two group: in round ``i`` each rank
        swaps its partial sum with rank ``rank ^ 2**i`` and adds the partner's."""
        other = torch.empty_like(t)
        mask = 1
        while mask < self.world:
            peer = self.rank ^ mask
            sent, received = self.pg.send([t], peer, mask), self.pg.recv([other], peer, mask)
            sent.wait()
            received.wait()
            t.add_(other)
            mask <<= 1

    def scatter(self, mine: torch.Tensor, parts: list[torch.Tensor] | None) -> None:
        """Rank 0's ``parts[r]`` into rank ``r``'s ``mine`` (``parts`` at rank 0 only, ``parts[0]``
        is ``mine``; the same shape and dtype everywhere)."""
        if self.world == 1:
            return
        t0 = time.perf_counter()
        opts = dist.ScatterOptions()
        opts.rootRank = 0
        self.pg.scatter([mine], [parts] if parts is not None else [], opts).wait()
        self.bytes_scattered += mine.nbytes * (self.world - 1 if self.rank == 0 else 1)
        self.comm_s += time.perf_counter() - t0


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
        """:meth:`update`, its time outside collectives added to this rank's ``compute`` seconds.
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


def replica_task(ch: Channel, *, replica_cls: type[Replica], config: TrainConfig, options: dict[str, Any],
                 workers: int, host: str, port: int, prefix: str, state: dict[str, Any],
                 fault: dict[str, Any] | None) -> None:
    """A worker rank's whole run (a :class:`~dqnlab.parallel.tasks.TaskGroup` task): join the
    group, then follow rank 0's scatters -- an update, a state request, or the stop.

    Rank ``ch.worker + 1``. ``state``: a :meth:`Replica.state` to start from (the parent's
    own at the start of a run). Reports its time split (:class:`~dqnlab.parallel.messages.Report`)
    about once a second and when it stops.
    """
    rank = ch.worker + 1
    agent = DQNAgent(config, seed=0)
    agent.load_state_dict(state["agent"])
    coll = Collectives(rank, workers)
    replica = replica_cls(agent, coll, options)
    replica.load_timing(state["timing"])
    part = _Part(config.batch_size, shipped_columns(config))

    def report(done: bool = False) -> None:  # (messages name the task: rank - 1)
        ch.send(Report(ch.worker, done, [], 0, agent.updates, replica.timing(), coll.comm_s, {}, {}))

    coll.join(dist.TCPStore(host, port, workers, is_master=False,
                            timeout=datetime.timedelta(seconds=COLLECTIVE_TIMEOUT_S)), prefix, host)
    try:
        next_report = time.perf_counter() + _REPORT_EVERY_S
        while True:
            coll.scatter(part.tensor, None)
            command, update, n, grad_norm, first, total = (int(v) for v in part.ints)
            if command == _STOP:
                break
            if command == _STATE:  # (update = the request's number * 2 + whether the agent is wanted)
                ch.send(StateReply(ch.worker, update // 2, replica.state(with_agent=bool(update % 2))))
                continue
            check_fault(fault, rank, updates=update)
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
    fault : dict, optional
        The test hook (:func:`~dqnlab.parallel.faults.check_fault`; ranks >= 1 only).
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
    """

    def __init__(self, replica_cls: type[Replica], agent: DQNAgent, options: dict[str, Any], workers: int,
                 fault: dict[str, Any] | None = None, states: list[dict[str, Any]] | None = None,
                 stats: dict[str, Any] | None = None):
        self.replica_cls, self.options, self.workers, self.fault = replica_cls, options, workers, fault
        self.coll = Collectives(0, workers)
        self.replica = replica_cls(agent, self.coll, options)
        if states is not None:
            if len(states) != workers:
                raise ValueError(f"a checkpoint of {len(states)} ranks cannot resume with {workers} workers")
            self.replica.load_timing(states[0]["timing"])
        if stats is not None:
            self.replica.load_stats(stats)
        self.start_states = states
        self.gathered: tuple[int, list[dict[str, Any]]] | None = None  # (updates, every rank's state) last gathered
        self.latest: list[dict[str, float]] = [self.replica.timing()] + [
            dict(states[r]["timing"]) if states else {"compute": 0.0, "comm": 0.0} for r in range(1, workers)]
        self.parts = [_Part(agent.config.batch_size, shipped_columns(agent.config)) for _ in range(workers)]
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
                       state=self.start_states[r] if self.start_states else start, fault=self.fault)
                  for r in range(1, self.workers)]
        self.tasks = TaskGroup(replica_task, kwargs, own_processes=True).__enter__()
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
            self._take_messages(0.1)
            self._check_silence()
            if time.perf_counter() > deadline or not self.tasks.alive:
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
                self._scatter(_STOP, 0)
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
            self._scatter(_STEP, self.replica.agent.updates, sizes, grad_norm)
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
        self._scatter(_STATE, 2 * ask + with_agents)
        got: dict[int, Any] = {}
        deadline = time.perf_counter() + COLLECTIVE_TIMEOUT_S
        while len(got) < self.workers - 1:
            for msg in self._take_messages(0.05):
                if isinstance(msg, StateReply) and msg.id == ask:
                    got[msg.worker + 1] = msg.state
            self._check_silence()
            if time.perf_counter() > deadline or not self.tasks.alive:
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
        others = [{k: v.numpy() for k, v in st["agent"]["online"].items()} for st in self.gathered[1][1:]]
        return {k: np.mean([own[k]] + [w[k] for w in others], axis=0, dtype=np.float64).astype(np.float32)
                for k in own}

    def poll(self) -> None:
        """Take the worker ranks' reports waiting (their time split), without blocking.

        Raises
        ------
        TaskFailed
            If a rank has sent nothing for :data:`~dqnlab.parallel.messages.SILENCE_S` (it stopped, or its host
            cannot be reached), or its task started again.
        """
        if self.tasks is not None:
            self._take_messages(0.0)
            self._check_silence()

    def _check_silence(self) -> None:
        """Raise :class:`TaskFailed` for a rank silent for :data:`~dqnlab.parallel.messages.SILENCE_S` (call with
        the messages just read)."""
        lost = self.tasks.silent()
        if lost is not None:
            self.broken = True
            raise TaskFailed(lost[0] + 1, *lost[1:])

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
        """Read the worker ranks' messages: hellos, reports; return the others. (Messages name the task:
        rank - 1.)

        Raises
        ------
        TaskFailed
            If a rank's task started a second time (a backend ran it again after its process died).
        """
        out = []
        msg = self.tasks.get(timeout)
        while msg is not None:
            if isinstance(msg, Hello):
                rerun = self.tasks.hello(msg)
                if rerun is not None:
                    self.broken = True
                    raise TaskFailed(rerun[0] + 1, *rerun[1:])
            elif isinstance(msg, Report):
                self.latest[msg.worker + 1] = dict(msg.timing)
            else:
                out.append(msg)
            msg = self.tasks.get(0.0)
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
            try:
                messages = self._take_messages(0.1)
            except TaskFailed as rerun:
                return rerun
            for msg in messages:
                if isinstance(msg, Failed):
                    failed = TaskFailed(msg.worker + 1, msg.message, msg.traceback)
                    if not _peer_went_away(msg.message):
                        return failed
                    knock_on = knock_on or failed
            first = self.tasks.watch.first
            if first is not None:
                how = first[2] or exit_from_pool_error(cause) or "cause unknown"
                return TaskFailed(first[0] + 1, f"its process ({self.tasks.where(first[0])}) died ({how})",
                                  f"rank 0's collective failed: {cause}")
            lost = self.tasks.silent(3 * HEARTBEAT_S)  # (a rank that stopped is quiet by now; the rest beat)
            if lost is not None:
                return TaskFailed(lost[0] + 1, lost[1], f"rank 0's collective failed: {cause}")
            if not self.tasks.alive and self.tasks.failure is not None:
                how = exit_from_pool_error(describe(self.tasks.failure))
                if how is not None:
                    who = 1 if self.workers == 2 else None
                    return TaskFailed(who, f"a worker process died ({how})", self.tasks.failure_tb)
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


def finite_or_raise(value: float, update: int) -> None:
    """Raise FloatingPointError for a non-finite TD loss (the message of :meth:`DQNAgent.gradient_step`)."""
    if not math.isfinite(value):
        raise FloatingPointError(f"non-finite TD loss ({value}) at update {update}")
