"""``serial``: one process, one learner -- the baseline every scheme is measured against.

The DQN algorithm of Mnih et al. (2015) made fast on one process: ``n_envs`` boards
stepped at once, batched updates at a fixed replay ratio.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..config import TrainConfig
from ..options import SchemeOptions
from ..runtime.checkpoint import Checkpointer
from ..runtime.driver import build_result, run_to_end
from ..runtime.learner import Learner
from ..runtime.loop import RunLoop
from ..runtime.results import RunResult

__all__ = ["Options", "run"]


@dataclass(frozen=True)
class Options(SchemeOptions):
    """``serial`` takes no options."""


def run(config: TrainConfig, options: Options, *, workers: int = 1, progress: bool = True,
        callback: Callable[[RunResult], Any] | None = None, _checkpoint: Checkpointer | None = None) -> RunResult:
    """Train one DQN learner in this process until the budget of ``config`` is spent.

    Parameters
    ----------
    config : TrainConfig
    options : Options
        Empty: the scheme takes none (see :class:`Options`).
    workers : int
        Must be 1 (serial is one process).
    progress, callback
        As for :func:`dqnlab.train`.

    Returns
    -------
    RunResult
        ``time_split`` has ``acting`` and ``learning``; ``communication`` is 0. ``extra["replay"]``:
        the buffer's :meth:`~dqnlab.ReplayBuffer.statistics` (with prioritized replay, the priorities').
        KeyboardInterrupt ends the run early with ``status="interrupted"`` and
        everything gathered so far.

    Raises
    ------
    ValueError
        If ``workers`` is not 1.
    DivergedError
        If a TD loss is NaN or infinite (the message says which update); ``partial``
        holds the run up to the last good update.

    Notes
    -----
    Checkpoints (``dqnlab.train(..., run_dir=...)``) hold the whole learner, so a
    resumed run continues exactly as if it had not stopped: same games, same updates,
    same weights.
    """
    if workers != 1:
        raise ValueError(f"workers must be 1 for the serial scheme, got {workers!r}")
    learner = Learner(config, device=config.device)
    resumed = _checkpoint.take_state() if _checkpoint is not None else None
    if resumed is not None:
        learner.load_state_dict(resumed.pop("learner"))

    def time_split() -> dict[str, float]:
        return {**learner.timing, "communication": 0.0}

    def result(status: str | None = None) -> RunResult:
        weights = learner.agent.weight_views() if loop.closed else learner.agent.get_weights()  # (a snapshot: copies)
        return build_result("serial", config, 1, loop, learner.progress(time_split()), weights, status,
                            extra={"replay": learner.buffer.statistics()})

    loop = RunLoop(config, progress=progress, callback=callback, snapshot=result, checkpointer=_checkpoint,
                   state=lambda: {"learner": learner.state_dict(copy_agent=False)})  # (written at once)
    learner.clock0 = loop.t0

    def train() -> None:
        while not loop.done:
            learner.run(loop.chunk_steps(config.n_envs), loop.report_deadline())
            loop.report(learner.progress(time_split()))

    return run_to_end("serial", loop, train, result)
