"""The messages between the parent and its long-lived worker tasks, one small class per kind.

Workers send :data:`REPORTS` to the parent (each names its ``worker``); the parent sends
:data:`ORDERS` to a worker. A side that receives a message of a kind it does not know
raises :class:`UnexpectedMessage` rather than dropping it. They are sent at report
frequency (about once a second per worker, or every ~50 ms for ``actors``' data), so a
dataclass per message costs nothing that shows.

Arrays travel as NumPy: weights as ``dict[str, ndarray]`` (float32, by parameter name),
transitions as the columns of :class:`~dqnlab.replay.Minibatch`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from .weights import Changes

__all__ = ["Hello", "Heartbeat", "Failed", "StateReply", "Report", "SyncPost", "ActorData",
           "Stop", "Checkpoint", "Checkpointed", "NewWeights", "Throttle",
           "REPORTS", "ORDERS", "HEARTBEAT_S", "SILENCE_S", "UnexpectedMessage"]

#: Seconds between two :class:`Heartbeat` of a task.
HEARTBEAT_S = 1.0
#: A task that has sent nothing, not even a heartbeat, for this many seconds is lost: its process stopped or its
#: host cannot be reached. The run ends naming it (so a worker cut off on another host ends the run within 15 s).
SILENCE_S = 10.0

#: A network's parameters by name (float32 arrays).
WeightDict = dict[str, np.ndarray]


class UnexpectedMessage(TypeError):
    """A message of a kind its receiver does not handle (a protocol error, not a worker's fault)."""

    def __init__(self, where: str, message: Any):
        super().__init__(f"{where} got an unexpected message: {message!r}"[:500])


# ----------------------------------------------------------------------------- worker -> parent
@dataclass(frozen=True)
class Hello:
    """A task has started: its process id, torch threads and host name."""

    worker: int
    pid: int
    torch_threads: int
    host: str


@dataclass(frozen=True)
class Heartbeat:
    """A task's process is alive and its host reachable (sent every :data:`HEARTBEAT_S` by a thread of its own,
    whatever the task is doing)."""

    worker: int


@dataclass(frozen=True)
class Failed:
    """A task raised: ``"TypeName: message"`` and the traceback text."""

    worker: int
    message: str
    traceback: str


@dataclass(frozen=True)
class StateReply:
    """A worker's answer to :class:`Checkpoint` ``id``: its checkpoint ``state`` (None without one)."""

    worker: int
    id: int
    state: Any


@dataclass(frozen=True)
class Report:
    """A learner's progress (``done``: its last report, when it has finished).

    Attributes
    ----------
    rows : list of dict
        Episode rows finished since its previous report.
    env_steps, updates : int
        Its totals.
    timing : dict of str to float
        Seconds ``acting`` and ``learning``.
    comm_s : float
        Seconds communicating with the parent.
    diagnostics : dict of str to float
        Its :data:`~dqnlab.runtime.loop.DIAGNOSTICS`.
    extra : dict
        The scheme's own counters (``independent``: ``score``, ``bytes_sent``; ``shared``: ``lock_wait_s``).
    weights : dict or None
        Its final weights (``done``, schemes whose learners each hold a model; ``independent``: as
        :data:`~dqnlab.parallel.weights.Changes` from the learners' common weights).
    state : any
        Its final checkpoint state (``done``, runs that checkpoint).
    """

    worker: int
    done: bool
    rows: list
    env_steps: int
    updates: int
    timing: dict
    comm_s: float
    diagnostics: dict
    extra: dict = field(default_factory=dict)
    weights: WeightDict | Changes | None = None
    state: Any = None


@dataclass(frozen=True)
class SyncPost:
    """An ``independent`` learner checks in at sync round ``round`` (``active``: it waits for weights) with
    its weights' ``changes`` from the learners' last common weights."""

    worker: int
    round: int
    active: bool
    changes: Changes
    score: float
    env_steps: int
    updates: int


@dataclass(frozen=True)
class ActorData:
    """An ``actors`` actor's transitions and counters since its last message (``done``: its last).

    ``transitions``: the columns of :meth:`~dqnlab.replay.ReplayBuffer.add_batch` (n-step
    transitions with their ``steps``; with prioritized replay also ``td_errors``, ``(N,)``
    float32, the actor's own: their initial priorities), None if none, acted with the
    weights of learner update ``version``; ``finished``: games finished among
    them; ``rows``: their episode rows; ``timing``: the actor's seconds by activity;
    ``epsilon``: its fixed epsilon (None: the schedule), ``epsilon_now`` the one in use; ``niceness``: the
    scheduling niceness it acts at (None where the OS has none).
    """

    worker: int
    done: bool
    transitions: dict | None
    version: int
    finished: int
    rows: list
    env_steps: int
    episodes: int
    timing: dict
    weights_loads: int
    waits: int
    epsilon: float | None
    epsilon_now: float = math.nan
    state: Any = None
    niceness: int | None = None


# ----------------------------------------------------------------------------- parent -> worker
@dataclass(frozen=True)
class Stop:
    """End the task now (budget spent, Stop, Ctrl-C, or another worker failed)."""


@dataclass(frozen=True)
class Checkpoint:
    """Send your state (:class:`StateReply`) and wait for :class:`Checkpointed` ``id``."""

    id: int


@dataclass(frozen=True)
class Checkpointed:
    """Checkpoint ``id`` is written (or abandoned): go on."""

    id: int


@dataclass(frozen=True)
class NewWeights:
    """New weights (None: keep yours; ``independent``: the combined weights as
    :data:`~dqnlab.parallel.weights.Changes` from the learners' common ones); ``version``: the learner update
    they are from (``actors``)."""

    weights: WeightDict | Changes | None
    version: int = 0


@dataclass(frozen=True)
class Throttle:
    """``actors``: pause acting (``paused``) until the learner catches up, or go on."""

    paused: bool


#: What workers send.
REPORTS = (Hello, Heartbeat, Failed, StateReply, Report, SyncPost, ActorData)
#: What the parent sends.
ORDERS = (Stop, Checkpoint, Checkpointed, NewWeights, Throttle)
