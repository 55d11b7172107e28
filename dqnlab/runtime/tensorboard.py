"""TensorBoard event files of a run, in ``RUN_DIR/tb/``: ``tensorboard --logdir runs/`` shows them.

Every run with a run directory (``dqnlab.train(..., run_dir=DIR)``, ``python -m dqnlab train
--out DIR``) writes them unless told not to (``tensorboard=False``, ``--no-tensorboard``).
One writer, in the process that runs the run loop (:class:`dqnlab.runtime.loop.RunLoop`),
adds one point per tag at every progress report (about once a second) that has new env steps,
whatever the scheme; the global step is the run's env steps (all workers together), so it
increases from point to point. A resumed run appends to the same directory and its steps
continue.

Tags (a value that is not finite, e.g. the loss before learning starts, is left out):

* ``rollout/ep_score_mean``: mean score of the last 100 finished games (points);
* ``rollout/max_tile``: largest tile of the last 100 finished games;
* ``train/loss``: TD loss of the last update;
* ``train/q_max_mean``: mean over the last minibatch of max_a Q(s, a) (with afterstates: of
  the trained V(afterstate));
* ``train/epsilon``: exploration rate;
* ``train/grad_norm``: L2 norm of the last update's gradient, before clipping;
* ``time/env_steps_per_s``, ``time/updates_per_s``: speed since the previous report;
* ``time/replay_ratio``: minibatch samples trained per env step, so far;
* ``time/acting_s``, ``time/learning_s``, ``time/communication_s``: the time split so far
  (seconds, summed over workers);
* ``worker{k}/train/...`` and ``worker{k}/time/replay_ratio``: each worker's diagnostics, for
  schemes with several learners (``independent``, ``shared``) or actors (``actors``: its
  ``train/epsilon``).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping

from .progress import DIAGNOSTICS, Progress

__all__ = ["TensorBoardLog", "DIAGNOSTIC_TAGS", "FLUSH_S"]

#: Tag of each diagnostic of the run loop (:data:`dqnlab.runtime.progress.DIAGNOSTICS`): ``train/NAME``,
#: but ``time/replay_ratio``.
DIAGNOSTIC_TAGS = {name: f"{'time' if name == 'replay_ratio' else 'train'}/{name}" for name in DIAGNOSTICS}
#: Seconds between the writer's flushes to disk while a run goes on (closing flushes too).
FLUSH_S = 10


class TensorBoardLog:
    """The event files of one run (``torch.utils.tensorboard.SummaryWriter``).

    Parameters
    ----------
    directory : path
        Where the event files go (created if needed): the run directory's ``tb/``.
    resume_step : int, optional
        For a resumed run, the env steps of the checkpoint it continues from. Points
        that an earlier session wrote past that step (after its last checkpoint) are
        hidden by TensorBoard (the writer's ``purge_step``), so each curve continues
        without a fold; this session's points come after it.

    Raises
    ------
    ImportError
        If the ``tensorboard`` package is not installed (train with ``tensorboard=False``
        or ``--no-tensorboard`` to do without).
    """

    def __init__(self, directory: str | os.PathLike, resume_step: int | None = None):
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as e:
            raise ImportError(f"the TensorBoard log needs the tensorboard package ({e}); install it "
                              f"(pip install tensorboard) or train with tensorboard=False / --no-tensorboard") from e
        self.writer = SummaryWriter(os.fspath(directory), flush_secs=FLUSH_S,
                                    purge_step=None if resume_step is None else resume_step + 1)
        #: The step of the last points written (env steps; 0 or ``resume_step`` before the first).
        self.step = resume_step or 0

    def write(self, progress: Progress, *, score_mean: float, max_tile: float, env_steps_per_s: float,
              updates_per_s: float) -> None:
        """Add one point per tag (see the module docstring) at step ``progress.env_steps``,
        unless that step is not past :attr:`step` (a report without new env steps, e.g.
        while worker processes start, adds nothing).

        ``score_mean`` (points) and ``max_tile`` are those of the recent games; the speeds
        are env steps and updates per second since the previous report.
        """
        if progress.env_steps <= self.step:
            return
        self.step = progress.env_steps
        scalars = {"rollout/ep_score_mean": score_mean, "rollout/max_tile": max_tile,
                   "time/env_steps_per_s": env_steps_per_s, "time/updates_per_s": updates_per_s,
                   **{f"time/{name}_s": seconds for name, seconds in progress.time_split.items()},
                   **_diagnostic_scalars(progress.diagnostics)}
        for k, worker in enumerate(progress.workers):
            scalars.update({f"worker{k}/{tag}": value for tag, value in _diagnostic_scalars(worker).items()})
        for tag, value in scalars.items():
            if math.isfinite(value):
                self.writer.add_scalar(tag, value, progress.env_steps)

    def close(self) -> None:
        """Flush and close the event file (closing again does nothing)."""
        self.writer.close()


def _diagnostic_scalars(diagnostics: Mapping[str, float]) -> dict[str, float]:
    return {DIAGNOSTIC_TAGS[name]: float(value) for name, value in diagnostics.items()}
