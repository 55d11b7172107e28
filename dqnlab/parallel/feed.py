"""The learner's end of K actors: receive their data, store it, keep their counters.

:class:`ActorFeed` is the :class:`~dqnlab.parallel.tasks.Coordinator` of a learner fed by
actors (:class:`~dqnlab.parallel.actor.Actor`): it puts every
:class:`~dqnlab.parallel.messages.ActorData` into the replay buffer, keeps the games,
each actor's counters and the parameter lag of every transition, holds back its answers
while a checkpoint is gathered, and saves all of that in a checkpoint. What the learner
does with the data (learn, send weights, throttle) is the scheme's subclass
(:mod:`dqnlab.schemes.actors`).

A checkpoint is one consistent cut of the run: the learner asks every actor for its
state and, until all have answered, takes no updates and sends no orders; each actor
first sends the transitions it holds, then its state (games in progress, exploration
stream, current weights and their version, counters, timing), and waits for the
learner to write the checkpoint. An actor's messages arrive in order, so the learner
has stored every transition of the cut when the last state comes in. The final
checkpoint is written when every actor has sent its final state with its last message.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from typing import Any

import numpy as np

from ..replay import ReplayBuffer
from .messages import ActorData, UnexpectedMessage
from .tasks import Coordinator

__all__ = ["ActorFeed", "lag_summary"]


class ActorFeed(Coordinator):
    """The learner's store of what K actors send.

    Parameters
    ----------
    workers : int
        K actors.
    buffer : ReplayBuffer
        Where the transitions go.

    Attributes
    ----------
    env_steps : int
        Env steps of all actors whose transitions were received; ``steps``: per actor. (With
        n-step returns an actor holds back the transitions of its last ``n - 1`` steps per board.)
    rows : list of dict
        The actors' episode rows as they came, each with the learner's ``last_loss`` then.
    actors : list of dict
        Each actor's last counters (``env_steps``, ``episodes``, ``timing``, ``weights_loads``,
        ``waits``, ``epsilon``, ``epsilon_now``).
    lag : collections.Counter
        Parameter lag (learner updates between the weights an actor acted with and the
        learner's when the transition arrived) -> transitions.
    first_data_s : float or None
        Seconds from ``t0`` to the first transitions.
    timing : dict
        The learner's seconds ``receiving`` (storing included), ``learning`` and ``sending_weights``
        (orders included); the learner counts the last two.
    """

    def __init__(self, workers: int, buffer: ReplayBuffer):
        super().__init__(workers)
        self.buffer = buffer
        self.t0 = time.perf_counter()
        self.env_steps = 0
        self.steps = [0] * workers
        self.rows: list[dict[str, Any]] = []
        self.actors: list[dict[str, Any]] = [{} for _ in range(workers)]
        self.lag: Counter = Counter()
        self.first_data_s: float | None = None
        self.last_loss = math.nan
        self.timing = {"learning": 0.0, "receiving": 0.0, "sending_weights": 0.0}
        self.gone: set[int] = set()  # actors that have ended
        self.held: set[int] = set()  # actors whose data came while a checkpoint was gathered

    # ------------------------------------------------------------------ the learner's part
    @property
    def updates(self) -> int:
        """The learner's updates so far (the weights version now)."""
        raise NotImplementedError

    def stored(self, data: ActorData, n: int) -> None:
        """Called after the transitions of ``data``, ``n`` > 0 env steps, went into the buffer."""

    def after_data(self, worker: int) -> None:
        """Called after ``worker``'s data was stored (not while a checkpoint is gathered)."""

    def after_checkpoint(self, held: list[int]) -> None:
        """Called when a checkpoint ends, with the running actors whose data came meanwhile."""

    # ------------------------------------------------------------------ the feed
    def receive(self, msg: Any) -> None:
        """Store an actor's :class:`~dqnlab.parallel.messages.ActorData`, then :meth:`after_data`.

        While a checkpoint is gathered the learner takes no updates and sends no orders,
        so that the actors' states and its own are one cut (nothing in flight): the actor
        is held until :meth:`after_checkpoint`.
        """
        if not isinstance(msg, ActorData):
            raise UnexpectedMessage(type(self).__name__, msg)
        t0 = time.perf_counter()
        self._store(msg)
        self.timing["receiving"] += time.perf_counter() - t0
        if msg.done:
            return
        if self.checkpoint_pending:
            self.held.add(msg.worker)
        else:
            self.after_data(msg.worker)

    def _store(self, p: ActorData) -> None:
        k = p.worker
        self.actors[k] = {key: getattr(p, key) for key in ("env_steps", "episodes", "timing", "weights_loads",
                                                            "waits", "epsilon", "epsilon_now", "niceness")}
        for row in p.rows:
            row["loss"] = self.last_loss
        self.rows.extend(p.rows)
        t = p.transitions
        steps = p.env_steps - self.steps[k]  # its env steps since its last message
        if t is None or steps == 0:
            return
        n = len(t["actions"])  # transitions: fewer than the steps while n-step returns are pending
        if self.first_data_s is None:
            self.first_data_s = time.perf_counter() - self.t0
        self.buffer.add_batch(**t)  # (with the actor's TD errors: the initial priorities, prioritized replay)
        self.env_steps += steps
        self.steps[k] = p.env_steps
        self.lag[self.updates - p.version] += n
        self.stored(p, steps)

    def exited(self, worker: int) -> None:
        self.gone.add(worker)

    def checkpoint_ended(self) -> None:
        held = sorted(self.held - self.gone)
        self.held.clear()
        self.after_checkpoint(held)

    def time_split(self, wall: float) -> dict[str, float]:
        """Seconds ``acting`` (the actors'), ``learning`` (the learner's updates) and in
        ``communication`` (both sides' sending, receiving and waiting), after ``wall`` seconds."""
        actors = [a.get("timing", {}) for a in self.actors]
        actor_comm = sum(t.get(key, 0.0) for t in actors for key in ("sending", "receiving", "waiting", "weights"))
        learner_comm = self.timing["receiving"] + self.timing["sending_weights"] + self.waiting_s(wall)
        return {"acting": sum(t.get("acting", 0.0) for t in actors), "learning": self.timing["learning"],
                "communication": actor_comm + learner_comm}

    def waiting_s(self, wall: float) -> float:
        """Seconds of the first ``wall`` that the learner spent waiting (not learning, receiving or sending)."""
        return max(0.0, wall - sum(self.timing.values()))

    def per_actor(self) -> list[dict[str, Any]]:
        """Per actor: ``worker``, ``pid``, ``host``, ``env_steps``, ``episodes``, ``epsilon``, seconds
        ``acting_s``, ``sending_s``, ``receiving_s``, ``waiting_s``, ``loading_weights_s``,
        and ``weights_loads``, ``waits``, ``niceness`` (the niceness it acted at; None: not known)."""
        out = []
        for k, a in enumerate(self.actors):
            t = a.get("timing", {})
            out.append({
                "worker": k, "pid": (self.group.pids.get(k) if self.group is not None else None),
                "host": (self.group.hosts.get(k) if self.group is not None else None),
                "env_steps": self.steps[k], "episodes": sum(1 for r in self.rows if r["worker"] == k),
                "epsilon": a.get("epsilon"), "acting_s": t.get("acting", 0.0), "sending_s": t.get("sending", 0.0),
                "receiving_s": t.get("receiving", 0.0), "waiting_s": t.get("waiting", 0.0),
                "loading_weights_s": t.get("weights", 0.0),
                "weights_loads": a.get("weights_loads", 0), "waits": a.get("waits", 0),
                "niceness": a.get("niceness"),
            })
        return out

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        """The feed's part of the learner's checkpoint state (copies)."""
        lag = sorted(self.lag)
        return {"buffer": self.buffer.state_dict(), "env_steps": self.env_steps, "steps": list(self.steps),
                "rows": [dict(r) for r in self.rows], "first_data_s": self.first_data_s,
                "last_loss": self.last_loss,
                "lag": {"values": [int(v) for v in lag], "counts": [int(self.lag[v]) for v in lag]},
                "timing": dict(self.timing), "actors": [dict(a) for a in self.actors]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the feed's part of :meth:`state_dict` output.

        Raises
        ------
        ValueError
            If the state is of another number of actors.
        """
        if len(state["steps"]) != self.workers:
            raise ValueError(f"learner state of {len(state['steps'])} actors, not {self.workers}")
        self.buffer.load_state_dict(state["buffer"])
        self.env_steps, self.steps = int(state["env_steps"]), [int(n) for n in state["steps"]]
        self.rows = [dict(r) for r in state["rows"]]
        self.first_data_s = None if state["first_data_s"] is None else float(state["first_data_s"])
        self.last_loss = float(state["last_loss"])
        self.lag = Counter(dict(zip((int(v) for v in state["lag"]["values"]),
                                    (int(c) for c in state["lag"]["counts"]), strict=True)))
        self.timing = {k: float(v) for k, v in state["timing"].items()}
        self.actors = [dict(a) for a in state["actors"]]


def lag_summary(lag: Counter) -> dict[str, Any]:
    """Mean, median, 95th percentile and max of the parameter lag (learner updates), over transitions."""
    total = sum(lag.values())
    if total == 0:
        return {"mean": None, "median": None, "p95": None, "max": None, "transitions": 0,
                "unit": "learner updates"}
    values = np.array(sorted(lag), dtype=np.float64)
    counts = np.array([lag[v] for v in sorted(lag)], dtype=np.float64)
    cum = np.cumsum(counts) / total
    return {"mean": float(np.dot(values, counts) / total), "median": float(values[np.searchsorted(cum, 0.5)]),
            "p95": float(values[np.searchsorted(cum, 0.95)]), "max": float(values[-1]), "transitions": int(total),
            "unit": "learner updates"}
