"""An actor of the ``actors`` scheme, in a long-lived worker task: act, send transitions, follow orders.

The actor steps its boards with a recent copy of the learner's network and sends its
transitions in :class:`~dqnlab.parallel.messages.ActorData` messages; the learner
(:mod:`dqnlab.schemes.actors`, in the parent) sends it new weights, pause / go
(:class:`~dqnlab.parallel.messages.Throttle`), checkpoint requests and stop.
:class:`Actor` is the actor (the shape of TorchRL's collectors: act, send, take orders);
:func:`actor_task` builds one in the task and runs it.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..agent.dqn import DQNAgent, epsilon_at, transform_rewards
from ..config import TrainConfig
from ..game import VecGame2048, legal_actions_batch
from ..replay import FIELDS, Minibatch, NStepReturns
from ..runtime.driver import RunClock
from ..runtime.learner import Learner, next_board_masks, worker_seeds
from ..runtime.native import native_reason
from .faults import check_fault
from .messages import ActorData, Checkpoint, NewWeights, Stop, Throttle, UnexpectedMessage
from .shm import SharedParameters
from .tasks import Channel
from .threads import run_niced, thread_niceness
from .weights import Changes, apply_changes

__all__ = ["Actor", "ActorSettings", "actor_task", "FLUSH_S", "ORDERS_S"]

#: Seconds an actor gathers transitions before sending them (at most).
FLUSH_S = 0.05
#: Seconds between an actor's looks at its orders (weights, pause / go, stop).
ORDERS_S = 0.01


@dataclass(frozen=True)
class ActorSettings:
    """What an actor is told once, for the whole run (picklable: it travels to the worker task).

    Attributes
    ----------
    config : TrainConfig
        The run's configuration (``n_envs`` boards, the epsilon schedule, n-step returns, prioritized replay).
    worker, workers : int
        This actor's index and the number K of actors.
    budget : int or None
        This actor's env steps (None: no step budget).
    clock : RunClock
        The run's start and time budget.
    epsilon : float or None
        A fixed epsilon (None: the config's schedule, clocked by the actor's own env steps times K).
    lockstep : bool
        Wait for the learner's reply after every step.
    max_chunk : int
        Transitions sent at once (about, at most).
    parent_pid : int
        The learner's process (an actor in another one acts on one torch thread).
    checkpointing : bool
        Answer the learner's checkpoint requests, and send the final state with the last message.
    shared_weights : tuple or None
        The learner's weights in shared memory (:attr:`~dqnlab.parallel.shm.SharedParameters.handle`), which
        the actor reads as the learner trains them; None: the learner sends them
        (:class:`~dqnlab.parallel.messages.NewWeights`).
    nice : int
        Niceness the actor acts at above its worker's (:func:`~dqnlab.parallel.threads.run_niced`; 0: none).
    """

    config: TrainConfig
    worker: int
    workers: int
    budget: int | None
    clock: RunClock
    epsilon: float | None
    lockstep: bool
    max_chunk: int
    parent_pid: int
    checkpointing: bool = False
    shared_weights: tuple[str, Any] | None = None
    nice: int = 0


def actor_task(ch: Channel, *, settings: ActorSettings, weights: dict[str, np.ndarray] | None, version: int,
               paused: bool = False, resume: dict[str, Any] | None = None) -> None:
    """One actor, in a worker task, for the whole run (see :mod:`dqnlab.schemes.actors`): :meth:`Actor.run` of
    ``Actor(ch, settings, weights, version, paused, resume)`` (its parameters and errors), with one torch thread
    outside the parent process, at ``settings.nice`` above its worker (:func:`~dqnlab.parallel.threads.run_niced`).
    """
    if os.getpid() != settings.parent_pid and torch.get_num_threads() != 1:
        torch.set_num_threads(1)  # a batched forward pass of n_envs boards: one thread is plenty
    actor = Actor(ch, settings, weights, version, paused, resume)
    try:
        run_niced(actor.run, settings.nice)
    finally:
        if actor.shared is not None:  # (a worker process outlives the run: let go of the learner's block)
            actor.shared.close()


class Actor:
    """An actor: steps ``config.n_envs`` boards, sends its transitions, follows the learner's orders.

    It acts with ``weights``, the learner's after ``version`` updates (then those the learner
    sends, :class:`~dqnlab.parallel.messages.NewWeights`), or on the learner's machine with the
    learner's own weights as it trains them (``settings.shared_weights``), at the settings' epsilon, and sends
    :class:`~dqnlab.parallel.messages.ActorData` (transitions since the last one, at most about
    ``max_chunk``, the weights version they were acted with, finished games, counters and
    timing) every :data:`FLUSH_S`, and a last one (``done``). It pauses while the learner says
    so (:class:`~dqnlab.parallel.messages.Throttle`); in ``lockstep`` it waits for the
    learner's reply after every step. With prioritized replay each transition carries its
    initial priority, the actor's own TD error (Ape-X, Horgan et al. 2018).

    An actor that acts greedily with an afterstate n-tuple network (the n-tuple presets: epsilon 0)
    acts on the compiled core (:attr:`core`, a :class:`~dqnlab.runtime.learner.Learner` of its own
    that never learns: its boards, n-step returns and a buffer of one message's transitions), for
    many steps a call, as ``serial`` does; any other acts one step at a time in Python.

    With ``checkpointing``, it answers the learner's checkpoint requests: it sends the
    transitions it holds, then its :meth:`state`, and waits for the checkpoint to be written
    (or a stop); its final state goes with the last message. The state holds the actor's copy
    of the weights only in ``lockstep`` (where a resumed run is exact); an overlapped actor
    resumes with the learner's weights, as after a broadcast, so that no copy of a large table
    travels per actor.

    Parameters
    ----------
    ch : Channel
        The task's channel.
    settings : ActorSettings
        What the actor is told once.
    weights : dict of str to numpy.ndarray or None
        The learner's weights after ``version`` updates (None with ``settings.shared_weights``).
    version : int
        Their learner update count.
    paused : bool
        The learner's throttle now (for a resumed actor; a new one starts going).
    resume : dict, optional
        A :meth:`state` to continue from.

    Raises
    ------
    ValueError
        If ``resume`` is another actor's state.
    """

    def __init__(self, ch: Channel, settings: ActorSettings, weights: dict[str, np.ndarray] | None, version: int,
                 paused: bool = False, resume: dict[str, Any] | None = None):
        self.ch, self.settings, self.config = ch, settings, settings.config
        self.niceness: int | None = None  # the acting thread's, once it runs (ActorData.niceness)
        config, worker = settings.config, settings.worker
        self.clock0, self.deadline = settings.clock.local()  # the learner's start, on this process's clock
        self.core = _acting_core(settings)
        if self.core is not None:  # (the same seeds, boards and games as below, stepped by the kernels)
            self.env, self.agent, self.nstep = self.core.env, self.core.agent, self.core.nstep
            self.core.clock0 = self.clock0
        else:
            env_seed, _, agent_seed = worker_seeds(config.seed, worker)
            self.env = VecGame2048(config.n_envs, seed=env_seed, max_moves=config.max_moves,
                                   invalid_move_reward=config.invalid_move_reward)
            self.agent = DQNAgent(config, seed=agent_seed)  # its rng explores; its weights come from the learner
            self.nstep = NStepReturns(config.n_step, config.gamma, config.n_envs)
        # Prioritized replay: the actor computes each transition's initial priority from its own TD error,
        # with its copy of the weights as online and target network (Horgan et al. 2018).
        self.own_target = config.prioritized
        # On the learner's machine its networks read the learner's weights in shared memory instead.
        self.shared = None if settings.shared_weights is None else SharedParameters.attach(
            settings.shared_weights, *{id(m): m for m in (self.agent.online, self.agent.target)}.values())
        self.version, self.paused = version, False
        self.env_steps = self.episodes = self.loads = self.waits = 0
        self.timing = {"acting": 0.0, "sending": 0.0, "receiving": 0.0, "waiting": 0.0, "weights": 0.0}
        self.awaiting = False  # lockstep: data sent, waiting for the learner's weights
        self.chunk: list[dict[str, np.ndarray]] = []  # the n-step transitions of each step since the last message
        self.rows: list[dict[str, Any]] = []  # the games finished since the last message
        self.finished_in_chunk = 0
        if resume is None:
            if self.shared is None:
                self.agent.set_weights(weights, target=self.own_target)
            self.boards = self.env.reset()  # as the serial learner does (the constructor's boards are not used)
            self.masks = legal_actions_batch(self.boards)
            self.values = self.agent.q_values(self.boards)  # (as a learner acts: on each board's evaluation)
        else:
            self._resume(resume, weights, paused)
        self.last_flush = time.perf_counter()
        # Read orders before the first step: a resumed learner may have trained (and sent weights) while this started.
        self.last_orders = self.last_flush - ORDERS_S
        if settings.checkpointing:
            ch.state = self.state  # Channel.wait answers a request that comes while this actor waits

    # ------------------------------------------------------------------ the loop
    def run(self) -> None:
        """Act until the budget, the deadline or a stop; send the data on the way and at the end.

        On an exception it first sends what it gathered, then re-raises (the task wrapper reports it).
        """
        s, ch = self.settings, self.ch
        self.niceness = thread_niceness()  # (this thread's, which acts: see actor_task)
        try:
            if self.awaiting:  # resumed while waiting for the learner's reply (the learner sends it)
                self.wait_for_learner(True, count=False)
            while ((s.budget is None or self.env_steps < s.budget)
                   and (self.deadline is None or time.perf_counter() < self.deadline) and not ch.stopped):
                if time.perf_counter() - self.last_orders >= ORDERS_S:
                    self.take_orders()
                while self.paused and not ch.stopped:  # the learner is behind: let it catch up
                    if self.chunk or self.rows:
                        self.flush()
                    self.wait_for_learner(False)
                if ch.stopped:
                    break
                n = self.act()
                check_fault(ch.fault, s.worker, env_steps=self.env_steps)
                if s.lockstep:
                    self.flush()
                    self.wait_for_learner(True)
                elif time.perf_counter() - self.last_flush >= FLUSH_S or len(self.chunk) * n >= s.max_chunk:
                    self.flush()
        except BaseException:
            try:
                self.flush()  # keep the games finished since the last message
            except Exception:  # noqa: BLE001, S110 - the queue is gone too: the original error matters more
                pass
            raise
        self.flush(done=True, final_state=self.state() if s.checkpointing else None)

    def act(self) -> int:
        """Step every board once with the current epsilon (on the compiled core: as many times as fill about
        one message, or :data:`ORDERS_S`); keep the n-step transitions and the finished games.

        Returns
        -------
        int
            The env steps taken (``n_envs`` a step).
        """
        if self.shared is not None and not self.chunk:  # (a message's version: that of its first step's weights)
            self.version = self.shared.updates
        if self.core is not None:
            return self._act_on_core()
        t0 = time.perf_counter()
        boards = self.boards
        actions = self.agent.act(boards, self.masks, self.epsilon_now(), values=self.values)
        out = self.env.step(actions)
        n = len(actions)
        ended = out.terminated | out.truncated
        self.chunk.append(self.nstep.push(boards, actions, transform_rewards(self.config, out.rewards),
                                          out.next_boards, out.terminated, next_board_masks(out, ended), ended))
        self.boards, self.masks = out.boards, out.action_masks
        self.values = self.agent.q_values(self.boards)
        self.env_steps += n
        done = np.flatnonzero(ended)
        if len(done):
            now, eps, worker = time.perf_counter() - self.clock0, self.epsilon_now(), self.settings.worker
            for i in done:
                self.rows.append({"worker": worker, "episode": self.episodes, "env_steps": self.env_steps,
                                  "wall_time_s": now, "score": int(out.episode_scores[i]),
                                  "max_tile": int(out.episode_max_tiles[i]), "moves": int(out.episode_moves[i]),
                                  "epsilon": eps, "loss": math.nan})
                self.episodes += 1
            self.finished_in_chunk += len(done)
        self.timing["acting"] += time.perf_counter() - t0
        return n

    def _act_on_core(self) -> int:
        """:meth:`act` on the compiled core: its steps' transitions are what its buffer gained."""
        t0 = time.perf_counter()
        s, core, n_envs = self.settings, self.core, self.config.n_envs
        steps = max(1, s.max_chunk // n_envs)
        if s.budget is not None:
            steps = min(steps, -(-(s.budget - self.env_steps) // n_envs))
        buf, before = core.buffer, core.buffer.added
        core.env_steps, core.masks, core.values = self.env_steps, self.masks, self.values
        n = core.native.run(steps, time.perf_counter() + ORDERS_S, learn=False)
        new = buf.added - before
        index = (buf.pos - new + np.arange(new)) % buf.capacity
        self.chunk.append({name: buf.arrays[name][index] for name in FIELDS})
        for row in core.episodes:  # (numbered as this actor's games)
            self.rows.append({**row, "worker": s.worker, "episode": self.episodes, "loss": math.nan})
            self.episodes += 1
        self.finished_in_chunk += len(core.episodes)
        core.episodes.clear()
        self.boards, self.masks, self.values = core.boards, core.masks, core.values
        self.env_steps += n
        self.timing["acting"] += time.perf_counter() - t0
        return n

    def epsilon_now(self) -> float:
        """The settings' fixed epsilon, or the schedule's at this actor's env steps times K (the run's, estimated)."""
        s = self.settings
        if s.epsilon is not None:
            return s.epsilon
        return epsilon_at(self.config, self.env_steps * s.workers, self.version)

    # ------------------------------------------------------------------ to the learner
    def flush(self, done: bool = False, final_state: dict[str, Any] | None = None) -> None:
        """Send the transitions and games since the last message, with the counters now (``done``: the last
        message, with ``final_state``); with prioritized replay the transitions carry their TD errors."""
        transitions = None
        if self.chunk:
            transitions = {name: np.concatenate([c[name] for c in self.chunk]) for name in FIELDS}
            if self.own_target and len(transitions["actions"]):  # initial priorities: computing, so counted as acting
                t0 = time.perf_counter()
                transitions["td_errors"] = self.agent.td_errors(Minibatch(**transitions))
                self.timing["acting"] += time.perf_counter() - t0
        t0 = time.perf_counter()
        self.ch.send(ActorData(self.settings.worker, done, transitions, self.version, self.finished_in_chunk,
                               self.rows, self.env_steps, self.episodes, dict(self.timing), self.loads, self.waits,
                               self.settings.epsilon, self.epsilon_now(), final_state, self.niceness))
        self.chunk, self.rows, self.finished_in_chunk = [], [], 0
        self.last_flush = time.perf_counter()
        self.timing["sending"] += self.last_flush - t0

    # ------------------------------------------------------------------ from the learner
    def take_orders(self) -> None:
        """Read the orders waiting and :meth:`apply` them (first sending the data acted with older weights)."""
        t0 = time.perf_counter()
        orders = self.ch.orders()
        self.last_orders = time.perf_counter()
        self.timing["receiving"] += self.last_orders - t0
        if self.chunk and any(isinstance(m, NewWeights) for m in orders):
            self.flush()  # one weights version per message
        self.apply(orders)

    def apply(self, orders: list[Any]) -> None:
        """Carry out ``orders`` in the order they came (a checkpoint sees the ones before it); each new
        weights are changes from the ones before, so every one is loaded.

        Raises
        ------
        UnexpectedMessage
            For a message that is not an actor's order.
        """
        for msg in orders:
            if isinstance(msg, NewWeights):
                self._load_weights(msg.weights)
                self.version = msg.version
            elif isinstance(msg, Throttle):
                self.paused = msg.paused
            elif isinstance(msg, Checkpoint):
                self.serve_checkpoint(msg.id)
            elif not isinstance(msg, Stop):
                raise UnexpectedMessage(f"actor {self.settings.worker}", msg)

    def _load_weights(self, changes: Changes | None) -> None:
        """Act from now on with the learner's weights, given as ``changes`` from this actor's (None: keep them)."""
        if changes is not None:
            t0 = time.perf_counter()
            apply_changes(self.agent.weight_views(), changes)  # (the actor's network is on the CPU: in place)
            if self.own_target:
                self.agent.sync_target()
            self.loads += 1
            self.timing["weights"] += time.perf_counter() - t0

    def serve_checkpoint(self, n: int) -> None:
        """Send the transitions held, then answer checkpoint ``n`` (:meth:`Channel.serve_checkpoint`),
        carrying out weights / pause orders that come meanwhile."""
        if self.chunk or self.rows:
            self.flush()
        self.timing["waiting"] += self.ch.serve_checkpoint(n, other=lambda msg: self.apply([msg]))

    def wait_for_learner(self, reply: bool, count: bool = True) -> None:
        """Block until the learner sends something (weights, go, or stop), and carry it out with the orders
        behind it; ``reply``: a lockstep wait for the weights after this actor's data; ``count``: count
        the wait in :attr:`waits`."""
        t0 = time.perf_counter()
        self.waits += int(count)
        self.awaiting = reply
        msg = self.ch.wait()  # answers a checkpoint request at once (the state says what it waits for)
        if not isinstance(msg, Stop):
            self.awaiting = False
            self.apply([msg] + self.ch.orders())
        self.timing["waiting"] += time.perf_counter() - t0

    # ------------------------------------------------------------------ checkpoints
    def state(self) -> dict[str, Any]:
        """This actor's checkpoint state (called between steps, with nothing left to send): its games,
        exploration stream, pending n-step returns, counters (``st``), timing, whether it waits for a
        lockstep reply, and in ``lockstep`` its copy of the weights (None otherwise, and where it reads the
        learner's in shared memory)."""
        return {"worker": self.settings.worker, "env": self.env.state_dict(), "nstep": self.nstep.state_dict(),
                "rng": self.agent.rng.bit_generator.state,
                "weights": self.agent.get_weights() if self.settings.lockstep and self.shared is None else None,
                "boards": self.boards.copy(), "masks": self.masks.copy(), "values": self.values.copy(),
                "st": {"version": self.version, "paused": self.paused, "env_steps": self.env_steps,
                       "episodes": self.episodes, "loads": self.loads, "waits": self.waits},
                "timing": dict(self.timing), "awaiting": self.awaiting}

    def _resume(self, state: dict[str, Any], weights: dict[str, np.ndarray], paused: bool) -> None:
        """Continue from :meth:`state` output, with the learner's ``weights`` where it holds none."""
        if state["worker"] != self.settings.worker:
            raise ValueError(f"actor state is actor {state['worker']}'s, not actor {self.settings.worker}'s")
        self.env.load_state_dict(state["env"])
        self.agent.rng.bit_generator.state = state["rng"]
        if self.shared is None:
            self.agent.set_weights(weights if state["weights"] is None else state["weights"], target=self.own_target)
        self.nstep.load_state_dict(state["nstep"])
        self.boards, self.masks = np.array(state["boards"], np.uint8), np.array(state["masks"], bool)
        self.values = np.array(state["values"], np.float32)
        if self.core is not None:
            self.core.boards, self.core.masks = self.boards, self.masks
        st = state["st"]
        self.env_steps, self.episodes = int(st["env_steps"]), int(st["episodes"])
        self.loads, self.waits = int(st["loads"]), int(st["waits"])
        if state["weights"] is not None:
            self.version = int(st["version"])
        self.timing.update({key: float(v) for key, v in state["timing"].items()})
        self.awaiting = bool(state["awaiting"])
        self.paused = paused  # the learner's throttle is what counts (an order in flight at the end was lost)


def _acting_core(settings: ActorSettings) -> Learner | None:
    """The compiled core an actor acts on, where it can (see :class:`Actor`): a learner that never learns,
    with this actor's seeds and a buffer of at least one message's transitions; None elsewhere."""
    c = settings.config
    greedy = c.epsilon_start == c.epsilon_end == 0.0 and not settings.epsilon and not settings.lockstep
    if not greedy or native_reason(c) is not None:
        return None
    return Learner(c.replace(buffer_size=max(settings.max_chunk, c.n_envs), learning_starts=0),
                   worker=settings.worker)
