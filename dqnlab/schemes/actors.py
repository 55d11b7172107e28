"""``actors``: K parallel actors feed one learner (Gorila / Ape-X style).

The field's answer to the user's question "how do we go parallel and keep true DQN":
keep **one learner and one replay buffer** and parallelise only the acting (Nair et
al. 2015, Gorila, arXiv:1507.04296; Horgan et al. 2018, Ape-X, arXiv:1803.00933).

* **Actors** (one long-lived worker task each) step ``n_envs`` boards at once with one
  batched forward pass of a recent copy of the online network, and send compact
  transitions (uint8 boards, uint8 actions, float32 rewards, done flags, legal-move
  masks of the next boards: about 42 bytes each) to the learner every ~50 ms
  (:data:`FLUSH_S`; sooner when throttled, so that one message stays within the slack).
* **The learner is this (the parent) process.** It owns the replay buffer, the
  online and target networks and Adam, and trains *while* the actors act: between
  messages it takes updates, and every ``weights_every`` updates it sends every actor
  the new weights. Keeping the learner in the parent (rather than in a dedicated
  task) means no second copy of the buffer, the final weights are simply here, and
  with the Dask backend the actors run on the cluster while the learner runs where
  the user is (the data comes back through the scheduler).

The replay ratio (minibatch samples per env step, ``config.replay_ratio``) is held
as a **ceiling**: the learner never trains more than its share of the data that has
arrived; when it is ahead it waits for data. When the learner falls behind, nothing
is dropped (every transition enters the FIFO buffer), but the actors are
**throttled**: the learner tells them to pause when it is more than
:data:`SLACK_UPDATES` updates behind ``min_replay_ratio`` samples per env step (counted
from the start of learning), and to go on when it is back within half of that. A
paused learner always has updates owed (``min_replay_ratio <= replay_ratio``), so the
pause always ends. The achieved ratio lies between ``min_replay_ratio`` and
``replay_ratio`` (up to the slack) and is recorded. When the actors have spent a step
budget, the learner first catches up with the floor (at most the slack), so that the
floor holds for the whole run:

* ``min_replay_ratio=replay_ratio`` holds the ratio exactly: the same samples per env
  step as ``serial``; what the actors buy is only that acting overlaps learning;
* the default, ``replay_ratio / 2``, lets actors run up to twice as far ahead: more
  env steps per second for about the same updates per second (each transition is
  replayed fewer times). On a 2-core machine it keeps the learner at about serial's
  updates per second while the env steps per second grow; a lower floor gives the
  actors more of the CPU;
* ``min_replay_ratio=0`` never throttles (Ape-X): on a small machine the actors then
  take CPU from the learner.

Exploration: by default every actor follows the config's epsilon schedule, clocked
by the run's total env steps (estimated by each actor as its own steps times K). With
``actor_epsilon="apex"`` actor i keeps the fixed ``eps_i = 0.4 ** (1 + 7 i / (K - 1))``
of Ape-X (0.4 for a single actor); a list gives each actor's epsilon explicitly.

With ``lockstep=True`` an actor waits after every step until the learner has stored
its transitions and done the updates they are owed, then acts with the new weights:
no overlap. With one worker this is ``serial`` transition for transition (same games,
same updates, same weights); the test suite checks it.

The **parameter lag** of a transition is the number of learner updates between the
weights the actor used and the learner's weights when the transition reaches the
buffer; ``extra["param_lag"]`` summarises it over all transitions.

**Checkpoints** (``dqnlab.train(..., run_dir=...)``) are one consistent cut of the
run. The learner asks every actor for its state and, until all have answered, takes
no updates and sends no orders; each actor first sends the transitions it holds, then
its state (games in progress, exploration stream, current weights and their version,
counters, timing), and waits for the learner to write the checkpoint. An actor's
messages arrive in order, so the learner has stored every transition of the cut when
the last state comes in. The checkpoint holds the learner (networks, Adam, replay
buffer, replay-ratio credit, throttle, parameter-lag counts, timing) and every actor;
the final one is written when every actor has sent its final state with its ``done``.
A resumed run restores all of it exactly. With ``lockstep=True`` the continuation is
exact too (one actor: the same games, updates and weights as a run that did not
stop); without it, how the actors' steps interleave with the learner's updates
depends on timing, so the continuation is as timing-dependent as any ``actors`` run.
"""

from __future__ import annotations

import copy
import math
import os
import queue
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import joblib
import numpy as np
import pandas as pd
import torch

from ..agent.dqn import DQNAgent, epsilon_at, transform_rewards
from ..runtime.checkpoint import Checkpointer
from ..config import TrainConfig
from ..game import VecGame2048, legal_actions_batch
from ..options import SchemeOptions, option
from ..replay import ReplayBuffer
from ..runtime.results import RunResult
from .base import Progress, RunLoop, episodes_frame, mean_diagnostics, worker_seeds
from .parallel import (
    Channel,
    DivergedError,
    TaskGroup,
    check_fault,
    check_int,
    drive_tasks,
    split_budget,
    torch_threads,
)

__all__ = ["Options", "run", "apex_epsilons", "APEX_EPSILON", "APEX_ALPHA", "ACTOR_EPSILONS"]

#: Base epsilon and spread of Ape-X's per-actor exploration (Horgan et al. 2018).
APEX_EPSILON = 0.4
APEX_ALPHA = 7.0
#: Named choices of ``actor_epsilon`` (a list of K numbers is also accepted).
ACTOR_EPSILONS = ("schedule", "apex")


def _epsilons_value(value: Any) -> str | tuple[float, ...]:
    """``actor_epsilon`` normalised: a name of :data:`ACTOR_EPSILONS`, or a non-empty tuple of
    numbers in [0, 1] (their count is checked against the actors in :func:`run`)."""
    if isinstance(value, str):
        if value not in ACTOR_EPSILONS:
            raise ValueError(value)
        return value
    values = tuple(float(e) for e in value)
    if not values or not all(0.0 <= e <= 1.0 for e in values):
        raise ValueError(value)
    return values


@dataclass(frozen=True)
class Options(SchemeOptions):
    """Options of ``actors`` (keyword arguments of :func:`dqnlab.train`)."""

    weights_every: int = option(50, "Learner updates between weight broadcasts to the actors.", unit="updates",
                                low=1)
    min_replay_ratio: float | None = option(
        None, "Actors pause while the learner has trained fewer samples per env step than this (after learning "
        "starts, beyond a slack of SLACK_UPDATES updates), at most config.replay_ratio; None: half of it; "
        "replay_ratio holds the ratio exactly; 0 never throttles.", low=0)
    actor_epsilon: str | tuple[float, ...] = option(
        "schedule", "Exploration of each actor: the config's decaying schedule, Ape-X's fixed spread "
        "0.4**(1+7i/(K-1)), or one number per actor.", choices=ACTOR_EPSILONS,
        parse=lambda text: text if text in ACTOR_EPSILONS else tuple(float(x) for x in text.split(",")),
        check=_epsilons_value, allowed=f"one of {list(ACTOR_EPSILONS)} or numbers in [0, 1], one per actor")
    lockstep: bool = option(False, "Actors wait for the learner after every step (no overlap; 1 worker = serial).")
    learner_threads: int | None = option(
        None, "PyTorch threads of the learner during the run (restored afterwards); None: the cores the actors "
        "leave, max(1, cores - workers), at most torch_threads(1), when they run on this machine; unchanged "
        "on a Dask cluster.", low=1)
#: Learner updates of headroom before a throttled actor pauses.
SLACK_UPDATES = 32
#: Seconds an actor gathers transitions before sending them (at most).
FLUSH_S = 0.05
#: Seconds between an actor's looks at its orders (weights, pause / go, stop).
ORDERS_S = 0.01
#: Transitions an actor sends at once (at most).
MAX_CHUNK = 4096
#: Seconds of updates the learner takes before looking at its messages again.
LEARN_SLICE_S = 0.02


def apex_epsilons(workers: int, epsilon: float = APEX_EPSILON, alpha: float = APEX_ALPHA) -> list[float]:
    """Ape-X's fixed per-actor exploration rates: ``eps_i = epsilon ** (1 + alpha * i / (K - 1))``.

    Actor 0 explores most (``epsilon``), actor K-1 least (``epsilon ** (1 + alpha)``,
    about 0.00066 with the defaults). One actor gets ``epsilon``.

    References
    ----------
    Horgan et al., "Distributed Prioritized Experience Replay", ICLR 2018 (Ape-X), section 4.1.
    """
    check_int("workers", workers)
    if workers == 1:
        return [float(epsilon)]
    return [float(epsilon ** (1 + alpha * i / (workers - 1))) for i in range(workers)]


def run(config: TrainConfig, options: Options, *, workers: int = 1, progress: bool = True,
        callback: Callable[[RunResult], Any] | None = None,
        _fault: dict[str, Any] | None = None, _checkpoint: Checkpointer | None = None) -> RunResult:
    """Train one learner (this process) on the transitions of ``workers`` parallel actors.

    Parameters
    ----------
    config : TrainConfig
        ``total_env_steps`` is split evenly across actors; ``replay_ratio`` is the
        learner's ceiling (samples per env step); ``buffer_size`` and
        ``learning_starts`` are the one learner's.
    workers : int
        K actors, one worker task each (>= 1, <= ``total_env_steps``). With K = 1 the
        actor runs in a thread of this process (joblib runs one task in-process).
    progress : bool
        Show a progress bar.
    callback : callable, optional
        ``callback(snapshot: RunResult)`` about once a second; return True to stop.
    options : Options
        Weight broadcasts, throttle, exploration, lockstep and the learner's threads (see
        :class:`Options`).

    Returns
    -------
    RunResult
        ``episodes``: the actors' games (``worker`` = actor index, ``loss`` = the
        learner's last TD loss when the game reached it). ``updates``: the learner's.
        ``time_split``: ``acting`` = actors' acting (forward pass, game, packing);
        ``learning`` = the learner's updates (sampling included); ``communication``
        = the learner's waiting for data, storing it and sending weights, plus the
        actors' sending, loading weights and waiting for the learner (throttle or
        lockstep). ``extra``: ``learner`` (its time split in seconds, updates,
        threads), ``per_worker`` (per actor: pid, env steps, games, epsilon, time
        split), ``param_lag`` (mean, median, p95, max in learner updates, over
        transitions), ``replay_ratio`` (the ceiling), ``min_replay_ratio``,
        ``achieved_replay_ratio`` (updates x batch / env steps) and
        ``achieved_replay_ratio_learning`` (the same counting only env steps since
        learning started), ``learning_started_at``, ``weights_sent``,
        ``actor_waits`` and more.

    Raises
    ------
    ValueError
        If ``options.min_replay_ratio`` exceeds ``config.replay_ratio``, ``options.actor_epsilon``
        does not give one number per actor, or ``total_env_steps`` < ``workers``.
    WorkerError
        If an actor fails; ``err.partial`` holds every game gathered until then.
    DivergedError
        If the learner's TD loss is NaN or infinite (``partial``: the run until then).

    Notes
    -----
    Checkpoints (``dqnlab.train(..., run_dir=...)``) are one consistent cut: the
    learner pauses its updates and orders while every actor sends its last
    transitions and then its state, and waits until the checkpoint is written. A
    resumed run restores the learner (networks, Adam, replay buffer, credit,
    throttle, lag counts, timing) and every actor (games, exploration stream,
    weights and version, counters) exactly. With ``lockstep=True`` the continuation
    is exact as well (with one actor: the same games and weights as a run that did
    not stop); otherwise it depends on timing, as every ``actors`` run does.
    """
    ratio = float(config.replay_ratio)
    if options.min_replay_ratio is None:
        min_ratio = ratio / 2.0
    elif options.min_replay_ratio > ratio:
        raise ValueError(f"min_replay_ratio must be a number in [0, replay_ratio] = [0, {ratio:g}], "
                         f"got {options.min_replay_ratio!r}")
    else:
        min_ratio = float(options.min_replay_ratio)
    epsilons = _actor_epsilons(options.actor_epsilon, workers)
    if config.total_env_steps is not None and config.total_env_steps < workers:
        raise ValueError(f"total_env_steps ({config.total_env_steps}) must be at least workers ({workers})")

    from .cluster import active_dask_client

    remote = active_dask_client() is not None
    reported = {"weights_every": options.weights_every, "min_replay_ratio": min_ratio,
                "actor_epsilon": options.actor_epsilon if isinstance(options.actor_epsilon, str) else list(epsilons),
                "lockstep": options.lockstep}
    threads = options.learner_threads or (
        None if remote else min(torch_threads(1), max(1, joblib.cpu_count() - workers)))
    learner = _Learner(config, workers, options.weights_every, min_ratio, options.lockstep)
    resumed = _checkpoint.state if _checkpoint is not None else None
    if resumed is not None:
        if len(resumed["actors"]) != workers:
            raise ValueError(f"checkpoint of {len(resumed['actors'])} actors, not {workers}")
        learner.load_state_dict(resumed["learner"], resumed["actors"])
    budgets = split_budget(config.total_env_steps, workers)
    loop: RunLoop
    group: TaskGroup | None = None

    def result(status: str | None = None) -> RunResult:
        return learner.result(loop, reported, status, group, remote)

    def checkpoint(states: dict[int, Any]) -> None:
        loop.write_checkpoint(learner.checkpoint(states))

    loop = RunLoop(config, progress=progress, callback=callback, snapshot=result, checkpointer=_checkpoint)
    learner.t0 = loop.t0
    t0_wall = time.time() - (time.perf_counter() - loop.t0)
    init = learner.agent.get_weights()
    # A throttled actor sends at most its share of the slack at once, so that one message
    # cannot carry the learner far past the floor.
    chunk = MAX_CHUNK if min_ratio <= 0 else int(SLACK_UPDATES * config.batch_size / min_ratio / (2 * workers))
    chunk = max(config.n_envs, min(MAX_CHUNK, chunk))
    kwargs = [dict(config=config, worker=k, workers=workers, budget=budgets[k], t0_wall=t0_wall, weights=init,
                   epsilon=epsilons[k], lockstep=options.lockstep, max_chunk=chunk, parent_pid=os.getpid(),
                   fault=_fault, checkpointing=_checkpoint is not None, paused=learner.paused,
                   resume=None if resumed is None else resumed["actors"][k])
              for k in range(workers)]
    before = torch.get_num_threads()
    try:
        if threads is not None:
            torch.set_num_threads(threads)
        learner.threads = torch.get_num_threads()
        with TaskGroup(_actor_task, kwargs) as group:
            learner.group = group
            if resumed is not None:  # lockstep actors that were waiting for the learner's reply get it
                learner.answer(sorted(k for k, a in enumerate(resumed["actors"]) if a["awaiting"]))
            drive_tasks(group, loop, learner.handle, lambda: learner.progress(loop.elapsed), "actors",
                        lambda: result("failed"),
                        work=learner.work, checkpoint=checkpoint if _checkpoint is not None else None)
        # The actors spent the step budget (not stopped by the user, not out of time): honour the floor.
        if loop.status in ("running", "completed") and (loop.deadline is None or time.perf_counter() < loop.deadline):
            learner.catch_up(loop.deadline)
    except KeyboardInterrupt:
        loop.interrupt()
    except FloatingPointError as e:  # the learner's TD loss was not finite: the update was not applied
        loop.close()
        raise DivergedError("actors", None, str(e), "", result("failed")) from None
    finally:
        torch.set_num_threads(before)
        loop.close()
    # Every actor sent its final state (and the learner is not half-way through an update): the final checkpoint.
    if _checkpoint is not None and len(learner.final_states) == workers and not loop.abrupt:
        loop.write_checkpoint(learner.checkpoint({}))
    return result()


def _actor_epsilons(actor_epsilon: Any, workers: int) -> list[float | None]:
    """Each actor's fixed epsilon, or None for the config's schedule."""
    if isinstance(actor_epsilon, str):
        if actor_epsilon not in ACTOR_EPSILONS:
            raise ValueError(f"actor_epsilon must be one of {list(ACTOR_EPSILONS)} or a list of {workers} "
                             f"numbers in [0, 1], got {actor_epsilon!r}")
        return [None] * workers if actor_epsilon == "schedule" else list(apex_epsilons(workers))
    try:
        values = [float(e) for e in actor_epsilon]
    except (TypeError, ValueError):
        values = []
    if len(values) != workers or not all(0.0 <= e <= 1.0 for e in values):
        raise ValueError(f"actor_epsilon must be one of {list(ACTOR_EPSILONS)} or a list of {workers} "
                         f"numbers in [0, 1] (one per actor), got {actor_epsilon!r}")
    return values


class _Learner:
    """The learner: replay buffer, agent, replay-ratio accounting, throttle, lag and timing."""

    def __init__(self, config: TrainConfig, workers: int, weights_every: int, min_ratio: float, lockstep: bool):
        self.config, self.workers = config, workers
        self.weights_every, self.min_ratio, self.lockstep = weights_every, min_ratio, lockstep
        _, replay_seed, agent_seed = worker_seeds(config.seed, 0)
        self.buffer = ReplayBuffer(config.buffer_size, seed=replay_seed)
        self.agent = DQNAgent(config, seed=agent_seed)
        self.group: TaskGroup | None = None
        self.t0 = time.perf_counter()
        self.threads: int | None = None
        self.env_steps = 0  # transitions received (= env steps of all actors)
        self.steps = [0] * workers  # per actor
        self.rows: list[dict[str, Any]] = []
        self.credit = 0.0  # updates owed at the replay ratio
        self.started_at: int | None = None  # env steps when learning started
        self.first_data_s: float | None = None  # seconds from the start to the first transitions
        self.last_loss = math.nan
        self.lag = Counter()  # lag in updates -> transitions
        self.timing = {"learning": 0.0, "receiving": 0.0, "sending_weights": 0.0}
        self.weights_sent = 0  # weight dicts sent (one per actor per broadcast)
        self.broadcast_at = 0  # updates at the last broadcast
        self.version_sent = [0] * workers  # weights version each actor has
        self.paused = False  # actors told to pause (throttle)
        self.catch_up_s = 0.0
        self.pauses = 0
        self.actors: list[dict[str, Any]] = [{} for _ in range(workers)]
        self.exited: set[int] = set()
        self.upe = config.updates_per_env_step
        self.final_states: dict[int, Any] = {}  # actors' states sent with their "done" (checkpoints)
        self.owe_reply: set[int] = set()  # lockstep actors whose data came while a checkpoint was gathered

    @property
    def updates(self) -> int:
        return self.agent.updates

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

    def progress(self, wall: float) -> Progress:
        """The run's :class:`~dqnlab.schemes.base.Progress` after ``wall`` seconds: the learner's
        diagnostics, with the actors' mean epsilon; each actor's epsilon."""
        epsilons = [{"epsilon": a.get("epsilon_now", math.nan)} for a in self.actors]
        diagnostics = {**mean_diagnostics(epsilons, self.updates * self.config.batch_size, self.env_steps),
                       **self.agent.diagnostics()}
        return Progress(self.env_steps, self.updates, self.rows, self.time_split(wall), diagnostics, epsilons)

    # ------------------------------------------------------------------ messages
    def handle(self, kind: str, k: int, payload: Any) -> None:
        if kind in ("data", "done"):
            t0 = time.perf_counter()
            self._store(k, payload)
            self.timing["receiving"] += time.perf_counter() - t0
            if kind == "done" and payload.get("state") is not None:
                self.final_states[k] = payload["state"]
            if kind == "data" and self.lockstep:
                if self._frozen:
                    self.owe_reply.add(k)  # answered once the checkpoint is written
                else:
                    self.answer([k])
            elif kind == "data" and not self._frozen:
                self._throttle()
        elif kind == "checkpoint_end":  # what was held back while the checkpoint was gathered
            if self.lockstep:
                self.answer(sorted(self.owe_reply - self.exited))
                self.owe_reply.clear()
            else:
                self._throttle()
        elif kind == "exit":
            self.exited.add(k)

    @property
    def _frozen(self) -> bool:
        """While a checkpoint is gathered the learner takes no updates and sends no orders,
        so that the actors' states and its own are one cut (nothing in flight)."""
        return self.group is not None and self.group.checkpoint_pending

    def answer(self, actors: list[int]) -> None:
        """Lockstep: do the updates owed, then send each of ``actors`` the weights it waits for."""
        if not actors:
            return
        self._learn(self.owed())
        for k in actors:
            self._send_weights([k])

    def _store(self, k: int, p: dict[str, Any]) -> None:
        self.actors[k] = {key: p[key] for key in ("env_steps", "episodes", "timing", "weights_loads", "waits",
                                                   "epsilon", "epsilon_now")}
        for row in p["rows"]:
            row["loss"] = self.last_loss
        self.rows.extend(p["rows"])
        t = p["transitions"]
        if t is None:
            return
        n = len(t["actions"])
        if self.first_data_s is None:
            self.first_data_s = time.perf_counter() - self.t0
        self.buffer.add_batch(t["boards"], t["actions"], t["rewards"], t["next_boards"], t["dones"], t["next_masks"])
        self.env_steps += n
        self.steps[k] += n
        self.lag[self.updates - p["version"]] += n
        if p["finished"] and self.config.target_update == 0:
            self.agent.sync_target()  # the user's schedule: at the end of every game, as serial does
        if self.env_steps >= self.config.learning_starts and len(self.buffer) >= self.config.batch_size:
            if self.started_at is None:
                self.started_at = self.env_steps - n
            self.credit += n * self.upe

    def owed(self) -> int:
        """Updates owed at ``replay_ratio`` for the data received so far."""
        return int(self.credit)

    def deficit(self) -> float:
        """Updates the learner is behind ``min_replay_ratio`` (negative: ahead of it)."""
        if self.started_at is None or self.min_ratio <= 0:
            return -math.inf
        return (self.env_steps - self.started_at) * self.min_ratio / self.config.batch_size - self.updates

    # ------------------------------------------------------------------ learning
    def work(self) -> bool:
        """Updates for up to :data:`LEARN_SLICE_S` seconds; True if more are owed now."""
        owed = self.owed()
        if self.lockstep or owed < 1 or self._frozen:
            return False
        done = self._learn(owed, LEARN_SLICE_S)
        self._throttle()
        return done < owed

    def _learn(self, n: int, max_s: float = math.inf) -> int:
        """Up to ``n`` updates (fewer if ``max_s`` seconds pass); broadcast weights on schedule."""
        t0 = time.perf_counter()
        done = 0
        while done < n:
            self.last_loss = self.agent.update(self.buffer.sample(self.config.batch_size))
            done += 1
            if not self.lockstep and self.updates - self.broadcast_at >= self.weights_every:
                self.timing["learning"] += time.perf_counter() - t0
                self._send_weights([k for k in range(self.workers) if k not in self.exited])
                t0 = time.perf_counter()
            if time.perf_counter() - t0 >= max_s:
                break
        self.credit -= done
        self.timing["learning"] += time.perf_counter() - t0
        return done

    def catch_up(self, deadline: float | None) -> None:
        """After the actors have finished: train until ``min_replay_ratio`` is met (or ``deadline``)."""
        t0 = time.perf_counter()
        n = min(self.owed(), math.ceil(self.deficit())) if math.isfinite(self.deficit()) else 0
        while n > 0 and (deadline is None or time.perf_counter() < deadline):
            n -= self._learn(n, LEARN_SLICE_S)
        self.catch_up_s = time.perf_counter() - t0

    # ------------------------------------------------------------------ orders to actors
    def _send_weights(self, actors: list[int]) -> None:
        """Send ``actors`` the current weights (None for an actor that already has them)."""
        t0 = time.perf_counter()
        weights = None
        for k in actors:
            fresh = self.version_sent[k] != self.updates
            if fresh and weights is None:
                weights = self.agent.get_weights()
            self.group.send(k, ("weights", {"weights": weights if fresh else None, "version": self.updates}))
            self.version_sent[k] = self.updates
            self.weights_sent += int(fresh)
        self.broadcast_at = self.updates
        self.timing["sending_weights"] += time.perf_counter() - t0

    def _throttle(self) -> None:
        """Pause the actors when the learner is over :data:`SLACK_UPDATES` behind
        ``min_replay_ratio``; let them go again at half that (hysteresis)."""
        d = self.deficit()
        if not self.paused and d > SLACK_UPDATES:
            self.paused = True
            self.pauses += 1
        elif self.paused and d <= SLACK_UPDATES / 2:
            self.paused = False
        else:
            return
        t0 = time.perf_counter()
        for k in range(self.workers):
            if k not in self.exited:
                self.group.send(k, ("pause" if self.paused else "go",))
        self.timing["sending_weights"] += time.perf_counter() - t0

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        """The learner's part of a checkpoint (copies)."""
        lag = sorted(self.lag)
        return {"agent": copy.deepcopy(self.agent.state_dict()), "buffer": self.buffer.state_dict(),
                "env_steps": self.env_steps, "steps": list(self.steps), "rows": [dict(r) for r in self.rows],
                "credit": self.credit, "started_at": self.started_at, "first_data_s": self.first_data_s,
                "last_loss": self.last_loss, "lag": {"values": [int(v) for v in lag],
                                                     "counts": [int(self.lag[v]) for v in lag]},
                "timing": dict(self.timing), "weights_sent": self.weights_sent, "broadcast_at": self.broadcast_at,
                "version_sent": list(self.version_sent), "paused": self.paused, "pauses": self.pauses,
                "catch_up_s": self.catch_up_s, "actors": [dict(a) for a in self.actors]}

    def load_state_dict(self, state: dict[str, Any], actors: list[dict[str, Any]]) -> None:
        """Restore :meth:`state_dict` output, with the ``actors``' states of the same checkpoint."""
        if len(state["steps"]) != self.workers:
            raise ValueError(f"learner state of {len(state['steps'])} actors, not {self.workers}")
        self.agent.load_state_dict(state["agent"])
        self.buffer.load_state_dict(state["buffer"])
        self.env_steps, self.steps = int(state["env_steps"]), [int(n) for n in state["steps"]]
        self.rows = [dict(r) for r in state["rows"]]
        self.credit = float(state["credit"])
        self.started_at = None if state["started_at"] is None else int(state["started_at"])
        self.first_data_s = None if state["first_data_s"] is None else float(state["first_data_s"])
        self.last_loss = float(state["last_loss"])
        self.lag = Counter(dict(zip((int(v) for v in state["lag"]["values"]),
                                    (int(c) for c in state["lag"]["counts"]), strict=True)))
        self.timing = {k: float(v) for k, v in state["timing"].items()}
        self.weights_sent, self.broadcast_at = int(state["weights_sent"]), int(state["broadcast_at"])
        # Each actor holds the weights its own state says (an order in flight at the end of a run was lost).
        self.version_sent = [int(a["st"]["version"]) for a in actors]
        self.paused, self.pauses = bool(state["paused"]), int(state["pauses"])
        self.catch_up_s = float(state["catch_up_s"])
        self.actors = [dict(a) for a in state["actors"]]

    def checkpoint(self, states: dict[int, Any]) -> dict[str, Any]:
        """The scheme's checkpoint state: the learner's and every actor's (actors that have
        exited contribute the final state they sent with ``done``)."""
        states = {**self.final_states, **states}
        missing = sorted(set(range(self.workers)) - set(states))
        if missing:  # cannot happen while drive_tasks gathers the states; never write a partial cut
            raise RuntimeError(f"checkpoint without the state of actors {missing}")
        return {"learner": self.state_dict(), "actors": [states[k] for k in range(self.workers)]}

    # ------------------------------------------------------------------ result
    def result(self, loop: RunLoop, options: dict[str, Any], status: str | None, group: TaskGroup | None,
               remote: bool) -> RunResult:
        c = self.config
        wall = loop.elapsed
        per_worker = []
        for k, a in enumerate(self.actors):
            t = a.get("timing", {})
            per_worker.append({
                "worker": k, "pid": (group.pids.get(k) if group is not None else None),
                "env_steps": self.steps[k], "episodes": sum(1 for r in self.rows if r["worker"] == k),
                "epsilon": a.get("epsilon"), "acting_s": t.get("acting", 0.0), "sending_s": t.get("sending", 0.0),
                "receiving_s": t.get("receiving", 0.0), "waiting_s": t.get("waiting", 0.0),
                "loading_weights_s": t.get("weights", 0.0),
                "weights_loads": a.get("weights_loads", 0), "waits": a.get("waits", 0),
            })
        learner = {"learning_s": self.timing["learning"], "receiving_s": self.timing["receiving"],
                   "sending_weights_s": self.timing["sending_weights"],
                   "waiting_s": self.waiting_s(wall), "first_data_s": self.first_data_s,
                   "updates": self.updates, "torch_threads": self.threads,
                   "updates_per_s": self.updates / wall if wall > 0 else None}
        learned_steps = self.env_steps - self.started_at if self.started_at is not None else 0
        return RunResult(
            scheme="actors", config=c, workers=self.workers, episodes=episodes_frame(self.rows),
            env_steps=self.env_steps, updates=self.updates, wall_time_s=wall, time_split=self.time_split(wall),
            weights=self.agent.get_weights(), history=pd.DataFrame(loop.history), status=status or loop.status,
            options=dict(options),
            extra={
                "learner": learner, "per_worker": per_worker, "param_lag": _lag_summary(self.lag),
                "replay_ratio": c.replay_ratio, "min_replay_ratio": self.min_ratio,
                "achieved_replay_ratio": self.updates * c.batch_size / self.env_steps if self.env_steps else None,
                "achieved_replay_ratio_learning": (self.updates * c.batch_size / learned_steps
                                                   if learned_steps else None),
                "learning_started_at": self.started_at, "slack_updates": SLACK_UPDATES,
                "updates_owed": self.owed(), "throttle_pauses": self.pauses, "catch_up_s": self.catch_up_s,
                "weights_every": self.weights_every,
                "weights_sent": self.weights_sent, "actor_waits": sum(w["waits"] for w in per_worker),
                "lockstep": self.lockstep, "torch_threads_per_worker": 1, "actors_on_cluster": remote,
            },
        )


def _lag_summary(lag: Counter) -> dict[str, Any]:
    """Mean, median, 95th percentile and max of the parameter lag (updates), over transitions."""
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


# ----------------------------------------------------------------------------- the actor (a worker task)
def _orders(ch: Channel) -> list[tuple]:
    """Every order waiting for this actor, in order, without blocking: weights, pause / go,
    and checkpoint requests ``("checkpoint", n)`` (a stop sets ``ch.stopped`` instead)."""
    out = []
    while True:
        try:
            msg = ch.outbox.get_nowait()
        except queue.Empty:
            return out
        if msg[0] == "stop":
            ch.stopped = True
        else:
            out.append(msg)


def _actor_task(ch: Channel, *, config: TrainConfig, worker: int, workers: int, budget: int | None, t0_wall: float,
                weights: dict[str, np.ndarray], epsilon: float | None, lockstep: bool, max_chunk: int,
                parent_pid: int, fault: dict[str, Any] | None, checkpointing: bool = False, paused: bool = False,
                resume: dict[str, Any] | None = None) -> None:
    """One actor, in a worker task, for the whole run (see the module docstring).

    Sends ``data`` messages (transitions since the last one, the weights version
    they were acted with, finished games, counters and timing) and a final ``done``.
    On an exception it first sends what it gathered, then re-raises.

    With ``checkpointing``, it answers the learner's checkpoint requests: it sends
    the transitions it holds, then ``state`` (see the module docstring), and waits
    for ``checkpointed`` (or stop); its final state goes with ``done``. ``resume`` is
    such a state to continue from; ``paused`` is the learner's throttle then.
    """
    if os.getpid() != parent_pid and torch.get_num_threads() != 1:
        torch.set_num_threads(1)  # a batched forward pass of n_envs boards: one thread is plenty
    clock0 = time.perf_counter() - (time.time() - t0_wall)  # the learner's start, on this process's clock
    deadline = None if config.max_seconds is None else clock0 + config.max_seconds
    env_seed, _, agent_seed = worker_seeds(config.seed, worker)
    env = VecGame2048(config.n_envs, seed=env_seed, max_moves=config.max_moves,
                      invalid_move_reward=config.invalid_move_reward)
    agent = DQNAgent(config, seed=agent_seed)  # its rng explores; its weights come from the learner
    st = {"version": 0, "paused": False, "env_steps": 0, "episodes": 0, "loads": 0, "waits": 0}
    timing = {"acting": 0.0, "sending": 0.0, "receiving": 0.0, "waiting": 0.0, "weights": 0.0}
    awaiting = False  # lockstep: data sent, waiting for the learner's weights
    if resume is None:
        agent.set_weights(weights)
        boards = env.reset()  # as the serial learner does (the constructor's boards are not used)
        masks = legal_actions_batch(boards)
    else:
        if resume["worker"] != worker:
            raise ValueError(f"actor state is actor {resume['worker']}'s, not actor {worker}'s")
        env.load_state_dict(resume["env"])
        agent.rng.bit_generator.state = resume["rng"]
        agent.set_weights(resume["weights"])
        boards, masks = np.array(resume["boards"], np.uint8), np.array(resume["masks"], bool)
        st.update({key: int(resume["st"][key]) for key in ("version", "env_steps", "episodes", "loads", "waits")})
        timing.update({key: float(v) for key, v in resume["timing"].items()})
        awaiting = bool(resume["awaiting"])
        st["paused"] = paused  # the learner's throttle is what counts (an order in flight at the end was lost)
    chunk: list[tuple] = []
    rows: list[dict[str, Any]] = []
    finished_in_chunk = 0
    last_flush = time.perf_counter()
    # Read orders before the first step: a resumed learner may have trained (and sent weights) while this started.
    last_orders = last_flush - ORDERS_S

    def state() -> dict[str, Any]:
        """This actor's checkpoint state (called between steps, with nothing left to send)."""
        return {"worker": worker, "env": env.state_dict(), "rng": agent.rng.bit_generator.state,
                "weights": agent.get_weights(), "boards": boards.copy(), "masks": masks.copy(), "st": dict(st),
                "timing": dict(timing), "awaiting": awaiting}

    if checkpointing:
        ch.state = state  # Channel.wait answers a request that comes while this actor waits

    def current_epsilon() -> float:
        if epsilon is not None:
            return epsilon
        return epsilon_at(config, st["env_steps"] * workers, st["version"])

    def flush(kind: str = "data", **more: Any) -> None:
        nonlocal chunk, rows, finished_in_chunk, last_flush
        t0 = time.perf_counter()
        transitions = None
        if chunk:
            cols = list(zip(*chunk, strict=True))
            transitions = {name: np.concatenate(col) for name, col in
                           zip(("boards", "actions", "rewards", "next_boards", "dones", "next_masks"), cols,
                               strict=True)}
        ch.send(kind, {"transitions": transitions, "version": st["version"], "finished": finished_in_chunk,
                       "rows": rows, "env_steps": st["env_steps"], "episodes": st["episodes"],
                       "timing": dict(timing), "weights_loads": st["loads"], "waits": st["waits"],
                       "epsilon": epsilon, "epsilon_now": current_epsilon(), **more})
        chunk, rows, finished_in_chunk = [], [], 0
        last_flush = time.perf_counter()
        timing["sending"] += last_flush - t0

    def apply(orders: list[tuple]) -> None:
        """Carry out ``orders`` in the order they came (a checkpoint sees the ones before it)."""
        newest = None

        def load() -> None:
            nonlocal newest
            if newest is not None:
                t0 = time.perf_counter()
                agent.set_weights(newest)
                st["loads"] += 1
                timing["weights"] += time.perf_counter() - t0
                newest = None

        for msg in orders:
            if msg[0] == "weights":
                if msg[1]["weights"] is not None:
                    newest = msg[1]["weights"]
                st["version"] = msg[1]["version"]
            elif msg[0] in ("pause", "go"):
                st["paused"] = msg[0] == "pause"
            elif msg[0] == "checkpoint":
                load()
                serve_checkpoint(msg[1])
        load()

    def serve_checkpoint(n: int) -> None:
        """Send the transitions held, then answer checkpoint ``n`` (Channel.serve_checkpoint),
        carrying out weights / pause orders that come meanwhile."""
        if chunk or rows:
            flush()
        timing["waiting"] += ch.serve_checkpoint(n, other=lambda msg: apply([msg]))

    def take_orders() -> None:
        nonlocal last_orders
        t0 = time.perf_counter()
        orders = _orders(ch)
        last_orders = time.perf_counter()
        timing["receiving"] += last_orders - t0
        if chunk and any(m[0] == "weights" for m in orders):
            flush()  # one weights version per message
        apply(orders)

    def wait_for_learner(reply: bool, count: bool = True) -> None:
        """Block until the learner sends something (weights, go, or stop); ``reply``:
        a lockstep wait for the weights after this actor's data."""
        nonlocal awaiting
        t0 = time.perf_counter()
        st["waits"] += int(count)
        awaiting = reply
        msg = ch.wait()  # answers a checkpoint request at once (the state says what it waits for)
        if msg[0] != "stop":
            awaiting = False
            apply([msg] + _orders(ch))
        timing["waiting"] += time.perf_counter() - t0

    try:
        if awaiting:  # resumed while waiting for the learner's reply (the learner sends it)
            wait_for_learner(True, count=False)
        while ((budget is None or st["env_steps"] < budget)
               and (deadline is None or time.perf_counter() < deadline) and not ch.stopped):
            if time.perf_counter() - last_orders >= ORDERS_S:
                take_orders()
            while st["paused"] and not ch.stopped:  # the learner is behind: let it catch up
                if chunk or rows:
                    flush()
                wait_for_learner(False)
            if ch.stopped:
                break
            t0 = time.perf_counter()
            actions = agent.act(boards, masks, current_epsilon())
            out = env.step(actions)
            n = len(actions)
            chunk.append((boards, actions.astype(np.uint8), transform_rewards(config, out.rewards),
                          out.next_boards, out.terminated, legal_actions_batch(out.next_boards)))
            boards, masks = out.boards, out.action_masks
            st["env_steps"] += n
            done = np.flatnonzero(out.terminated | out.truncated)
            if len(done):
                now, eps = time.perf_counter() - clock0, current_epsilon()
                for i in done:
                    rows.append({"worker": worker, "episode": st["episodes"], "env_steps": st["env_steps"],
                                 "wall_time_s": now, "score": int(out.episode_scores[i]),
                                 "max_tile": int(out.episode_max_tiles[i]), "moves": int(out.episode_moves[i]),
                                 "epsilon": eps, "loss": math.nan})
                    st["episodes"] += 1
                finished_in_chunk += len(done)
            timing["acting"] += time.perf_counter() - t0
            check_fault(fault, worker, env_steps=st["env_steps"])
            if lockstep:
                flush()
                wait_for_learner(True)
            elif time.perf_counter() - last_flush >= FLUSH_S or len(chunk) * n >= max_chunk:
                flush()
    except BaseException:
        try:
            flush()  # keep the games finished since the last message
        except Exception:  # the queue is gone too: the original error matters more
            pass
        raise
    flush("done", state=state() if checkpointing else None)
