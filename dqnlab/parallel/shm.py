"""Shared memory for the ``shared`` scheme: named arrays in one block, a replay buffer and a model in it, a lock.

* :class:`SharedArrays` -- named NumPy arrays in one ``multiprocessing.shared_memory`` block;
* :func:`bind_agent` -- make a :class:`~dqnlab.DQNAgent`'s parameters (and Adam state) views of the block;
* :class:`SharedReplay` -- a replay buffer in the block, written by K workers (one segment each),
  sampled by all (the :class:`~dqnlab.ReplayBuffer` protocol);
* :class:`FileLock` -- an inter-process lock that a crashed holder cannot leave locked.

The block's arrays are named as ``dqnlab.schemes.shared.shared_layout`` lays them out.
"""

from __future__ import annotations

import gc
import os
import sys
from multiprocessing import resource_tracker, shared_memory
from typing import Any

import numpy as np
import torch

from ..agent.dqn import DQNAgent
from ..replay import Minibatch
from .tasks import split_budget

__all__ = ["Spec", "SharedArrays", "bind_agent", "SharedReplay", "FileLock"]

#: Array name -> (shape, dtype name).
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
        """A new zeroed block holding the arrays of ``spec`` (this process owns it and must :meth:`unlink` it)."""
        shm = shared_memory.SharedMemory(create=True, size=cls.nbytes(spec))  # zero-filled by the OS
        try:
            return cls(shm, spec, owner=True)
        except BaseException:
            shm.close()
            shm.unlink()
            raise

    @property
    def handle(self) -> tuple[str, Spec]:
        """``(block name, spec)``: what another process needs to :meth:`attach` (picklable)."""
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
        """The array ``name`` (a view into the block)."""
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

    def load(self, saved: dict[str, np.ndarray]) -> None:
        """Fill the block with a copy of it (``{name: array}``, same layout: a checkpoint's).

        Raises
        ------
        ValueError
            If the names, shapes or dtypes differ from this block's.
        """
        if set(saved) != set(self.spec):
            raise ValueError(f"checkpoint block has arrays {sorted(saved)}, this run needs {sorted(self.spec)}")
        for name, value in saved.items():
            value = np.asarray(value)
            if value.shape != self[name].shape or value.dtype != self[name].dtype:
                raise ValueError(f"checkpoint array {name!r} is {value.dtype}{value.shape}, "
                                 f"this run needs {self[name].dtype}{self[name].shape}")
            self[name][...] = value

    def copy(self) -> dict[str, np.ndarray]:
        """A copy of every array (for a checkpoint)."""
        return {name: self[name].copy() for name in self.spec}


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
        Holding the replay arrays of ``dqnlab.schemes.shared.shared_layout``.
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
        """Restore :meth:`state_dict` output."""
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
        """Block until this process holds the lock."""
        import fcntl

        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDWR)
        fcntl.flock(self._fd, fcntl.LOCK_EX)

    def release(self) -> None:
        """Let the lock go."""
        import fcntl

        fcntl.flock(self._fd, fcntl.LOCK_UN)

    def close(self) -> None:
        """Close this process's descriptor (releasing the lock if held)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
