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
        """Append ``N`` transitions (shapes and kinds as in :class:`Minibatch` with ``B = N``).

        ``boards`` and ``next_boards``: integer exponents in 0..17; ``actions``:
        integer action ids in 0..3; ``rewards``: finite numbers; ``dones`` and
        ``next_masks``: bool. Nothing is stored unless every array is valid.

        Raises
        ------
        ValueError
            If an array has the wrong length, shape or kind of values, or a value
            out of range; the message names the array.
        """
        batch = {"boards": boards, "actions": actions, "rewards": rewards,
                 "next_boards": next_boards, "dones": dones, "next_masks": next_masks}
        n = np.shape(actions)[0] if np.ndim(actions) >= 1 else -1
        if n < 0:
            raise ValueError(f"actions must be a 1-d array of N action ids, got shape {np.shape(actions)}")
        for name, value in batch.items():
            value = batch[name] = np.asarray(value)
            shape = _FIELDS[name][0]
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

    def sample(self, batch_size: int) -> Minibatch:
        """Draw ``batch_size`` transitions uniformly, with replacement.

        Raises
        ------
        ValueError
            If the buffer is empty or ``batch_size`` is not an integer >= 1.
        """
        if not isinstance(batch_size, (int, np.integer)) or isinstance(batch_size, bool) or batch_size < 1:
            raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")
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
        for name, (shape, _dtype) in _FIELDS.items():
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
