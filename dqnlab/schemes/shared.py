"""``shared``: K workers sharing ONE replay buffer and ONE model in shared memory.

Shared-memory parallel DQN: the workers split the acting and learning between them and
share the replay buffer and the current model, as Hogwild (below) and A3C (Mnih et al.
2016, arXiv:1602.01783) share one model. The trade-off is the lock: workers that hold it
while they update the shared model serialise the learning, so past some number of
workers more processes do not help (Amdahl's law); without it they race. Each of the K
workers steps its own ``n_envs`` boards, appends its transitions to the shared replay
buffer, and trains the shared model on minibatches sampled from the whole buffer:

* ``lock=True``: a lock around each update (read the weights, compute the gradient,
  apply the optimiser step) serialises the learning: one model trained one update at a
  time on everybody's data, as one serial learner would be; only acting runs in parallel, and
  the time workers spend waiting for the lock is reported (``extra["lock_wait_s"]``);
* ``lock=False``: Hogwild (Niu, Recht, Re and Wright, "Hogwild!: A Lock-Free Approach
  to Parallelizing Stochastic Gradient Descent", NeurIPS 2011): every worker reads and
  writes the parameters without any lock; updates may overwrite each other.

Everything lives in one ``multiprocessing.shared_memory`` block (see
:func:`shared_layout`): the online parameters as one flat float32 vector that each
worker's torch parameters view (``torch.from_numpy``), the target parameters (none
when ``target_update == 1``: the target is the online network), the optimiser's state (Adam's
moments and step counts, temporal coherence's sums; none with plain SGD, ``config.optimizer =
"sgd"``, as the n-tuple presets train), the replay arrays, and counters. With Adam, **its state is shared**: with the
lock this makes the K workers' updates exactly the updates of one Adam optimiser (the
model is trained "linearly", whoever computes the step); A3C
(Mnih et al. 2016) also found shared optimiser statistics more robust than
per-worker ones. Under Hogwild the moments are updated racily like the weights.

The replay buffer is split into K contiguous segments: worker k writes only into
segment k (its own FIFO, no write lock needed, at least one step of its boards long), and
every worker samples uniformly from all filled slots of all segments, so each trains on
everybody's experience -- or, with ``sample="own"``, from its own segment only: then the workers
share the model and nothing else, each learning from its own games as A3C's actor-learners
(Mnih et al. 2016) and the threads of the parallel n-tuple learners (Jaskowski 2018) do, and an
update finds its next boards' values where its own act left them instead of evaluating another
worker's boards again.
Transitions are n-step ones (``config.n_step``) as each worker makes them from its own
boards. With ``config.prioritized`` the block also holds one sum tree over the whole
capacity and the largest priority so far: every worker samples in proportion to the
priorities of all segments (proportional prioritized replay, Schaul et al. 2016), with
importance weights annealed by the env steps of all workers, and after each update
writes its TD errors back as priorities, outside the update lock and under a tree lock
of its own (see :class:`~dqnlab.parallel.shm.SharedPrioritizedReplay`).
The target network is copied from the online one every ``target_update`` updates of
the shared update counter. Epsilon and ``learning_starts`` count env steps of all
workers together (one learner), and a worker's updates also wait for its own share of
``learning_starts`` (``learning_starts / K`` of its own env steps): a worker that starts
late (a process still importing) would otherwise train at once on the opening moves of its
games started together, whose shared weight rows take one summed step per sample; on the
n-tuple presets, with temporal coherence, that blow-up can leave the shared tables stuck.

This scheme is single-machine by nature (shared memory). Its K workers are threads of this process over
the same block (joblib's ``threading`` backend) where the learner runs on the compiled core that trains the
n-tuple presets (:mod:`dqnlab.core`), which releases the GIL, as the C++ n-tuple learners' threads share one
table (Jaskowski 2018); for PyTorch's networks, or with ``threads=False``, processes (joblib's ``loky``)
attached to the block (:func:`~dqnlab.parallel.threads.as_threads`). On the compiled core the lock is a
ticket lock in the block (:func:`dqnlab.core.team.acquire`: one atomic add and a wait, inside the kernel);
on PyTorch's networks a ``flock`` on a file, which excludes threads too (each worker opens its own
descriptor). The block and the lock files are removed on every path out
(:class:`~dqnlab.parallel.shm.SharedBlock`, a context manager).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from ..agent.dqn import DQNAgent, epsilon_at, priority_beta_at
from ..config import TrainConfig
from ..core.loops import learning_ready
from ..core.team import TEAM_SLOTS, new_team
from ..options import SchemeOptions, option
from ..parallel.shm import OPTIMIZER_STATE, BlockHandle, SharedBlock, Spec, bind_agent, shared_replay
from ..parallel.tasks import Channel, TaskGroup, drive_tasks, split_budget
from ..parallel.threads import as_threads, threads_option, torch_threads
from ..parallel.workers import LearnerCoordinator, LearnerWorker
from ..replay import SumTree, column_arrays, update_priorities
from ..runtime.checkpoint import Checkpointer
from ..runtime.driver import RunClock, build_result, run_to_end
from ..runtime.learner import Learner, worker_seeds
from ..runtime.loop import RunLoop
from ..runtime.native import NativeLoop, native_reason
from ..runtime.results import RunResult

__all__ = ["Options", "run", "shared_layout", "SAMPLE_FROM"]

#: Which segments of the shared buffer a worker samples (:attr:`Options.sample`).
SAMPLE_FROM = ("all", "own")


@dataclass(frozen=True)
class Options(SchemeOptions):
    """Options of ``shared`` (keyword arguments of :func:`dqnlab.train`)."""

    lock: bool = option(True, "Serialise updates with a lock; False: Hogwild, no lock (see dqnlab.schemes.shared).",
                        tip="One update at a time, behind a lock; off: the workers update the shared weights at "
                            "once, without a lock (Hogwild).")
    threads: bool | None = threads_option()
    sample: str = option(
        "all", "Which transitions a worker's minibatches are drawn from: all (every worker's segment of the "
        "shared buffer) or own (its own segment only: the workers share the model alone, as A3C's and the "
        "parallel n-tuple learners' threads do). Own needs uniform replay.", choices=SAMPLE_FROM)


def run(config: TrainConfig, options: Options, *, workers: int = 1, progress: bool = True,
        callback: Callable[[RunResult], Any] | None = None,
        _checkpoint: Checkpointer | None = None) -> RunResult:
    """Train one model, in shared memory, with ``workers`` acting-and-learning processes.

    Parameters
    ----------
    config : TrainConfig
        ``total_env_steps`` is split evenly across workers; the shared buffer's capacity is
        ``max(buffer_size, K * n_envs)``, split into K write segments (each holds at least one
        step of its worker's ``n_envs`` boards, :func:`shared_layout`); ``learning_starts``,
        epsilon and the target schedule count all workers together (and a worker waits for its own
        ``learning_starts / workers`` env steps too).
    workers : int
        K processes (>= 1). K = 1 runs in this process.
    progress, callback
        As for :func:`dqnlab.train`.
    options : Options
        The lock, threads or processes, and which segments a worker samples (see :class:`Options`).

    Returns
    -------
    RunResult
        ``weights``: the shared model at the end. ``time_split`` summed over workers:
        ``acting``, ``learning`` (update compute, lock wait excluded),
        ``communication`` (lock wait and progress messages). ``extra``:
        ``lock_wait_s`` (total), ``per_worker`` (env steps, updates, time split, lock
        wait), ``updates_counter`` (the shared counter: equals the workers' updates
        summed under the lock; Hogwild may lose increments, see ``lost_increments``),
        ``target_syncs`` (0 with ``target_update == 1``: the target is the online
        network), ``optimizer_state`` (``"shared"``: Adam's moments live in the block
        like the weights), ``lock``, ``replay``: the shared buffer's
        :meth:`~dqnlab.ReplayBuffer.statistics` (with prioritized replay the priorities',
        :meth:`~dqnlab.replay.PrioritizedReplayBuffer.statistics`): capacity, size and
        priorities of the whole buffer, the workers' counters (``added``,
        ``priority_updates``, ``given_priorities``, the importance weights' mean) summed, and
        ``beta`` the largest worker's; each ``per_worker`` row has its own counters as ``replay``.

    Raises
    ------
    ValueError
        If ``total_env_steps`` < ``workers``, ``options.lock`` or ``config.prioritized`` on Windows, or
        ``options.sample == "own"`` with ``config.prioritized`` or with segments smaller than ``batch_size``.
    WorkerError
        If a worker fails; ``err.partial`` holds the episodes and model so far.

    Notes
    -----
    A time budget (``config.max_seconds``) counts from this call, so it includes
    starting the worker processes: a few seconds the first time in a Python session
    (each imports torch), nothing later (joblib keeps its pool).

    Checkpoints (``dqnlab.train(..., run_dir=...)``): the parent asks every worker
    for its private state (games, random streams, counters, episodes); each answers
    between two steps and waits, and with all of them waiting the parent copies the
    whole block (model, target, Adam, replay, counters). A resumed run restores all
    of it exactly; what it does next is as timing-dependent as any run of this
    scheme with K > 1 (the workers' updates interleave differently). The priority tree is
    in the block; each worker's replay counters are in its state.
    """
    if config.total_env_steps is not None and config.total_env_steps < workers:
        raise ValueError(f"total_env_steps ({config.total_env_steps}) must be at least workers ({workers})")
    if options.lock and sys.platform == "win32":
        raise ValueError("shared with lock=True needs a POSIX system (fcntl); use lock=False on Windows")
    if config.prioritized and sys.platform == "win32":
        raise ValueError("shared with prioritized replay needs a POSIX system (fcntl: the priority tree's lock)")
    if config.prioritized and options.sample == "own":
        raise ValueError("sample='own' needs uniform replay (prioritized=False): the priority tree spans every "
                         "worker's segment")
    segment = min(split_budget(_replay_capacity(config, workers), workers))  # (the smallest)
    if options.sample == "own" and segment < config.batch_size:
        raise ValueError(f"sample='own' draws each minibatch from one worker's replay segment, and with buffer_size "
                         f"{config.buffer_size} and n_envs {config.n_envs} the smallest of {workers} segments holds "
                         f"{segment} transitions, fewer than batch_size ({config.batch_size}): no update would ever "
                         f"be ready; set buffer_size to at least {workers * config.batch_size}")
    init = DQNAgent(config, seed=worker_seeds(config.seed, 0)[2])
    resumed = _checkpoint.take_state() if _checkpoint is not None else None
    model = init.online.state_dict()
    layout = shared_layout(config, workers, sum(v.numel() for v in model.values()), len(model))
    # (threads: the block in this process's memory, on huge pages where the OS offers them; the compiled core
    # locks its updates with the block's team array, PyTorch's networks with a lock file)
    file_lock = options.lock and native_reason(config) is not None
    options = replace(options, threads=as_threads(options.threads, config))  # (the run records which)
    with SharedBlock.create(layout, model, config, workers, lock=file_lock, private=options.threads) as block:
        new_team(1, locked=options.lock, out=block.arrays["team"])
        parent = _SharedCoordinator(config, options, workers, block)
        if resumed is None:  # the model every worker trains starts as learner 0's would
            block.set_model(init.get_weights())
        else:  # the block as it was, and the parent's view of each worker
            block.load(resumed.pop("arrays"))
            parent.restore(resumed)

        def result(status: str | None = None) -> RunResult:
            return parent.result(loop, status)

        loop = RunLoop(config, progress=progress, callback=callback, snapshot=result, checkpointer=_checkpoint)
        budgets = split_budget(config.total_env_steps, workers)
        tasks = [dict(block=block.handle, config=config, worker=k, workers=workers, own=options.sample == "own",
                      budget=budgets[k], clock=RunClock.of(loop), report_every_s=loop.report_every_s / 2,
                      checkpointing=_checkpoint is not None,
                      resume=None if resumed is None else resumed["workers"][k]) for k in range(workers)]

        def workers_act_and_learn() -> None:
            with TaskGroup(_shared_task, tasks, backend="threading" if options.threads else "loky") as group:
                drive_tasks(group, loop, parent, checkpoints=_checkpoint is not None)

        return run_to_end("shared", loop, workers_act_and_learn, result, final_state=parent.final_checkpoint)


# ----------------------------------------------------------------------------- the block's layout
def _replay_capacity(config: TrainConfig, workers: int) -> int:
    """``C``, the shared buffer's capacity: ``max(buffer_size, K * n_envs)`` (see :func:`shared_layout`)."""
    return max(config.buffer_size, workers * config.n_envs)


def shared_layout(config: TrainConfig, workers: int, n_params: int, n_tensors: int) -> Spec:
    """The arrays of a ``shared`` run: model, optimiser, counters and replay.

    ``theta``, ``target``, ``optimizer_0``, ``optimizer_1``: float32 flat
    parameter vectors (online and target ``(P,)``, the optimiser's state: Adam's moments ``(P,)``
    each, or temporal coherence's sums ``(2 P,)`` in ``optimizer_0``,
    :data:`~dqnlab.parallel.shm.OPTIMIZER_STATE`; ``target`` is empty when the
    target is the online network, ``target_update == 1``, and the state is empty
    with plain SGD); ``optimizer_step``: one float32 step count per parameter tensor;
    ``updates_total``, ``target_syncs``: ``(1,)`` int64
    shared counters; ``team``: the compiled core's update lock (a :mod:`dqnlab.core.team` array); ``env_steps``, ``updates``: ``(K,)`` int64, each worker writes its
    own; replay arrays of capacity ``C = max(buffer_size, K * n_envs)`` as in :class:`~dqnlab.ReplayBuffer`
    (:func:`dqnlab.replay.column_arrays`, ``steps`` among them) with ``seg_size``/``seg_pos``
    ``(K,)`` int64 per segment; with ``config.prioritized`` also ``priority_tree``, the
    ``(2 P,)`` float64 array of a :class:`~dqnlab.replay.SumTree` over the C slots (``P`` the
    power of two >= C), and ``max_priority``, ``(1,)`` float64. Each worker writes its own segment of
    ``C / K`` slots, and a step writes ``n_envs`` transitions at once: a segment smaller than that would
    overwrite part of each step before any update sampled it (the n-tuple presets' replay is one step,
    ``buffer_size == n_envs``), so C is at least ``K * n_envs``.
    """
    c, k = _replay_capacity(config, workers), workers
    n_target = 0 if config.target_update == 1 else n_params
    state = dict(enumerate(width * n_params for _, width in OPTIMIZER_STATE.get(config.optimizer, ())))
    return {
        "theta": ((n_params,), "float32"), "target": ((n_target,), "float32"),
        **{f"optimizer_{j}": ((state.get(j, 0),), "float32") for j in range(2)},
        "optimizer_step": ((n_tensors,), "float32"),
        "updates_total": ((1,), "int64"), "target_syncs": ((1,), "int64"), "team": ((TEAM_SLOTS,), "int64"),
        "env_steps": ((k,), "int64"), "updates": ((k,), "int64"),
        **column_arrays(c), "seg_size": ((k,), "int64"), "seg_pos": ((k,), "int64"),
        **({"priority_tree": ((SumTree.size_for(c),), "float64"), "max_priority": ((1,), "float64")}
           if config.prioritized else {}),
    }


# ----------------------------------------------------------------------------- a worker
class _SharedLearner(Learner):
    """A :class:`Learner` whose buffer and model live in the run's
    :class:`~dqnlab.parallel.shm.SharedBlock`, under its update lock (None: Hogwild) and, with
    prioritized replay, its tree lock."""

    def __init__(self, config: TrainConfig, worker: int, workers: int, block: SharedBlock, own: bool = False):
        super().__init__(config, worker=worker)
        arrays = block.arrays
        self.buffer = shared_replay(arrays, worker, workers, config, seed=worker_seeds(config.seed, worker)[1],
                                    tree_lock=block.tree_lock, own=own)
        bind_agent(self.agent, arrays)
        self.arrays, self.lock, self.workers = arrays, block.lock, workers
        self.lock_wait = 0.0
        if self.native is not None:  # the compiled loop on the block: all workers' steps, updates and syncs
            self.native = NativeLoop(self, steps_of_all=arrays["env_steps"],
                                     totals=(arrays["updates_total"], arrays["target_syncs"]), me=worker,
                                     own_segment=own, team=arrays["team"])

    def state_dict(self, copy_agent: bool = True) -> dict[str, Any]:
        """This worker's private state (the model, Adam and replay are in the block)."""
        return {**super().state_dict(copy_agent), "lock_wait": self.lock_wait}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output."""
        super().load_state_dict(state)
        self.lock_wait = float(state["lock_wait"])

    def _agent_state(self, copy_agent: bool) -> dict[str, Any]:  # (the model is the block's: never in the state)
        return {"rng": self.agent.rng.bit_generator.state, "updates": self.agent.updates}

    def _load_agent_state(self, state: dict[str, Any]) -> None:
        self.agent.rng.bit_generator.state = state["rng"]
        self.agent.updates = int(state["updates"])

    def _global_env_steps(self) -> int:
        steps = self.arrays["env_steps"]
        return int(steps.sum()) - int(steps[self.worker]) + self.env_steps

    @property
    def epsilon(self) -> float:
        """Epsilon from the env steps and updates of all workers together."""
        return epsilon_at(self.config, self._global_env_steps(), int(self.arrays["updates_total"][0]))

    @property
    def priority_beta(self) -> float:
        """Importance-sampling exponent from the env steps of all workers together (and the run's seconds)."""
        return priority_beta_at(self.config, self._global_env_steps(), time.perf_counter() - self.clock0)

    def learning_ready(self) -> bool:
        """``learning_starts`` env steps of all workers together, and this worker's own share of them
        (:func:`dqnlab.core.loops.learning_ready`), and a minibatch in the buffer."""
        c = self.config
        return (learning_ready(c.learning_starts, self._global_env_steps(), self.env_steps, self.workers)
                and len(self.buffer) >= c.batch_size)

    def advance(self, env_steps: int | None = None, deadline: float | None = None,
                update_limit: int | None = None) -> int:
        """:meth:`Learner.advance`: on the compiled core, a whole chunk on the block (each update under the
        block's team lock, or none); on PyTorch's networks one step, whose updates each take the file lock."""
        if self.native is not None:
            waited = self.native.waited
            n = super().advance(env_steps, deadline, update_limit)
            self.arrays["updates"][self.worker] = self.agent.updates
            self.lock_wait += self.native.waited - waited
            return n
        n = self.act_step()
        self.learn()
        return n

    def act_step(self) -> int:
        n = super().act_step()
        self.arrays["env_steps"][self.worker] = self.env_steps
        return n

    def learn(self, max_updates: int | None = None) -> int:
        """Do the owed updates on the shared model (under the lock if there is one).

        With prioritized replay, the buffer samples at :attr:`priority_beta` and each update's TD
        errors become the priorities of its slots after the update lock is released (the tree has a
        lock of its own).
        """
        n = self.owed_updates() if max_updates is None else min(max_updates, self.owed_updates())
        if n <= 0:
            return 0
        t0 = time.perf_counter()
        wait = 0.0
        c, agent, a = self.config, self.agent, self.arrays
        if c.prioritized:
            self.buffer.beta = self.priority_beta
        for _ in range(n):
            batch = None if self.native is not None else self.buffer.sample(c.batch_size)
            if self.lock is not None:
                tw = time.perf_counter()
                self.lock.acquire()
                wait += time.perf_counter() - tw
            try:
                if batch is None:  # the compiled update, which counts and syncs in the block itself
                    self.native.learn(1)
                else:
                    self.last_loss = agent.gradient_step(batch, update=int(a["updates_total"][0]) + 1)  # on the shared model
                    agent.updates += 1
                    a["updates_total"][0] += 1
                    if c.target_update > 1 and a["updates_total"][0] // c.target_update > a["target_syncs"][0]:
                        a["target_syncs"][0] = a["updates_total"][0] // c.target_update
                        a["target"][:] = a["theta"]  # (target_update 1: the target is the online network)
                a["updates"][self.worker] = agent.updates
            finally:
                if self.lock is not None:
                    self.lock.release()
            if batch is not None:
                update_priorities(self.buffer, batch, agent.td_errors)  # (this worker's own last gradient's)
        self.spend_updates(n)
        self.lock_wait += wait
        self.timing["learning"] += time.perf_counter() - t0 - wait
        return n


class _SharedCoordinator(LearnerCoordinator):
    """What the parent knows of the workers, and the run's result; a checkpoint also copies the whole block."""

    def __init__(self, config: TrainConfig, options: Options, workers: int, block: SharedBlock):
        super().__init__(workers, config.batch_size, {"lock_wait_s": 0.0, "replay": None})
        self.config, self.options, self.block = config, options, block

    def absorb_extra(self, k: int, state: dict[str, Any]) -> dict[str, Any]:
        buffer = state["learner"]["buffer"]
        return {"lock_wait_s": float(state["learner"]["lock_wait"]),
                "replay": {name: value for name, value in buffer.items() if name != "rng"}}

    def own_state(self) -> dict[str, Any]:
        # every worker waits (or has ended) while the checkpoint is written: the block is still
        return {"arrays": self.block.arrays.views()}

    def result(self, loop: RunLoop, status: str | None = None) -> RunResult:
        """The run's result so far (see :func:`run`), from the workers' reports and the block."""
        progress, arrays = self.progress(), self.block.arrays
        counter = int(arrays["updates_total"][0])
        per_worker = [{**w, "lock_wait_s": latest["lock_wait_s"], "replay": latest["replay"]}
                      for w, latest in zip(self.per_worker(), self.latest)]
        model = self.block.model(copy=not loop.closed)  # (closed: nobody writes the block any more)
        return build_result("shared", self.config, self.workers, loop, progress, model, status,
                            self.options.to_dict(),
                            {"per_worker": per_worker, "lock": self.options.lock,
                             "lock_wait_s": sum(w["lock_wait_s"] for w in self.latest),
                             "updates_counter": counter, "lost_increments": progress.updates - counter,
                             "target_syncs": int(arrays["target_syncs"][0]), "optimizer_state": "shared",
                             "replay": self.block.replay_statistics([w["replay"] for w in self.latest]),
                             "torch_threads_per_worker": torch_threads(self.workers)})


class _SharedWorker(LearnerWorker):
    """A worker task that reports its lock wait and replay counters."""

    def report_extra(self) -> dict[str, Any]:
        return {"lock_wait_s": self.learner.lock_wait, "replay": self.learner.buffer.counters()}


def _shared_task(ch: Channel, *, block: BlockHandle, config: TrainConfig, worker: int, workers: int, own: bool,
                 **kw: Any) -> None:
    """One worker of the shared scheme: act on its boards, learn on the shared model.

    ``block``: the run's :attr:`SharedBlock.handle`; ``own``: sample its own segment only; ``kw``:
    :class:`~dqnlab.parallel.workers.LearnerWorker`'s (budget, clock, reports, checkpointing, resume).
    """
    # (the learner and its views into the block are gone with the task object, before the block closes)
    with SharedBlock.attach(block) as shared:
        _SharedWorker(ch, _SharedLearner(config, worker, workers, shared, own), **kw).run()
