"""Weight maths: averaging, the entries that changed since a common base (what learners that sync ship),
divergence, and the optimiser state as NumPy (to ship and average)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from ..agent.dqn import DQNAgent

__all__ = ["Weights", "Changes", "average_weights", "normalised_coefficients", "changed_entries", "combine_changes",
           "apply_changes", "changes_nbytes", "divergence", "optimizer_state", "load_optimizer_state",
           "average_optimizer_states"]

#: Elements of a parameter averaged (or compared) at a time, in float64: an n-tuple table needs no
#: temporaries of its own size.
CHUNK = 1 << 16

#: A network's parameters by name (:meth:`DQNAgent.get_weights`).
Weights = dict[str, np.ndarray]

#: A network's parameters where they differ from a base both sides hold (:func:`changed_entries`): per name,
#: ``(index, values)`` -- the flat indices (int64, increasing) of the entries that changed and their float32
#: values now -- or ``(None, values)``, the whole parameter, where most of it changed. An n-tuple network
#: trained for a few seconds changes a few per cent of its 67M entries: this is what keeps its syncs small.
Changes = dict[str, tuple[np.ndarray | None, np.ndarray]]

#: A parameter of which more than this share of the entries changed travels whole (indices would cost more).
DENSE_SHARE = 1 / 3


def average_weights(weights: Sequence[Weights], coefficients: Sequence[float] | np.ndarray | None = None) -> Weights:
    """Weighted average of parameter dicts: ``sum_k c_k w_k`` with ``sum_k c_k = 1``.

    Parameters
    ----------
    weights : sequence of dict of str to ndarray
        K dicts with the same names and shapes (e.g. :meth:`DQNAgent.get_weights`).
    coefficients : sequence of float, optional
        K non-negative numbers; normalised to sum to 1. ``None`` = plain mean ``1/K``.

    Returns
    -------
    dict of str to ndarray
        float32 arrays (the average is accumulated in float64).

    Raises
    ------
    ValueError
        If ``weights`` is empty, names or shapes differ, or the coefficients are not
        K finite non-negative numbers with a positive sum.
    """
    if len(weights) == 0:
        raise ValueError("average_weights needs at least one weight dict")
    c = normalised_coefficients(len(weights), coefficients)
    names = list(weights[0])
    for w in weights[1:]:
        if list(w) != names or any(np.shape(w[n]) != np.shape(weights[0][n]) for n in names):
            raise ValueError("weight dicts to average must have the same names and shapes")
    out = {}
    acc, term = np.empty(CHUNK), np.empty(CHUNK)
    for n in names:
        parts = [np.asarray(w[n]).reshape(-1) for w in weights]
        flat = np.empty(parts[0].size, np.float32)
        for lo in range(0, flat.size, CHUNK):  # in float64 a chunk at a time: no table-sized temporaries
            m = min(CHUNK, flat.size - lo)
            np.multiply(parts[0][lo:lo + m], c[0], out=acc[:m])
            for ck, part in zip(c[1:], parts[1:]):
                np.multiply(part[lo:lo + m], ck, out=term[:m])
                acc[:m] += term[:m]
            flat[lo:lo + m] = acc[:m]
        out[n] = flat.reshape(np.shape(weights[0][n]))
    return out


def normalised_coefficients(k: int, coefficients: Sequence[float] | np.ndarray | None) -> np.ndarray:
    """``(k,)`` float64 coefficients summing to 1: ``coefficients`` normalised, or ``1/k`` each for None.

    Raises
    ------
    ValueError
        Unless ``coefficients`` are ``k`` finite non-negative numbers with a positive sum.
    """
    if coefficients is None:
        return np.full(k, 1.0 / k)
    c = np.asarray(coefficients, dtype=np.float64)
    if c.shape != (k,) or not np.all(np.isfinite(c)) or np.any(c < 0) or c.sum() <= 0:
        raise ValueError(f"coefficients must be {k} finite non-negative numbers with a positive sum, "
                         f"got {coefficients!r}")
    return c / c.sum()


def changed_entries(weights: Weights, base: Weights) -> Changes:
    """The entries of ``weights`` that differ from ``base`` (same names and shapes), as :data:`Changes`.

    Bit-level difference (NaN counts as changed); a parameter with more than :data:`DENSE_SHARE` of its
    entries changed is given whole. ``weights`` may be views of a live network: the values are copied.
    """
    out: Changes = {}
    for n, w in weights.items():
        flat, old = np.asarray(w).reshape(-1), np.asarray(base[n]).reshape(-1)
        index = np.flatnonzero(flat.view(np.uint32) != old.view(np.uint32)) if flat.dtype == np.float32 \
            else np.flatnonzero(flat != old)
        out[n] = ((None, np.array(w, np.float32, copy=True)) if index.size > DENSE_SHARE * flat.size
                  else (index, flat[index].astype(np.float32)))
    return out


def apply_changes(weights: Weights, changes: Changes) -> None:
    """Write ``changes`` into ``weights`` in place (each array, or a view of a network's parameter, keeps its
    memory): ``w.flat[index] = values``, or the whole parameter."""
    for n, (index, values) in changes.items():
        flat = weights[n].reshape(-1)
        assert np.shares_memory(flat, weights[n])
        if index is None:
            flat[:] = values.reshape(-1)
        else:
            flat[index] = values


def changes_nbytes(changes: Changes) -> int:
    """Bytes of ``changes``' arrays (what a sync ships, before pickling)."""
    return sum(v.nbytes + (0 if i is None else i.nbytes) for i, v in changes.values())


def _on_union(base: Weights, changes: Sequence[Changes]) -> dict[str, tuple[np.ndarray | None, np.ndarray]]:
    """Per name: the entries any learner changed (None: all) and the ``(K, entries)`` float32 values every
    learner has there (its own where it changed them, else the base's)."""
    out = {}
    for n, b in base.items():
        parts = [c[n] for c in changes]
        flat = np.asarray(b).reshape(-1)
        if any(index is None for index, _ in parts):
            union = None
            rows = np.stack([values.reshape(-1) if index is None else _with(flat, index, values)
                             for index, values in parts])
        else:
            mask = np.zeros(flat.size, bool)
            for index, _ in parts:
                mask[index] = True
            union = np.flatnonzero(mask)
            rows = np.empty((len(parts), union.size), np.float32)
            for row, (index, values) in zip(rows, parts):
                row[:] = flat[union]
                row[np.searchsorted(union, index)] = values
        out[n] = (union, rows)
    return out


def _square_sum(x: np.ndarray) -> float:
    """``sum(x**2)`` in float64, a chunk at a time (no table-sized temporaries)."""
    return float(sum(np.dot(c, c) for c in (x[lo:lo + CHUNK].astype(np.float64) for lo in range(0, x.size, CHUNK))))


def _with(flat: np.ndarray, index: np.ndarray, values: np.ndarray) -> np.ndarray:
    """``flat`` with ``values`` at ``index`` (a copy)."""
    out = np.array(flat, np.float32, copy=True)
    out[index] = values
    return out


def combine_changes(base: Weights, changes: Sequence[Changes],
                    coefficients: Sequence[float] | np.ndarray | None = None, *, normalise: bool = True) -> Changes:
    """The weighted average ``sum_k c_k w_k`` of K learners, each ``base`` with its ``changes``, as the
    changes every learner applies (:func:`apply_changes`) to come out equal: on every entry any of them
    changed. The same float32 values :func:`average_weights` gives for the learners' whole weights (a
    one-hot ``coefficients`` copies that learner's values exactly).

    With ``normalise=False`` the coefficients are taken as given: ``base + sum_k c_k (w_k - base)``, so
    ones add every learner's changes whole, as a parameter server adds each worker's accumulated updates
    (Downpour SGD, Dean et al. 2012, "Large Scale Distributed Deep Networks", NeurIPS). Sums in float64.

    Raises
    ------
    ValueError
        If ``changes`` is empty, or the coefficients are not K finite non-negative numbers with a
        positive sum.
    """
    if len(changes) == 0:
        raise ValueError("combine_changes needs at least one learner's changes")
    c = normalised_coefficients(len(changes), coefficients)
    if not normalise and coefficients is not None:
        c = np.asarray(coefficients, np.float64)
    out: Changes = {}
    for n, (union, rows) in _on_union(base, changes).items():
        if normalise:
            mean = np.zeros(rows.shape[1])
        else:  # (1 - sum c) base + sum c_k w_k
            flat = np.asarray(base[n]).reshape(-1)
            mean = (1.0 - c.sum()) * (flat if union is None else flat[union]).astype(np.float64)
        for ck, row in zip(c, rows):
            mean += ck * row.astype(np.float64)
        mean = mean.astype(np.float32)
        out[n] = (union, mean) if union is not None else (None, mean.reshape(np.shape(base[n])))
    return out


def divergence(base: Weights, changes: Sequence[Changes]) -> tuple[float, float]:
    """How far K learners, each ``base`` with its ``changes``, have drifted apart.

    Returns
    -------
    (mean_l2, relative)
        ``mean_l2``: mean over learners of ``||theta_k - theta_bar||_2``, the L2
        distance of each flattened parameter vector to their mean; ``relative``:
        ``mean_l2 / ||theta_bar||_2``. Both 0 when the learners are identical.
    """
    square = np.zeros(len(changes))  # ||theta_k - theta_bar||^2, summed over the parameters
    mean_square = 0.0
    for n, (union, rows) in _on_union(base, changes).items():
        rows = rows.astype(np.float64)
        mean = rows.mean(axis=0)
        square += ((rows - mean) ** 2).sum(axis=1)
        mean_square += float(mean @ mean)
        if union is not None:  # the entries nobody changed: the base's
            flat = np.asarray(base[n]).reshape(-1)
            mean_square += _square_sum(flat) - _square_sum(flat[union])
    d = float(np.sqrt(square).mean())
    norm = math.sqrt(mean_square)
    return d, (d / norm if norm > 0 else 0.0)


def optimizer_state(agent: DQNAgent) -> dict[str, dict[str, Any]]:
    """The optimiser's per-parameter state as NumPy, keyed by parameter name.

    For Adam: ``{"mlp.0.weight": {"step": float, "exp_avg": ndarray, "exp_avg_sq": ndarray}, ...}``;
    plain SGD has no state (``{}``). Arrays are float32 copies shaped like the parameter.
    """
    out: dict[str, dict[str, Any]] = {}
    for name, p in agent.online.named_parameters():
        st = agent.optimizer.state.get(p)
        if st:
            out[name] = {k: (v.detach().numpy().copy() if v.dim() else float(v)) if torch.is_tensor(v) else v
                         for k, v in st.items()}
    return out


def load_optimizer_state(agent: DQNAgent, state: dict[str, dict[str, Any]]) -> None:
    """Replace the optimiser's per-parameter state with :func:`optimizer_state` output."""
    agent.optimizer.state.clear()
    for name, p in agent.online.named_parameters():
        if name in state:
            agent.optimizer.state[p] = {
                k: (torch.from_numpy(np.array(v, dtype=np.float32)) if isinstance(v, np.ndarray)
                    else torch.tensor(float(v), dtype=torch.float32))
                for k, v in state[name].items()}


def average_optimizer_states(states: Sequence[dict[str, dict[str, Any]]],
                             coefficients: Sequence[float] | np.ndarray | None = None) -> dict[str, dict[str, Any]]:
    """Weighted average of :func:`optimizer_state` dicts (Adam moments; equal step counts stay)."""
    c = normalised_coefficients(len(states), coefficients)
    out: dict[str, dict[str, Any]] = {}
    for name, first in states[0].items():
        out[name] = {}
        for key, v in first.items():
            if isinstance(v, np.ndarray):
                total = sum(ck * np.asarray(s[name][key], np.float64) for ck, s in zip(c, states))
                out[name][key] = total.astype(np.float32)
            else:
                out[name][key] = float(sum(ck * float(s[name][key]) for ck, s in zip(c, states)))
    return out
