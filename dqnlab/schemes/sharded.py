"""``sharded``: one learner; each minibatch is split across K workers, weights averaged.

The user's third idea ("let each process have a [share] of the minibatch ... return
their weights ... and then average the weights"). The parent is the single DQN
learner: it acts on its ``n_envs`` boards and owns the replay buffer. For every
update it samples one minibatch of ``B`` transitions, splits it into K shards
(sizes differ by at most one), and each worker takes **one** optimiser step on its
shard's mean TD loss, starting from a copy of the current online and target weights
and optimiser state. The K resulting weight vectors (and Adam moments) are averaged,
weighted by shard size, into the learner.

With plain SGD this is exactly one SGD step on the whole minibatch (synchronous
data parallelism, as in the parameter servers of Gorila, Nair et al. 2015,
arXiv:1507.04296, and in Zinkevich et al. 2010 with one local step). With Adam it is
not: each worker normalises its own shard's gradient before the average, which
adds noise, and the moments must travel too (3x the data of the weights alone).

The replay ratio, epsilon and target schedule are serial's: only where the gradient
arithmetic happens changes, so this scheme can only win when a worker's share of the
update costs more than shipping the model there and back.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..config import TrainConfig
from ..options import SchemeOptions
from ..replay import Minibatch
from ..runtime.results import RunResult
from ..runtime.learner import Learner
from ..parallel.rounds import run_rounds

__all__ = ["Options", "run", "shard"]


@dataclass(frozen=True)
class Options(SchemeOptions):
    """``sharded`` takes no options."""


def shard(batch: Minibatch, k: int) -> tuple[list[Minibatch], np.ndarray]:
    """Split a minibatch of ``B`` transitions into ``k`` contiguous shards.

    Returns
    -------
    (shards, sizes)
        ``k`` Minibatches (sizes ``B // k`` or ``B // k + 1``, as
        :func:`numpy.array_split`) and their ``(k,)`` int64 sizes.

    Raises
    ------
    ValueError
        If ``k`` exceeds ``B`` (a shard would be empty).
    """
    b = len(batch.actions)
    if not 1 <= k <= b:
        raise ValueError(f"cannot split a minibatch of {b} transitions into {k} shards: batch_size must be >= workers")
    bounds = np.cumsum([0] + [b // k + (1 if i < b % k else 0) for i in range(k)])
    shards = [Minibatch(*(field[lo:hi] for field in batch)) for lo, hi in zip(bounds[:-1], bounds[1:])]
    return shards, np.diff(bounds).astype(np.int64)


def run(config: TrainConfig, options: Options, *, workers: int = 1, progress: bool = True,
        callback: Callable[[RunResult], Any] | None = None,
        _fault: dict[str, Any] | None = None, _checkpoint: Any = None) -> RunResult:
    """Train one learner whose every update is split across ``workers`` processes.

    Parameters
    ----------
    config : TrainConfig
        ``batch_size`` is the whole minibatch ``B``, split into ``workers`` shards.
    options : Options
        Empty: the scheme takes none (see :class:`Options`).
    workers : int
        K worker processes (>= 1, <= ``batch_size``). With K = 1 the one step runs in
        this process (joblib runs a single job in-process): serial plus the cost of
        copying the state.
    progress, callback
        As for :func:`dqnlab.train`.

    Returns
    -------
    RunResult
        ``time_split``: ``acting`` (parent), ``learning`` (workers' step time summed,
        plus the parent's sampling and averaging), ``communication`` (per worker: round
        wall time minus its step time, summed). ``extra``: ``per_worker`` splits,
        ``shard_sizes``, ``effective_batch`` (= ``batch_size``), ``optimizer``
        (``config.optimizer``: with ``"sgd"`` the averaged step equals one step on the whole minibatch),
        ``rounds`` and ``round_ms_mean`` (wall time of one update round).

    Raises
    ------
    ValueError
        If ``workers`` > ``batch_size``.
    WorkerError
        If a worker fails; ``err.partial`` holds the run so far (``status="failed"``).
    """
    if workers > config.batch_size:
        raise ValueError(f"sharded needs batch_size >= workers (one transition per shard), "
                         f"got batch_size {config.batch_size} and {workers} workers")

    def make_batches(learner: Learner) -> tuple[list[Minibatch], np.ndarray]:
        return shard(learner.buffer.sample(config.batch_size), workers)

    sizes = shard(Minibatch(*(np.zeros(config.batch_size),) * 6), workers)[1]
    return run_rounds("sharded", config, workers, progress, callback, make_batches,
                      {"shard_sizes": sizes.tolist(), "effective_batch": config.batch_size,
                       "optimizer": config.optimizer}, _fault, _checkpoint)
