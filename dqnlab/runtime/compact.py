"""Mostly-zero arrays stored by their non-zero entries: how run directories stay small.

A young n-tuple table (4x6 tuples: 67M float32 entries, 268 MB dense) is mostly the zeros of
features no board has reached yet. ``checkpoint.pt`` and ``model.pt`` store such an array by
its non-zero entries, bit-exact, where that takes under half its dense bytes; every other
array is stored as it is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

__all__ = ["SPARSE_MIN_SIZE", "nonzero_entries", "Entries", "dense", "saved_tensor", "dense_tensor"]

#: Arrays (and tensors) of at least this many elements are stored as their non-zero entries where that takes
#: under half their bytes.
SPARSE_MIN_SIZE = 1 << 20


def nonzero_entries(a: np.ndarray, rows: bool = False) -> np.ndarray | None:
    """The flat indices (``rows``: the first-axis indices) of ``a``'s non-zero entries, or None where
    storing ``a`` densely is as small (or ``a`` is under :data:`SPARSE_MIN_SIZE` elements, or not numeric).

    Zero means all bits zero, so -0.0 and NaN payloads are kept. Indices are int32 where the array has
    under 2^31 elements (``rows``: int64, as torch's sparse tensors need), else int64.
    """
    if a.size < SPARSE_MIN_SIZE or a.dtype.kind not in "fiu":
        return None
    bits = np.ascontiguousarray(a).view(f"u{a.itemsize}")
    if rows:
        used = bits.reshape(len(a), -1).any(axis=1)
        count, each = int(np.count_nonzero(used)), 8 + a.itemsize * (a.size // max(len(a), 1))
    else:
        used, count, each = bits.reshape(-1), int(np.count_nonzero(bits)), (4 if a.size < 2**31 else 8) + a.itemsize
    if count * each >= a.nbytes // 2:
        return None  # as dense as that (an optimistic table, say): said before any index is made
    index = np.flatnonzero(used)
    return index if rows or a.size >= 2**31 else index.astype(np.int32)


@dataclass(frozen=True)
class Entries:
    """A mostly-zero array as its non-zero entries: ``shape``, ``dtype``, flat ``index`` (:func:`nonzero_entries`)
    and ``values`` ``(len(index),)``; :meth:`dense` gives the array back bit-exact. ``tensor``: the array was a
    CPU tensor's, and :func:`dense` gives a tensor back."""

    shape: tuple[int, ...]
    dtype: np.dtype
    index: np.ndarray
    values: np.ndarray
    tensor: bool = False

    @classmethod
    def of(cls, a: np.ndarray) -> Entries | None:
        """``a``'s non-zero entries, or None where :func:`nonzero_entries` says dense is as small."""
        index = nonzero_entries(a)
        if index is None:
            return None
        return cls(tuple(a.shape), a.dtype, index, np.ascontiguousarray(a).reshape(-1)[index])

    def dense(self) -> np.ndarray:
        """The array, zeros where no entry is."""
        out = np.zeros(math.prod(self.shape), self.dtype)
        out[self.index] = self.values
        return out.reshape(self.shape)


def dense(x: Any) -> Any:
    """``x`` whole: an :class:`Entries`' array (a tensor where it was one's); anything else as it is."""
    if not isinstance(x, Entries):
        return x
    return torch.from_numpy(x.dense()) if x.tensor else x.dense()


def saved_tensor(a: np.ndarray) -> torch.Tensor:
    """``a`` as a tensor to :func:`torch.save`: a sparse COO tensor over its first axis (one entry per
    non-zero row, ``t.to_dense()`` gives ``a`` back bit-exact) where :func:`nonzero_entries` says that is
    under half the bytes, else dense (sharing ``a``'s memory)."""
    t = torch.from_numpy(np.ascontiguousarray(a))
    rows = nonzero_entries(a, rows=True)
    if rows is None:
        return t
    index = torch.from_numpy(rows).unsqueeze(0)
    return torch.sparse_coo_tensor(index, t[index[0]], t.shape, is_coalesced=True, check_invariants=False)


def dense_tensor(t: torch.Tensor) -> torch.Tensor:
    """A tensor read from a file, dense (the inverse of :func:`saved_tensor`)."""
    return t.to_dense() if t.is_sparse else t
