"""``shared``: worker processes sharing ONE replay buffer and ONE model in shared memory.

The user's second idea: "spread out the work ... sharing the replay buffer and the
current model", with the worry that "they would need to hold locks with each other
when they were accessing their shared model, so at some point more processes
wouldn't help". Each of the K workers steps its own ``n_envs`` boards, appends its
transitions to the shared replay buffer, and trains the shared model on minibatches
sampled from the whole buffer:

* ``lock=True``: a lock around each update (read the weights, compute the gradient,
  apply the optimiser step) serialises the learning: one model trained one update at a
  time on everybody's data, as the user wanted; only acting runs in parallel, and
  the time workers spend waiting for the lock is reported (``extra["lock_wait_s"]``);
* ``lock=False``: Hogwild (Niu, Recht, Re and Wright, "Hogwild!: A Lock-Free Approach
  to Parallelizing Stochastic Gradient Descent", NeurIPS 2011): every worker reads and
  writes the parameters without any lock; updates may overwrite each other.

Everything lives in one ``multiprocessing.shared_memory`` block (see
:func:`shared_layout`): the online parameters as one flat float32 vector that each
worker's torch parameters view (``torch.from_numpy``), the target parameters (none
when ``target_update == 1``: the target is the online network), the Adam moments and
step counts (none with plain SGD, ``config.optimizer = "sgd"``, as the n-tuple presets
train), the replay arrays, and counters. With Adam, **its state is shared**: with the
lock this makes the K workers' updates exactly the updates of one Adam optimiser (the
model is trained "linearly", whoever computes the step); A3C
(Mnih et al. 2016) also found shared optimiser statistics more robust than
per-worker ones. Under Hogwild the moments are updated racily like the weights.

The replay buffer is split into K contiguous segments: worker k writes only into
segment k (its own FIFO, no write lock needed), and every worker samples uniformly
from all filled slots of all segments, so each trains on everybody's experience.
The target network is copied from the online one every ``target_update`` updates of
the shared update counter. Epsilon and ``learning_starts`` count env steps of all
workers together (one learner).

This scheme is single-machine by nature (shared memory): it always runs on joblib's
``loky`` backend. The block and the lock file are removed on every path out.
"""

from __future__ import annotations

import gc
import math
import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing import resource_tracker, shared_memory
from typing import Any

import numpy as np
import pandas as pd
import torch

from ..agent.dqn import DQNAgent, epsilon_at
from ..runtime.checkpoint import Checkpointer
from ..config import TrainConfig
from ..options import SchemeOptions, option
from ..replay import Minibatch
from ..runtime.results import RunResult
from .base import DIAGNOSTICS, Learner, Progress, RunLoop, episodes_frame, worker_seeds, workers_progress
from .parallel import (
    Channel,
    TaskGroup,
    check_fault,
    drive_tasks,
    split_budget,
    torch_threads,
)

__all__ = ["Options", "run", "SharedArrays", "SharedReplay", "FileLock", "shared_layout", "bind_agent"]


@dataclass(frozen=True)
class Options(SchemeOptions):
    """Options of ``shared`` (keyword arguments of :func:`dqnlab.train`)."""

    lock: bool = option(True, "Serialise updates with a lock; False: Hogwild, no lock (see dqnlab.schemes.shared).")

Spec = dict[str, tuple[tuple[int, ...], str]]


class SharedArrays:
    """Named NumPy arrays in one ``multiprocessing.shared_memory`` block.

    Create in the parent with :meth:`create`, pass :attr:`handle` (picklable) to the
    workers, and :meth:`attach` there. The creator must :meth:`unlink` it (once);
    everybody :meth:`close` s it. Arrays start zeroed and are 64-byte aligned.
    """

    def __init__(self, shm: shared_memory.SharedMemory, spec: Spec, owner: bool):
        self.shm, self.spec, self.owner = shm, spec, owner
        self.arrays: dict[str, np.ndarray] = {}
        offset = 0
        for name, (shape, dtype) in spec.items():
            n = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
            self.arrays[name] = np.ndarray(shape, dtype=dtype, buffer=shm.buf, offset=offset)
            offset += -(-n // 64) * 64

    @staticmethod
    def nbytes(spec: Spec) -> int:
        """Bytes of a block holding ``spec``."""
        return max(64, sum(-(-int(np.prod(s, dtype=np.int64)) * np.dtype(d).itemsize // 64) * 64
                           for s, d in spec.values()))

    @classmethod
    def create(cls, spec: Spec) -> "SharedArrays":
        shm = shared_memory.SharedMemory(create=True, size=cls.nbytes(spec))  # zero-filled by the OS
        try:
            return cls(shm, spec, owner=True)
        except BaseException:
            shm.close()
            shm.unlink()
            raise

    @property
    def handle(self) -> tuple[str, Spec]:
        return self.shm.name, self.spec

    @classmethod
    def attach(cls, handle: tuple[str, Spec]) -> "SharedArrays":
        """Open a block created elsewhere, without registering it with this process's
        resource tracker (which would otherwise unlink it when the worker exits)."""
        name, spec = handle
        if sys.version_info >= (3, 13):
            shm = shared_memory.SharedMemory(name=name, track=False)  # type: ignore[call-arg]
        else:
            register = resource_tracker.register
            resource_tracker.register = lambda *a, **k: None  # type: ignore[assignment]
            try:
                shm = shared_memory.SharedMemory(name=name)
            finally:
                resource_tracker.register = register  # type: ignore[assignment]
        return cls(shm, spec, owner=False)

    def __getitem__(self, name: str) -> np.ndarray:
        return self.arrays[name]

    def close(self) -> None:
        """Drop this process's views and mapping (views handed out must be gone)."""
        self.arrays = {}
        gc.collect()
        try:
            self.shm.close()
        except BufferError:  # a view is still referenced somewhere; the mapping goes with the process
            pass

    def unlink(self) -> None:
        """Remove the block from the system (the creator, once)."""
        try:
            self.shm.unlink()
        except FileNotFoundError:
            pass


def shared_layout(config: TrainConfig, workers: int, n_params: int, n_tensors: int) -> Spec:
    """The arrays of a ``shared`` run: model, optimiser, counters and replay.

    ``theta``, ``target``, ``exp_avg``, ``exp_avg_sq``: ``(P,)`` float32 flat
    parameter vectors (online, target, Adam moments; ``target`` is empty when the
    target is the online network, ``target_update == 1``, and the moments are empty
    with plain SGD); ``adam_step``: one float32 step count per parameter tensor;
    ``updates_total``, ``target_syncs``: ``(1,)`` int64
    shared counters; ``env_steps``, ``updates``: ``(K,)`` int64, each worker writes its
    own; replay arrays of capacity ``buffer_size`` as in :class:`~dqnlab.ReplayBuffer`
    with ``seg_size``/``seg_pos`` ``(K,)`` int64 per segment.
    """
    c, k = config.buffer_size, workers
    n_target = 0 if config.target_update == 1 else n_params
    n_moments = n_params if config.optimizer == "adam" else 0
    return {
        "theta": ((n_params,), "float32"), "target": ((n_target,), "float32"),
        "exp_avg": ((n_moments,), "float32"), "exp_avg_sq": ((n_moments,), "float32"),
        "adam_step": ((n_tensors,), "float32"),
        "updates_total": ((1,), "int64"), "target_syncs": ((1,), "int64"),
        "env_steps": ((k,), "int64"), "updates": ((k,), "int64"),
        "boards": ((c, 4, 4), "uint8"), "actions": ((c,), "uint8"), "rewards": ((c,), "float32"),
        "next_boards": ((c, 4, 4), "uint8"), "dones": ((c,), "bool"), "next_masks": ((c, 4), "bool"),
        "seg_size": ((k,), "int64"), "seg_pos": ((k,), "int64"),
    }


def bind_agent(agent: DQNAgent, arrays: SharedArrays) -> None:
    """Make ``agent``'s online and target parameters, and its Adam state, views of ``arrays``.

    After this, ``agent.step_optimizer()`` updates the shared ``theta`` (and Adam
    moments) in place, and ``agent.sync_target()`` writes the shared ``target``.
    """
    off = 0
    separate, adam = agent.target is not agent.online, agent.config.optimizer == "adam"
    for i, (p, pt) in enumerate(zip(agent.online.parameters(), agent.target.parameters())):
        n = p.numel()
        p.data = torch.from_numpy(arrays["theta"][off:off + n]).view_as(p)
        if separate:
            pt.data = torch.from_numpy(arrays["target"][off:off + n]).view_as(pt)
        if adam:
            agent.optimizer.state[p] = {
                "step": torch.from_numpy(arrays["adam_step"][i:i + 1]).view(()),
                "exp_avg": torch.from_numpy(arrays["exp_avg"][off:off + n]).view_as(p),
                "exp_avg_sq": torch.from_numpy(arrays["exp_avg_sq"][off:off + n]).view_as(p),
            }
        off += n


class SharedReplay:
    """Worker ``k``'s view of the shared replay buffer (the API of :class:`~dqnlab.ReplayBuffer`).

    Capacity ``C`` is split into K contiguous segments; :meth:`add_batch` writes into
    this worker's segment only (a FIFO ring), publishing its new size after the data;
    :meth:`sample` draws uniformly, with replacement, from the filled slots of all
    segments. Reads take no lock: a slot being overwritten may be read half-new.

    Parameters
    ----------
    arrays : SharedArrays
        Holding the replay arrays of :func:`shared_layout`.
    worker, workers : int
        This worker's index and K.
    seed : int
        Seeds this worker's sampling.
    """

    FIELDS = ("boards", "actions", "rewards", "next_boards", "dones", "next_masks")

    def __init__(self, arrays: SharedArrays, worker: int, workers: int, seed: int | None = None):
        self.a = arrays
        self.worker = worker
        caps = split_budget(len(arrays["actions"]), workers)
        self.los = np.cumsum([0] + caps[:-1]).astype(np.int64)
        self.cap = int(caps[worker])
        self.lo = int(self.los[worker])
        self.rng = np.random.default_rng(seed)
        self.added = 0

    def __len__(self) -> int:
        return int(self.a["seg_size"].sum())

    def add_batch(self, boards: np.ndarray, actions: np.ndarray, rewards: np.ndarray, next_boards: np.ndarray,
                  dones: np.ndarray, next_masks: np.ndarray) -> None:
        """Append ``N`` transitions to this worker's segment (shapes as :class:`~dqnlab.Minibatch`)."""
        batch = (boards, actions, rewards, next_boards, dones, next_masks)
        n = len(actions)
        if n > self.cap:
            batch = tuple(v[-self.cap:] for v in batch)
            n = self.cap
        pos, size = int(self.a["seg_pos"][self.worker]), int(self.a["seg_size"][self.worker])
        idx = self.lo + (pos + np.arange(n)) % self.cap
        for name, value in zip(self.FIELDS, batch):
            self.a[name][idx] = value
        self.a["seg_pos"][self.worker] = (pos + n) % self.cap
        self.a["seg_size"][self.worker] = min(size + n, self.cap)  # publish after the data is written
        self.added += n

    def sample(self, batch_size: int) -> Minibatch:
        """``batch_size`` transitions uniformly from all segments' filled slots.

        Raises
        ------
        ValueError
            If the buffer is empty.
        """
        sizes = self.a["seg_size"].copy()
        total = int(sizes.sum())
        if total == 0:
            raise ValueError("cannot sample from an empty replay buffer")
        i = self.rng.integers(0, total, size=batch_size)
        ends = np.cumsum(sizes)
        seg = np.searchsorted(ends, i, side="right")
        idx = self.los[seg] + i - (ends[seg] - sizes[seg])
        a = self.a
        return Minibatch(a["boards"][idx], a["actions"][idx].astype(np.int64), a["rewards"][idx],
                         a["next_boards"][idx], a["dones"][idx], a["next_masks"][idx])

    def state_dict(self) -> dict[str, Any]:
        """This worker's own part (its sampling stream and count); the contents are in the block."""
        return {"rng": self.rng.bit_generator.state, "added": self.added}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rng.bit_generator.state = state["rng"]
        self.added = int(state["added"])


class FileLock:
    """An inter-process lock: ``fcntl.flock`` on a file (POSIX).

    Picklable (only the path travels; each process opens its own descriptor). The
    kernel releases it if the holder dies, so a crashed worker cannot deadlock the
    others.
    """

    def __init__(self, path: str):
        self.path = path
        self._fd: int | None = None

    def __getstate__(self) -> dict:
        return {"path": self.path, "_fd": None}

    def acquire(self) -> None:
        import fcntl

        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDWR)
        fcntl.flock(self._fd, fcntl.LOCK_EX)

    def release(self) -> None:
        import fcntl

        fcntl.flock(self._fd, fcntl.LOCK_UN)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class _SharedLearner(Learner):
    """A :class:`Learner` whose buffer and model live in shared memory."""

    def __init__(self, config: TrainConfig, worker: int, workers: int, arrays: SharedArrays,
                 lock: FileLock | None, clock0: float):
        super().__init__(config, worker=worker, clock0=clock0)
        self.buffer = SharedReplay(arrays, worker, workers, seed=worker_seeds(config.seed, worker)[1])
        bind_agent(self.agent, arrays)
        self.arrays, self.lock = arrays, lock
        self.lock_wait = 0.0

    def state_dict(self) -> dict[str, Any]:
        """This worker's private state (the model, Adam and replay are in the block)."""
        return {**super().state_dict(), "lock_wait": self.lock_wait}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.lock_wait = float(state["lock_wait"])

    def _agent_state(self) -> dict[str, Any]:
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

    def learning_ready(self) -> bool:
        return self._global_env_steps() >= self.config.learning_starts and len(self.buffer) >= self.config.batch_size

    def act_step(self) -> int:
        n = super().act_step()
        self.arrays["env_steps"][self.worker] = self.env_steps
        return n

    def learn(self, max_updates: int | None = None) -> int:
        """Do the owed updates on the shared model (under the lock if there is one)."""
        n = self.owed_updates() if max_updates is None else min(max_updates, self.owed_updates())
        if n <= 0:
            return 0
        t0 = time.perf_counter()
        wait = 0.0
        c, agent, a = self.config, self.agent, self.arrays
        for _ in range(n):
            batch = self.buffer.sample(c.batch_size)
            if self.lock is not None:
                tw = time.perf_counter()
                self.lock.acquire()
                wait += time.perf_counter() - tw
            try:
                value = agent.compute_gradients(batch)
                if not math.isfinite(value):
                    raise FloatingPointError(f"non-finite TD loss ({value}) at shared update "
                                             f"{int(a['updates_total'][0]) + 1} (worker {self.worker})")
                agent.step_optimizer()
                agent.updates += 1
                a["updates_total"][0] += 1
                a["updates"][self.worker] = agent.updates
                if c.target_update > 1 and a["updates_total"][0] // c.target_update > a["target_syncs"][0]:
                    a["target_syncs"][0] = a["updates_total"][0] // c.target_update
                    a["target"][:] = a["theta"]  # (target_update 1: the target is the online network)
            finally:
                if self.lock is not None:
                    self.lock.release()
            self.last_loss = value
        self.spend_updates(n)
        self.lock_wait += wait
        self.timing["learning"] += time.perf_counter() - t0 - wait
        return n


def run(config: TrainConfig, options: Options, *, workers: int = 1, progress: bool = True,
        callback: Callable[[RunResult], Any] | None = None,
        _fault: dict[str, Any] | None = None, _checkpoint: Checkpointer | None = None) -> RunResult:
    """Train one model, in shared memory, with ``workers`` acting-and-learning processes.

    Parameters
    ----------
    config : TrainConfig
        ``total_env_steps`` is split evenly across workers; ``buffer_size`` is the
        shared buffer's capacity (split into K write segments); ``learning_starts``,
        epsilon and the target schedule count all workers together.
    workers : int
        K processes (>= 1; ``buffer_size`` >= K). K = 1 runs in this process.
    progress : bool
        Show a progress bar.
    callback : callable, optional
        ``callback(snapshot: RunResult)`` about once a second; return True to stop.
    options : Options
        The lock (see :class:`Options`).

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
        like the weights), ``lock``.

    Raises
    ------
    ValueError
        If ``buffer_size`` < ``workers``, or ``options.lock`` on Windows.
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
    scheme with K > 1 (the workers' updates interleave differently).
    """
    if config.buffer_size < workers:
        raise ValueError(f"shared needs buffer_size >= workers (one replay segment each), "
                         f"got {config.buffer_size} and {workers}")
    if config.total_env_steps is not None and config.total_env_steps < workers:
        raise ValueError(f"total_env_steps ({config.total_env_steps}) must be at least workers ({workers})")
    if options.lock and sys.platform == "win32":
        raise ValueError("shared with lock=True needs a POSIX system (fcntl); use lock=False on Windows")
    init = DQNAgent(config, seed=worker_seeds(config.seed, 0)[2])
    shapes = [(name, v.shape) for name, v in init.online.state_dict().items()]
    n_params = sum(int(np.prod(s)) for _, s in shapes)
    budgets = split_budget(config.total_env_steps, workers)
    rows: list[dict[str, Any]] = []
    latest = [{"env_steps": 0, "updates": 0, "timing": {"acting": 0.0, "learning": 0.0}, "comm_s": 0.0,
               "lock_wait_s": 0.0, "diagnostics": dict.fromkeys(DIAGNOSTICS, math.nan)} for _ in range(workers)]
    final: dict[str, Any] = {}
    final_states: dict[int, Any] = {}  # workers' states sent with their "done" (checkpoints)
    arrays = SharedArrays.create(shared_layout(config, workers, n_params, len(shapes)))
    lock_path = None
    resumed = _checkpoint.state if _checkpoint is not None else None
    loop: RunLoop
    group: TaskGroup | None = None

    def weights() -> dict[str, np.ndarray]:
        if "weights" in final:
            return final["weights"]
        flat, out, off = arrays["theta"], {}, 0
        for name, shape in shapes:
            n = int(np.prod(shape))
            out[name] = flat[off:off + n].reshape(shape).copy()
            off += n
        return out

    def progress_report() -> Progress:
        return workers_progress(latest, rows, config.batch_size)

    def result(status: str | None = None) -> RunResult:
        per_worker = [{"worker": k, "env_steps": w["env_steps"], "updates": w["updates"],
                       "episodes": sum(1 for r in rows if r["worker"] == k), "acting_s": w["timing"]["acting"],
                       "learning_s": w["timing"]["learning"], "communication_s": w["comm_s"] + w["lock_wait_s"],
                       "lock_wait_s": w["lock_wait_s"], "pid": None if group is None else group.pids.get(k)}
                      for k, w in enumerate(latest)]
        progress = progress_report()
        env_steps, updates = progress.env_steps, progress.updates
        counter = final.get("counter", int(arrays["updates_total"][0]) if arrays.arrays else updates)
        syncs = final.get("target_syncs", int(arrays["target_syncs"][0]) if arrays.arrays else 0)
        return RunResult(
            scheme="shared", config=config, workers=workers, episodes=episodes_frame(rows),
            env_steps=env_steps, updates=updates, wall_time_s=loop.elapsed, time_split=dict(progress.time_split),
            weights=weights(), history=pd.DataFrame(loop.history), status=status or loop.status,
            options=options.to_dict(),
            extra={"per_worker": per_worker, "lock": options.lock, "lock_wait_s": sum(w["lock_wait_s"] for w in latest),
                   "updates_counter": counter, "lost_increments": updates - counter, "target_syncs": syncs,
                   "optimizer_state": "shared", "torch_threads_per_worker": torch_threads(workers)},
        )

    def absorb(k: int, st: dict[str, Any]) -> None:
        """Make the parent's view of worker ``k`` that of its checkpoint state ``st``."""
        learner = st["learner"]
        rows[:] = [r for r in rows if r["worker"] != k] + [dict(r) for r in learner["episodes"]]
        latest[k] = {"env_steps": int(learner["env_steps"]), "updates": int(learner["agent"]["updates"]),
                     "timing": dict(learner["timing"]), "comm_s": float(st["comm"]),
                     "lock_wait_s": float(learner["lock_wait"]), "diagnostics": latest[k]["diagnostics"]}

    def handle(kind: str, k: int, payload: Any) -> None:
        if kind in ("progress", "done"):
            rows.extend(payload["rows"])
            latest[k] = {key: payload[key] for key in latest[k]}
            if kind == "done" and payload.get("state") is not None:
                final_states[k] = payload["state"]
                absorb(k, payload["state"])

    def checkpoint_state(states: dict[int, Any]) -> dict[str, Any]:
        """Workers' states (exited ones: their final state) and a copy of the whole block."""
        states = {**final_states, **states}
        missing = sorted(set(range(workers)) - set(states))
        if missing:  # cannot happen while drive_tasks gathers the states; never write a partial cut
            raise RuntimeError(f"checkpoint without the state of workers {missing}")
        for k, st in states.items():
            absorb(k, st)
        return {"workers": [states[k] for k in range(workers)],
                "arrays": {name: arrays[name].copy() for name in arrays.spec}}

    def checkpoint(states: dict[int, Any]) -> None:
        loop.write_checkpoint(checkpoint_state(states))

    try:
        if resumed is None:
            w0 = init.get_weights()
            arrays["theta"][:] = np.concatenate([w0[name].ravel() for name, _ in shapes])
            if len(arrays["target"]):
                arrays["target"][:] = arrays["theta"]
        else:
            _restore_arrays(arrays, resumed["arrays"])
            for k, st in enumerate(resumed["workers"]):
                absorb(k, st)
        if options.lock:
            fd, lock_path = tempfile.mkstemp(prefix="dqnlab-shared-", suffix=".lock")
            os.close(fd)
        loop = RunLoop(config, progress=progress, callback=callback, snapshot=result, checkpointer=_checkpoint)
        t0_wall = time.time() - (time.perf_counter() - loop.t0)
        kwargs = [dict(handle=arrays.handle, lock_path=lock_path, config=config, worker=k, workers=workers,
                       budget=budgets[k], t0_wall=t0_wall, report_every_s=loop.report_every_s / 2, fault=_fault,
                       checkpointing=_checkpoint is not None,
                       resume=None if resumed is None else resumed["workers"][k])
                  for k in range(workers)]
        try:
            with TaskGroup(_shared_task, kwargs, backend="loky") as group:
                drive_tasks(group, loop, handle, progress_report, "shared", lambda: result("failed"),
                            checkpoint=checkpoint if _checkpoint is not None else None)
        except KeyboardInterrupt:
            loop.interrupt()
        finally:
            loop.close()
        if _checkpoint is not None and len(final_states) == workers:  # every worker sent its final state
            loop.write_checkpoint(checkpoint_state({}))
        return result()
    finally:
        final["weights"] = weights()
        final["counter"] = int(arrays["updates_total"][0])
        final["target_syncs"] = int(arrays["target_syncs"][0])
        arrays.close()
        arrays.unlink()
        if lock_path is not None:
            os.unlink(lock_path)


def _restore_arrays(arrays: SharedArrays, saved: dict[str, np.ndarray]) -> None:
    """Fill the block with a checkpoint's copy of it (same layout)."""
    if set(saved) != set(arrays.spec):
        raise ValueError(f"checkpoint block has arrays {sorted(saved)}, this run needs {sorted(arrays.spec)}")
    for name, value in saved.items():
        value = np.asarray(value)
        if value.shape != arrays[name].shape or value.dtype != arrays[name].dtype:
            raise ValueError(f"checkpoint array {name!r} is {value.dtype}{value.shape}, "
                             f"this run needs {arrays[name].dtype}{arrays[name].shape}")
        arrays[name][...] = value


def _shared_task(ch: Channel, *, handle: tuple, lock_path: str | None, config: TrainConfig, worker: int,
                 workers: int, budget: int | None, t0_wall: float, report_every_s: float,
                 fault: dict[str, Any] | None, checkpointing: bool = False,
                 resume: dict[str, Any] | None = None) -> None:
    """One worker of the shared scheme: act on its boards, learn on the shared model.

    With ``checkpointing`` it answers checkpoint requests with its private state (and
    sends its final state with ``done``); ``resume`` is such a state to continue from.
    """
    clock0 = time.perf_counter() - (time.time() - t0_wall)
    deadline = None if config.max_seconds is None else clock0 + config.max_seconds
    arrays = SharedArrays.attach(handle)
    lock = FileLock(lock_path) if lock_path is not None else None
    learner = None
    try:
        learner = _SharedLearner(config, worker, workers, arrays, lock, clock0)
        sent = 0
        comm = 0.0
        if resume is not None:
            learner.load_state_dict(resume["learner"])
            comm = float(resume["comm"])
            sent = len(learner.episodes)  # the parent has them, from the checkpoint

        def state() -> dict[str, Any]:
            nonlocal sent
            sent = len(learner.episodes)  # the state carries every game: the parent takes them from it
            return {"learner": learner.state_dict(), "comm": comm}

        if checkpointing:
            ch.state = state

        def report(kind: str, **more: Any) -> None:
            nonlocal sent, comm
            t0 = time.perf_counter()
            rows, sent = learner.episodes[sent:], len(learner.episodes)
            ch.send(kind, {"env_steps": learner.env_steps, "updates": learner.updates, "rows": rows,
                           "timing": dict(learner.timing), "comm_s": comm, "lock_wait_s": learner.lock_wait,
                           "diagnostics": learner.diagnostics(), **more})
            comm += time.perf_counter() - t0

        next_report = time.perf_counter() + report_every_s
        try:
            while ((budget is None or learner.env_steps < budget)
                   and (deadline is None or time.perf_counter() < deadline) and not ch.stopped):
                learner.act_step()
                learner.learn()
                check_fault(fault, worker, env_steps=learner.env_steps, updates=learner.updates)
                now = time.perf_counter()
                if now >= next_report:
                    next_report = now + report_every_s
                    report("progress")
                    ch.poll()
                    ch.serve_checkpoint()
                    comm += time.perf_counter() - now
        except BaseException:
            report("progress")  # keep the games finished since the last report
            raise
        report("done", state=state() if checkpointing else None)
    finally:
        learner = None  # drop the views into the block before closing it
        if lock is not None:
            lock.close()
        arrays.close()
