"""What a scheme reports to its run loop: :class:`Progress` and its :data:`DIAGNOSTICS`.

Its own module, below both :mod:`dqnlab.runtime.loop` (which takes the reports) and
:mod:`dqnlab.runtime.tensorboard` (which writes them), so that neither imports the other back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from ..agent.dqn import UPDATE_DIAGNOSTICS

__all__ = ["Progress", "DIAGNOSTICS"]

#: The DQN diagnostics in :attr:`RunResult.history <dqnlab.RunResult.history>`, sampled at every
#: progress report (the one declaration of their names: the run loop and the TensorBoard log read
#: them here): the agent's :data:`~dqnlab.agent.dqn.UPDATE_DIAGNOSTICS`, ``loss``, ``q_max_mean``
#: and ``grad_norm`` of the last update (see :meth:`dqnlab.DQNAgent.diagnostics`; NaN before
#: learning starts; ``sharded`` and ``averaged`` measure ``grad_norm`` on the first update after
#: each report), then ``epsilon`` (exploration rate now) and ``replay_ratio`` (achieved: minibatch
#: samples trained so far per env step so far).
DIAGNOSTICS = (*UPDATE_DIAGNOSTICS, "epsilon", "replay_ratio")


class Progress(NamedTuple):
    """What a scheme tells its :class:`~dqnlab.runtime.loop.RunLoop` at a progress report (about once a second).

    Attributes
    ----------
    env_steps, updates : int
        Totals of the run so far (all workers).
    games : sequence of dict
        The episode rows so far (:data:`dqnlab.runtime.results.EPISODE_COLUMNS`), oldest first; the
        last :data:`~dqnlab.runtime.loop.RECENT_GAMES` give the mean score and the largest tile.
    time_split : mapping of str to float
        Seconds ``acting``, ``learning`` and in ``communication`` so far, summed over workers.
    diagnostics : mapping of str to float
        The run's :data:`DIAGNOSTICS` (a missing one is NaN).
    workers : sequence of mapping, optional
        Each worker's diagnostics (some of :data:`DIAGNOSTICS`), for schemes
        whose workers learn or act apart (``independent``, ``shared``, ``actors``); recorded when
        there are two or more (one worker's are the run's).
    """

    env_steps: int
    updates: int
    games: Sequence[Mapping[str, Any]]
    time_split: Mapping[str, float]
    diagnostics: Mapping[str, float]
    workers: Sequence[Mapping[str, float]] = ()
