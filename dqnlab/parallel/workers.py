"""A learner in a long-lived task: the worker side and the parent side, once for every scheme.

``independent`` and ``shared`` run one :class:`~dqnlab.runtime.learner.Learner` per
worker task. What such a task does besides its scheme's algorithm is the same: report
its games and counters about twice a second, answer checkpoint requests with its
state, stop on the parent's order, the budget or the deadline, send what it has when it
fails, and send its last report (with its final state) when it ends.
:class:`LearnerWorker` does that (the scheme's part is :meth:`LearnerWorker.after_step`
and a few fields); :class:`LearnerCoordinator` is what the parent knows of such learners:
their games, last reports, checkpoint assembly and per-worker summary.
"""

from __future__ import annotations

import math
import time
from typing import Any

from ..runtime.driver import RunClock
from ..runtime.learner import Learner
from ..runtime.loop import DIAGNOSTICS, workers_progress
from ..runtime.progress import Progress
from .faults import check_fault
from .messages import Checkpoint, Report, UnexpectedMessage
from .tasks import Channel, Coordinator

__all__ = ["LearnerWorker", "LearnerCoordinator"]


class LearnerWorker:
    """A learner's side of a long-lived task: its loop, reports, checkpoint state and end.

    Parameters
    ----------
    ch : Channel
        The task's channel.
    learner : Learner
        The worker's learner (its ``clock0`` is set to the run's start here).
    budget : int or None
        Env steps this learner may take (None: no step budget).
    clock : RunClock
        The run's start and time budget.
    report_every_s : float
        Seconds between reports.
    checkpointing : bool
        Answer checkpoint requests, and send the final state with the last report.
    resume : dict, optional
        A :meth:`state` to continue from.

    Notes
    -----
    A scheme subclasses it for its own part: :meth:`after_step` (after every act-and-learn
    step), :meth:`report_extra` (its counters in each :class:`Report`),
    :meth:`state_extra` / :meth:`load_extra` (its part of the checkpoint state) and
    :meth:`final_weights`.
    """

    def __init__(self, ch: Channel, learner: Learner, *, budget: int | None, clock: RunClock,
                 report_every_s: float, checkpointing: bool,
                 resume: dict[str, Any] | None):
        self.ch, self.learner, self.budget = ch, learner, budget
        learner.clock0, self.deadline = clock.local()
        self.report_every_s, self.checkpointing = report_every_s, checkpointing
        self.comm = 0.0  # seconds communicating with the parent
        self.sent = 0  # episodes already reported
        if resume is not None:
            learner.load_state_dict(resume["learner"])
            self.comm = float(resume["comm"])
            self.sent = len(learner.episodes)  # the parent has them, from the checkpoint
            self.load_extra(resume)
        if checkpointing:
            ch.state = self.state

    # ------------------------------------------------------------------ the scheme's part
    def after_step(self) -> None:
        """Called after every act-and-learn step, or chunk of them on the compiled core
        (``independent``: the sync check-in)."""

    def update_limit(self) -> int | None:
        """The update count at which :meth:`after_step` must run, so that the compiled loop stops there
        (``independent``: the next sync round); None: any."""
        return None

    def report_extra(self) -> dict[str, Any]:
        """The scheme's own counters in each report."""
        return {}

    def state_extra(self) -> dict[str, Any]:
        """The scheme's own part of the checkpoint state."""
        return {}

    def load_extra(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_extra` from a checkpoint state."""

    def final_weights(self) -> dict | None:
        """Weights sent with the last report, beside the final state where there is one (None: the parent has
        the model already)."""
        return None

    # ------------------------------------------------------------------ the plumbing
    def state(self) -> dict[str, Any]:
        """This worker's checkpoint state: its learner, its communication time and the scheme's part (the
        agent's live tensors: the channel serialises the state as it sends it)."""
        self.sent = len(self.learner.episodes)  # the state carries every game: the parent takes them from it
        return {"learner": self.learner.state_dict(copy_agent=False), "comm": self.comm, **self.state_extra()}

    def report(self, done: bool = False) -> None:
        """Send a :class:`Report` of the games finished since the last one and the counters now."""
        t0 = time.perf_counter()
        learner = self.learner
        rows, self.sent = learner.episodes[self.sent:], len(learner.episodes)
        final = done and self.checkpointing
        self.ch.send(Report(self.ch.worker, done, rows, learner.env_steps, learner.updates, dict(learner.timing),
                            self.comm, learner.diagnostics(), self.report_extra(),
                            weights=self.final_weights() if done else None,
                            state=self.state() if final else None))
        self.comm += time.perf_counter() - t0

    def take_orders(self) -> None:
        """Read the parent's orders: a stop, or a checkpoint request to serve now.

        Raises
        ------
        UnexpectedMessage
            For any other order.
        """
        for order in self.ch.orders():
            if not isinstance(order, Checkpoint):
                raise UnexpectedMessage(f"learner {self.ch.worker}", order)
            self.ch.serve_checkpoint(order.id)

    def running(self) -> bool:
        """Whether the budget, the deadline and the parent let the learner go on."""
        return ((self.budget is None or self.learner.env_steps < self.budget)
                and (self.deadline is None or time.perf_counter() < self.deadline) and not self.ch.stopped)

    def budget_fraction(self) -> float:
        """Fraction of this learner's budget spent, in [0, 1]: env steps or seconds, whichever is further."""
        p = 0.0 if self.budget is None else self.learner.env_steps / self.budget
        if self.deadline is not None:
            seconds = self.deadline - self.learner.clock0
            p = max(p, (time.perf_counter() - self.learner.clock0) / seconds)
        return min(1.0, p)

    def run(self) -> None:
        """Act and learn until the budget, the deadline or a stop; report on the way and at the end.

        On an exception the games finished since the last report are sent first, then it is
        re-raised (the task wrapper reports it).
        """
        learner = self.learner
        next_report = time.perf_counter() + self.report_every_s
        try:
            while self.running():
                learner.advance(None if self.budget is None else self.budget - learner.env_steps,
                                next_report if self.deadline is None else min(next_report, self.deadline),
                                self.update_limit())
                check_fault(self.ch.fault, self.ch.worker, env_steps=learner.env_steps, updates=learner.updates)
                self.after_step()
                now = time.perf_counter()
                if now >= next_report:
                    next_report = now + self.report_every_s
                    self.report()
                    t0 = time.perf_counter()
                    self.take_orders()
                    self.comm += time.perf_counter() - t0
        except BaseException:
            self.report()  # keep the games finished since the last report
            raise
        self.report(done=True)


class LearnerCoordinator(Coordinator):
    """What the parent knows of K worker learners, from their reports and checkpoint states.

    Parameters
    ----------
    workers : int
        K.
    batch_size : int
        Samples per update (for the run's replay ratio).
    extra : dict
        The scheme's own counters of :attr:`Report.extra <dqnlab.parallel.messages.Report>`,
        with their values before the first report.

    Attributes
    ----------
    rows : list of dict
        Every learner's episode rows, as they came.
    latest : list of dict
        Each learner's last report: ``env_steps``, ``updates``, ``timing``, ``comm_s``,
        ``diagnostics`` and the scheme's ``extra`` counters.
    """

    def __init__(self, workers: int, batch_size: int, extra: dict[str, Any]):
        super().__init__(workers)
        self.batch_size = batch_size
        self.rows: list[dict[str, Any]] = []
        self.latest = [{"env_steps": 0, "updates": 0, "timing": {"acting": 0.0, "learning": 0.0}, "comm_s": 0.0,
                        "diagnostics": dict.fromkeys(DIAGNOSTICS, math.nan), **extra} for _ in range(workers)]

    def receive(self, msg: Any) -> None:
        """Take a :class:`Report` (and the final state that comes with a last one).

        Raises
        ------
        UnexpectedMessage
            For another kind of message.
        """
        if not isinstance(msg, Report):
            raise UnexpectedMessage(type(self).__name__, msg)
        self.rows.extend(msg.rows)
        self.latest[msg.worker] = {"env_steps": msg.env_steps, "updates": msg.updates, "timing": msg.timing,
                                   "comm_s": msg.comm_s, "diagnostics": msg.diagnostics, **msg.extra}
        if msg.state is not None:
            self.absorb(msg.worker, msg.state)

    def absorb(self, k: int, state: dict[str, Any]) -> None:
        """Make the view of learner ``k`` that of its checkpoint ``state`` (:meth:`LearnerWorker.state`)."""
        learner = state["learner"]
        self.rows = [r for r in self.rows if r["worker"] != k] + [dict(r) for r in learner["episodes"]]
        self.latest[k] = {**self.latest[k], "env_steps": int(learner["env_steps"]),
                          "updates": int(learner["agent"]["updates"]), "timing": dict(learner["timing"]),
                          "comm_s": float(state["comm"]), **self.absorb_extra(k, state)}

    def absorb_extra(self, k: int, state: dict[str, Any]) -> dict[str, Any]:
        """The scheme's ``extra`` counters of learner ``k`` from its checkpoint ``state``."""
        return {}

    def own_state(self) -> dict[str, Any]:
        """The parent's own part of a checkpoint (beside the learners' states)."""
        return {}

    def checkpoint_state(self, states: dict[int, Any]) -> dict[str, Any]:
        """``{"workers": [state of each learner], **own_state()}``; the view absorbs the states."""
        gathered = self.gather_states(states)
        for k, st in enumerate(gathered):
            self.absorb(k, st)
        return {"workers": gathered, **self.own_state()}

    def restore(self, saved: dict[str, Any]) -> None:
        """Continue from :meth:`checkpoint_state` output (the learners' part)."""
        if len(saved["workers"]) != self.workers:
            raise ValueError(f"checkpoint of {len(saved['workers'])} learners, not {self.workers}")
        for k, st in enumerate(saved["workers"]):
            self.absorb(k, st)

    def progress(self) -> Progress:
        """The run's :class:`~dqnlab.runtime.progress.Progress`, from each learner's last report."""
        return workers_progress(self.latest, self.rows, self.batch_size)

    def per_worker(self) -> list[dict[str, Any]]:
        """Per learner: ``worker``, ``env_steps``, ``updates``, ``episodes``, ``acting_s``,
        ``learning_s``, ``communication_s`` (seconds), ``pid`` and ``host``."""
        return [{"worker": k, "env_steps": w["env_steps"], "updates": w["updates"],
                 "episodes": sum(1 for r in self.rows if r["worker"] == k), "acting_s": w["timing"]["acting"],
                 "learning_s": w["timing"]["learning"],
                 "communication_s": w["comm_s"] + w.get("lock_wait_s", 0.0),
                 "pid": None if self.group is None else self.group.pids.get(k),
                 "host": None if self.group is None else self.group.hosts.get(k)}
                for k, w in enumerate(self.latest)]
