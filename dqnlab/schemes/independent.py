"""``independent``: K independent DQN learners that share parameters on a sync schedule.

The user's first idea: "train multiple DQN agents at the same time, then periodically
by some sharing plan ... share the model weights that each agent has trained". Each
of the K learners is a whole serial DQN (:class:`~dqnlab.schemes.base.Learner`) in its
own worker process: its own ``n_envs`` boards, replay buffer, online/target networks
and Adam state, with seeds derived from ``(seed, k)``. The env-step budget is split
evenly across learners. All learners start from the same initial weights (learner
0's), as parameter averaging requires (Zinkevich et al. 2010; McMahan et al. 2017,
FedAvg); exploration, games and replay differ.

Every ``sync_every`` updates each learner checks in with the parent (see
:class:`~dqnlab.schemes.parallel.SyncSchedule`), posting its weights and its recent
mean score; the parent measures how far the learners have drifted apart (the
divergence, recorded at every check-in) and, when the schedule says so, sends every
learner the combined weights:

* ``none`` -- never share (the control: K separate runs);
* ``periodic`` -- plain average every ``sync_every`` updates (local SGD / FedAvg);
* ``final`` -- plain average every ``sync_every`` updates, but only in the last
  ``final_fraction`` of the budget (the user's "share periodically in last 25%");
* ``weighted`` -- average weighted by ``softmax(score / temperature)``: "favour the
  better agent";
* ``best`` -- every learner gets a copy of the best learner's weights (a form of
  population-based selection).

Only the online network's weights are shared; each learner keeps its own target
network (it catches up at its next target sync) and its own Adam moments, as local
SGD methods keep optimiser state local. Shared learners of this kind are also how
Gorila (Nair et al. 2015, arXiv:1507.04296) scales, there through a parameter server.

How it runs: one long-lived joblib task per learner (the learner and its replay
buffer live for the whole run), talking to the parent through
``multiprocessing.Manager`` queues: the parent runs the sync barrier, gathers the
episodes as they finish (live progress and callbacks), and can tell the learners to
stop. A learner's exception stops the others and raises
:class:`~dqnlab.schemes.parallel.WorkerError` with the episodes gathered so far.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pandas as pd

from ..agent.dqn import DQNAgent
from ..runtime.checkpoint import Checkpointer
from ..config import TrainConfig
from ..options import SchemeOptions, option, unless, when
from ..runtime.results import RunResult
from .base import (
    DIAGNOSTICS,
    Learner,
    Progress,
    RunLoop,
    episodes_frame,
    recent_score,
    worker_seeds,
    workers_progress,
)
from .parallel import (
    SCORE_WINDOW,
    SYNC_SCHEDULES,
    Channel,
    SyncSchedule,
    TaskGroup,
    check_fault,
    combine_weights,
    divergence,
    drive_tasks,
    split_budget,
    torch_threads,
)

__all__ = ["Options", "run"]


@dataclass(frozen=True)
class Options(SchemeOptions):
    """Options of ``independent`` (keyword arguments of :func:`dqnlab.train`)."""

    sync: str = option("periodic", "When the learners share weights: never, every sync_every updates, only in "
                       "the last final_fraction of the budget, weighted by recent score, or the best learner's "
                       "(see dqnlab.schemes.independent).", choices=SYNC_SCHEDULES)
    sync_every: int = option(500, "Updates of each learner between check-ins with the parent.", unit="updates",
                             low=1, applies=unless("sync", "none"))
    final_fraction: float = option(0.25, "Share only in this last fraction of the budget (env steps or seconds, "
                                   "whichever runs out first).", low=0, high=1, low_open=True,
                                   applies=when("sync", "final"))
    temperature: float = option(500.0, "Softmax temperature of the score weighting: a learner this many points "
                                "ahead gets e = 2.7 times the weight.", unit="points", low=0, low_open=True,
                                applies=when("sync", "weighted"))


def run(config: TrainConfig, options: Options, *, workers: int = 1, progress: bool = True,
        callback: Callable[[RunResult], Any] | None = None,
        _fault: dict[str, Any] | None = None, _checkpoint: Checkpointer | None = None) -> RunResult:
    """Train ``workers`` independent learners that share weights per ``options.sync``.

    Parameters
    ----------
    config : TrainConfig
        ``total_env_steps`` is split evenly across learners; ``buffer_size``,
        ``learning_starts`` and ``epsilon_decay_steps`` are per learner.
    workers : int
        K learners, one worker process each (>= 1, <= ``total_env_steps``). With
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
        score), ``divergence`` (one row per check-in round: ``round``, ``updates``
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
    budgets = split_budget(config.total_env_steps, workers)
    init = DQNAgent(config, seed=worker_seeds(config.seed, 0)[2]).get_weights()
    state = _State(workers, init, config.batch_size)
    resumed = _checkpoint.state if _checkpoint is not None else None
    if resumed is not None:
        state.restore(resumed)
    loop: RunLoop
    group: TaskGroup | None = None

    def result(status: str | None = None) -> RunResult:
        return state.result(config, options.sync, options.temperature, options.to_dict(), loop, status, group)

    loop = RunLoop(config, progress=progress, callback=callback, snapshot=result, checkpointer=_checkpoint)
    t0_wall = time.time() - (time.perf_counter() - loop.t0)
    kwargs = [dict(config=config, worker=k, budget=budgets[k], sync=options.sync, sync_every=options.sync_every,
                   final_fraction=options.final_fraction, t0_wall=t0_wall, init_weights=init if workers > 1 else None,
                   report_every_s=loop.report_every_s / 2, fault=_fault, checkpointing=_checkpoint is not None,
                   resume=None if resumed is None else resumed["workers"][k]) for k in range(workers)]

    def handle(kind: str, k: int, payload: Any) -> None:
        state.handle(kind, k, payload, loop, group, options.sync, options.temperature)

    def checkpoint(states: dict[int, Any]) -> None:
        loop.write_checkpoint(state.checkpoint(states))

    try:
        with TaskGroup(_learner_task, kwargs) as group:
            for r in sorted(state.rounds):  # rounds left open by the checkpoint resumed from
                state._complete(r, loop, group, options.sync, options.temperature)
            drive_tasks(group, loop, handle, state.progress, "independent", lambda: result("failed"),
                        checkpoint=checkpoint if _checkpoint is not None else None)
    except KeyboardInterrupt:
        loop.interrupt()
    finally:
        loop.close()
    if _checkpoint is not None and len(state.final_states) == workers:  # every learner sent its final state
        loop.write_checkpoint(state.checkpoint({}))
    return result()


class _State:
    """What the parent knows about the learners (updated from their messages)."""

    def __init__(self, workers: int, init: dict, batch_size: int):
        self.workers, self.batch_size = workers, batch_size
        self.rows: list[dict[str, Any]] = []
        self.latest = [{"env_steps": 0, "updates": 0, "timing": {"acting": 0.0, "learning": 0.0},
                        "comm_s": 0.0, "score": math.nan, "diagnostics": dict.fromkeys(DIAGNOSTICS, math.nan)}
                       for _ in range(workers)]
        self.weights: list[dict | None] = [None] * workers  # last weights seen per learner
        self.final: list[dict | None] = [None] * workers
        self.init = init
        self.alive = set(range(workers))
        self.rounds: dict[int, dict[int, dict[str, Any]]] = {}
        self.divergence: list[dict[str, Any]] = []
        self.syncs = 0
        self.torch_threads = [None] * workers
        self.final_states: dict[int, Any] = {}  # learners' states sent with their "done" (checkpoints)

    # ------------------------------------------------------------------ checkpoints
    def absorb(self, k: int, st: dict[str, Any]) -> None:
        """Make this view of learner ``k`` that of its checkpoint state ``st``."""
        learner = st["learner"]
        rows = [dict(r) for r in learner["episodes"]]
        self.rows = [r for r in self.rows if r["worker"] != k] + rows
        self.latest[k] = {"env_steps": int(learner["env_steps"]), "updates": int(learner["agent"]["updates"]),
                          "timing": dict(learner["timing"]), "comm_s": float(st["comm"]),
                          "score": recent_score(rows, SCORE_WINDOW), "diagnostics": self.latest[k]["diagnostics"]}
        self.weights[k] = {name: t.detach().numpy().copy() for name, t in learner["agent"]["online"].items()}

    def checkpoint(self, states: dict[int, Any]) -> dict[str, Any]:
        """The scheme's checkpoint state from the learners' ``states`` (learners that
        have exited contribute the final state they sent)."""
        states = {**self.final_states, **states}
        missing = sorted(set(range(self.workers)) - set(states))
        if missing:  # cannot happen while drive_tasks gathers the states; never write a partial cut
            raise RuntimeError(f"checkpoint without the state of learners {missing}")
        for k, st in states.items():
            self.absorb(k, st)
        return {"workers": [states[k] for k in range(self.workers)],
                "parent": {"rounds": {r: dict(p) for r, p in self.rounds.items()},
                           "divergence": list(self.divergence), "syncs": self.syncs}}

    def restore(self, saved: dict[str, Any]) -> None:
        """Continue from :meth:`checkpoint` output."""
        if len(saved["workers"]) != self.workers:
            raise ValueError(f"checkpoint of {len(saved['workers'])} learners, not {self.workers}")
        for k, st in enumerate(saved["workers"]):
            self.absorb(k, st)
        parent = saved["parent"]
        self.rounds = {int(r): {int(k): p for k, p in posted.items()} for r, posted in parent["rounds"].items()}
        self.divergence = list(parent["divergence"])
        self.syncs = int(parent["syncs"])

    def progress(self) -> Progress:
        """The run's :class:`~dqnlab.schemes.base.Progress` (each learner's diagnostics from its last report)."""
        return workers_progress(self.latest, self.rows, self.batch_size)

    def handle(self, kind: str, k: int, payload: Any, loop: RunLoop, group: TaskGroup, sync: str,
               temperature: float) -> None:
        if kind in ("progress", "done"):
            self.rows.extend(payload["rows"])
            self.latest[k] = {key: payload[key] for key in self.latest[k]}
            if kind == "done":
                self.final[k] = self.weights[k] = payload["weights"]
                if payload.get("state") is not None:
                    self.final_states[k] = payload["state"]
                    self.absorb(k, payload["state"])
        elif kind == "checkpoint_end":
            for r in sorted(self.rounds):  # rounds held back while the checkpoint was gathered
                self._complete(r, loop, group, sync, temperature)
        elif kind == "sync":
            self.weights[k] = payload["weights"]
            self.rounds.setdefault(payload["round"], {})[k] = payload
            self._complete(payload["round"], loop, group, sync, temperature)
        elif kind == "exit":
            self.alive.discard(k)
            for r in sorted(self.rounds):
                self._complete(r, loop, group, sync, temperature)

    def _complete(self, r: int, loop: RunLoop, group: TaskGroup, sync: str, temperature: float) -> None:
        """Close round ``r`` once every learner still running has checked in (not while
        a checkpoint is being gathered: the checkpoint keeps the round open)."""
        posted = self.rounds.get(r)
        if posted is None or not self.alive <= set(posted) or group.checkpoint_pending:
            return
        del self.rounds[r]
        ks = sorted(posted)
        ws = [posted[k]["weights"] for k in ks]
        scores = [posted[k]["score"] for k in ks]
        # A round syncs only if every learner in it asked to (with a time budget the
        # learners may disagree at the start of the final phase: then nobody syncs).
        applied = sync != "none" and all(posted[k]["active"] for k in ks)
        combined, coefs = combine_weights(sync, ws, scores, temperature) if applied else (None, None)
        for k in ks:
            if posted[k]["active"]:
                group.send(k, ("weights", combined))
        d, rel = divergence(ws) if len(ws) > 1 else (0.0, 0.0)
        self.syncs += int(applied)
        self.divergence.append({
            "round": r, "updates": max(posted[k]["updates"] for k in ks),
            "env_steps": sum(posted[k]["env_steps"] for k in ks), "wall_time_s": loop.elapsed,
            "learners": ks, "divergence": d, "divergence_rel": rel, "synced": applied,
            "coefficients": None if coefs is None else [float(c) for c in coefs],
            "scores": [float(s) for s in scores],
        })

    def result(self, config: TrainConfig, sync: str, temperature: float, options: dict, loop: RunLoop,
               status: str | None, group: TaskGroup | None = None) -> RunResult:
        have = [k for k in range(self.workers) if self.weights[k] is not None]
        scores = [self.latest[k]["score"] for k in have]
        if not have:
            weights, how = self.init, "initial weights (no learner has reported weights yet)"
        elif len(have) == 1:
            weights, how = self.weights[have[0]], f"learner {have[0]}"
        else:
            weights, coefs = combine_weights(sync, [self.weights[k] for k in have], scores, temperature)
            how = {"none": f"best learner by recent score (learner {have[int(coefs.argmax())]})",
                   "best": f"best learner by recent score (learner {have[int(coefs.argmax())]})",
                   "weighted": f"score-weighted average, coefficients {[round(float(c), 4) for c in coefs]}"
                   }.get(sync, "plain average of the learners' last weights")
        per_worker = [{
            "worker": k, "env_steps": w["env_steps"], "updates": w["updates"],
            "episodes": sum(1 for r in self.rows if r["worker"] == k), "acting_s": w["timing"]["acting"],
            "learning_s": w["timing"]["learning"], "communication_s": w["comm_s"], "score_recent": w["score"],
            "pid": None if group is None else group.pids.get(k),
        } for k, w in enumerate(self.latest)]
        progress = self.progress()
        return RunResult(
            scheme="independent", config=config, workers=self.workers, episodes=episodes_frame(self.rows),
            env_steps=progress.env_steps, updates=progress.updates, wall_time_s=loop.elapsed,
            time_split=dict(progress.time_split),
            weights=weights, history=pd.DataFrame(loop.history), status=status or loop.status,
            options=dict(options),
            extra={"per_worker": per_worker, "divergence": list(self.divergence), "syncs": self.syncs,
                   "final_weights": how, "common_init": True, "score_window": SCORE_WINDOW,
                   "torch_threads_per_worker": torch_threads(self.workers)},
        )


def _learner_task(ch: Channel, *, config: TrainConfig, worker: int, budget: int | None, sync: str,
                  sync_every: int, final_fraction: float, t0_wall: float, init_weights: dict | None,
                  report_every_s: float, fault: dict[str, Any] | None, checkpointing: bool = False,
                  resume: dict[str, Any] | None = None) -> None:
    """One learner, in a worker process, for the whole run (see the module docstring).

    Sends ``progress`` (new episode rows, counters, timing) every ``report_every_s``,
    ``sync`` at every check-in (waiting for the parent's weights when active), and
    ``done`` with its final weights. On an exception it first sends the rows
    gathered since the last report, then re-raises (the task wrapper reports it).

    With ``checkpointing``, it answers the parent's checkpoint requests with its
    state (and sends its final state with ``done``); ``resume`` is such a state to
    continue from (including a sync round it was waiting on).
    """
    clock0 = time.perf_counter() - (time.time() - t0_wall)  # the parent's start, on this process's clock
    learner = Learner(config, worker=worker, clock0=clock0)
    deadline = None if config.max_seconds is None else clock0 + config.max_seconds
    schedule = SyncSchedule(sync, sync_every, final_fraction)
    comm = 0.0
    sent = 0
    awaiting: int | None = None  # the sync round this learner posted and waits on
    if resume is not None:
        learner.load_state_dict(resume["learner"])
        schedule.last_round, comm, awaiting = int(resume["last_round"]), float(resume["comm"]), resume["awaiting"]
        sent = len(learner.episodes)  # the parent has them, from the checkpoint
    elif init_weights is not None:
        learner.agent.set_weights(init_weights, target=True)

    def state() -> dict[str, Any]:
        nonlocal sent
        sent = len(learner.episodes)  # the state carries every game: the parent takes them from it
        return {"learner": learner.state_dict(), "last_round": schedule.last_round, "comm": comm,
                "awaiting": awaiting}

    if checkpointing:
        ch.state = state

    def sync_wait() -> None:
        nonlocal awaiting
        reply = ch.wait()
        if reply[0] == "weights" and reply[1] is not None:
            learner.agent.set_weights(reply[1])
        awaiting = None

    def budget_fraction(now: float) -> float:
        p = 0.0 if budget is None else learner.env_steps / budget
        if config.max_seconds is not None:
            p = max(p, (now - clock0) / config.max_seconds)
        return min(1.0, p)

    def report(kind: str, **more: Any) -> None:
        nonlocal sent, comm
        t0 = time.perf_counter()
        rows, sent = learner.episodes[sent:], len(learner.episodes)
        ch.send(kind, {"env_steps": learner.env_steps, "updates": learner.updates, "rows": rows,
                       "timing": dict(learner.timing), "comm_s": comm,
                       "score": recent_score(learner.episodes, SCORE_WINDOW),
                       "diagnostics": learner.diagnostics(), **more})
        comm += time.perf_counter() - t0

    next_report = time.perf_counter() + report_every_s
    try:
        if awaiting is not None:  # resumed at a sync barrier: the parent has our post
            t0 = time.perf_counter()
            sync_wait()
            comm += time.perf_counter() - t0
        while ((budget is None or learner.env_steps < budget)
               and (deadline is None or time.perf_counter() < deadline) and not ch.stopped):
            learner.act_step()
            learner.learn()
            check_fault(fault, worker, env_steps=learner.env_steps, updates=learner.updates)
            now = time.perf_counter()
            due = schedule.check(learner.updates, budget_fraction(now))
            if due is not None:
                r, active = due
                ch.send("sync", {"round": r, "active": active, "weights": learner.agent.get_weights(),
                                 "score": recent_score(learner.episodes, SCORE_WINDOW),
                                 "env_steps": learner.env_steps, "updates": learner.updates})
                if active:
                    awaiting = r
                    sync_wait()
                comm += time.perf_counter() - now
            if now >= next_report:
                next_report = now + report_every_s
                report("progress")
                t0 = time.perf_counter()
                ch.poll()
                ch.serve_checkpoint()
                comm += time.perf_counter() - t0
    except BaseException:
        report("progress")  # keep the games finished since the last report
        raise
    report("done", weights=learner.agent.get_weights(), state=state() if checkpointing else None)
