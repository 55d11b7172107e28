"""``independent``: K independent DQN learners that share parameters on a sync schedule.

Several DQN agents trained at the same time that, by some sharing plan, periodically
share the weights each has trained: parameter averaging as in local SGD / FedAvg, or
selection as in population-based training (Jaderberg et al. 2017, arXiv:1711.09846). Each
of the K learners is a whole serial DQN (:class:`~dqnlab.runtime.learner.Learner`) in a
worker of its own (a thread of this process on the compiled core, else a process:
:func:`~dqnlab.parallel.threads.as_threads`): its own ``n_envs`` boards, replay buffer, online/target networks
and Adam state, with seeds derived from ``(seed, k)``. The env-step budget is split
evenly across learners. All learners start from the same initial weights (learner
0's), as parameter averaging requires (Zinkevich et al. 2010; McMahan et al. 2017,
FedAvg); exploration, games and replay differ.

Every ``sync_every`` updates each learner checks in with the parent (see
:class:`SyncSchedule`), posting its weights and its recent
mean score; the parent measures how far the learners have drifted apart (the
divergence, recorded at every check-in) and, when the schedule says so, sends every
learner the combined weights. What travels is only the entries that changed since the
learners were last equal (:func:`~dqnlab.parallel.weights.changed_entries`): an n-tuple
network's update touches a few hundred of its 67M entries, so a sync of its 268 MB tables
ships a few per cent of them (``bytes_moved`` in the run's ``extra``). The combinations:

* ``none`` -- never share (the control: K separate runs);
* ``periodic`` -- plain average every ``sync_every`` updates (local SGD / FedAvg);
* ``final`` -- plain average every ``sync_every`` updates, but only in the last
  ``final_fraction`` of the budget (by default its last quarter);
* ``weighted`` -- average weighted by ``softmax(score / temperature)``: "favour the
  better agent";
* ``best`` -- every learner gets a copy of the best learner's weights (a form of
  population-based selection);
* ``sum`` -- every ``sync_every`` updates each learner's changes since the last sync are all
  added to the common weights, so that every learner's steps count whole, as in one table that
  all of them write with a delay (a parameter server that adds the workers' accumulated
  updates: Downpour SGD, Dean et al. 2012; Hogwild's lock-free writes, Niu et al. 2011, at a
  stride). Averaging instead divides an entry only one learner moved by K.

Only the online network's weights are shared; each learner keeps its own target
network (it catches up at its next target sync) and its own Adam moments, as local
SGD methods keep optimiser state local. Shared learners of this kind are also how
Gorila (Nair et al. 2015, arXiv:1507.04296) scales, there through a parameter server.

How it runs: one long-lived joblib task per learner (the learner and its replay
buffer live for the whole run), talking to the parent through queues (in memory between
threads, a ``multiprocessing.Manager``'s between processes): the parent runs the sync barrier, gathers the
episodes as they finish (live progress and callbacks), and can tell the learners to
stop. A learner's exception stops the others and raises
:class:`~dqnlab.runtime.errors.WorkerError` with the episodes gathered so far.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ..agent.dqn import DQNAgent
from ..config import TrainConfig
from ..options import SchemeOptions, option, when
from ..parallel.messages import NewWeights, Report, SyncPost, UnexpectedMessage
from ..parallel.tasks import Channel, TaskGroup, drive_tasks, split_budget
from ..parallel.threads import as_threads, threads_option, torch_threads
from ..parallel.weights import (
    Changes,
    Weights,
    apply_changes,
    changed_entries,
    changes_nbytes,
    combine_changes,
    divergence,
)
from ..parallel.workers import LearnerCoordinator, LearnerWorker
from ..runtime.checkpoint import Checkpointer
from ..runtime.compact import dense
from ..runtime.driver import RunClock, build_result, run_to_end
from ..runtime.learner import Learner, worker_seeds
from ..runtime.loop import RunLoop, recent_score
from ..runtime.results import RunResult

__all__ = ["Options", "run", "SYNC_SCHEDULES", "SCORE_WINDOW", "SYNC_EVERY", "SyncSchedule", "sync_coefficients",
           "score_coefficients", "best_index"]

#: Sync schedules of the ``independent`` scheme.
SYNC_SCHEDULES = ("none", "periodic", "final", "weighted", "best", "sum")
#: Finished games whose mean score ranks a learner (``weighted`` and ``best`` schedules).
SCORE_WINDOW = 20
#: ``sync_every`` left at None: updates between check-ins per network family. An n-tuple network's update is
#: a few microseconds of sparse SGD (thousands a second), a network's a millisecond of dense maths: both
#: check in every few seconds of training.
SYNC_EVERY = {"ntuple": 10_000, "mlp": 500, "cnn": 500}



@dataclass(frozen=True)
class Options(SchemeOptions):
    """Options of ``independent`` (keyword arguments of :func:`dqnlab.train`)."""

    sync: str = option("periodic", "When the learners share weights: never, every sync_every updates, only in "
                       "the last final_fraction of the budget, weighted by recent score, or the best learner's "
                       "(see dqnlab.schemes.independent).", choices=SYNC_SCHEDULES,
                       tip="When the learners share weights: never, at every check-in, only near the end of the "
                           "budget, averaged weighted by recent score, or all taking the best learner's.")
    sync_every: int | None = option(None, "Updates of each learner between check-ins with the parent (a sync, or "
                                    "with sync none only a measurement of how far the learners have drifted "
                                    "apart); none: 10,000 for the n-tuple network, 500 for the others.",
                                    unit="updates", low=1)
    final_fraction: float = option(0.25, "Share only in this last fraction of the budget (env steps or seconds, "
                                   "whichever runs out first).", low=0, high=1, low_open=True,
                                   applies=when("sync", "final"))
    threads: bool | None = threads_option()
    temperature: float = option(500.0, "Softmax temperature of the score weighting: a learner this many points "
                                "ahead gets e = 2.7 times the weight.", unit="points", low=0, low_open=True,
                                applies=when("sync", "weighted"))


def run(config: TrainConfig, options: Options, *, workers: int = 1, progress: bool = True,
        callback: Callable[[RunResult], Any] | None = None,
        _checkpoint: Checkpointer | None = None) -> RunResult:
    """Train ``workers`` independent learners that share weights per ``options.sync``.

    Parameters
    ----------
    config : TrainConfig
        ``total_env_steps`` is split evenly across learners; ``buffer_size``,
        ``learning_starts`` and ``epsilon_decay_steps`` are per learner.
    workers : int
        K learners, one worker each (>= 1, <= ``total_env_steps``). With
        K = 1 the learner runs in this process and, whatever the schedule, plays the
        same games as ``serial`` with the same seed.
    progress : bool
        Show a progress bar (all learners together).
    callback : callable, optional
        ``callback(snapshot: RunResult)`` about once a second; return True to stop.
    options : Options
        The sharing schedule and its parameters (see :class:`Options`).

    Returns
    -------
    RunResult
        ``episodes`` of every learner (``worker`` column = learner index: per-learner
        curves). ``weights``: the combination the schedule would make at one more
        sync at the end (average / weighted / best; for ``none`` the best learner's).
        ``time_split`` summed over learners; ``communication`` is time in sync
        check-ins (sending weights, waiting at the barrier) and progress messages.
        ``extra``: ``per_worker`` (env steps, updates, games, time split, recent
        score, ``replay``: its buffer's :meth:`~dqnlab.ReplayBuffer.statistics` at its last report,
        with prioritized replay the priorities'), ``divergence`` (one row per check-in round: ``round``, ``updates``
        per learner, total ``env_steps``, ``wall_time_s``, ``divergence`` = mean L2
        distance of each learner's parameters to their mean, ``divergence_rel``
        (divided by the mean's norm), ``synced``, ``coefficients``, ``scores``),
        ``syncs`` (rounds applied), ``final_weights`` (how they were made).

    Raises
    ------
    ValueError
        If ``total_env_steps`` < ``workers``.
    WorkerError
        If a learner fails; ``err.partial`` holds every episode gathered until then.

    Notes
    -----
    A time budget (``config.max_seconds``) counts from this call, so it includes
    starting the worker processes: a few seconds the first time in a Python session
    (each imports torch), nothing later (joblib keeps its pool).

    Checkpoints (``dqnlab.train(..., run_dir=...)``) are one consistent cut of the
    run: the parent asks every learner for its state, each answers between two
    steps (or while it waits at a sync barrier) and waits until all have answered;
    open sync rounds are kept with the checkpoint. A resumed run continues every
    learner exactly where it was (weights, Adam, replay, games, random streams, sync
    schedule), so with an env-step budget it plays the same games as a run that did
    not stop.
    """
    if config.total_env_steps is not None and config.total_env_steps < workers:
        raise ValueError(f"total_env_steps ({config.total_env_steps}) must be at least workers ({workers})")
    options = replace(options, threads=as_threads(options.threads, config))  # (the run records which)
    budgets = split_budget(config.total_env_steps, workers)
    sync_every = options.sync_every or SYNC_EVERY[config.network]
    init = DQNAgent(config, seed=worker_seeds(config.seed, 0)[2]).get_weights()  # every learner starts here
    parent = _IndependentCoordinator(workers, config.batch_size, init, options.sync, options.temperature)
    resumed = _checkpoint.take_state() if _checkpoint is not None else None
    if resumed is not None:
        parent.restore(resumed)

    def result(status: str | None = None) -> RunResult:
        wall = loop.elapsed  # (read once: the rate below and the result's wall time agree)
        weights, how = parent.final_weights()
        return build_result("independent", config, workers, loop, parent.progress(), weights, status,
                            {**options.to_dict(), "sync_every": sync_every},
                            {"per_worker": parent.per_worker(), "divergence": list(parent.divergence),
                             "syncs": parent.syncs, "final_weights": how, "common_init": True,
                             "bytes_moved": parent.bytes_moved,
                             "bytes_moved_per_s": parent.bytes_moved / max(wall, 1e-9),
                             "score_window": SCORE_WINDOW, "torch_threads_per_worker": torch_threads(workers)},
                            wall_time_s=wall)

    loop = RunLoop(config, progress=progress, callback=callback, snapshot=result, checkpointer=_checkpoint)
    tasks = [dict(config=config, worker=k, budget=budgets[k], sync=options.sync,
                  sync_every=sync_every, final_fraction=options.final_fraction, clock=RunClock.of(loop),
                  base=parent.base,
                  report_every_s=loop.report_every_s / 2, checkpointing=_checkpoint is not None,
                  resume=None if resumed is None else resumed["workers"][k]) for k in range(workers)]

    def learners() -> None:
        with TaskGroup(_learner_task, tasks, backend="threading" if options.threads else None) as group:
            parent.group, parent.loop = group, loop
            parent.complete_rounds()  # rounds left open by the checkpoint resumed from
            drive_tasks(group, loop, parent, checkpoints=_checkpoint is not None)

    return run_to_end("independent", loop, learners, result, final_state=parent.final_checkpoint)


# ----------------------------------------------------------------------------- the sync schedule
@dataclass
class SyncSchedule:
    """When an ``independent`` learner checks in, and whether that check-in syncs.

    A learner checks in each time its update count crosses a multiple of
    ``sync_every`` (round ``r = updates // sync_every``). At every check-in it posts
    its weights (for the divergence measurement); the check-in is **active** -- the
    learner waits for the combined weights -- when the schedule says so:

    * ``none``: never;
    * ``periodic``, ``weighted``, ``best``, ``sum``: always;
    * ``final``: when ``progress >= 1 - final_fraction`` (progress = fraction of the
      budget spent, env steps or seconds, whichever is further along), so with the
      default 0.25 never before 75% of the budget.

    Parameters
    ----------
    schedule : str
        One of :data:`SYNC_SCHEDULES`.
    sync_every : int
        Updates (of this learner) between check-ins.
    final_fraction : float
        In (0, 1]: the last fraction of the budget in which ``final`` syncs.
    """

    schedule: str
    sync_every: int
    final_fraction: float = 0.25
    last_round: int = 0

    def active(self, progress: float) -> bool:
        """Whether a check-in at budget fraction ``progress`` (in [0, 1]) syncs."""
        if self.schedule == "none":
            return False
        if self.schedule == "final":
            return progress >= 1.0 - self.final_fraction - 1e-12
        return True

    def check(self, updates: int, progress: float) -> tuple[int, bool] | None:
        """Call after every learning step: ``(round, active)`` at a check-in, else None."""
        r = updates // self.sync_every
        if r <= self.last_round:
            return None
        self.last_round = r
        return r, self.active(progress)


def score_coefficients(scores: Sequence[float], temperature: float) -> np.ndarray:
    """Softmax of mean scores: ``c_k = exp(s_k / T) / sum_j exp(s_j / T)``.

    Parameters
    ----------
    scores : sequence of float
        Each learner's recent mean game score (points); NaN (no finished game yet)
        counts as the lowest finite score, and all-NaN gives equal coefficients.
    temperature : float
        T in points, > 0. Small T favours the best learner strongly (T -> 0 is
        ``best``); large T approaches the plain mean.

    Returns
    -------
    (K,) float64 coefficients summing to 1.
    """
    s = np.asarray(scores, dtype=np.float64)
    if not np.isfinite(s).any():
        return np.full(len(s), 1.0 / len(s))
    s = np.where(np.isfinite(s), s, np.nanmin(np.where(np.isfinite(s), s, np.nan)))
    z = (s - s.max()) / temperature  # shift for numerical stability; softmax is shift-invariant
    e = np.exp(z)
    return e / e.sum()


def best_index(scores: Sequence[float]) -> int:
    """Index of the highest finite score (ties: the lowest index; all NaN: 0)."""
    s = np.asarray(scores, dtype=np.float64)
    return int(np.argmax(np.where(np.isfinite(s), s, -np.inf))) if np.isfinite(s).any() else 0


def sync_coefficients(schedule: str, scores: Sequence[float], temperature: float = 500.0) -> np.ndarray:
    """How a sync combines K learners' weights, per schedule: ``(K,)`` coefficients (summing to 1 but for ``sum``).

    ``periodic`` and ``final``: the plain mean ``1/K``; ``weighted``: :func:`score_coefficients`;
    ``best``: one-hot on the best learner (a copy of its weights); ``none``: also the best
    learner's (used only for the run's final weights: averaging learners that never
    synchronised is not meaningful); ``sum``: ones, not normalised (every learner's changes added:
    ``combine_changes(..., normalise=False)``).

    Raises
    ------
    ValueError
        For an unknown schedule.
    """
    if schedule not in SYNC_SCHEDULES:
        raise ValueError(f"sync must be one of {list(SYNC_SCHEDULES)}, got {schedule!r}")
    k = len(scores)
    if schedule == "sum":
        return np.ones(k)
    if schedule in ("best", "none"):
        c = np.zeros(k)
        c[best_index(scores)] = 1.0
        return c
    return score_coefficients(scores, temperature) if schedule == "weighted" else np.full(k, 1.0 / k)


# ----------------------------------------------------------------------------- the parent
class _IndependentCoordinator(LearnerCoordinator):
    """What the parent knows of the learners, and the sync barrier: it closes each round
    once every running learner has checked in, and sends the combined weights.

    It holds the learners' last common weights (:attr:`base`: the initial ones, then each sync's)
    and each learner's entries that differ from them (:attr:`changes`)."""

    def __init__(self, workers: int, batch_size: int, init: Weights, sync: str, temperature: float):
        super().__init__(workers, batch_size, {"score": math.nan, "replay": None, "bytes_sent": 0})
        self.base, self.sync, self.temperature = init, sync, temperature
        self.changes: list[Changes | None] = [None] * workers  # last seen per learner (None: not yet)
        self.alive = set(range(workers))
        self.given: set[int] = set()  # learners whose report in hand brought their changes
        self.rounds: dict[int, dict[int, SyncPost]] = {}  # open rounds: learner -> its post
        self.divergence: list[dict[str, Any]] = []
        self.syncs = 0
        self.bytes_sent = 0  # combined weights sent to the learners

    @property
    def bytes_moved(self) -> int:
        """Bytes of weights moved so far, both ways (the learners' posts and the combined weights sent back)."""
        return self.bytes_sent + sum(w["bytes_sent"] for w in self.latest)

    def receive(self, msg: Any) -> None:
        if isinstance(msg, SyncPost):
            self.changes[msg.worker] = msg.changes
            self.rounds.setdefault(msg.round, {})[msg.worker] = msg
            self.complete_rounds()
            return
        if isinstance(msg, Report) and msg.weights is not None:  # a last report: its changes, as the learner made
            self.changes[msg.worker] = msg.weights  # them (the final state beside them is not read for them again)
            self.given.add(msg.worker)
        super().receive(msg)
        self.given.clear()

    def exited(self, worker: int) -> None:
        self.alive.discard(worker)
        self.complete_rounds()

    def checkpoint_ended(self) -> None:
        self.complete_rounds()  # rounds held back while the checkpoint was gathered

    def complete_rounds(self) -> None:
        """Close every open round that every learner still running has checked in to (not while
        a checkpoint is gathered, nor once the learners are told to stop: the checkpoint keeps the round
        open, and a resumed run closes it)."""
        if self.checkpoint_pending or (self.group is not None and self.group.stopping):
            return
        for r in sorted(self.rounds):
            posted = self.rounds[r]
            if not self.alive <= set(posted):
                continue
            del self.rounds[r]
            ks = sorted(posted)
            changes, scores = [posted[k].changes for k in ks], [posted[k].score for k in ks]
            d, rel = divergence(self.base, changes) if len(ks) > 1 else (0.0, 0.0)
            # A round syncs only if every learner in it asked to (with a time budget the
            # learners may disagree at the start of the final phase: then nobody syncs).
            applied = self.sync != "none" and all(posted[k].active for k in ks)
            coefs = sync_coefficients(self.sync, scores, self.temperature) if applied else None
            combined = combine_changes(self.base, changes, coefs, normalise=self.sync != "sum") if applied else None
            told = [k for k in ks if posted[k].active]
            self.group.send_all(told, NewWeights(combined))  # (one file for them all, where it goes by one)
            self.bytes_sent += 0 if combined is None else len(told) * changes_nbytes(combined)
            if applied:  # the learners in the round now have the combined weights: the new base
                gone = {k: self.weights_of(k) for k in range(self.workers) if k not in ks and self.changes[k]}
                apply_changes(self.base, combined)
                for k in ks:
                    self.changes[k] = {n: (np.zeros(0, np.int64), np.zeros(0, np.float32)) for n in self.base}
                for k, w in gone.items():  # (a learner that ended before the round: its changes from the new base)
                    self.changes[k] = changed_entries(w, self.base)
            self.syncs += int(applied)
            self.divergence.append({
                "round": r, "updates": max(posted[k].updates for k in ks),
                "env_steps": sum(posted[k].env_steps for k in ks), "wall_time_s": self.loop.elapsed,
                "learners": ks, "divergence": d, "divergence_rel": rel, "synced": applied,
                "coefficients": None if coefs is None else [float(c) for c in coefs],
                "scores": [float(s) for s in scores]})

    def weights_of(self, k: int) -> Weights:
        """Learner ``k``'s last weights seen, whole (a copy)."""
        weights = {n: np.array(w, copy=True) for n, w in self.base.items()}
        apply_changes(weights, self.changes[k])
        return weights

    def absorb(self, k: int, state: dict[str, Any]) -> None:
        super().absorb(k, state)
        if k not in self.given:
            online = {name: dense(t).detach().numpy() for name, t in state["learner"]["agent"]["online"].items()}
            self.changes[k] = changed_entries(online, self.base)

    def absorb_extra(self, k: int, state: dict[str, Any]) -> dict[str, Any]:
        return {"score": recent_score([r for r in self.rows if r["worker"] == k], SCORE_WINDOW),
                "bytes_sent": int(state["bytes_sent"])}

    def own_state(self) -> dict[str, Any]:
        rounds = {r: {k: {f: v for f, v in vars(p).items() if f != "worker"} for k, p in posted.items()}
                  for r, posted in self.rounds.items()}
        return {"parent": {"rounds": rounds, "base": self.base, "divergence": list(self.divergence),
                           "syncs": self.syncs, "bytes_sent": self.bytes_sent}}

    def restore(self, saved: dict[str, Any]) -> None:
        parent = saved["parent"]
        self.base = parent["base"]  # (first: the learners' states are read as changes from it)
        super().restore(saved)
        self.rounds = {int(r): {int(k): SyncPost(int(k), **p) for k, p in posted.items()}
                       for r, posted in parent["rounds"].items()}
        self.divergence = list(parent["divergence"])
        self.syncs, self.bytes_sent = int(parent["syncs"]), int(parent["bytes_sent"])

    def per_worker(self) -> list[dict[str, Any]]:
        return [{**w, "score_recent": latest["score"], "replay": latest["replay"], "bytes_sent": latest["bytes_sent"]}
                for w, latest in zip(super().per_worker(), self.latest)]

    def final_weights(self) -> tuple[Weights, str]:
        """The run's weights -- the combination the schedule would make at one more sync -- and how they were made."""
        have = [k for k in range(self.workers) if self.changes[k] is not None]
        if not have:
            return self.base, "initial weights (no learner has reported weights yet)"
        scores = [self.latest[k]["score"] for k in have]
        if len(have) == 1:
            return self.weights_of(have[0]), f"learner {have[0]}"
        coefs = sync_coefficients(self.sync, scores, self.temperature)
        weights = {n: np.array(w, copy=True) for n, w in self.base.items()}
        apply_changes(weights, combine_changes(self.base, [self.changes[k] for k in have], coefs,
                                               normalise=self.sync != "sum"))
        best = f"best learner by recent score (learner {have[int(coefs.argmax())]})"
        how = {"none": best, "best": best,
               "weighted": f"score-weighted average, coefficients {[round(float(c), 4) for c in coefs]}",
               "sum": "the last common weights with every learner's changes added"}.get(self.sync, "plain average of the learners' last weights")
        return weights, how


# ----------------------------------------------------------------------------- a learner (a worker task)
class _IndependentWorker(LearnerWorker):
    """A learner task that checks in at every sync round (and waits for the weights when active)."""

    def __init__(self, ch: Channel, learner: Learner, schedule: SyncSchedule, base: Weights, **kw: Any):
        self.schedule = schedule
        self.awaiting: int | None = None  # the sync round this learner posted and waits on
        self.bytes_sent = 0  # weights posted
        super().__init__(ch, learner, **kw)
        #: The learners' last common weights, which the parent holds too.
        self.base = {n: np.array(w, np.float32, copy=True) for n, w in base.items()}

    def changes(self) -> Changes:
        """This learner's entries that differ from :attr:`base`."""
        return changed_entries(self.learner.agent.weight_views(), self.base)

    def after_step(self) -> None:
        """Check in when a sync round is due: post the weights, and wait for the combined ones when active."""
        t0 = time.perf_counter()
        due = self.schedule.check(self.learner.updates, self.budget_fraction())
        if due is None:
            return
        r, active = due
        learner = self.learner
        changes = self.changes()
        self.bytes_sent += changes_nbytes(changes)
        self.ch.send(SyncPost(self.ch.worker, r, active, changes,
                              recent_score(learner.episodes, SCORE_WINDOW), learner.env_steps, learner.updates))
        if active:
            self.awaiting = r
            self.sync_wait()
        self.comm += time.perf_counter() - t0

    def sync_wait(self) -> None:
        """Wait for the round's weights (None: the round did not sync). A stop ends the wait with the round
        still awaited: the parent closes no round once it has told the learners to stop, so the checkpoint
        keeps the round open with this learner waiting on it, and a resumed run waits for it again."""
        reply = self.ch.wait()
        if isinstance(reply, NewWeights):
            if reply.weights is not None:  # the combined weights, as changes from the base: the new base
                agent = self.learner.agent
                weights = agent.weight_views()
                apply_changes(weights, reply.weights)
                agent.set_weights(weights) if agent.device.type != "cpu" else agent.refresh_acting()
                apply_changes(self.base, reply.weights)
            self.awaiting = None
        elif not self.ch.stopped:
            raise UnexpectedMessage(f"learner {self.ch.worker} (at a sync barrier)", reply)

    def update_limit(self) -> int:
        return (self.schedule.last_round + 1) * self.schedule.sync_every

    def report_extra(self) -> dict[str, Any]:
        return {"score": recent_score(self.learner.episodes, SCORE_WINDOW), "replay": self.learner.buffer.statistics(),
                "bytes_sent": self.bytes_sent}

    def state_extra(self) -> dict[str, Any]:
        return {"last_round": self.schedule.last_round, "awaiting": self.awaiting, "bytes_sent": self.bytes_sent}

    def load_extra(self, state: dict[str, Any]) -> None:
        self.schedule.last_round, self.awaiting = int(state["last_round"]), state["awaiting"]
        self.bytes_sent = int(state["bytes_sent"])

    def final_weights(self) -> Changes:
        return self.changes()

    def run(self) -> None:
        if self.awaiting is not None:  # resumed at a sync barrier: the parent has our post
            t0 = time.perf_counter()
            self.sync_wait()
            self.comm += time.perf_counter() - t0
        super().run()


def _learner_task(ch: Channel, *, config: TrainConfig, worker: int, sync: str, sync_every: int,
                  final_fraction: float, base: Weights, **kw: Any) -> None:
    """One learner, in a worker, for the whole run (see the module docstring).

    ``base``: the learners' common weights, the initial ones or a resumed run's last sync's;
    ``kw``: :class:`~dqnlab.parallel.workers.LearnerWorker`'s (budget, clock, reports,
    checkpointing, resume).
    """
    # A learner's budget is its own share of the run's env steps: prioritized replay anneals beta to 1 over it.
    own = config if kw["budget"] is None else config.replace(total_env_steps=kw["budget"])
    learner = Learner(own, worker=worker, device=config.device)
    if kw["resume"] is None:
        learner.agent.set_weights(base, target=True)
    _IndependentWorker(ch, learner, SyncSchedule(sync, sync_every, final_fraction), base, **kw).run()
