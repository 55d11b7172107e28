"""``averaged``: one learner; K workers each step on their own minibatch, weights averaged.

The user's fourth idea ("spin up entirely different processes that would each grab a
different minibatch and train the input model on it, then return the weights ...
average out the models"). The parent is the single DQN learner (its boards, its
replay buffer). Each update, it draws K independent minibatches of ``B``
transitions (uniform, with replacement) from its buffer and ships minibatch ``k`` to
worker ``k``; every worker takes one optimiser step from a copy of the current
online/target weights and optimiser state; the K results are averaged with equal
weights, every update. That is one-step local SGD / FedAvg with one local step
(Zinkevich et al. 2010; McMahan et al. 2017) on an effective minibatch of K x B.

The number of updates per env step is serial's (``replay_ratio / batch_size``), so
each env step is trained on K times as many samples: more learning per game, not
faster games -- as the user expected ("does not improve per-episode training time").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..config import TrainConfig
from ..options import SchemeOptions
from ..replay import Minibatch
from ..runtime.results import RunResult
from ..runtime.learner import Learner
from ..parallel.rounds import run_rounds

__all__ = ["Options", "run", "draw_minibatches"]


@dataclass(frozen=True)
class Options(SchemeOptions):
    """``averaged`` takes no options."""


def draw_minibatches(learner: Learner, k: int) -> list[Minibatch]:
    """``k`` independent minibatches of ``config.batch_size`` from the learner's buffer.

    Drawn one after the other from the buffer's own random stream, so with ``k = 1``
    the minibatch is exactly the one the serial learner would sample.
    """
    return [learner.buffer.sample(learner.config.batch_size) for _ in range(k)]


def run(config: TrainConfig, options: Options, *, workers: int = 1, progress: bool = True,
        callback: Callable[[RunResult], Any] | None = None,
        _fault: dict[str, Any] | None = None, _checkpoint: Any = None) -> RunResult:
    """Train one learner whose every update averages K workers' steps on K minibatches.

    Parameters
    ----------
    config : TrainConfig
        ``batch_size`` is each worker's minibatch ``B``; the effective batch is K x B.
    options : Options
        Empty: the scheme takes none (see :class:`Options`).
    workers : int
        K worker processes (>= 1). With K = 1 the step runs in this process and the
        update equals serial's (same minibatch, same Adam step).
    progress, callback
        As for :func:`dqnlab.train`.

    Returns
    -------
    RunResult
        ``time_split`` as in :func:`dqnlab.schemes.sharded.run`. ``extra``:
        ``effective_batch`` (K x B), ``effective_replay_ratio`` (samples trained on
        per env step, K x ``replay_ratio``), ``per_worker``, ``optimizer``
        (``config.optimizer``; Adam moments are averaged like the weights), ``rounds``,
        ``round_ms_mean``. Updates/s is ``RunResult.updates_per_s``.

    Raises
    ------
    WorkerError
        If a worker fails; ``err.partial`` holds the run so far (``status="failed"``).
    """

    def make_batches(learner: Learner) -> tuple[list[Minibatch], None]:
        return draw_minibatches(learner, workers), None

    return run_rounds("averaged", config, workers, progress, callback, make_batches,
                      {"effective_batch": workers * config.batch_size,
                       "effective_replay_ratio": workers * config.replay_ratio,
                       "optimizer": config.optimizer}, _fault, _checkpoint)
