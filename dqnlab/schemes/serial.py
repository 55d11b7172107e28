"""``serial``: one process, one learner -- the baseline every scheme is measured against.

The DQN algorithm of Mnih et al. (2015) made fast on one process: ``n_envs`` boards
stepped at once, batched updates at a fixed replay ratio.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..config import TrainConfig
from ..options import SchemeOptions
from ..parallel.faults import injected
from ..runtime.checkpoint import Checkpointer
from ..runtime.driver import build_result, run_to_end
from ..runtime.learner import Learner
from ..runtime.loop import RunLoop
from ..runtime.results import RunResult

__all__ = ["Options", "run", "one_learner"]


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
    return one_learner("serial", config, options, progress=progress, callback=callback, checkpoint=_checkpoint)


def one_learner(scheme: str, config: TrainConfig, options: SchemeOptions, *, team: int = 1, average_every: int = 0,
                progress: bool = True, callback: Callable[[RunResult], Any] | None = None,
                checkpoint: Checkpointer | None = None, extra: dict[str, Any] | None = None) -> RunResult:
    """One learner in this process until the budget of ``config`` is spent (:func:`run`), or a team of ``team``
    K > 1 threads on the compiled core (:meth:`~dqnlab.runtime.native.NativeLoop.team_up`): with
    ``average_every`` 0, K - 1 helpers compute shares of every update's minibatch and the learner applies each
    update as one step (``sharded``); else each member steps a table of its own on a minibatch of its own, and
    the tables are averaged every ``average_every`` updates (``averaged``). ``scheme``, ``options`` and
    ``extra`` name the run in its result.

    Raises
    ------
    ValueError
        If a test injected a worker fault (:func:`dqnlab.parallel.faults.inject`): this run has no worker task.
    """
    if injected() is not None:
        raise ValueError(f"a fault is injected into a worker task, and {scheme} runs none here")
    learner = Learner(config, device=config.device)
    resumed = checkpoint.take_state() if checkpoint is not None else None
    if resumed is not None:
        learner.load_state_dict(resumed.pop("learner"))
    native = learner.native
    bodies = native.team_up(team, average_every) if team > 1 else []
    if resumed is not None and "team" in resumed:
        native.load_team_state(resumed["team"])
    helpers = [threading.Thread(target=body, name=f"dqnlab-{scheme}-{k}", daemon=True)
               for k, body in enumerate(bodies, 1)]

    def time_split() -> dict[str, float]:
        return {**learner.timing, "communication": 0.0}

    def result(status: str | None = None) -> RunResult:
        if average_every:  # (the members' mean: a copy)
            weights = native.team_weights(learner.agent.get_weights())
        else:
            weights = learner.agent.weight_views() if loop.closed else learner.agent.get_weights()  # (snapshot: copy)
        own = {"averages": native.averages} if average_every else {}
        return build_result(scheme, config, team, loop, learner.progress(time_split()), weights, status,
                            options.to_dict(), {**(extra or {}), **own, "replay": learner.buffer.statistics()})

    def state() -> dict[str, Any]:  # (written at once, the helpers waiting between updates)
        return {"learner": learner.state_dict(copy_agent=False), **({"team": native.team_state()} if bodies else {})}

    loop = RunLoop(config, progress=progress, callback=callback, snapshot=result, checkpointer=checkpoint, state=state)
    learner.clock0 = loop.t0

    def train() -> None:
        for thread in helpers:
            thread.start()
        try:
            while not loop.done:
                learner.run(loop.chunk_steps(config.n_envs), loop.report_deadline())
                loop.report(learner.progress(time_split()))
        finally:
            if helpers:
                learner.native.disband()
            for thread in helpers:
                thread.join()

    return run_to_end(scheme, loop, train, result)
