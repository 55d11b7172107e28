"""``actors``: K parallel actors feed one learner (Gorila / Ape-X style).

The usual way to go parallel and keep true DQN (one learner's updates on one buffer's data):
keep **one learner and one replay buffer** and parallelise only the acting (Nair et
al. 2015, Gorila, arXiv:1507.04296; Horgan et al. 2018, Ape-X, arXiv:1803.00933).

* **Actors** (one long-lived worker task each: a thread of the learner's process on the compiled core, else
  a process; :func:`~dqnlab.parallel.threads.as_threads`) step ``n_envs`` boards at once with one
  batched forward pass of a recent copy of the online network, and send compact
  transitions (uint8 boards, uint8 actions, float32 rewards, done flags, legal-move
  masks of the next boards: about 42 bytes each) to the learner every ~50 ms
  (:data:`~dqnlab.parallel.actor.FLUSH_S`; sooner when throttled, so that one message stays within the slack).
* **The learner is this (the parent) process.** It owns the replay buffer, the
  online and target networks and Adam, and trains *while* the actors act: between
  messages it takes updates (an afterstate n-tuple network's on the compiled core, as
  ``serial``'s). It stores every message waiting before its next slice of updates, and many
  can come between two slices (the actors act while it learns, and while the OS runs them
  instead of it), so its buffer holds at least :data:`REPLAY_MESSAGES` messages of every actor:
  a buffer of the n-tuple presets' size (the last step's transitions) would be overwritten
  before any update sampled most of them, and the few it keeps would be sampled many times.
* **The weights reach the actors** in one of two ways. On the learner's machine (the default,
  ``share_weights``) they live in shared memory
  (:class:`~dqnlab.parallel.shm.SharedParameters`): the actors act on the learner's weights as
  it trains them, and nothing is copied. Elsewhere (a Dask cluster, a learner on a GPU, or
  ``share_weights=False``) the learner sends every actor the new weights every ``weights_every``
  updates: only the entries that changed since that actor's last copy
  (:func:`~dqnlab.parallel.weights.changed_entries`; ``bytes_moved`` in the run's ``extra``),
  so an n-tuple network's 268 MB tables travel a few per cent at a time. Weights thousands of
  updates old are what an afterstate learner must not act on: its TD target takes the max over
  the next board's afterstates, and an afterstate the learner now overvalues is one the stale
  policy does not yet visit, so nothing corrects it (the same off-policy bootstrapping that
  makes Q-learning with function approximation diverge; Sutton and Barto 2018, section 11.3).
  Keeping the learner in the parent (rather than in a dedicated
  task) means no second copy of the buffer, the final weights are simply here, and
  with the Dask backend the actors run on the cluster while the learner runs
  in the calling process (the data comes back through the scheduler).

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
  replayed fewer times). On a machine with few cores this leaves the learner most of
  its CPU while the actors add env steps; a lower floor gives the actors more of the
  CPU (``bench scaling`` measures both rates);
* ``min_replay_ratio=0`` never throttles (Ape-X): on a small machine the actors then
  take CPU from the learner.

Priorities: where the actors compete with the learner for its cores (two actors and the learner on
two cores, say; not on a Dask cluster, nor in lockstep, where they take turns), the OS would give
each process an even share, but the learner's updates are the run's bottleneck (the throttle holds
the actors to them). So each actor acts at a higher niceness (``actor_nice``; on Linux in a thread
of its own, so that its worker process keeps its priority for the tasks it runs later), and the
learner gets a core whenever it has updates owed, as Gorila's and Ape-X's learners have hardware of
their own. The actors then also yield to any other work on the machine.

Exploration: by default every actor follows the config's epsilon schedule, clocked
by the run's total env steps (estimated by each actor as its own steps times K). With
``actor_epsilon="apex"`` actor i keeps the fixed ``eps_i = 0.4 ** (1 + 7 i / (K - 1))``
of Ape-X (0.4 for a single actor); a list gives each actor's epsilon explicitly.

With ``lockstep=True`` an actor waits after every step until the learner has stored
its transitions and done the updates they are owed, then acts with the new weights:
no overlap. With one worker this is ``serial`` transition for transition (same games,
same updates, same weights); the test suite checks it.

**Prioritized replay** (``config.prioritized``): the learner's buffer is a
:class:`~dqnlab.replay.PrioritizedReplayBuffer`. As in Ape-X, each actor computes the
initial priority of every transition it sends from its own TD error, with its copy of the
weights as online and target network (:meth:`~dqnlab.DQNAgent.td_errors` on the batch
before a message), so that new data is ranked without the learner spending an update on
it; the learner samples by priority, weights the loss by importance sampling and sets the
priorities of each minibatch from its TD errors after the update. With ``config.n_step``
the actors build n-step transitions on their boards (:class:`~dqnlab.replay.NStepReturns`;
Ape-X uses n = 3). ``extra["replay"]`` records the priorities' statistics.

The **parameter lag** of a transition is the number of learner updates between the
weights the actor used and the learner's weights when the transition reaches the
buffer; ``extra["param_lag"]`` summarises it over all transitions.

**Checkpoints**: see :func:`run`; how the cut is taken, :mod:`dqnlab.parallel.feed`.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import joblib
import numpy as np
import torch

from ..agent.dqn import DQNAgent, priority_beta_at
from ..config import TrainConfig
from ..options import SchemeOptions, option
from ..parallel.actor import ActorSettings, actor_task
from ..parallel.dask import active_dask_client
from ..parallel.feed import ActorFeed, lag_summary
from ..parallel.messages import ActorData, NewWeights, Throttle
from ..parallel.shm import SharedParameters
from ..parallel.tasks import TaskGroup, drive_tasks, split_budget
from ..parallel.threads import as_threads, threads_option, torch_threads, torch_threads_set
from ..parallel.weights import Weights, apply_changes, changed_entries, changes_nbytes
from ..runtime.checkpoint import Checkpointer
from ..runtime.driver import RunClock, build_result, run_to_end
from ..runtime.learner import Learner, replay_update
from ..runtime.loop import RunLoop, mean_diagnostics
from ..runtime.progress import Progress
from ..runtime.results import RunResult

__all__ = ["Options", "run", "apex_epsilons", "APEX_EPSILON", "APEX_ALPHA", "ACTOR_EPSILONS", "WEIGHTS_EVERY"]

#: Base epsilon and spread of Ape-X's per-actor exploration (Horgan et al. 2018).
APEX_EPSILON = 0.4
APEX_ALPHA = 7.0
#: Named choices of ``actor_epsilon`` (a list of K numbers is also accepted).
ACTOR_EPSILONS = ("schedule", "apex")
#: ``weights_every`` left at None: learner updates between broadcasts per network family (an n-tuple
#: network's update is a few microseconds: thousands a second; a network's about a millisecond).
WEIGHTS_EVERY = {"ntuple": 5_000, "mlp": 50, "cnn": 50}


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

    weights_every: int | None = option(None, "Learner updates between weight broadcasts to the actors; none: "
                                       "5,000 for the n-tuple network, 50 for the others.", unit="updates", low=1)
    min_replay_ratio: float | None = option(
        None, "Actors pause while the learner has trained fewer samples per env step than this (after learning "
        "starts, beyond a slack of 32 updates, SLACK_UPDATES), at most config.replay_ratio; None: half of it; "
        "replay_ratio holds the ratio exactly; 0 never throttles.", low=0,
        tip="The learner's floor: actors pause while the learner has trained on fewer samples per env step than "
            "this (beyond a slack of 32 updates), at most the replay ratio; empty: half the replay ratio; 0: the "
            "actors never pause.")
    actor_epsilon: str | tuple[float, ...] = option(
        "schedule", "Exploration of each actor: the config's decaying schedule, Ape-X's fixed spread "
        "0.4**(1+7i/(K-1)), or one number per actor.", choices=ACTOR_EPSILONS,
        parse=lambda text: text if text in ACTOR_EPSILONS else tuple(float(x) for x in text.split(",")),
        check=_epsilons_value, allowed=f"one of {list(ACTOR_EPSILONS)} or numbers in [0, 1], one per actor",
        tip="How much each actor explores: the run's decaying schedule, a fixed spread from 0.4 for the first "
            "actor down to about 0.0007 for the last (Ape-X), or one number per actor, comma-separated.")
    lockstep: bool = option(False, "Actors wait for the learner after every step (no overlap; 1 worker = serial).")
    threads: bool | None = threads_option()
    share_weights: bool = option(
        True, "Actors on the learner's machine read its weights in shared memory as it trains them (no copies "
        "sent); off, on a Dask cluster or with the learner on a GPU: the learner sends each actor the entries "
        "that changed, every weights_every updates.",
        tip="Actors read the learner's weights in shared memory as it trains them (no copies); off: the learner "
            "sends each actor what changed, every so many updates (weights every).")
    learner_threads: int | None = option(
        None, "PyTorch threads of the learner during the run (restored afterwards); None: the cores the actors "
        "leave, max(1, cores - workers), at most torch_threads(1), when they run on this machine; unchanged "
        "on a Dask cluster.", low=1,
        tip="Threads the learner computes its updates with during the run; empty: the cores the actors leave "
            "free (one at least), when the actors run on this machine.")
    actor_nice: int = option(
        10, "Niceness each actor acts at above its worker's (Linux: its own thread's; 0: none) where the actors "
        "compete with the learner for its cores (actors on its machine, not in lockstep, and with it more than "
        "the cores): the learner, whose updates are the run's bottleneck, then gets a core whenever it has "
        "updates to make, and the actors the rest.", low=0, high=19,
        tip="How much the actors give way to the learner for the cores (0: not at all, 19: the most): the "
            "learner's updates are what limits the run, so it gets a core whenever it has updates to make and the "
            "actors take the rest.")
#: Learner updates of headroom before a throttled actor pauses.
SLACK_UPDATES = 32
#: Transitions an actor sends at once (at most).
MAX_CHUNK = 4096
#: Messages of every actor the learner's replay holds (at least; one in lockstep). Between two of the learner's
#: looks at its messages, many may come (the actors act while it learns, and while the OS runs them instead of it).
REPLAY_MESSAGES = 16
#: Seconds of updates the learner takes before looking at its messages again.
LEARN_SLICE_S = 0.005
#: Updates of an n-tuple network the compiled core takes in one call (a fraction of ``LEARN_SLICE_S``).
NATIVE_SLICE = 64


def apex_epsilons(workers: int, epsilon: float = APEX_EPSILON, alpha: float = APEX_ALPHA) -> list[float]:
    """Ape-X's fixed per-actor exploration rates: ``eps_i = epsilon ** (1 + alpha * i / (K - 1))``.

    Actor 0 explores most (``epsilon``), actor K-1 least (``epsilon ** (1 + alpha)``,
    about 0.00066 with the defaults). One actor gets ``epsilon``.

    References
    ----------
    Horgan et al., "Distributed Prioritized Experience Replay", ICLR 2018 (Ape-X), section 4.1.
    """
    if not isinstance(workers, (int, np.integer)) or isinstance(workers, bool) or workers < 1:
        raise ValueError(f"workers must be an integer >= 1, got {workers!r}")
    if workers == 1:
        return [float(epsilon)]
    return [float(epsilon ** (1 + alpha * i / (workers - 1))) for i in range(workers)]


def run(config: TrainConfig, options: Options, *, workers: int = 1, progress: bool = True,
        callback: Callable[[RunResult], Any] | None = None,
        _checkpoint: Checkpointer | None = None) -> RunResult:
    """Train one learner (this process) on the transitions of ``workers`` parallel actors.

    Parameters
    ----------
    config : TrainConfig
        ``total_env_steps`` is split evenly across actors; ``replay_ratio`` is the
        learner's ceiling (samples per env step); ``buffer_size`` (raised to :data:`REPLAY_MESSAGES`
        messages of every actor, one in lockstep) and ``learning_starts`` are the one learner's.
    workers : int
        K actors, one worker task each (>= 1, <= ``total_env_steps``). With K = 1 the
        actor runs in a thread of this process (joblib runs one task in-process).
    progress, callback
        As for :func:`dqnlab.train`.
    options : Options
        Weight broadcasts, throttle, exploration, lockstep, the learner's threads and the actors' niceness (see
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
        learning started), ``learning_started_at``, ``stored_between_slices`` (env steps the learner stored
        between two slices of its updates, as a transition sees them: mean, max, and ``over_buffer``, the share
        that came in a batch larger than the buffer), ``weights`` (how the actors got them: ``"shared
        memory"`` or ``"sent as changes"``), ``weights_sent``, ``actor_waits`` and more.

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
    min_ratio = _min_replay_ratio(options.min_replay_ratio, float(config.replay_ratio))
    epsilons = _actor_epsilons(options.actor_epsilon, workers)
    if config.total_env_steps is not None and config.total_env_steps < workers:
        raise ValueError(f"total_env_steps ({config.total_env_steps}) must be at least workers ({workers})")
    remote = active_dask_client() is not None
    options = replace(options, threads=as_threads(options.threads, config))  # (the run records which)
    weights_every = options.weights_every or WEIGHTS_EVERY[config.network]
    reported = {"weights_every": weights_every, "min_replay_ratio": min_ratio,
                "actor_epsilon": options.actor_epsilon if isinstance(options.actor_epsilon, str) else list(epsilons),
                "lockstep": options.lockstep, "share_weights": options.share_weights, "threads": options.threads}
    chunk = _max_chunk(config, min_ratio, workers)
    learner = _CentralLearner(config, workers, weights_every, min_ratio, options.lockstep, chunk)
    resumed = _checkpoint.take_state() if _checkpoint is not None else None
    if resumed is not None:
        if len(resumed["actors"]) != workers:
            raise ValueError(f"checkpoint of {len(resumed['actors'])} actors, not {workers}")
        learner.load_state_dict(resumed.pop("learner"), resumed["actors"])

    def result(status: str | None = None) -> RunResult:
        return learner.result(loop, reported, status, remote)

    loop = RunLoop(config, progress=progress, callback=callback, snapshot=result, checkpointer=_checkpoint)
    learner.t0 = loop.t0
    budgets, checkpointing = split_budget(config.total_env_steps, workers), _checkpoint is not None
    if options.share_weights and not remote and learner.agent.device.type == "cpu":
        learner.share_weights()  # (closed at the end, below)
    init = None
    if learner.shared is None:
        init = learner.agent.get_weights()
        learner.actors_have(init, None if resumed is None else resumed["actors"])
    tasks = [dict(settings=ActorSettings(config=config, worker=k, workers=workers, budget=budgets[k],
                                         clock=RunClock.of(loop), epsilon=epsilons[k], lockstep=options.lockstep,
                                         max_chunk=chunk, parent_pid=os.getpid(),
                                         checkpointing=checkpointing,
                                         shared_weights=None if learner.shared is None else learner.shared.handle,
                                         nice=options.actor_nice if _share_cores(workers, remote, options.lockstep) else 0),
                  weights=init, version=learner.agent.updates, paused=learner.paused,
                  resume=None if resumed is None else resumed["actors"][k])
             for k in range(workers)]
    threads = options.learner_threads or (
        None if remote else min(torch_threads(1), max(1, joblib.cpu_count() - workers)))

    def act_and_learn() -> None:
        with torch_threads_set(threads):
            learner.threads = torch.get_num_threads()
            with TaskGroup(actor_task, tasks, backend="threading" if options.threads else None) as group:
                learner.group = group
                if resumed is not None:  # lockstep actors that were waiting for the learner's reply get it
                    learner.answer(sorted(k for k, a in enumerate(resumed["actors"]) if a["awaiting"]))
                drive_tasks(group, loop, learner, checkpoints=checkpointing)  # learns between messages
            # The actors spent the step budget (not stopped by a callback or Ctrl-C, not out of time): honour the floor.
            if loop.status in ("running", "completed") and (loop.deadline is None
                                                             or time.perf_counter() < loop.deadline):
                learner.catch_up(loop.deadline)

    # The final checkpoint: every actor sent its final state, and the learner is not half-way through an update.
    try:
        return run_to_end("actors", loop, act_and_learn, result,
                          final_state=lambda: None if loop.abrupt else learner.final_checkpoint())
    finally:
        learner.unshare_weights()


def _share_cores(workers: int, remote: bool, lockstep: bool) -> bool:
    """Whether the actors compete with the learner for its cores: ``workers`` actors on this machine (not on a Dask
    cluster), acting while it learns (not in lockstep), and with it more than the cores (:func:`joblib.cpu_count`)."""
    return not remote and not lockstep and workers + 1 > joblib.cpu_count()


def _min_replay_ratio(min_replay_ratio: float | None, ratio: float) -> float:
    """The throttle's floor: ``min_replay_ratio``, or half of ``ratio`` (the ceiling) for None.

    Raises
    ------
    ValueError
        If ``min_replay_ratio`` exceeds ``ratio``.
    """
    if min_replay_ratio is None:
        return ratio / 2.0
    if min_replay_ratio > ratio:
        raise ValueError(f"min_replay_ratio must be a number in [0, replay_ratio] = [0, {ratio:g}], "
                         f"got {min_replay_ratio!r}")
    return float(min_replay_ratio)


def _max_chunk(config: TrainConfig, min_ratio: float, workers: int) -> int:
    """Transitions an actor sends at once: :data:`MAX_CHUNK`, or fewer when throttled (at least one step of
    its boards)."""
    # A throttled actor sends at most its share of the slack at once, so that one message
    # cannot carry the learner far past the floor.
    chunk = MAX_CHUNK if min_ratio <= 0 else int(SLACK_UPDATES * config.batch_size / min_ratio / (2 * workers))
    return max(config.n_envs, min(MAX_CHUNK, chunk))


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


class _CentralLearner(ActorFeed):
    """The learner: the actors' data in its replay buffer (:class:`~dqnlab.parallel.feed.ActorFeed`),
    the agent, replay-ratio accounting, weight broadcasts and the throttle."""

    has_work = True

    def __init__(self, config: TrainConfig, workers: int, weights_every: int, min_ratio: float, lockstep: bool,
                 max_chunk: int):
        # A learner of its own (serial's seeds): its agent, its buffer (which the actors fill) and, for an
        # afterstate n-tuple network, its compiled core's updates; its own boards never step. Its buffer holds
        # REPLAY_MESSAGES messages of every actor (the module's docstring says why).
        held = 1 if lockstep else REPLAY_MESSAGES
        self.core = Learner(config.replace(buffer_size=max(config.buffer_size, held * workers * max_chunk)),
                            device=config.device)  # (the actors act on the CPU)
        super().__init__(workers, self.core.buffer)
        self.config = config
        self.weights_every, self.min_ratio, self.lockstep = weights_every, min_ratio, lockstep
        self.agent: DQNAgent = self.core.agent
        self.shared: SharedParameters | None = None  # the weights in shared memory, which the actors read
        self.sent: list[Weights] = []  # each actor's weights as it has them (its next weights are changes from them)
        self.bytes_sent = 0  # of weights, to the actors
        self.threads: int | None = None
        self.credit = 0.0  # updates owed at the replay ratio
        self.between = 0  # env steps stored since the last slice of updates
        # of the batches stored between two slices, per transition: sum of sizes, of squared sizes, those larger
        # than the buffer, the largest
        self.batches = {"steps": 0, "squares": 0, "over_buffer": 0, "max": 0}
        self.started_at: int | None = None  # env steps when learning started
        self.weights_sent = 0  # weight dicts sent (one per actor per broadcast)
        self.broadcast_at = 0  # updates at the last broadcast
        self.version_sent = [0] * workers  # weights version each actor has
        self.paused = False  # actors told to pause (throttle)
        self.catch_up_s = 0.0
        self.pauses = 0
        self.upe = config.updates_per_env_step

    @property
    def updates(self) -> int:
        return self.agent.updates

    def share_weights(self) -> None:
        """Move the online weights into shared memory, where the actors read them as they are trained, with
        the count of the updates that made them (on the compiled core counted by its kernels, update by update:
        the version an actor tags its next message with)."""
        self.shared = SharedParameters.create(self.agent.online)
        self.shared.updates = self.updates  # (a resumed learner's)
        if self.core.native is not None:
            self.core.native.count_updates_in(self.shared.arrays["updates"])

    def unshare_weights(self) -> None:
        """The weights back in this process's memory and the block removed (nothing if not shared)."""
        if self.shared is None:
            return
        if self.core.native is not None:
            self.core.native.count_updates_in(None)
        self.shared.close()

    def progress(self, wall: float | None = None) -> Progress:
        """The run's :class:`~dqnlab.runtime.progress.Progress` after ``wall`` seconds (default: now): the
        learner's diagnostics, with the actors' mean epsilon; each actor's epsilon."""
        wall = self.loop.elapsed if wall is None else wall
        epsilons = [{"epsilon": a.get("epsilon_now", math.nan)} for a in self.actors]
        diagnostics = {**mean_diagnostics(epsilons, self.updates * self.config.batch_size, self.env_steps),
                       **self.agent.diagnostics()}
        return Progress(self.env_steps, self.updates, self.rows, self.time_split(wall), diagnostics, epsilons)

    # ------------------------------------------------------------------ data in
    def stored(self, data: ActorData, n: int) -> None:
        """New transitions: the target sync at a game's end (``target_update == 0``), and the updates they are owed."""
        if data.finished and self.config.target_update == 0:
            self.agent.sync_target()  # the seed preset's schedule: at the end of every game, as serial does
        if self.env_steps >= self.config.learning_starts and len(self.buffer) >= self.config.batch_size:
            if self.started_at is None:
                self.started_at = self.env_steps - n
            self.credit += n * self.upe
        self.between += n

    def after_data(self, worker: int) -> None:
        """Lockstep: answer the actor now; otherwise see whether to throttle."""
        if self.lockstep:
            self.answer([worker])
        else:
            self._throttle()

    def after_checkpoint(self, held: list[int]) -> None:
        """Send what was held back while the checkpoint was gathered."""
        if self.lockstep:
            self.answer(held)
        else:
            self._throttle()

    def answer(self, actors: list[int]) -> None:
        """Lockstep: do the updates owed, then send each of ``actors`` the weights it waits for."""
        if not actors:
            return
        self._learn(self.owed())
        for k in actors:
            self._send_weights([k])

    # ------------------------------------------------------------------ learning
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
        if self.lockstep or owed < 1 or self.checkpoint_pending:
            return False
        done = self._learn(owed, LEARN_SLICE_S)
        self._throttle()
        return done < owed

    def _learn(self, n: int, max_s: float = math.inf) -> int:
        """Up to ``n`` updates (fewer if ``max_s`` seconds pass); broadcast weights on schedule."""
        t0 = time.perf_counter()
        done = 0
        if self.between:  # (the batch stored since the last slice)
            b, m, self.between = self.between, self.batches, 0
            m["steps"], m["squares"], m["max"] = m["steps"] + b, m["squares"] + b * b, max(m["max"], b)
            m["over_buffer"] += b if b > self.buffer.capacity else 0
        if self.config.prioritized:
            self.buffer.beta = priority_beta_at(self.config, self.env_steps, time.perf_counter() - self.t0)
        native = self.core.native
        while done < n:
            if native is None:
                self.last_loss = replay_update(self.agent, self.buffer, self.config.batch_size)
                done += 1
            else:  # a slice of updates on the compiled core, up to the next broadcast
                k = min(n - done, NATIVE_SLICE, n if self.lockstep or self.shared is not None else
                        max(1, self.weights_every - (self.updates - self.broadcast_at)))
                native.learn(k)
                self.last_loss = self.core.last_loss
                done += k
            if self.shared is not None:  # (the compiled core counted its updates in the block one by one)
                self.shared.updates = self.updates  # (the version the actors' next data was acted with)
            elif (not self.lockstep and self.updates - self.broadcast_at >= self.weights_every
                  and not self.group.stopping):
                self.timing["learning"] += time.perf_counter() - t0
                self._send_weights([k for k in range(self.workers) if k not in self.gone])
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
    def actors_have(self, init: Weights, resumed: list[dict[str, Any]] | None) -> None:
        """What each actor starts with: ``init`` (the learner's weights), or a resumed lockstep actor's own."""
        self.sent = [{n: np.array(w, np.float32, copy=True) for n, w in
                      (init if resumed is None or resumed[k]["weights"] is None else resumed[k]["weights"]).items()}
                     for k in range(self.workers)]

    def _send_weights(self, actors: list[int]) -> None:
        """Send ``actors`` the current weights, as changes from the copy each has (None for an actor that
        already has them, as every actor has that reads them in shared memory)."""
        t0 = time.perf_counter()
        views = self.agent.weight_views()
        for k in actors:
            changes = None
            if self.shared is None and self.version_sent[k] != self.updates:
                changes = changed_entries(views, self.sent[k])
                apply_changes(self.sent[k], changes)
                self.bytes_sent += changes_nbytes(changes)
            self.group.send(k, NewWeights(changes, self.updates))
            self.version_sent[k] = self.updates
            self.weights_sent += int(changes is not None)
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
            if k not in self.gone:
                self.group.send(k, Throttle(self.paused))
        self.timing["sending_weights"] += time.perf_counter() - t0

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        """The learner's part of a checkpoint (the agent's live tensors: the checkpoint is written before the
        learner steps again, in this thread)."""
        return {"agent": self.agent.state_dict(), **super().state_dict(), "credit": self.credit,
                "between": self.between, "batches": dict(self.batches), "started_at": self.started_at,
                "weights_sent": self.weights_sent, "broadcast_at": self.broadcast_at,
                "bytes_sent": self.bytes_sent,
                "version_sent": list(self.version_sent), "paused": self.paused, "pauses": self.pauses,
                "catch_up_s": self.catch_up_s}

    def load_state_dict(self, state: dict[str, Any], actors: list[dict[str, Any]]) -> None:
        """Restore :meth:`state_dict` output, with the ``actors``' states of the same checkpoint."""
        super().load_state_dict(state)
        self.agent.load_state_dict(state["agent"])
        self.credit = float(state["credit"])
        self.between = int(state["between"])
        self.batches = {k: int(v) for k, v in state["batches"].items()}
        self.started_at = None if state["started_at"] is None else int(state["started_at"])
        self.weights_sent, self.broadcast_at = int(state["weights_sent"]), int(state["broadcast_at"])
        self.bytes_sent = int(state["bytes_sent"])
        # Each actor holds the weights its own state says (an order in flight at the end of a run was lost); an
        # actor whose state keeps no weights (not lockstep) starts from the learner's.
        self.version_sent = [self.agent.updates if a["weights"] is None else int(a["st"]["version"]) for a in actors]
        self.paused, self.pauses = bool(state["paused"]), int(state["pauses"])
        self.catch_up_s = float(state["catch_up_s"])

    def checkpoint_state(self, states: dict[int, Any]) -> dict[str, Any]:
        """The scheme's checkpoint state: the learner's and every actor's (actors that have
        exited contribute the final state they sent with their last message)."""
        return {"learner": self.state_dict(), "actors": self.gather_states(states)}

    # ------------------------------------------------------------------ result
    def result(self, loop: RunLoop, options: dict[str, Any], status: str | None, remote: bool) -> RunResult:
        """The run's result so far: the learner's totals and weights; its, the actors' and the lag's measurements."""
        c = self.config
        wall = loop.elapsed
        per_worker = self.per_actor()
        learner = {"learning_s": self.timing["learning"], "receiving_s": self.timing["receiving"],
                   "sending_weights_s": self.timing["sending_weights"],
                   "waiting_s": self.waiting_s(wall), "first_data_s": self.first_data_s,
                   "updates": self.updates, "torch_threads": self.threads,
                   "updates_per_s": self.updates / wall if wall > 0 else None}
        learned_steps = self.env_steps - self.started_at if self.started_at is not None else 0
        # (closed: nothing trains any more, and the weights' memory outlives the block they may be in: no copy)
        lasting = loop.closed and (self.shared is None or self.shared.arrays.lasting)
        weights = self.agent.weight_views() if lasting else self.agent.get_weights()
        return build_result(
            "actors", c, self.workers, loop, self.progress(wall), weights, status, options,
            wall_time_s=wall, extra={
                "learner": learner, "per_worker": per_worker, "param_lag": lag_summary(self.lag),
                "replay_ratio": c.replay_ratio, "min_replay_ratio": self.min_ratio,
                "achieved_replay_ratio": self.updates * c.batch_size / self.env_steps if self.env_steps else None,
                "achieved_replay_ratio_learning": (self.updates * c.batch_size / learned_steps
                                                   if learned_steps else None),
                "learning_started_at": self.started_at, "slack_updates": SLACK_UPDATES,
                "updates_owed": self.owed(), "throttle_pauses": self.pauses, "catch_up_s": self.catch_up_s,
                "weights_every": self.weights_every,
                "weights": "shared memory" if self.shared is not None else "sent as changes",
                "weights_sent": self.weights_sent, "bytes_moved": self.bytes_sent,
                "bytes_moved_per_s": self.bytes_sent / wall if wall > 0 else None, "actor_waits": sum(w["waits"] for w in per_worker),
                "lockstep": self.lockstep, "torch_threads_per_worker": 1, "actors_on_cluster": remote,
                "replay": self.buffer.statistics(), "buffer_size": self.buffer.capacity,
                "stored_between_slices": _batch_summary(self.batches),
            },
        )


def _batch_summary(batches: dict[str, int]) -> dict[str, Any]:
    """Env steps stored between two slices of the learner's updates, as a transition sees them: the mean
    batch (weighted by its transitions), the largest, and the share of transitions that came in a batch larger
    than the buffer (most of such a batch is overwritten before an update can sample it)."""
    steps = batches["steps"]
    return {"mean": batches["squares"] / steps if steps else None, "max": batches["max"],
            "over_buffer": batches["over_buffer"] / steps if steps else None, "unit": "env steps"}
