"""This process's end of a run's gloo process group: join, all-reduce and scatter, timed.

The collectives are the group's own (``torch.distributed.ProcessGroupGloo``'s ``allreduce`` and
``scatter``); gloo's all-reduce gives every rank the same bits.

Rendezvous: a ``torch.distributed.TCPStore`` (served by rank 0 on
:func:`~dqnlab.parallel.addresses.store_host`); gloo then opens one TCP connection between every
pair of ranks on ephemeral ports, each rank listening on the interface of its route to the store's
host (:meth:`Collectives.join`; ``GLOO_SOCKET_IFNAME``, gloo's own setting, names one instead). Joining times out
after :data:`COLLECTIVE_TIMEOUT_S`, and rank 0's collectives, once the first update is done, after
:data:`PEER_TIMEOUT_S`. A rank that dies closes its connections, so the others' collective fails at once.
"""

from __future__ import annotations

import datetime
import os
import time
from typing import Any

import torch
import torch.distributed as dist

from .addresses import route_interface

__all__ = ["COLLECTIVE_TIMEOUT_S", "PEER_TIMEOUT_S", "Collectives"]

#: Seconds a collective (or the rendezvous) may wait for a peer before the run ends with an error.
COLLECTIVE_TIMEOUT_S = 60.0
#: Seconds a collective at rank 0 waits for the other ranks once the first update is done (each takes
#: milliseconds; a rank that is silent this long stopped, or its host cannot be reached).
PEER_TIMEOUT_S = 5.0


class Collectives:
    """This process's end of a run's process group: all-reduce and scatter, timed.

    The group is a ``torch.distributed.ProcessGroupGloo`` of its own, not the process's
    default group: a worker process serves run after run, and a user's own default group
    is left alone. With ``world == 1`` there is no group and the all-reduce is the identity.

    Parameters
    ----------
    rank, world : int
        This process's rank (0: the parent) and the number of ranks K.

    Attributes
    ----------
    pg : ProcessGroupGloo or None
        The group, once joined (:meth:`join`) and until left (:meth:`leave`).
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

        Gloo listens on the interface of this machine's route to ``store_host`` (the rendezvous store's
        host, which every rank reaches), so that ranks on other hosts reach it: gloo's own default, the
        address of the host's name, is 127.0.0.1 on many machines (``/etc/hosts``). ``GLOO_SOCKET_IFNAME``
        names an interface instead.

        Raises
        ------
        RuntimeError
            If a rank does not join within :data:`COLLECTIVE_TIMEOUT_S` (torch's ``DistStoreError``).
        """
        chosen = os.environ.get("GLOO_SOCKET_IFNAME")
        os.environ["GLOO_SOCKET_IFNAME"] = chosen or route_interface(store_host)  # (what gloo reads)
        try:
            self.pg = dist.ProcessGroupGloo(dist.PrefixStore(prefix, store), self.rank, self.world,
                                            datetime.timedelta(seconds=COLLECTIVE_TIMEOUT_S))
        finally:  # (the environment as it was)
            if chosen is None:
                del os.environ["GLOO_SOCKET_IFNAME"]
            else:
                os.environ["GLOO_SOCKET_IFNAME"] = chosen

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
            if t.is_sparse:  # (this rank's payload: its rows once each)
                own = t.coalesce()
                self.bytes_reduced += own.values().nbytes + own.indices().nbytes
            else:
                self.bytes_reduced += t.nbytes
            self.pg.allreduce([t]).wait()
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
                for t, v in zip(dense, flat[:weighted - len(values)].split([t.numel() for t in dense])):
                    t.copy_(v.view_as(t))
        if carry is not None:
            carry.copy_(flat[weighted:])
        return flat[weighted - len(values):weighted].tolist()

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

