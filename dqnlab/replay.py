"""Experience replay for 2048 transitions: uniform and prioritized buffers, n-step returns.

* :class:`ReplayBuffer` -- a preallocated NumPy ring buffer sampled uniformly: experience
  replay as used by DQN (Mnih et al. 2015); layout after Stable-Baselines3's
  ``ReplayBuffer`` (preallocated arrays, NamedTuple samples).
* :class:`PrioritizedReplayBuffer` -- the proportional variant of prioritized experience
  replay (Schaul, Quan, Antonoglou and Silver, "Prioritized Experience Replay", ICLR 2016)
  on a :class:`SumTree`, with importance-sampling weights.
* :class:`NStepReturns` -- turns one-step transitions of ``N`` boards into n-step ones
  (Sutton 1988; Mnih et al. 2016; Hessel et al. 2018, Rainbow) where they are made.

:func:`make_buffer` builds the buffer a :class:`~dqnlab.TrainConfig` asks for; after an
update on a sampled :class:`Minibatch`, :func:`update_priorities` hands its TD errors back.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from .config import MAX_N_STEP, TrainConfig

__all__ = ["Minibatch", "COLUMNS", "FIELDS", "BATCH_COLUMNS", "column_arrays", "ReplayBuffer", "PrioritizedReplayBuffer",
           "SumTree", "NStepReturns", "make_buffer", "update_priorities", "importance_weights"]


class Minibatch(NamedTuple):
    """A batch of ``B`` transitions, all NumPy arrays.

    Attributes
    ----------
    boards : (B, 4, 4) uint8
        Boards the actions were taken on (log2 exponents).
    actions : (B,) int64
        Action ids 0-3.
    rewards : (B,) float32
        Rewards as stored (already transformed by the trainer, if at all).
    next_boards : (B, 4, 4) uint8
        Boards after the move and the spawn.
    dones : (B,) bool
        True where the game ended (terminal: no bootstrap). Truncation is not terminal.
    next_masks : (B, 4) bool
        Legal actions on ``next_boards``.
    steps : (B,) uint8, optional
        Env steps each transition spans: its reward is the discounted sum of that many
        rewards and its target bootstraps with ``gamma ** steps`` (n-step returns,
        :class:`NStepReturns`). None: every transition is one step.
    weights : (B,) float32, optional
        Importance-sampling weights of a prioritized sample (:class:`PrioritizedReplayBuffer`),
        multiplying each transition's loss; None: all 1.
    indices : (B,) int64, optional
        The buffer slots of a prioritized sample, for :func:`update_priorities`; None otherwise.
    """

    boards: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    next_boards: np.ndarray
    dones: np.ndarray
    next_masks: np.ndarray
    steps: np.ndarray | None = None
    weights: np.ndarray | None = None
    indices: np.ndarray | None = None


#: The columns a transition is stored with, in :class:`Minibatch` order: name -> (shape per transition,
#: dtype). The one declaration of them: a :class:`ReplayBuffer`'s arrays, the replay arrays of the
#: ``shared`` scheme's block (:func:`column_arrays`) and, through :data:`BATCH_COLUMNS`, the all-reduce
#: wire format of minibatches (``dqnlab.parallel.parts``) follow it. The order is that of the
#: block's arrays and of the wire, so it stays as it is (checkpoints store the columns by name).
COLUMNS: dict[str, tuple[tuple[int, ...], type]] = {
    "boards": ((4, 4), np.uint8),
    "actions": ((), np.uint8),
    "rewards": ((), np.float32),
    "next_boards": ((4, 4), np.uint8),
    "dones": ((), np.bool_),
    "next_masks": ((4,), np.bool_),
    "steps": ((), np.uint8),
}

#: The names of :data:`COLUMNS`, in :class:`Minibatch` order.
FIELDS = tuple(COLUMNS)

#: The columns of a sampled :class:`Minibatch` (:meth:`ReplayBuffer.gather`), in its order: those of
#: :data:`COLUMNS` with ``actions`` widened to int64, then a prioritized sample's ``weights``
#: (``indices`` are slots of the buffer, not data of the transitions).
BATCH_COLUMNS: dict[str, tuple[tuple[int, ...], type]] = {**COLUMNS, "actions": ((), np.int64),
                                                           "weights": ((), np.float32)}


def column_arrays(capacity: int) -> dict[str, tuple[tuple[int, ...], str]]:
    """The arrays of a buffer of ``capacity`` transitions: name -> (shape, dtype name), as :data:`COLUMNS`."""
    return {name: ((capacity, *shape), np.dtype(dtype).name) for name, (shape, dtype) in COLUMNS.items()}


#: Largest board exponent (tile 2**17 = 131072).
_MAX_EXPONENT = 17


def _check_values(name: str, value: np.ndarray) -> None:
    """Raise ValueError naming ``name`` unless ``value`` holds the kind and range of values its field takes."""
    kind = value.dtype.kind
    if name in ("dones", "next_masks"):
        if kind != "b":
            raise ValueError(f"{name} must be a bool array, got dtype {value.dtype}")
        return
    if name == "rewards":
        if kind not in "iuf":
            raise ValueError(f"rewards must be real numbers, got dtype {value.dtype}")
        if kind == "f" and value.size and not np.isfinite(value.sum(dtype=np.float64)) \
                and not np.isfinite(value).all():
            raise ValueError("rewards must be finite numbers, got NaN or infinity")
        return
    if kind not in "iu":
        raise ValueError(f"{name} must be an integer array, got dtype {value.dtype}")
    if name == "steps":
        if value.size and (value.min() < 1 or value.max() > MAX_N_STEP):
            raise ValueError(f"steps must hold env step counts in 1..{MAX_N_STEP}, "
                             f"got values in {value.min()}..{value.max()}")
        return
    if value.size:
        high = 3 if name == "actions" else _MAX_EXPONENT
        if value.max() > high or (kind == "i" and value.min() < 0):
            what = "action ids in 0..3" if name == "actions" else f"board exponents in 0..{_MAX_EXPONENT}"
            raise ValueError(f"{name} must hold {what}, got values in {value.min()}..{value.max()}")


class ReplayBuffer:
    """Fixed-capacity FIFO of transitions with uniform sampling.

    Parameters
    ----------
    capacity : int
        Transitions kept; the oldest is overwritten first. About 41 bytes each.
    seed : int or numpy.random.Generator, optional
        Source of the sampling randomness.

    Raises
    ------
    ValueError
        If ``capacity`` < 1.
    """

    def __init__(self, capacity: int, seed: int | np.random.Generator | None = None):
        if not isinstance(capacity, (int, np.integer)) or capacity < 1:
            raise ValueError(f"capacity must be an integer >= 1, got {capacity!r}")
        self.capacity = int(capacity)
        self.rng = np.random.default_rng(seed)
        self.arrays = {name: np.zeros(shape, dtype) for name, (shape, dtype) in column_arrays(self.capacity).items()}
        self.pos = 0  # next slot to write
        self.size = 0  # transitions held
        self.added = 0  # transitions ever added

    def __len__(self) -> int:
        return self.size

    def add_batch(self, boards: np.ndarray, actions: np.ndarray, rewards: np.ndarray,
                  next_boards: np.ndarray, dones: np.ndarray, next_masks: np.ndarray,
                  steps: np.ndarray | None = None) -> np.ndarray | slice:
        """Append ``N`` transitions (shapes and kinds as in :class:`Minibatch` with ``B = N``).

        ``boards`` and ``next_boards``: integer exponents in 0..17; ``actions``:
        integer action ids in 0..3; ``rewards``: finite numbers; ``dones`` and
        ``next_masks``: bool; ``steps``: integers in 1..255 (None: all 1). Nothing is
        stored unless every array is valid.

        Returns
        -------
        slice or (M,) int64 array
            The slots written (``M = min(N, capacity)``: only the newest survive a batch larger
            than the buffer).

        Raises
        ------
        ValueError
            If an array has the wrong length, shape or kind of values, or a value
            out of range; the message names the array.
        """
        batch = {"boards": boards, "actions": actions, "rewards": rewards,
                 "next_boards": next_boards, "dones": dones, "next_masks": next_masks, "steps": steps}
        n = np.shape(actions)[0] if np.ndim(actions) >= 1 else -1
        if n < 0:
            raise ValueError(f"actions must be a 1-d array of N action ids, got shape {np.shape(actions)}")
        if steps is None:
            batch["steps"] = np.ones(n, np.uint8)
        for name, value in batch.items():
            value = batch[name] = np.asarray(value)
            shape = COLUMNS[name][0]
            if value.shape != (n, *shape):
                raise ValueError(f"{name} must have shape {(n, *shape)}, got {value.shape}")
            _check_values(name, value)
        self.added += n  # every transition offered counts, even those overwritten at once
        if n > self.capacity:  # only the newest `capacity` survive anyway
            batch = {k: v[-self.capacity:] for k, v in batch.items()}
            n = self.capacity
        if self.pos + n <= self.capacity:  # no wrap-around: slices, cheaper than an index array
            idx: slice | np.ndarray = slice(self.pos, self.pos + n)
        else:
            idx = (self.pos + np.arange(n)) % self.capacity
        for name, value in batch.items():
            self.arrays[name][idx] = value
        self.pos = (self.pos + n) % self.capacity
        self.size = min(self.size + n, self.capacity)
        return idx

    def sample(self, batch_size: int) -> Minibatch:
        """Draw ``batch_size`` transitions uniformly, with replacement.

        Raises
        ------
        ValueError
            If the buffer is empty or ``batch_size`` is not an integer >= 1.
        """
        self._check_sample(batch_size)
        return self.gather(self.rng.integers(0, self.size, size=batch_size))

    def _check_sample(self, batch_size: int) -> None:
        if not isinstance(batch_size, (int, np.integer)) or isinstance(batch_size, bool) or batch_size < 1:
            raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")
        if self.size == 0:
            raise ValueError("cannot sample from an empty replay buffer")

    def gather(self, idx: np.ndarray) -> Minibatch:
        """The transitions in slots ``idx`` (``(B,)`` int64, each < ``len(self)``) as a :class:`Minibatch`."""
        a = self.arrays
        # ndarray.take along axis 0 is the same gather as a[idx], and cheaper.
        return Minibatch(a["boards"].take(idx, 0), a["actions"].take(idx).astype(BATCH_COLUMNS["actions"][1]),
                         a["rewards"].take(idx),
                         a["next_boards"].take(idx, 0), a["dones"].take(idx), a["next_masks"].take(idx, 0),
                         a["steps"].take(idx))

    def segments(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
        """The buffer as the compiled core's replay (:mod:`dqnlab.core.loops`): ``(K,)`` int64 first slots,
        capacities, next write positions and sizes of its K segments, and the segment this buffer writes.
        One segment here (copies: :meth:`set_segments` takes the positions back)."""
        return (np.zeros(1, np.int64), np.array([self.capacity], np.int64), np.array([self.pos], np.int64),
                np.array([self.size], np.int64), 0)

    def set_segments(self, pos: np.ndarray, size: np.ndarray) -> None:
        """Take back the positions and sizes of :meth:`segments` after the core wrote transitions."""
        self.pos, self.size = int(pos[0]), int(size[0])

    def statistics(self) -> dict[str, Any]:
        """What the buffer reports in a run's summary (``extra["replay"]``): ``capacity``, ``size``, ``added``."""
        return {"capacity": self.capacity, "size": self.size, "added": self.added}

    def state_dict(self) -> dict[str, Any]:
        """Contents and position (arrays trimmed to ``size``), for checkpoints."""
        return {"capacity": self.capacity, "pos": self.pos, "size": self.size, "added": self.added,
                "rng": self.rng.bit_generator.state,
                **{k: v[: self.size].copy() for k, v in self.arrays.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output into this buffer (same capacity).

        Raises
        ------
        ValueError
            If the capacities differ or the state is not a consistent
            :meth:`state_dict` (positions out of range, arrays of the wrong length
            or kind); the buffer is left unchanged then.
        """
        if state["capacity"] != self.capacity:
            raise ValueError(f"replay capacity mismatch: saved {state['capacity']}, buffer {self.capacity}")
        pos, size, added = int(state["pos"]), int(state["size"]), int(state["added"])
        if not (0 <= size <= self.capacity and 0 <= pos < self.capacity and added >= size
                and (size == self.capacity or pos == size)):
            raise ValueError(f"replay state is inconsistent: pos {pos}, size {size}, added {added}, "
                             f"capacity {self.capacity}")
        arrays = {}
        for name, (shape, _dtype) in COLUMNS.items():
            value = np.asarray(state[name])
            if value.shape != (size, *shape):
                raise ValueError(f"replay state: {name} must have shape {(size, *shape)}, got {value.shape}")
            _check_values(name, value)
            arrays[name] = value
        rng = np.random.default_rng()
        rng.bit_generator.state = state["rng"]
        self.pos, self.size, self.added, self.rng = pos, size, added, rng
        for name, value in arrays.items():
            self.arrays[name][:size] = value


class SumTree:
    """A binary tree of sums over ``capacity`` non-negative priorities, in one NumPy array.

    Leaf ``i`` (``tree[P + i]``, ``P`` the power of two >= ``capacity``) holds priority
    ``i``; every inner node the sum of its two children, the root (``tree[1]``) the total.
    Setting ``B`` priorities and drawing ``B`` slots in proportion to them are vectorised
    over the batch: ``log2 P`` NumPy operations on ``B`` nodes each. The segment tree of
    Schaul et al. (2016), appendix B.2.1.

    Parameters
    ----------
    capacity : int
        Leaves (>= 1).
    tree : (2 P,) float64 array, optional
        Storage to use (for a tree in shared memory, ``dqnlab.parallel.shm``); zeros
        (all priorities 0) when new. Default: a new array.

    Raises
    ------
    ValueError
        If ``capacity`` < 1 or ``tree`` has the wrong shape or dtype.
    """

    def __init__(self, capacity: int, tree: np.ndarray | None = None):
        if not isinstance(capacity, (int, np.integer)) or capacity < 1:
            raise ValueError(f"capacity must be an integer >= 1, got {capacity!r}")
        self.capacity = int(capacity)
        self.leaves = 1 << max(0, (self.capacity - 1).bit_length())
        self.depth = self.leaves.bit_length() - 1
        if tree is None:
            tree = np.zeros(2 * self.leaves)
        if tree.shape != (2 * self.leaves,) or tree.dtype != np.float64:
            raise ValueError(f"tree must be a float64 array of shape {(2 * self.leaves,)}, "
                             f"got {tree.dtype}{tree.shape}")
        self.tree = tree

    @staticmethod
    def size_for(capacity: int) -> int:
        """Length of the ``tree`` array of a tree of ``capacity`` leaves."""
        return 2 * (1 << max(0, (int(capacity) - 1).bit_length()))

    @property
    def total(self) -> float:
        """Sum of all priorities."""
        return float(self.tree[1])

    def __getitem__(self, idx: np.ndarray | int | slice) -> np.ndarray:
        """The priorities of leaves ``idx``."""
        if isinstance(idx, slice):
            lo, hi, _ = idx.indices(self.capacity)
            return self.tree[self.leaves + lo:self.leaves + hi]
        return self.tree[self.leaves + np.asarray(idx)]

    def set(self, idx: np.ndarray | slice, priorities: np.ndarray | float) -> None:
        """Set the priorities of leaves ``idx`` (``(B,)`` int, repeats allowed: the last wins,
        as in NumPy assignment) and recompute the sums above them.

        Each inner node on the way up is recomputed from its two children (not moved by a
        difference), so repeated leaves, and rounding, leave every sum consistent.
        """
        if isinstance(idx, slice):
            idx = np.arange(*idx.indices(self.capacity))
        nodes = np.asarray(idx, np.int64) + self.leaves
        if nodes.size == 0:
            return
        self.tree[nodes] = priorities
        tree = self.tree
        for _ in range(self.depth):
            nodes >>= 1
            tree[nodes] = tree[2 * nodes] + tree[2 * nodes + 1]

    def find(self, values: np.ndarray) -> np.ndarray:
        """For each of ``values`` (``(B,)`` float64 in ``[0, total)``), the leaf where the
        running sum of priorities passes it: leaf ``i`` is found with probability
        ``priority_i / total`` for a uniform value. Returns ``(B,)`` int64 leaves."""
        values = np.array(values, np.float64)
        nodes = np.ones(len(values), np.int64)
        tree = self.tree
        for _ in range(self.depth):
            nodes <<= 1
            left = tree[nodes]
            right = values >= left
            values -= np.where(right, left, 0.0)
            nodes += right
        return nodes - self.leaves

    def sample(self, n: int, rng: np.random.Generator, high: int | None = None) -> np.ndarray:
        """``n`` leaves drawn in proportion to their priorities, stratified: one uniform value in
        each of ``n`` equal segments of the total (Schaul et al. 2016, appendix B.2.1).

        ``high``: leaves ``>= high`` hold no transitions (priority 0); a draw that rounding
        pushes onto one is moved back to ``high - 1``. Returns ``(n,)`` int64 leaves.
        """
        total = self.total
        values = (np.arange(n) + rng.random(n)) * (total / n)
        leaves = self.find(np.minimum(values, np.nextafter(total, 0.0)))
        return np.minimum(leaves, (self.capacity if high is None else high) - 1)


def importance_weights(probabilities: np.ndarray, size: int, beta: float) -> np.ndarray:
    """Importance-sampling weights ``w_i = (size P(i)) ** -beta``, divided by the largest of the
    batch so that they only scale the loss down (Schaul et al. 2016, section 3.4; normalised
    over the minibatch as Dopamine's Rainbow agent does, Castro et al. 2018).

    ``probabilities``: ``(B,)`` float64 sampling probabilities; returns ``(B,)`` float32 in (0, 1].
    """
    w = np.power(size * np.asarray(probabilities, np.float64), -beta)
    return (w / w.max()).astype(np.float32)


class PrioritizedReplayBuffer(ReplayBuffer):
    """A :class:`ReplayBuffer` sampled in proportion to priorities: proportional prioritized
    experience replay (Schaul, Quan, Antonoglou and Silver, ICLR 2016).

    Transition ``i`` has priority ``p_i = (|delta_i| + eps) ** alpha`` and is drawn with
    probability ``P(i) = p_i / sum_k p_k`` (stratified over the minibatch). New transitions
    get the given priorities (actors' own TD errors, Horgan et al. 2018) or, without any,
    the largest priority so far, so that each is replayed at least once soon. A sample
    carries the importance-sampling weights ``(N P(i)) ** -beta`` (:func:`importance_weights`)
    and its slots; after the update the learner hands the new TD errors back with
    :meth:`update_priorities`.

    Parameters
    ----------
    capacity : int
        Transitions kept (FIFO, as :class:`ReplayBuffer`).
    alpha : float
        Priority exponent in [0, 1]: 0 is uniform sampling.
    eps : float
        Added to ``|delta|`` (> 0) so that no transition's priority is 0.
    seed : int or numpy.random.Generator, optional
        Source of the sampling randomness.

    Attributes
    ----------
    beta : float
        Exponent of the importance-sampling weights in [0, 1] (1: full correction). The
        learner anneals it to 1 over the run (:func:`dqnlab.agent.dqn.priority_beta_at`).
    tree : SumTree
        The priorities ``p_i`` (already raised to ``alpha``).

    Raises
    ------
    ValueError
        For a capacity < 1, or ``alpha`` or ``eps`` out of range.
    """

    def __init__(self, capacity: int, alpha: float = 0.6, eps: float = 1e-6,
                 seed: int | np.random.Generator | None = None):
        super().__init__(capacity, seed)
        self._init_priorities(alpha, eps, SumTree(self.capacity))

    def _init_priorities(self, alpha: float, eps: float, tree: SumTree) -> None:
        """Check ``alpha`` and ``eps``; priorities over ``tree``, counters at 0. (A buffer keeping its
        transitions elsewhere, ``dqnlab.parallel.shm.SharedPrioritizedReplay``, calls it instead of ``__init__``.)"""
        if not 0.0 <= alpha <= 1.0:
            raise ValueError(f"alpha must be in [0, 1], got {alpha!r}")
        if not eps > 0.0:
            raise ValueError(f"eps must be > 0, got {eps!r}")
        self.alpha, self.eps, self.beta = float(alpha), float(eps), 1.0
        self.tree = tree
        self.max_priority = 1.0  # the largest p_i set so far (new transitions without priorities get it)
        self.priority_updates = 0  # transitions whose priority was updated after an update
        self.given_priorities = 0  # transitions added with priorities of their own (an actor's TD errors)
        self.weights_sum, self.weights_n = 0.0, 0  # importance weights drawn so far (their mean)

    def priorities(self, td_errors: np.ndarray) -> np.ndarray:
        """``(|td_errors| + eps) ** alpha``: ``(N,)`` float -> ``(N,)`` float64."""
        p = np.abs(np.asarray(td_errors, np.float64)) + self.eps
        if not np.isfinite(p).all():
            raise ValueError("priorities need finite TD errors, got NaN or infinity")
        return p if self.alpha == 1.0 else np.power(p, self.alpha)

    def add_batch(self, boards: np.ndarray, actions: np.ndarray, rewards: np.ndarray,
                  next_boards: np.ndarray, dones: np.ndarray, next_masks: np.ndarray,
                  steps: np.ndarray | None = None, td_errors: np.ndarray | None = None) -> np.ndarray | slice:
        """:meth:`ReplayBuffer.add_batch`, each new transition with priority ``(|td_error| + eps) ** alpha``
        (``td_errors``: ``(N,)`` float, an actor's own) or, without them, the largest priority so far.

        Raises
        ------
        ValueError
            As :meth:`ReplayBuffer.add_batch`, or if ``td_errors`` is not ``(N,)`` finite numbers.
        """
        n = len(actions)
        if td_errors is not None:
            if np.shape(td_errors) != (n,):
                raise ValueError(f"td_errors must have shape {(n,)}, got {np.shape(td_errors)}")
            p = self.priorities(td_errors)
        idx = super().add_batch(boards, actions, rewards, next_boards, dones, next_masks, steps)
        if td_errors is None:
            self.tree.set(idx, self.max_priority)
        else:
            self.given_priorities += n
            p = p[n - (idx.stop - idx.start if isinstance(idx, slice) else len(idx)):]  # the slots written
            self.tree.set(idx, p)
            self.max_priority = max(self.max_priority, float(p.max(initial=0.0)))
        return idx

    def sample(self, batch_size: int) -> Minibatch:
        """Draw ``batch_size`` transitions with probability ``P(i) = p_i / sum p`` (stratified),
        with their importance-sampling ``weights`` (at :attr:`beta`) and slots (``indices``).

        Raises
        ------
        ValueError
            If the buffer is empty or ``batch_size`` is not an integer >= 1.
        """
        self._check_sample(batch_size)
        idx = self._draw(batch_size)
        weights = importance_weights(self.tree[idx] / self.tree.total, self.size, self.beta)
        self.weights_sum += float(weights.sum(dtype=np.float64))
        self.weights_n += len(weights)
        return self.gather(idx)._replace(weights=weights, indices=idx)

    def update_priorities(self, indices: np.ndarray, td_errors: np.ndarray) -> None:
        """Set the priorities of slots ``indices`` (``(B,)`` int; a slot drawn twice takes its
        last TD error) from the update's ``td_errors`` (``(B,)`` float, ``|Q(s, a) - y|``).

        Raises
        ------
        ValueError
            If the shapes differ, a slot is out of range or a TD error is not finite.
        """
        indices = np.asarray(indices, np.int64)
        if np.shape(td_errors) != indices.shape or indices.ndim != 1:
            raise ValueError(f"indices and td_errors must be two (B,) arrays, got shapes {indices.shape} "
                             f"and {np.shape(td_errors)}")
        self._check_slots(indices)
        p = self.priorities(td_errors)
        self.tree.set(indices, p)
        self.max_priority = max(self.max_priority, float(p.max(initial=0.0)))
        self.priority_updates += len(indices)

    def statistics(self) -> dict[str, Any]:
        """:meth:`ReplayBuffer.statistics` and the priorities': ``alpha``, ``beta`` (now),
        ``priority_mean``/``priority_min``/``priority_max`` (of ``p_i`` over the transitions held),
        ``max_priority`` (the largest ever set), ``priority_updates`` (transitions re-prioritised
        after updates), ``given_priorities`` (transitions added with priorities of their own: an
        actor's TD errors) and ``is_weight_mean`` (mean importance weight of all samples drawn)."""
        p = self._held_priorities()
        return {**super().statistics(), "prioritized": True, "alpha": self.alpha, "beta": self.beta,
                "priority_mean": float(p.mean()) if p.size else None,
                "priority_min": float(p.min()) if p.size else None,
                "priority_max": float(p.max()) if p.size else None,
                "max_priority": self.max_priority, "priority_updates": self.priority_updates,
                "given_priorities": self.given_priorities,
                "is_weight_mean": self.weights_sum / self.weights_n if self.weights_n else None}

    # Where the transitions are: slots 0..size-1 here; a buffer laid out otherwise (in segments,
    # ``dqnlab.parallel.shm.SharedPrioritizedReplay``) redefines these three.
    def _draw(self, batch_size: int) -> np.ndarray:
        """``(B,)`` int64 slots drawn with probability ``P(i)`` (stratified), each holding a transition."""
        return self.tree.sample(batch_size, self.rng, high=self.size)

    def _check_slots(self, indices: np.ndarray) -> None:
        """Raise ValueError unless each of ``indices`` (``(B,)`` int64) is a slot holding a transition."""
        if indices.size and (indices.min() < 0 or indices.max() >= self.size):
            raise ValueError(f"indices must be slots in 0..{self.size - 1}, got {indices.min()}..{indices.max()}")

    def _held_priorities(self) -> np.ndarray:
        """``(size,)`` float64 priorities of the transitions held."""
        return self.tree[: self.size]

    def state_dict(self) -> dict[str, Any]:
        """:meth:`ReplayBuffer.state_dict` with the priorities of the transitions held and the counters."""
        return {**super().state_dict(), "priorities": self.tree[: self.size].copy(),
                "max_priority": self.max_priority, "beta": self.beta, "priority_updates": self.priority_updates,
                "given_priorities": self.given_priorities, "weights_sum": self.weights_sum, "weights_n": self.weights_n}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output (the sum tree is rebuilt from the priorities).

        Raises
        ------
        ValueError
            As :meth:`ReplayBuffer.load_state_dict`, or if the state holds no priorities
            (a uniform buffer's: resume with ``prioritized=False``).
        """
        if "priorities" not in state:
            raise ValueError("replay state has no priorities: it was saved by a run without prioritized replay")
        priorities = np.asarray(state["priorities"], np.float64)
        if priorities.shape != (int(state["size"]),):
            raise ValueError(f"replay state: priorities must have shape {(int(state['size']),)}, "
                             f"got {priorities.shape}")
        super().load_state_dict(state)
        self.tree.tree[:] = 0.0
        self.tree.set(np.arange(self.size), priorities)
        self.max_priority, self.beta = float(state["max_priority"]), float(state["beta"])
        self.priority_updates, self.given_priorities = int(state["priority_updates"]), int(state["given_priorities"])
        self.weights_sum, self.weights_n = float(state["weights_sum"]), int(state["weights_n"])


def make_buffer(config: TrainConfig, seed: int | np.random.Generator | None = None) -> ReplayBuffer:
    """The replay buffer a :class:`~dqnlab.TrainConfig` asks for: ``buffer_size`` transitions,
    prioritized (``priority_alpha``, ``priority_eps``) when ``config.prioritized``."""
    if config.prioritized:
        return PrioritizedReplayBuffer(config.buffer_size, config.priority_alpha, config.priority_eps, seed)
    return ReplayBuffer(config.buffer_size, seed)


def update_priorities(buffer: Any, batch: Minibatch, td_errors: Any) -> None:
    """After an update on ``batch``: give a prioritized ``buffer`` its new TD errors (``td_errors()``
    is called only then: ``(B,)`` float32 ``|Q(s, a) - y|``, :meth:`dqnlab.DQNAgent.td_errors`).
    Nothing to do for a uniform sample (``batch.indices`` None)."""
    if batch.indices is not None:
        buffer.update_priorities(batch.indices, td_errors())


class NStepReturns:
    """Turns the one-step transitions of ``N`` boards, step after step, into n-step transitions.

    A transition ``(s_t, a_t)`` is emitted once ``n`` steps of its board have been seen, with
    reward ``R = r_t + gamma r_{t+1} + ... + gamma^(n-1) r_{t+n-1}``, next board ``s_{t+n}`` (and its
    legal moves) and ``steps = n``: its target bootstraps with ``gamma^n`` (Sutton and Barto 2018,
    section 7.1; Hessel et al. 2018). When a board's game ends, every pending transition of the
    board is emitted at once, spanning only the steps left: at a game over with ``done`` set (no
    bootstrap); at a truncation (``max_moves``) with ``done`` unset, bootstrapping from the last
    board with ``gamma^steps``. With ``n = 1`` transitions pass through unchanged.

    Rewards are summed as given (already transformed for the learner). With afterstate
    learning the learner subtracts the first reward itself (see :meth:`dqnlab.DQNAgent.td_targets`).

    Parameters
    ----------
    n : int
        Steps of each return, 1..255.
    gamma : float
        Discount per env step.
    n_envs : int
        Boards ``N`` stepped together.

    Raises
    ------
    ValueError
        If ``n`` is out of range.
    """

    def __init__(self, n: int, gamma: float, n_envs: int):
        if not isinstance(n, (int, np.integer)) or not 1 <= n <= MAX_N_STEP:
            raise ValueError(f"n must be an integer in 1..{MAX_N_STEP}, got {n!r}")
        self.n, self.gamma, self.n_envs = int(n), float(gamma), int(n_envs)
        # The last n steps of every board (ring over time): boards, actions, rewards.
        self.boards = np.zeros((self.n, n_envs, 4, 4), np.uint8)
        self.actions = np.zeros((self.n, n_envs), np.uint8)
        self.rewards = np.zeros((self.n, n_envs), np.float32)
        self.pending = np.zeros(n_envs, np.int64)  # steps of each board not yet emitted
        self.t = 0  # steps pushed

    def push(self, boards: np.ndarray, actions: np.ndarray, rewards: np.ndarray, next_boards: np.ndarray,
             dones: np.ndarray, next_masks: np.ndarray, ended: np.ndarray) -> dict[str, np.ndarray]:
        """One step of the ``N`` boards; the n-step transitions it completes.

        Parameters
        ----------
        boards : (N, 4, 4) uint8
        actions : (N,) integer
        rewards : (N,) float32
            Rewards as the learner sees them.
        next_boards : (N, 4, 4) uint8
            Boards after the move and the spawn (before any reset).
        dones : (N,) bool
            Game over (terminal).
        next_masks : (N, 4) bool
            Legal moves of ``next_boards``.
        ended : (N,) bool
            Game over or truncated: the board's pending transitions are all emitted.

        Returns
        -------
        dict of str to array
            The columns of :class:`ReplayBuffer.add_batch` (``boards``, ``actions``, ``rewards``,
            ``next_boards``, ``dones``, ``next_masks``, ``steps``) of the ``M`` transitions
            completed (``M`` = N with ``n = 1``), ordered by age of their first step, then board.
        """
        if self.n == 1:
            return {"boards": boards, "actions": np.asarray(actions, np.uint8), "rewards": rewards,
                    "next_boards": next_boards, "dones": dones, "next_masks": next_masks,
                    "steps": np.ones(len(actions), np.uint8)}
        slot = self.t % self.n
        self.boards[slot], self.actions[slot], self.rewards[slot] = boards, actions, rewards
        self.t += 1
        self.pending += 1
        # back[d, i]: return of board i from d steps back to now (d + 1 rewards), by R(d) = r_{t-d} + gamma R(d-1)
        back = np.empty((self.n, self.n_envs), np.float64)
        ret = np.zeros(self.n_envs, np.float64)
        for d in range(self.n):
            ret = self.rewards[(slot - d) % self.n] + self.gamma * ret
            back[d] = ret
        # emit: the oldest step of a board with n pending, and every pending step of an ended board
        depth = np.arange(self.n)[:, None]
        emit = (depth < self.pending) & (ended | (depth == self.n - 1))
        d, i = np.nonzero(emit[::-1])  # oldest first
        d = self.n - 1 - d
        t_slot = (slot - d) % self.n
        out = {"boards": self.boards[t_slot, i], "actions": self.actions[t_slot, i],
               "rewards": back[d, i].astype(np.float32), "next_boards": next_boards[i], "dones": dones[i],
               "next_masks": next_masks[i], "steps": (d + 1).astype(np.uint8)}
        self.pending = np.where(ended, 0, np.minimum(self.pending, self.n - 1))
        return out

    def state_dict(self) -> dict[str, Any]:
        """The pending steps (copies), for checkpoints."""
        return {"n": self.n, "boards": self.boards.copy(), "actions": self.actions.copy(),
                "rewards": self.rewards.copy(), "pending": self.pending.copy(), "t": self.t}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output (same ``n`` and boards).

        Raises
        ------
        ValueError
            If the state is of another ``n`` or number of boards.
        """
        if int(state["n"]) != self.n or np.shape(state["pending"]) != (self.n_envs,):
            raise ValueError(f"n-step state of n={state['n']} and {np.shape(state['pending'])} boards does not fit "
                             f"n={self.n} and {self.n_envs} boards")
        self.boards[...], self.actions[...] = state["boards"], state["actions"]
        self.rewards[...], self.pending[...], self.t = state["rewards"], state["pending"], int(state["t"])
