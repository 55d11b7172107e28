"""An actor of the ``actors`` scheme, in a long-lived worker task: act, send transitions, follow orders.

The actor steps its boards with a recent copy of the learner's network and sends its
transitions in :class:`~dqnlab.parallel.messages.ActorData` messages; the learner
(:mod:`dqnlab.schemes.actors`, in the parent) sends it new weights, pause / go
(:class:`~dqnlab.parallel.messages.Throttle`), checkpoint requests and stop.
"""

from __future__ import annotations

import math
import os
import time
from typing import Any

import numpy as np
import torch

from ..agent.dqn import DQNAgent, epsilon_at, transform_rewards
from ..config import TrainConfig
from ..game import VecGame2048, legal_actions_batch
from ..replay import FIELDS, Minibatch, NStepReturns
from ..runtime.driver import RunClock
from ..runtime.learner import next_board_masks, worker_seeds
from .faults import check_fault
from .messages import ActorData, Checkpoint, NewWeights, Stop, Throttle, UnexpectedMessage
from .tasks import Channel

__all__ = ["actor_task", "FLUSH_S", "ORDERS_S"]

#: Seconds an actor gathers transitions before sending them (at most).
FLUSH_S = 0.05
#: Seconds between an actor's looks at its orders (weights, pause / go, stop).
ORDERS_S = 0.01


def actor_task(ch: Channel, *, config: TrainConfig, worker: int, workers: int, budget: int | None, clock: RunClock,
                weights: dict[str, np.ndarray], version: int, epsilon: float | None, lockstep: bool, max_chunk: int,
                parent_pid: int, fault: dict[str, Any] | None, checkpointing: bool = False, paused: bool = False,
                resume: dict[str, Any] | None = None) -> None:
    """One actor, in a worker task, for the whole run (see :mod:`dqnlab.schemes.actors`).

    Steps ``config.n_envs`` boards with ``weights``, the learner's after ``version`` updates (then those it sends,
    :class:`~dqnlab.parallel.messages.NewWeights`), at ``epsilon`` (None: the config's
    schedule, clocked by its own env steps times ``workers``), and sends
    :class:`~dqnlab.parallel.messages.ActorData` (transitions since the last one, at most
    about ``max_chunk``, the weights version they were acted with, finished games,
    counters and timing) every :data:`FLUSH_S`, and a last one (``done``). It pauses
    while the learner says so (:class:`~dqnlab.parallel.messages.Throttle`); with
    ``lockstep`` it waits for the learner's reply after every step. On an exception it
    first sends what it gathered, then re-raises.

    With ``checkpointing``, it answers the learner's checkpoint requests: it sends
    the transitions it holds, then its state, and waits for the checkpoint to be
    written (or a stop); its final state goes with the last message. ``resume`` is
    such a state to continue from; ``paused`` is the learner's throttle then. The state holds the actor's
    copy of the weights only in ``lockstep`` (where a resumed run is exact); an overlapped actor resumes with
    the learner's weights, as after a broadcast, so that no copy of a large table travels per actor.
    ``budget``: its env steps (None: none); ``clock``: the run's start and time budget;
    ``fault``: the test hook's (:func:`~dqnlab.parallel.faults.check_fault`).
    """
    if os.getpid() != parent_pid and torch.get_num_threads() != 1:
        torch.set_num_threads(1)  # a batched forward pass of n_envs boards: one thread is plenty
    clock0, deadline = clock.local()  # the learner's start, on this process's clock
    env_seed, _, agent_seed = worker_seeds(config.seed, worker)
    env = VecGame2048(config.n_envs, seed=env_seed, max_moves=config.max_moves,
                      invalid_move_reward=config.invalid_move_reward)
    agent = DQNAgent(config, seed=agent_seed)  # its rng explores; its weights come from the learner
    nstep = NStepReturns(config.n_step, config.gamma, config.n_envs)
    # Prioritized replay: the actor computes each transition's initial priority from its own TD error,
    # with its copy of the weights as online and target network (Horgan et al. 2018).
    own_target = config.prioritized
    st = {"version": version, "paused": False, "env_steps": 0, "episodes": 0, "loads": 0, "waits": 0}
    timing = {"acting": 0.0, "sending": 0.0, "receiving": 0.0, "waiting": 0.0, "weights": 0.0}
    awaiting = False  # lockstep: data sent, waiting for the learner's weights
    if resume is None:
        agent.set_weights(weights, target=own_target)
        boards = env.reset()  # as the serial learner does (the constructor's boards are not used)
        masks = legal_actions_batch(boards)
    else:
        if resume["worker"] != worker:
            raise ValueError(f"actor state is actor {resume['worker']}'s, not actor {worker}'s")
        env.load_state_dict(resume["env"])
        agent.rng.bit_generator.state = resume["rng"]
        agent.set_weights(weights if resume["weights"] is None else resume["weights"], target=own_target)
        if "nstep" in resume:  # (an actor state from before n-step returns has none: nothing pending)
            nstep.load_state_dict(resume["nstep"])
        boards, masks = np.array(resume["boards"], np.uint8), np.array(resume["masks"], bool)
        st.update({key: int(resume["st"][key]) for key in ("env_steps", "episodes", "loads", "waits")})
        if resume["weights"] is not None:
            st["version"] = int(resume["st"]["version"])
        timing.update({key: float(v) for key, v in resume["timing"].items()})
        awaiting = bool(resume["awaiting"])
        st["paused"] = paused  # the learner's throttle is what counts (an order in flight at the end was lost)
    chunk: list[dict[str, np.ndarray]] = []  # the n-step transitions of each step since the last message
    rows: list[dict[str, Any]] = []
    finished_in_chunk = 0
    last_flush = time.perf_counter()
    # Read orders before the first step: a resumed learner may have trained (and sent weights) while this started.
    last_orders = last_flush - ORDERS_S

    def state() -> dict[str, Any]:
        """This actor's checkpoint state (called between steps, with nothing left to send)."""
        return {"worker": worker, "env": env.state_dict(), "nstep": nstep.state_dict(), "rng": agent.rng.bit_generator.state,
                "weights": agent.get_weights() if lockstep else None, "boards": boards.copy(), "masks": masks.copy(), "st": dict(st),
                "timing": dict(timing), "awaiting": awaiting}

    if checkpointing:
        ch.state = state  # Channel.wait answers a request that comes while this actor waits

    def current_epsilon() -> float:
        if epsilon is not None:
            return epsilon
        return epsilon_at(config, st["env_steps"] * workers, st["version"])

    def flush(done: bool = False, state: Any = None) -> None:
        nonlocal chunk, rows, finished_in_chunk, last_flush
        transitions = None
        if chunk:
            transitions = {name: np.concatenate([c[name] for c in chunk]) for name in FIELDS}
            if own_target and len(transitions["actions"]):  # initial priorities: computing, so counted as acting
                t0 = time.perf_counter()
                transitions["td_errors"] = agent.td_errors(Minibatch(**transitions))
                timing["acting"] += time.perf_counter() - t0
        t0 = time.perf_counter()
        ch.send(ActorData(worker, done, transitions, st["version"], finished_in_chunk, rows, st["env_steps"],
                          st["episodes"], dict(timing), st["loads"], st["waits"], epsilon, current_epsilon(), state))
        chunk, rows, finished_in_chunk = [], [], 0
        last_flush = time.perf_counter()
        timing["sending"] += last_flush - t0

    def apply(orders: list[Any]) -> None:
        """Carry out ``orders`` in the order they came (a checkpoint sees the ones before it)."""
        newest = None

        def load() -> None:
            nonlocal newest
            if newest is not None:
                t0 = time.perf_counter()
                agent.set_weights(newest, target=own_target)
                st["loads"] += 1
                timing["weights"] += time.perf_counter() - t0
                newest = None

        for msg in orders:
            if isinstance(msg, NewWeights):
                if msg.weights is not None:
                    newest = msg.weights
                st["version"] = msg.version
            elif isinstance(msg, Throttle):
                st["paused"] = msg.paused
            elif isinstance(msg, Checkpoint):
                load()
                serve_checkpoint(msg.id)
            elif not isinstance(msg, Stop):
                raise UnexpectedMessage(f"actor {worker}", msg)
        load()

    def serve_checkpoint(n: int) -> None:
        """Send the transitions held, then answer checkpoint ``n`` (:meth:`Channel.serve_checkpoint`),
        carrying out weights / pause orders that come meanwhile."""
        if chunk or rows:
            flush()
        timing["waiting"] += ch.serve_checkpoint(n, other=lambda msg: apply([msg]))

    def take_orders() -> None:
        nonlocal last_orders
        t0 = time.perf_counter()
        orders = ch.orders()
        last_orders = time.perf_counter()
        timing["receiving"] += last_orders - t0
        if chunk and any(isinstance(m, NewWeights) for m in orders):
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
        if not isinstance(msg, Stop):
            awaiting = False
            apply([msg] + ch.orders())
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
            ended = out.terminated | out.truncated
            chunk.append(nstep.push(boards, actions, transform_rewards(config, out.rewards), out.next_boards,
                                    out.terminated, next_board_masks(out, ended), ended))
            boards, masks = out.boards, out.action_masks
            st["env_steps"] += n
            done = np.flatnonzero(ended)
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
        except Exception:  # noqa: BLE001, S110 - the queue is gone too: the original error matters more
            pass
        raise
    flush(done=True, state=state() if checkpointing else None)
