"""Shared memory for the ``shared`` scheme (named arrays in one block, a replay buffer and a model in it, a lock)
and for ``actors``' weights on one machine.

* :class:`SharedArrays` -- named NumPy arrays in one ``multiprocessing.shared_memory`` block;
* :func:`bind_agent` -- make a :class:`~dqnlab.DQNAgent`'s parameters (and Adam state) views of the block;
* :class:`SharedParameters` -- a network's parameters in a block of their own, trained by one process and
  read by others as they change (``actors`` on one machine);
* :class:`SharedReplay` -- a replay buffer in the block, written by K workers (one segment each),
  sampled by all (a :class:`~dqnlab.ReplayBuffer`);
* :class:`SharedPrioritizedReplay` -- the same sampled in proportion to priorities (a
  :class:`~dqnlab.replay.PrioritizedReplayBuffer`), on one sum tree in the block whose writes hold a
  lock (:class:`LockedSumTree`) and whose reads take none; :func:`shared_replay` picks one of the two;
* :class:`FileLock` -- an inter-process lock that a crashed holder cannot leave locked;
* :class:`SharedBlock` -- a run's block and its locks as a context manager, created by the parent and
  attached by the workers, removed on every way out; the model's flat layout in it.

The block's arrays are named as ``dqnlab.schemes.shared.shared_layout`` lays them out.
"""

from __future__ import annotations

import contextlib
import gc
import mmap
import os
import sys
import tempfile
from multiprocessing import resource_tracker, shared_memory
from typing import Any, ClassVar, Self

import numpy as np
import torch

from ..agent.dqn import DQNAgent
from ..core import memory as core_memory
from ..replay import FIELDS, Minibatch, PrioritizedReplayBuffer, ReplayBuffer, SumTree
from .tasks import split_budget

__all__ = ["Spec", "SharedArrays", "OPTIMIZER_STATE", "bind_agent", "bind_parameters", "SharedParameters", "SharedReplay", "SharedPrioritizedReplay", "LockedSumTree",
           "shared_replay", "FileLock", "SharedBlock", "BlockHandle"]

#: Array name -> (shape, dtype name).
Spec = dict[str, tuple[tuple[int, ...], str]]


class _PrivateBlock:
    """A block in this process's own memory with the face of a ``SharedMemory`` (``name``, ``buf``, ``close``,
    ``unlink``), for :meth:`SharedArrays.create` with ``private=True``."""

    blocks: ClassVar[dict[str, _PrivateBlock]] = {}

    def __init__(self, size: int):
        # (kept out of forks: the task group's manager, forked while the block's tables are written, would
        # otherwise take them off huge pages, see dqnlab.core.memory)
        self.buf = memoryview(core_memory.zeros((size,), np.uint8, inherit=False))
        self.name = f"dqnlab-private-{os.getpid()}-{id(self):x}"
        _PrivateBlock.blocks[self.name] = self

    def close(self) -> None:
        """Nothing to unmap per user: the memory goes with :meth:`unlink` (and its last view)."""

    def unlink(self) -> None:
        _PrivateBlock.blocks.pop(self.name, None)


def _populated(shm: shared_memory.SharedMemory | _PrivateBlock) -> mmap.mmap | None:
    """The block's memory mapped with every page in this process's page tables at once (Linux's
    ``MAP_POPULATE`` on the block's file in ``/dev/shm``), or None where that is not to be had (then the
    block's own mapping serves). A page of a block that another process wrote costs one page fault at its
    first touch here, dear on a virtual machine and paid once per page of a table read at random by a
    worker or whole by the parent at the end; populating the mapping pays for them all in one call."""
    path = f"/dev/shm/{shm.name.lstrip('/')}"
    if isinstance(shm, _PrivateBlock) or not hasattr(mmap, "MAP_POPULATE") or not os.path.exists(path):
        return None
    fd = os.open(path, os.O_RDWR)
    try:
        return mmap.mmap(fd, shm.size, flags=mmap.MAP_SHARED | mmap.MAP_POPULATE)
    finally:
        os.close(fd)


class SharedArrays:
    """Named NumPy arrays in one ``multiprocessing.shared_memory`` block.

    Create in the parent with :meth:`create`, pass :attr:`handle` (picklable) to the
    workers, and :meth:`attach` there. The creator must :meth:`unlink` it (once);
    everybody :meth:`close` s it. Arrays start zeroed and are 64-byte aligned.

    Attributes
    ----------
    lasting : bool
        Whether views handed out stay valid after :meth:`close`, here and in forks (the memory goes with the
        last of them): a populated mapping's (:func:`_populated`); not the fallback mapping's, which close
        unmaps, nor a private block's, which a fork does not get (:func:`dqnlab.core.memory.zeros`).
    """

    def __init__(self, shm: shared_memory.SharedMemory | _PrivateBlock, spec: Spec, owner: bool):
        self.shm, self.spec, self.owner = shm, spec, owner
        self.map = _populated(shm)
        self.lasting = self.map is not None
        buf = shm.buf if self.map is None else self.map
        self.arrays: dict[str, np.ndarray] = {}
        offset = 0
        for name, (shape, dtype) in spec.items():
            n = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
            self.arrays[name] = np.ndarray(shape, dtype=dtype, buffer=buf, offset=offset)
            offset += -(-n // 64) * 64

    @staticmethod
    def nbytes(spec: Spec) -> int:
        """Bytes of a block holding ``spec``."""
        return max(64, sum(-(-int(np.prod(s, dtype=np.int64)) * np.dtype(d).itemsize // 64) * 64
                           for s, d in spec.values()))

    @classmethod
    def create(cls, spec: Spec, private: bool = False) -> SharedArrays:
        """A new zeroed block holding the arrays of ``spec`` (this process owns it and must :meth:`unlink` it).

        ``private``: in this process's own memory, on huge pages where the OS offers them
        (:func:`dqnlab.core.memory.zeros`; shared memory gets none), for workers that are threads of
        this process: :meth:`attach` finds it by its handle in this process only."""
        if private:
            return cls(_PrivateBlock(cls.nbytes(spec)), spec, owner=True)
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
    def attach(cls, handle: tuple[str, Spec]) -> SharedArrays:
        """Open a block created elsewhere, without registering it with this process's
        resource tracker (which would otherwise unlink it when the worker exits)."""
        name, spec = handle
        if name in _PrivateBlock.blocks:  # a private block of this process (threads)
            return cls(_PrivateBlock.blocks[name], spec, owner=False)
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
        """Drop this process's views and mapping (views handed out must be gone, unless :attr:`lasting`)."""
        self.arrays = {}
        self.map = None  # (the populated mapping goes with its last view: numpy's views hold it, not its buffer)
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

    def views(self) -> dict[str, np.ndarray]:
        """Every array, by name (the block's memory: a checkpoint written while nobody writes the block)."""
        return {name: self[name] for name in self.spec}


#: The per-weight state of each optimiser that has one, as ``shared``'s block holds it (``optimizer_0``,
#: ``optimizer_1``; plain SGD has none): each state tensor's name and its numbers per weight (Adam's
#: two moments; temporal coherence's two sums side by side in one tensor).
OPTIMIZER_STATE = {"adam": (("exp_avg", 1), ("exp_avg_sq", 1)), "tc": (("sums", 2),)}


def bind_agent(agent: DQNAgent, arrays: SharedArrays) -> None:
    """Make ``agent``'s online and target parameters, and its optimiser's state (Adam's moments,
    temporal coherence's sums: :data:`OPTIMIZER_STATE`), views of ``arrays``.

    After this, ``agent.step_optimizer()`` updates the shared ``theta`` (and the optimiser's
    state) in place, and ``agent.sync_target()`` writes the shared ``target``.
    """
    bind_parameters(agent.online, arrays["theta"])
    if agent.target is not agent.online:
        bind_parameters(agent.target, arrays["target"])
    keys = OPTIMIZER_STATE.get(agent.config.optimizer, ())
    if not keys:
        return
    off = 0
    for i, p in enumerate(agent.online.parameters()):
        n = p.numel()
        agent.optimizer.state[p] = {
            "step": torch.from_numpy(arrays["optimizer_step"][i:i + 1]).view(()),
            **{key: torch.from_numpy(arrays[f"optimizer_{j}"][off * w:(off + n) * w]).view(
                *p.shape, *((w,) if w > 1 else ())) for j, (key, w) in enumerate(keys)}}
        off += n


def bind_parameters(module: torch.nn.Module, flat: np.ndarray, keep_values: bool = False) -> None:
    """Make ``module``'s parameters views of ``flat`` (a float32 array of as many entries as they have, in
    their order): from now on their values are the array's (``keep_values``: first written there from the
    parameters, one at a time), and writing either writes both."""
    off = 0
    for p in module.parameters():
        n = p.numel()
        if keep_values:
            flat[off:off + n] = p.detach().cpu().numpy().reshape(-1)
        p.data = torch.from_numpy(flat[off:off + n]).view_as(p)
        off += n


def _in_block(view: str, doc: str) -> property:
    """A property that reads and writes element 0 of the ``(1,)`` int64 view ``self.<view>`` into the block."""

    def get(self: Any) -> int:
        return int(getattr(self, view)[0])

    def put(self: Any, value: int) -> None:
        getattr(self, view)[0] = value

    return property(get, put, doc=doc)


class SharedParameters:
    """A network's parameters in a block of their own, which one process trains and others read as it
    does (``actors`` on one machine: the actors act on the learner's weights as they are, with no copies
    sent), and the count of updates that made them.

    The owner makes it with the network (:meth:`create`: the parameters move into the block) and passes
    :attr:`handle` to the readers, who :meth:`attach` their networks to it. Each side's :meth:`close` moves
    its networks' parameters back into its own memory (a copy of their values then), and the owner's removes
    the block. A reader sees each float32 entry whole, but a board's entries may come from different
    updates (as Hogwild's readers do, Recht et al. 2011).
    """

    def __init__(self, arrays: SharedArrays, modules: tuple[torch.nn.Module, ...], owner: bool):
        self.arrays, self.modules, self.owner = arrays, modules, owner
        self._updates = arrays["updates"]

    @classmethod
    def create(cls, module: torch.nn.Module) -> SharedParameters:
        """A block holding ``module``'s parameters (their values now), which become views of it."""
        n = sum(p.numel() for p in module.parameters())
        arrays = SharedArrays.create({"theta": ((n,), "float32"), "updates": ((1,), "int64")})
        bind_parameters(module, arrays["theta"], keep_values=True)
        return cls(arrays, (module,), owner=True)

    @property
    def handle(self) -> tuple[str, Spec]:
        """What a reader needs to :meth:`attach` (picklable)."""
        return self.arrays.handle

    @classmethod
    def attach(cls, handle: tuple[str, Spec], *modules: torch.nn.Module) -> SharedParameters:
        """A reader's view: each of ``modules`` (the same shapes as the owner's) reads the block."""
        arrays = SharedArrays.attach(handle)
        for module in modules:
            bind_parameters(module, arrays["theta"])
        return cls(arrays, modules, owner=False)

    updates = _in_block("_updates", "The owner's updates when it last wrote the count (the parameters' version).")

    def close(self) -> None:
        """This side's networks back in its own memory (a copy), its mapping dropped, and, by the owner, the
        block removed. Idempotent."""
        for module in self.modules:
            for p in module.parameters():
                p.data = p.data.clone()
        self.modules = ()
        self._updates = None  # (the last view of the block here: the mapping can go)
        self.arrays.close()
        if self.owner:
            self.owner = False
            self.arrays.unlink()


class _Segment(ReplayBuffer):
    """Worker ``k``'s segment of the block as a :class:`~dqnlab.ReplayBuffer` (its FIFO ring), so that
    :meth:`ReplayBuffer.add_batch` checks, writes and counts the transitions: ``arrays`` are views of
    slots ``lo .. lo + cap - 1`` of the block, ``pos``/``size`` its ``seg_pos[k]``/``seg_size[k]``.
    ``add_batch`` writes the data first and ``size`` last, which publishes the new slots.

    ``ReplayBuffer.__init__`` is not called: it would allocate arrays and zero the block's positions
    (those of a resumed run among them).
    """

    def __init__(self, arrays: SharedArrays, worker: int, lo: int, cap: int):
        self.capacity, self.added = cap, 0
        self.arrays = {name: arrays[name][lo:lo + cap] for name in FIELDS}
        self._pos, self._size = arrays["seg_pos"][worker:worker + 1], arrays["seg_size"][worker:worker + 1]

    pos = _in_block("_pos", "Next slot of the segment to write (the block's ``seg_pos[k]``).")
    size = _in_block("_size", "Filled slots of the segment (the block's ``seg_size[k]``).")


class SharedReplay(ReplayBuffer):
    """Worker ``k``'s view of the shared replay buffer (a :class:`~dqnlab.ReplayBuffer`).

    Capacity ``C`` (the block's) is split into K contiguous segments; :meth:`add_batch` writes into
    this worker's segment only (a FIFO ring, :class:`_Segment`), publishing its new size after the
    data; :meth:`sample` draws uniformly, with replacement, from the filled slots of all segments
    (``len()`` of them), or with ``own`` from this worker's segment only. Reads take no lock: a slot being
    overwritten may be read half-new.

    Parameters
    ----------
    arrays : SharedArrays
        Holding the replay arrays of ``dqnlab.schemes.shared.shared_layout``.
    worker : int or None
        This worker's index; None: a reader (the parent's view, for :meth:`statistics`), which cannot add.
    workers : int
        K.
    seed : int, optional
        Seeds this worker's sampling.
    own : bool
        Sample this worker's segment only (its own transitions), not every segment.

    Attributes
    ----------
    added : int
        Transitions this worker added (the parent sums the workers', :meth:`sum_counters`).
    """

    #: This worker's own counters (in its state, summed over workers by the parent).
    COUNTERS: tuple[str, ...] = ("added",)

    def __init__(self, arrays: SharedArrays, worker: int | None, workers: int, seed: int | None = None,
                 own: bool = False):
        # not ReplayBuffer.__init__: the storage is the block's
        self.capacity = len(arrays["actions"])
        caps = split_budget(self.capacity, workers)
        self.los = np.cumsum([0] + caps[:-1]).astype(np.int64)
        self.worker = worker
        self.arrays = {name: arrays[name] for name in FIELDS}
        self._seg_size, self._seg_pos, self._caps = arrays["seg_size"], arrays["seg_pos"], np.array(caps, np.int64)
        self.segment = None if worker is None else _Segment(arrays, worker, int(self.los[worker]), caps[worker])
        self.rng = np.random.default_rng(seed)
        self.added = 0
        if own and worker is None:
            raise ValueError("own=True needs a worker: a reader's view (worker None) has no segment of its own")
        self.own = own

    @property
    def size(self) -> int:  # type: ignore[override]
        """Filled slots :meth:`sample` draws from: all segments' (this worker's alone with ``own``)."""
        return int(self._seg_size[self.worker]) if self.own else int(self._seg_size.sum())

    def held(self) -> np.ndarray:
        """``(size,)`` int64: the filled slots of all segments, in order."""
        sizes = self._seg_size.copy()
        return np.concatenate([np.arange(lo, lo + n, dtype=np.int64) for lo, n in zip(self.los, sizes)])

    def add_batch(self, boards: np.ndarray, actions: np.ndarray, rewards: np.ndarray, next_boards: np.ndarray,
                  dones: np.ndarray, next_masks: np.ndarray, steps: np.ndarray | None = None) -> np.ndarray | slice:
        """Append ``N`` transitions to this worker's segment: :meth:`ReplayBuffer.add_batch` (same arguments,
        checks and errors), returning the slots written in the whole buffer (``0 .. C - 1``).

        Raises
        ------
        ValueError
            As :meth:`ReplayBuffer.add_batch`.
        RuntimeError
            For a reader (``worker`` None).
        """
        if self.segment is None:
            raise RuntimeError("a reader's view of the shared replay buffer (worker None) cannot add transitions")
        idx = self.segment.add_batch(boards, actions, rewards, next_boards, dones, next_masks, steps)
        self.added += len(actions)
        lo = int(self.los[self.worker])
        return slice(idx.start + lo, idx.stop + lo) if isinstance(idx, slice) else idx + lo

    def segments(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
        """The block's segments for the compiled core (:meth:`ReplayBuffer.segments`): the block's own position
        and size arrays, written in place.

        Raises
        ------
        RuntimeError
            For a reader (``worker`` None).
        """
        if self.worker is None:
            raise RuntimeError("a reader's view of the shared replay buffer (worker None) cannot add transitions")
        return self.los, self._caps, self._seg_pos, self._seg_size, self.worker

    def set_segments(self, pos: np.ndarray, size: np.ndarray) -> None:
        """Nothing to take back: :meth:`segments` are the block's arrays."""

    def sample(self, batch_size: int) -> Minibatch:
        """``batch_size`` transitions uniformly, with replacement, from all segments' filled slots (with
        ``own``, this worker's segment's): a :class:`~dqnlab.Minibatch` with ``steps``; no ``weights`` or
        ``indices``.

        Raises
        ------
        ValueError
            If the slots it draws from are all empty or ``batch_size`` is not an integer >= 1.
        """
        self._check_sample(batch_size)
        if self.own:
            return self.gather(self.los[self.worker] + self.rng.integers(0, self.size, size=batch_size))
        sizes = self._seg_size.copy()
        i = self.rng.integers(0, int(sizes.sum()), size=batch_size)
        ends = np.cumsum(sizes)
        seg = np.searchsorted(ends, i, side="right")
        return self.gather(self.los[seg] + i - (ends[seg] - sizes[seg]))

    def counters(self) -> dict[str, Any]:
        """This worker's :attr:`COUNTERS` (and, prioritized, its ``beta``)."""
        return {name: getattr(self, name) for name in self.COUNTERS}

    def load_counters(self, counters: dict[str, Any]) -> None:
        """Set :meth:`counters` output."""
        for name in self.COUNTERS:
            setattr(self, name, type(getattr(self, name))(counters[name]))

    def sum_counters(self, counters: list[dict[str, Any] | None]) -> dict[str, Any]:
        """The workers' :meth:`counters` (None: none yet) together: counters summed, ``beta`` the largest."""
        given = [c for c in counters if c is not None]
        out: dict[str, Any] = {name: sum(c.get(name, 0) for c in given) for name in self.COUNTERS}
        if any("beta" in c for c in given):
            out["beta"] = max(c["beta"] for c in given if "beta" in c)
        return out

    def state_dict(self) -> dict[str, Any]:
        """This worker's own part (its sampling stream and :meth:`counters`); the contents are in the block."""
        return {"rng": self.rng.bit_generator.state, **self.counters()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output."""
        self.rng.bit_generator.state = state["rng"]
        self.load_counters(state)


class LockedSumTree(SumTree):
    """A :class:`~dqnlab.replay.SumTree` whose writes (:meth:`set`) hold ``lock``; reads take none.

    Parameters
    ----------
    capacity : int
        Leaves.
    tree : (2 P,) float64 array
        The storage (in the block).
    lock : FileLock or None
        Held around each :meth:`set` (None: no lock, one process).
    """

    def __init__(self, capacity: int, tree: np.ndarray, lock: FileLock | None):
        super().__init__(capacity, tree)
        self.lock = lock

    def set(self, idx: np.ndarray | slice, priorities: np.ndarray | float) -> None:
        """:meth:`SumTree.set <dqnlab.replay.SumTree.set>` under the lock."""
        with self.lock if self.lock is not None else contextlib.nullcontext():
            super().set(idx, priorities)


class SharedPrioritizedReplay(PrioritizedReplayBuffer, SharedReplay):
    """Worker ``k``'s view of a shared buffer sampled in proportion to priorities: the proportional
    prioritized replay of :class:`~dqnlab.replay.PrioritizedReplayBuffer` (Schaul et al. 2016; its
    code: priorities, new transitions at the largest priority, IS weights, updates, statistics) over
    :class:`SharedReplay`'s segments.

    One :class:`LockedSumTree` covers the whole capacity (the block's ``priority_tree``), with the
    largest priority so far in the block's ``max_priority``; slots not filled have priority 0.
    :meth:`sample` draws over the filled slots of all segments, with importance weights
    ``(N P(i)) ** -beta`` (``N`` the filled slots of all segments) and the slots (``indices``);
    after an update the worker hands its TD errors back with :meth:`update_priorities`.

    **Lock discipline.**

    * Tree writes hold the tree lock (``lock``, a :class:`FileLock` of its own, not the update lock):
      the priorities :meth:`add_batch` gives new transitions (after their data and size are
      published) and those :meth:`update_priorities` sets, and raising ``max_priority``. Each write
      recomputes the sums above its leaves from their children, so under the lock every inner node
      stays the sum of its children; two unlocked writers could leave a stale sum for good. Under
      Hogwild (``lock=False``) the tree is still locked.
    * Sampling reads the tree without a lock. A read concurrent with a write may see a leaf
      updated and the sums above it not yet (a few microseconds): the draw then follows slightly
      stale sums, ``P(i)`` and the IS weight of that leaf are off by the change, and a draw can land
      on a leaf of priority 0 (an unfilled slot). Draws onto priority-0 leaves (from this or from
      rounding in :meth:`SumTree.find <dqnlab.replay.SumTree.find>`) are drawn again, so a sample never
      holds a slot without data: a slot's priority is set after its data is written and its size
      published, so priority > 0 means it holds a transition (a slot just published has priority 0
      for a moment: it is not drawn, nor counted in the statistics' priorities).

    Parameters
    ----------
    arrays, worker, workers, seed
        As :class:`SharedReplay` (the block also holds ``priority_tree`` and ``max_priority``).
    alpha, eps : float
        As :class:`~dqnlab.replay.PrioritizedReplayBuffer`.
    lock : FileLock, optional
        The tree lock (None: no lock, for one process).

    Attributes
    ----------
    beta : float
        This worker's IS exponent (set by its learner).
    priority_updates, given_priorities, weights_sum, weights_n
        This worker's counters (in its state; the parent sums them, :meth:`sum_counters`).

    Raises
    ------
    ValueError
        For ``alpha`` or ``eps`` out of range.
    """

    COUNTERS = ("added", "priority_updates", "given_priorities", "weights_sum", "weights_n")
    #: Rounds of drawing again the draws that landed on a priority-0 leaf, before a uniform fallback.
    REDRAWS = 8

    def __init__(self, arrays: SharedArrays, worker: int | None, workers: int, seed: int | None = None,
                 alpha: float = 0.6, eps: float = 1e-6, lock: FileLock | None = None):
        SharedReplay.__init__(self, arrays, worker, workers, seed)
        self._max, self._lock = arrays["max_priority"], lock
        self._init_priorities(alpha, eps, LockedSumTree(self.capacity, arrays["priority_tree"], lock))

    @property
    def max_priority(self) -> float:  # type: ignore[override]
        """The largest priority set so far, by any worker (at least 1)."""
        return float(self._max[0])

    @max_priority.setter
    def max_priority(self, value: float) -> None:
        if value > self._max[0]:  # only ever raised, under the tree lock
            with self._lock if self._lock is not None else contextlib.nullcontext():
                self._max[0] = max(self._max[0], value)

    def _draw(self, batch_size: int) -> np.ndarray:
        """``(B,)`` int64 slots drawn in proportion to priority over the whole buffer (stratified); a draw
        onto a priority-0 leaf is drawn again (:attr:`REDRAWS` rounds), then replaced by a slot of
        priority > 0 drawn uniformly (reached only if the tree reads wrong over and over).

        Raises
        ------
        ValueError
            If no slot has a priority yet.
        """
        tree = self.tree
        idx = tree.sample(batch_size, self.rng)
        for _ in range(self.REDRAWS):
            bad = np.flatnonzero(tree[idx] <= 0.0)
            if not bad.size:
                return idx
            idx[bad] = tree.sample(len(bad), self.rng)
        bad = np.flatnonzero(tree[idx] <= 0.0)
        if bad.size:
            held = np.flatnonzero(tree[:] > 0.0)
            if not held.size:
                raise ValueError("cannot sample from a prioritized replay buffer whose priorities are not set yet")
            idx[bad] = held[self.rng.integers(0, len(held), len(bad))]
        return idx

    def _check_slots(self, indices: np.ndarray) -> None:
        """Raise ValueError unless each of ``indices`` is a filled slot of some segment."""
        sizes = self._seg_size.copy()
        seg = np.clip(np.searchsorted(self.los, indices, side="right") - 1, 0, len(sizes) - 1)
        ok = (indices >= 0) & (indices < self.capacity) & (indices - self.los[seg] < sizes[seg])
        if not ok.all():
            raise ValueError(f"indices must be filled slots of the shared buffer, got {indices[~ok][:5].tolist()} "
                             f"(segments start at {self.los.tolist()} and hold {sizes.tolist()})")

    def _held_priorities(self) -> np.ndarray:
        """Priorities of the filled slots of all segments (whose priority is set: > 0)."""
        p = self.tree[self.held()]
        return p[p > 0.0]

    def counters(self) -> dict[str, Any]:
        return {**SharedReplay.counters(self), "beta": self.beta}

    def load_counters(self, counters: dict[str, Any]) -> None:
        SharedReplay.load_counters(self, counters)
        self.beta = float(counters.get("beta", self.beta))

    # this worker's own part, not PrioritizedReplayBuffer's contents: those are in the block
    state_dict = SharedReplay.state_dict
    load_state_dict = SharedReplay.load_state_dict


def shared_replay(arrays: SharedArrays, worker: int | None, workers: int, config: Any, seed: int | None = None,
                  tree_lock: FileLock | None = None, own: bool = False) -> SharedReplay:
    """The view of the block's replay buffer a :class:`~dqnlab.TrainConfig` asks for:
    :class:`SharedPrioritizedReplay` (``priority_alpha``, ``priority_eps``, the tree lock) when
    ``config.prioritized``, else :class:`SharedReplay` (``own``: sampling this worker's segment only).

    Raises
    ------
    ValueError
        For ``own`` with ``config.prioritized`` (one priority tree spans every segment).
    """
    if config.prioritized:
        if own:
            raise ValueError("own=True (sampling one's own segment) needs uniform replay: the priority tree "
                             "spans every segment")
        return SharedPrioritizedReplay(arrays, worker, workers, seed, config.priority_alpha, config.priority_eps,
                                       tree_lock)
    return SharedReplay(arrays, worker, workers, seed, own)


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

    def __enter__(self) -> Self:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def close(self) -> None:
        """Close this process's descriptor (releasing the lock if held)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


#: ``(arrays' handle, update lock's path, tree lock's path)``: what a worker needs to
#: :meth:`SharedBlock.attach` (picklable; a path is None where the run has no such lock).
BlockHandle = tuple[tuple[str, Spec], str | None, str | None]


class SharedBlock:
    """What the workers of a ``shared`` run share, as a context manager: the arrays of
    ``dqnlab.schemes.shared.shared_layout`` in one block (:class:`SharedArrays`: model, target,
    Adam, replay, counters), the update lock and the priority tree's lock (:class:`FileLock`, each
    on a file of its own).

    The parent :meth:`create` s it (the block, the lock files, and its reader's view of the replay
    buffer, :attr:`replay`); a worker :meth:`attach` es it by its :attr:`handle`. On exit, on an
    error's too, each side drops its views, closes its mapping and lock descriptors, and the creator
    removes the block and the lock files. (Views handed out, a learner's, must be gone by then, or the
    mapping stays until the process ends.)

    Parameters
    ----------
    arrays : SharedArrays
        The block.
    lock, tree_lock : FileLock or None
        The update lock (None: Hogwild) and the priority tree's (None: uniform replay).
    shapes : list of (str, tuple of int), optional
        The model's parameter names and shapes in the order of the flat ``theta`` (the parent's, for
        :meth:`model`; a worker's has none).

    Attributes
    ----------
    replay : SharedReplay or None
        The parent's reader view of the replay buffer (for its statistics); a worker's: None.
    """

    def __init__(self, arrays: SharedArrays, lock: FileLock | None = None, tree_lock: FileLock | None = None,
                 shapes: list[tuple[str, tuple[int, ...]]] | None = None):
        self.arrays, self.lock, self.tree_lock, self.shapes = arrays, lock, tree_lock, shapes or []
        self.replay: SharedReplay | None = None

    @classmethod
    def create(cls, spec: Spec, model: dict[str, Any], config: Any, workers: int, *, lock: bool,
               private: bool = False) -> SharedBlock:
        """A new zeroed block of ``spec`` for ``workers`` training ``model`` (a state dict: its parameter names and
        shapes), with the lock files the run needs: ``lock``, the update lock; ``config.prioritized`` (a
        :class:`~dqnlab.TrainConfig`), the tree's. ``private``: in this process's memory, for workers that are
        threads (:meth:`SharedArrays.create`)."""
        block = cls(SharedArrays.create(spec, private=private),
                    shapes=[(name, tuple(value.shape)) for name, value in model.items()])
        try:
            if lock:
                block.lock = FileLock(_lock_file(".lock"))
            if config.prioritized:  # the priority tree's writes: a lock of their own, under Hogwild too
                block.tree_lock = FileLock(_lock_file(".tree.lock"))
            # (before the workers: it may set max_priority)
            block.replay = shared_replay(block.arrays, None, workers, config)
        except BaseException:
            block.close()
            raise
        return block

    @classmethod
    def attach(cls, handle: BlockHandle) -> SharedBlock:
        """A worker's view of the parent's block, by its :attr:`handle`."""
        arrays, lock_path, tree_lock_path = handle
        return cls(SharedArrays.attach(arrays), *(None if path is None else FileLock(path)
                                                  for path in (lock_path, tree_lock_path)))

    @property
    def handle(self) -> BlockHandle:
        """What a worker needs to :meth:`attach` (picklable)."""
        return (self.arrays.handle, *(None if held is None else held.path for held in (self.lock, self.tree_lock)))

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Drop this side's views, mapping and lock descriptors; the creator's also removes the block and the lock
        files."""
        self.replay = None  # (its views into the block go before the block)
        locks = [held for held in (self.lock, self.tree_lock) if held is not None]
        for held in locks:
            held.close()
        self.arrays.close()
        if self.arrays.owner:
            self.arrays.unlink()
            for held in locks:
                os.unlink(held.path)

    # ------------------------------------------------------------------ the parent's side
    def set_model(self, weights: dict[str, np.ndarray]) -> None:
        """Set the shared online model (and the target, where there is one) to ``weights`` (``{name: array}``)."""
        self.arrays["theta"][:] = np.concatenate([weights[name].ravel() for name, _ in self.shapes])
        if len(self.arrays["target"]):
            self.arrays["target"][:] = self.arrays["theta"]

    def model(self, copy: bool = True) -> dict[str, np.ndarray]:
        """The shared online model: ``{name: float32 array of its shape}``, a copy; with ``copy`` False, views of
        the block where they outlive it (``SharedArrays.lasting``: a run's final result, read once nobody
        writes the block, without a copy of hundreds of MB), else a copy."""
        flat, out, off = self.arrays["theta"], {}, 0
        copy = copy or not self.arrays.lasting
        for name, shape in self.shapes:
            n = int(np.prod(shape))
            view = flat[off:off + n].reshape(shape)
            out[name] = view.copy() if copy else view
            off += n
        return out

    def load(self, saved: dict[str, np.ndarray]) -> None:
        """Fill the block with a checkpoint's copy of it (:meth:`SharedArrays.load`).

        Raises
        ------
        ValueError
            If ``saved`` is of another layout.
        """
        self.arrays.load(saved)

    def replay_statistics(self, counters: list[dict[str, Any] | None]) -> dict[str, Any]:
        """The buffer's :meth:`~SharedReplay.statistics` now: the block's figures, with the workers' ``counters``
        (:meth:`SharedReplay.counters`; None: none yet) summed."""
        view = self.replay
        view.load_counters(view.sum_counters(counters))
        return view.statistics()


def _lock_file(suffix: str) -> str:
    """A new empty file for a :class:`FileLock` of a :class:`SharedBlock` (which removes it)."""
    fd, path = tempfile.mkstemp(prefix="dqnlab-shared-", suffix=suffix)
    os.close(fd)
    return path
