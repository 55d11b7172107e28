"""``serial``: one process, one learner -- the baseline every scheme is measured against.

The DQN algorithm of Mnih et al. (2015) made fast on one process: ``n_envs`` boards
stepped at once, batched updates at a fixed replay ratio.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..runtime.checkpoint import Checkpointer
from ..config import TrainConfig
from ..options import SchemeOptions
from ..runtime.results import RunResult
from .base import Learner, RunLoop, episodes_frame
from .parallel import DivergedError

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
    progress : bool
        Show a progress bar.
    callback : callable, optional
        ``callback(snapshot: RunResult)`` about once a second; return True to stop.

    Returns
    -------
    RunResult
        ``time_split`` has ``acting`` and ``learning``; ``communication`` is 0.
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
    learner = Learner(config)
    if _checkpoint is not None and _checkpoint.state is not None:
        learner.load_state_dict(_checkpoint.state["learner"])
    loop = RunLoop(config, progress=progress, callback=callback, snapshot=lambda: _result(learner, loop),
                   checkpointer=_checkpoint, state=lambda: {"learner": learner.state_dict()})
    learner.clock0 = loop.t0
    try:
        while not loop.done:
            learner.run(loop.chunk_steps(config.n_envs), loop.report_deadline())
            loop.report(learner.progress(_time_split(learner)))
    except KeyboardInterrupt:
        loop.interrupt()
    except FloatingPointError as e:  # a non-finite loss: the last good checkpoint stays
        loop.close()
        raise DivergedError("serial", None, str(e), "", _result(learner, loop, "failed")) from None
    finally:
        loop.close()
    loop.finish()
    return _result(learner, loop)


def _result(learner: Learner, loop: RunLoop, status: str | None = None) -> RunResult:
    import pandas as pd

    return RunResult(
        scheme="serial", config=learner.config, workers=1, episodes=episodes_frame(learner.episodes),
        env_steps=learner.env_steps, updates=learner.updates, wall_time_s=loop.elapsed,
        time_split=_time_split(learner), weights=learner.agent.get_weights(),
        history=pd.DataFrame(loop.history), status=status or loop.status,
    )


def _time_split(learner: Learner) -> dict[str, float]:
    return {**learner.timing, "communication": 0.0}
