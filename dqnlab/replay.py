"""Experience replay: a preallocated NumPy ring buffer of 2048 transitions.

Reference: experience replay as used by DQN (Mnih et al. 2015); layout after
Stable-Baselines3's ``ReplayBuffer`` (preallocated arrays, NamedTuple samples).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

__all__ = ["Minibatch", "ReplayBuffer"]


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
    """

    boards: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    next_boards: np.ndarray
    dones: np.ndarray
    next_masks: np.ndarray


_FIELDS: dict[str, tuple[tuple[int, ...], type]] = {
    "boards": ((4, 4), np.uint8),
    "actions": ((), np.uint8),
    "rewards": ((), np.float32),
    "next_boards": ((4, 4), np.uint8),
    "dones": ((), np.bool_),
    "next_masks": ((4,), np.bool_),
}


class ReplayBuffer:
    """Fixed-capacity FIFO of transitions with uniform sampling.

    Parameters
    ----------
    capacity : int
        Transitions kept; the oldest is overwritten first. About 40 bytes each.
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
        self.arrays = {name: np.zeros((self.capacity, *shape), dtype)
                       for name, (shape, dtype) in _FIELDS.items()}
        self.pos = 0  # next slot to write
        self.size = 0  # transitions held
        self.added = 0  # transitions ever added

    def __len__(self) -> int:
        return self.size

    def add_batch(self, boards: np.ndarray, actions: np.ndarray, rewards: np.ndarray,
                  next_boards: np.ndarray, dones: np.ndarray, next_masks: np.ndarray) -> None:
        """Append ``N`` transitions (shapes as in :class:`Minibatch` with ``B = N``).

        Raises
        ------
        ValueError
            If the arrays disagree in length or shape.
        """
        batch = {"boards": boards, "actions": actions, "rewards": rewards,
                 "next_boards": next_boards, "dones": dones, "next_masks": next_masks}
        n = len(actions)
        for name, value in batch.items():
            shape = _FIELDS[name][0]
            if np.shape(value) != (n, *shape):
                raise ValueError(f"{name} must have shape {(n, *shape)}, got {np.shape(value)}")
        if n > self.capacity:  # only the newest `capacity` survive anyway
            batch = {k: v[-self.capacity:] for k, v in batch.items()}
            n = self.capacity
        idx = (self.pos + np.arange(n)) % self.capacity
        for name, value in batch.items():
            self.arrays[name][idx] = value
        self.pos = (self.pos + n) % self.capacity
        self.size = min(self.size + n, self.capacity)
        self.added += n

    def sample(self, batch_size: int) -> Minibatch:
        """Draw ``batch_size`` transitions uniformly, with replacement.

        Raises
        ------
        ValueError
            If the buffer is empty or ``batch_size`` < 1.
        """
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if self.size == 0:
            raise ValueError("cannot sample from an empty replay buffer")
        idx = self.rng.integers(0, self.size, size=batch_size)
        a = self.arrays
        # ndarray.take along axis 0 is the same gather as a[idx], at about half the cost.
        return Minibatch(a["boards"].take(idx, 0), a["actions"].take(idx).astype(np.int64), a["rewards"].take(idx),
                         a["next_boards"].take(idx, 0), a["dones"].take(idx), a["next_masks"].take(idx, 0))

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
            If the capacities differ.
        """
        if state["capacity"] != self.capacity:
            raise ValueError(f"replay capacity mismatch: saved {state['capacity']}, buffer {self.capacity}")
        self.pos, self.size, self.added = int(state["pos"]), int(state["size"]), int(state["added"])
        self.rng.bit_generator.state = state["rng"]
        for k in self.arrays:
            self.arrays[k][: self.size] = state[k]
