"""Weight maths: averaging, divergence, and the optimiser state as NumPy (to ship and average)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from ..agent.dqn import DQNAgent

__all__ = ["Weights", "average_weights", "normalised_coefficients", "divergence",
           "optimizer_state", "load_optimizer_state", "average_optimizer_states"]

#: Elements of a parameter averaged (or compared) at a time, in float64: an n-tuple table needs no
#: temporaries of its own size.
CHUNK = 1 << 16

#: A network's parameters by name (:meth:`DQNAgent.get_weights`).
Weights = dict[str, np.ndarray]


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


def divergence(weights: Sequence[Weights]) -> tuple[float, float]:
    """How far K learners have drifted apart.

    Returns
    -------
    (mean_l2, relative)
        ``mean_l2``: mean over learners of ``||theta_k - theta_bar||_2``, the L2
        distance of each flattened parameter vector to their mean; ``relative``:
        ``mean_l2 / ||theta_bar||_2``. Both 0 when the learners are identical.
    """
    square = np.zeros(len(weights))  # ||theta_k - theta_bar||^2, summed over chunks of each parameter
    mean_square = 0.0
    for n in weights[0]:
        parts = [np.asarray(w[n]).reshape(-1) for w in weights]
        for lo in range(0, parts[0].size, CHUNK):
            chunk = np.stack([p[lo:lo + CHUNK] for p in parts]).astype(np.float64)
            mean = chunk.mean(axis=0)
            square += ((chunk - mean) ** 2).sum(axis=1)
            mean_square += float(mean @ mean)
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
