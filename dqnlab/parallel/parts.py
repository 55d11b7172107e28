"""The parts of an all-reduce update: how rank 0's scatter carries each rank's part, and how their TD errors become priorities.

Every update, rank 0 scatters one :class:`Part` to each rank: a header (the command, the update's
number, the part's size and first slot, the rank's share of the update) and the part's transitions,
column after column (:func:`pack_minibatch`, :func:`unpack_minibatch`). Which columns travel depends on
the run (:func:`shipped_columns`): n-step spans and importance-sampling weights only where used; the
slots (``indices``) stay at rank 0, which gives the parts' TD errors to a prioritized buffer
(:func:`reprioritize`, also after a joblib round).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from ..config import TrainConfig
from ..replay import BATCH_COLUMNS, Minibatch

__all__ = ["STEP", "STATE", "STOP", "HEADER", "BASE_COLUMNS", "Part", "shipped_columns", "pack_minibatch",
           "unpack_minibatch", "reprioritize"]

# The commands rank 0 scatters, in the header of every rank's part: command, update number,
# transitions that follow, whether to measure the gradient norm, the part's first slot in the
# update's transitions and their number (int64 each), and this rank's share of the update (float64).
#: The commands: an update, a state request (the update number is then the request's), the end.
STEP, STATE, STOP = 1, 2, 3
_INTS = 6
#: Bytes of a part's header, before its transitions.
HEADER = 8 * _INTS + 8

# A part carries columns of :data:`dqnlab.replay.BATCH_COLUMNS` (those of a sampled minibatch: shape
# per transition and dtype), one after the other in the order its ``columns`` name them.
#: The columns every part carries (a uniform one-step minibatch's: all but ``steps`` and ``weights``).
BASE_COLUMNS = tuple(c for c in BATCH_COLUMNS if c not in ("steps", "weights"))


def shipped_columns(config: TrainConfig) -> tuple[str, ...]:
    """The :class:`~dqnlab.replay.Minibatch` columns a rank's part carries under ``config``:
    :data:`BASE_COLUMNS`, ``steps`` with n-step returns (``n_step > 1``) and ``weights`` with
    prioritized replay (importance-sampling weights). Slots (``indices``) stay at rank 0."""
    return BASE_COLUMNS + (("steps",) if config.n_step > 1 else ()) + (("weights",) if config.prioritized else ())


def _bytes_per_transition(columns: tuple[str, ...]) -> int:
    return sum(int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
               for shape, dtype in (BATCH_COLUMNS[c] for c in columns))


def pack_minibatch(batch: Minibatch, out: np.ndarray, columns: tuple[str, ...] = BASE_COLUMNS) -> None:
    """Write the ``columns`` of ``batch`` (``n`` transitions, a :class:`~dqnlab.replay.Minibatch`)
    into the uint8 buffer ``out`` after the header, column after column
    (:func:`unpack_minibatch` reads it back); ``out`` holds at least ``n`` transitions of them.

    Raises
    ------
    ValueError
        If one of ``columns`` is None in ``batch``.
    """
    at = HEADER
    for name in columns:
        column = getattr(batch, name)
        if column is None:
            raise ValueError(f"the minibatch has no {name} to send")
        raw = np.ascontiguousarray(column, dtype=BATCH_COLUMNS[name][1]).view(np.uint8).reshape(-1)
        out[at:at + raw.size] = raw
        at += raw.size


def unpack_minibatch(buf: np.ndarray, n: int, columns: tuple[str, ...] = BASE_COLUMNS) -> Minibatch:
    """The minibatch of ``n`` transitions in ``buf`` (:func:`pack_minibatch` of the same
    ``columns``), as views of it (read-only use: the next scatter overwrites them); the
    columns not sent are None."""
    at, fields = HEADER, {}
    for name in columns:
        shape, dtype = BATCH_COLUMNS[name]
        size = n * int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        fields[name] = buf[at:at + size].view(dtype).reshape((n, *shape))
        at += size
    return Minibatch(**fields)


class Part:
    """One rank's part of a scatter: a uint8 tensor of the header and up to ``n`` transitions
    of ``columns``, with NumPy views of it.

    Parameters
    ----------
    n : int
        The most transitions it carries (the run's ``batch_size``).
    columns : tuple of str
        The columns it carries (:func:`shipped_columns`).

    Attributes
    ----------
    tensor : (HEADER + n * bytes per transition,) uint8 tensor
        What the scatter sends and receives.
    raw : uint8 ndarray
        The same bytes (:func:`pack_minibatch`, :func:`unpack_minibatch`).
    ints : (6,) int64 ndarray
        The header's command, update number, transitions, grad_norm flag, first slot and total transitions.
    share : (1,) float64 ndarray
        The rank's share of the update.
    """

    def __init__(self, n: int, columns: tuple[str, ...]):
        self.columns = columns
        self.tensor = torch.zeros(HEADER + n * _bytes_per_transition(columns), dtype=torch.uint8)
        self.raw = self.tensor.numpy()
        self.ints = self.raw[:8 * _INTS].view(np.int64)  # command, update, transitions, grad_norm, first, total
        self.share = self.raw[8 * _INTS:HEADER].view(np.float64)


def reprioritize(buffer: Any, parts: Sequence[Minibatch], td_errors: np.ndarray | None) -> None:
    """Give a prioritized ``buffer`` the new TD errors of every part of an update: ``td_errors``
    ``(total,)`` float32 ``|Q(s, a) - y|`` of the parts' transitions one part after the other
    (:attr:`~dqnlab.parallel.replica.Replica.td_errors`, or a joblib round's), the parts' ``indices``
    their slots. Nothing when ``buffer`` or ``td_errors`` is None (uniform replay).

    Raises
    ------
    ValueError
        As :meth:`~dqnlab.replay.PrioritizedReplayBuffer.update_priorities` (a TD error not finite).
    """
    if buffer is not None and td_errors is not None:
        buffer.update_priorities(np.concatenate([p.indices for p in parts]), td_errors)

