"""The n-tuple network on bitboards: features, values, the greedy afterstate move and sparse SGD.

An n-tuple network (Szubert and Jaskowski, "Temporal difference learning of N-tuple networks for
the game 2048", IEEE CIG 2014) sums one table entry per *placement*: a tuple of ``m`` cells at one of
the board's 8 symmetric placements reads the ``m`` exponents on its cells as an ``m``-digit base-16
number, the row of its tuple's table. Here a board's 8 symmetries are taken once, by masks and
shifts (:func:`dqnlab.core.bitboard.symmetry`), and each tuple is read from each of them as *runs*
of consecutive cells, one shift and mask a run (the 6-cell line ``0..5`` is one run; the 2x3
rectangle ``0, 1, 2, 4, 5, 6`` two). :func:`layout` makes the arrays a network is described by:

* ``runs`` ``(T, R, 3)`` uint64: per tuple, each run's shift on the board, its mask, and its shift
  in the row index; ``R`` is 2 when no tuple has more runs, else 6; runs past a tuple's ``n_runs``
  are zero (a zero mask reads nothing);
* ``n_runs`` ``(T,)`` int64;
* ``offsets`` ``(S, T)`` int64: the first row of each tuple's table in the flat weight array, for
  each of the ``S`` stages of a multi-stage network (one row of offsets for a plain one);
* ``stage_exps`` ``(S - 1,)`` int64: the exponents at which each later stage takes over. A board
  whose largest exponent is at least ``stage_exps[k - 1]`` (and below ``stage_exps[k]``) reads the
  table set of stage ``k`` (Wu, Yeh et al., "Multi-stage temporal difference learning for 2048",
  TAAI 2014): one set of tables for each phase of the game.

The kernels take the four as one tuple, ``layout``.

Placement ``p = 8 t + g`` is tuple ``t`` on symmetry ``g``, the order of
:class:`dqnlab.agent.networks.NTupleNetwork`. A feature reads 4 bits a cell, so an exponent above 15
reads as 15 (:mod:`dqnlab.core.bitboard`). Values are float32 sums (:func:`gather`: in four partial
sums; every CPU path of the package sums so, a GPU's ``embedding_bag`` in its own order); the TD update is in-place SGD on the rows a minibatch
used, ``w[row] -= lr * dL/dV`` (the n-tuple papers' update, batched as DQN's minibatch).
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from .bitboard import afterstate, inline, kernel, pack, symmetry, transpose

__all__ = ["layout", "placements", "stage", "features", "value", "values", "feature_batch", "gather", "gather_batch",
           "afterstate_rows", "afterstate_values", "sgd_rows", "tc_rows", "tc_entries", "sparse_grad_norm", "prefetch"]

#: The most runs a tuple can have (6 cells, none next to another).
MAX_RUNS = 6


def layout(tuples: tuple[tuple[int, ...], ...], offsets: np.ndarray,
           stage_exps: tuple[int, ...] = ()) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(runs, n_runs, offsets, stage_exps)`` of tuples of cells (0..15, row-major; at most 6 each) whose
    tables start at rows ``offsets`` ``(T,)`` of the flat weight array, with a set of tables for each stage
    past the exponents ``stage_exps`` (increasing; the sets one after another, see the module)."""
    runs = np.zeros((len(tuples), MAX_RUNS, 3), np.uint64)
    n_runs = np.zeros(len(tuples), np.int64)
    for t, cells in enumerate(tuples):
        k = 0
        while k < len(cells):
            n = 1
            while k + n < len(cells) and cells[k + n] == cells[k] + n:
                n += 1
            runs[t, n_runs[t]] = (4 * cells[k], (1 << (4 * n)) - 1, 4 * k)
            n_runs[t] += 1
            k += n
    width = 2 if n_runs.max() <= 2 else MAX_RUNS  # (a tuple of one run reads a zero mask as its second)
    offsets = np.asarray(offsets, np.int64)
    rows = sum(16 ** len(t) for t in tuples)
    staged = np.stack([offsets + k * rows for k in range(len(stage_exps) + 1)])
    return np.ascontiguousarray(runs[:, :width]), n_runs, staged, np.asarray(stage_exps, np.int64).copy()


def placements(layout: tuple[np.ndarray, ...]) -> int:
    """The weight rows a board reads, ``P = 8 T``."""
    return 8 * layout[2].shape[1]


@inline
def stage(b: np.uint64, stage_exps: np.ndarray) -> int:
    """The stage of bitboard ``b``: how many of ``stage_exps`` its largest exponent reaches."""
    if stage_exps.shape[0] == 0:
        return 0
    top = np.uint64(0)
    x = b
    for _ in range(16):
        top = max(top, x & np.uint64(15))
        x >>= np.uint64(4)
    k = 0
    while k < stage_exps.shape[0] and np.int64(top) >= stage_exps[k]:
        k += 1
    return k


@inline
def _symmetries(b: np.uint64):
    """The board under its 8 symmetries (a tuple: no allocation)."""
    return (b, symmetry(b, 1), symmetry(b, 2), symmetry(b, 3), symmetry(b, 4), symmetry(b, 5), symmetry(b, 6),
            symmetry(b, 7))


@inline
def gather(weights: np.ndarray, rows: np.ndarray) -> np.float32:
    """The float32 sum of ``weights[rows]`` (``rows`` ``(P,)`` int64): four partial sums over the rows
    ``p mod 4``, then ``(s0 + s1) + (s2 + s3)``, so that the additions do not wait one for another."""
    s0 = s1 = s2 = s3 = np.float32(0.0)
    n = rows.shape[0]
    p = 0
    while p + 4 <= n:
        s0 += weights[rows[p]]
        s1 += weights[rows[p + 1]]
        s2 += weights[rows[p + 2]]
        s3 += weights[rows[p + 3]]
        p += 4
    while p < n:
        s0 += weights[rows[p]]
        p += 1
    return (s0 + s1) + (s2 + s3)


@intrinsic
def prefetch(typingctx, array, index):
    """Ask the CPU to bring the cache line of element ``index`` of a C-contiguous ``array`` (counted over its
    flattened elements) into every cache level, for writing (LLVM's ``llvm.prefetch``); changes nothing, so that
    the misses of rows read later overlap with the work before."""
    if not (isinstance(array, types.Array) and array.layout == "C" and isinstance(index, types.Integer)):
        return None

    def codegen(context, builder, signature, args):
        data = context.make_array(signature.args[0])(context, builder, args[0]).data
        at = builder.gep(data, [context.cast(builder, args[1], signature.args[1], types.intp)])
        byte = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        fn = builder.module.declare_intrinsic("llvm.prefetch", [byte], ir.FunctionType(ir.VoidType(), [byte, i32, i32, i32]))
        builder.call(fn, [builder.bitcast(at, byte), i32(1), i32(3), i32(1)])  # (write, keep in every level, data)
        return context.get_dummy_value()

    return types.void(array, index), codegen


@inline
def features(b: np.uint64, layout: tuple, out: np.ndarray) -> None:
    """The ``P = 8 T`` weight rows a bitboard selects (in its stage's tables), into ``out`` ``(P,)`` int64.

    When no tuple has more than two runs (the 4x6 and 2x4+2x6 sets), every tuple reads its runs from
    locals, which lets the compiler keep the 8 boards' arithmetic side by side;
    other sets loop over each tuple's runs."""
    runs, n_runs, staged, stage_exps = layout
    offsets = staged[stage(b, stage_exps)]
    sym = _symmetries(b)
    if runs.shape[1] == 2:
        for t in range(offsets.shape[0]):
            base = offsets[t]
            s0, m0, d0 = runs[t, 0, 0], runs[t, 0, 1], runs[t, 0, 2]
            s1, m1, d1 = runs[t, 1, 0], runs[t, 1, 1], runs[t, 1, 2]
            for g in range(8):
                x = sym[g]
                out[8 * t + g] = base + np.int64((((x >> s0) & m0) << d0) | (((x >> s1) & m1) << d1))
        return
    for t in range(offsets.shape[0]):
        for g in range(8):
            x = sym[g]
            r = np.uint64(0)
            for k in range(n_runs[t]):
                r |= ((x >> runs[t, k, 0]) & runs[t, k, 1]) << runs[t, k, 2]
            out[8 * t + g] = offsets[t] + np.int64(r)


@kernel
def value(b: np.uint64, weights: np.ndarray, layout: tuple) -> np.float32:
    """V of one bitboard: the float32 sum of its ``P`` entries of ``weights`` ``(rows,)`` float32."""
    rows = np.empty(8 * layout[2].shape[1], np.int64)
    features(b, layout, rows)
    return gather(weights, rows)


@kernel
def feature_batch(boards: np.ndarray, layout: tuple, out: np.ndarray) -> None:
    """``(N, 16)`` uint8 exponent boards -> ``(N, P)`` int64 weight rows."""
    for n in range(boards.shape[0]):
        features(pack(boards[n])[0], layout, out[n])


@kernel
def gather_batch(weights: np.ndarray, rows: np.ndarray, columns: np.ndarray, out: np.ndarray) -> None:
    """``(N, O)`` float32 values of the rows ``rows`` ``(N, P)`` int64 of ``weights`` ``(R, O)``: the sum of
    :func:`gather` for one value (``O = 1``); for four action values, placement ``p`` reads action ``a``
    from column ``columns[p, a]`` (its own frame; ``columns`` ``(P, 4)`` int64), summed in order."""
    n_out = weights.shape[1]
    for n in range(rows.shape[0]):
        if n_out == 1:
            out[n, 0] = gather(weights[:, 0], rows[n])
            continue
        for o in range(n_out):
            v = np.float32(0.0)
            for p in range(rows.shape[1]):
                v += weights[rows[n, p], columns[p, o]]
            out[n, o] = v


@kernel
def values(boards: np.ndarray, weights: np.ndarray, layout: tuple, columns: np.ndarray, out: np.ndarray) -> None:
    """``(N, 16)`` uint8 boards -> ``(N, O)`` float32 values of ``weights`` ``(R, O)`` (see :func:`gather_batch`)."""
    rows = np.empty((1, 8 * layout[2].shape[1]), np.int64)
    for n in range(boards.shape[0]):
        features(pack(boards[n])[0], layout, rows[0])
        gather_batch(weights, rows, columns, out[n:n + 1])


@kernel
def afterstate_rows(cells16: np.ndarray, layout: tuple, log_rewards: bool, scratch: np.ndarray, rows: np.ndarray,
                    rewards: np.ndarray, legal: np.ndarray) -> bool:
    """For the four moves of one board (16 exponent bytes): whether each is legal (``legal`` ``(4,)`` bool),
    its reward (``rewards`` ``(4,)`` float32; ``log2(1 + points)`` with ``log_rewards``, as
    ``TrainConfig.reward_transform = "log"``) and, for the legal ones, the weight rows of its afterstate
    (``rows`` ``(4, P)`` int64). Returns whether any move is legal.

    The first half of :func:`afterstate_values`: the learner's loops compute the rows of many boards
    first and read the weights after (:func:`gather`), so that the table lookups, independent of each
    other, overlap in the memory system instead of waiting one for another."""
    b, big = pack(cells16)
    t = transpose(b)
    any_legal = False
    for a in range(4):
        nb, points, changed = afterstate(cells16, b, t, big, a, scratch)
        legal[a] = changed
        if changed:
            r = np.float32(points)
            if log_rewards:
                r = np.float32(np.log2(np.float32(1.0) + r))
            rewards[a] = r
            features(nb, layout, rows[a])
            any_legal = True
    return any_legal


@kernel
def afterstate_values(cells16: np.ndarray, weights: np.ndarray, layout: tuple, log_rewards: bool, scratch: np.ndarray,
                      q: np.ndarray) -> bool:
    """``q[a] = r(s, a) + V(afterstate(s, a))`` (float32) of the four moves of one board (16 exponent bytes),
    ``-inf`` for a move that changes nothing; returns whether any move is legal (see :func:`afterstate_rows`)."""
    rows = np.empty((4, 8 * layout[2].shape[1]), np.int64)
    rewards = np.empty(4, np.float32)
    legal = np.empty(4, np.bool_)
    any_legal = afterstate_rows(cells16, layout, log_rewards, scratch, rows, rewards, legal)
    for a in range(4):
        q[a] = gather(weights, rows[a]) + rewards[a] if legal[a] else -np.inf
    return any_legal


#: Rows of a block that one thread of a team updates (:func:`owns`): 16 float32 weights, one cache line.
BLOCK_BITS = 4


@inline
def owns(r, member, members):
    """Whether team member ``member`` of ``members`` updates row ``r``: rows go by blocks of
    ``2**BLOCK_BITS``, so that no two members write one cache line of the weights."""
    return members == 1 or (r >> BLOCK_BITS) % members == member


@kernel
def sgd_rows(weights: np.ndarray, rows: np.ndarray, slopes: np.ndarray, lr: float, member: int = 0,
             members: int = 1) -> None:
    """Plain SGD on the rows a minibatch used: ``weights[rows[i, p]] -= lr * slopes[i]``, in the order
    of ``rows`` ``(B, P)`` int64 (a row used twice takes both steps), ``slopes`` ``(B,)`` float32 the
    loss's gradient with respect to each sample's value. With a team of ``members`` threads, the rows
    member ``member`` :func:`owns` (each thread its own; together the whole step, each row's steps in the same
    order)."""
    step = np.float32(-lr)
    for i in range(rows.shape[0]):
        s = step * slopes[i]
        for p in range(rows.shape[1]):
            r = rows[i, p]
            if owns(r, member, members):
                weights[r] += s


@inline
def _tc_step(weights, sums, r, g, lr):
    """One temporal-coherence step of entry ``r`` on gradient ``g`` (see :func:`tc_rows`)."""
    e, a = sums[r, 0], sums[r, 1]
    rate = abs(e) / a if a > 0 else np.float32(1.0)
    weights[r] -= np.float32(lr) * rate * g
    sums[r, 0] = e + g
    sums[r, 1] = a + abs(g)


@kernel
def tc_rows(weights: np.ndarray, sums: np.ndarray, rows: np.ndarray, slopes: np.ndarray, lr: float, member: int = 0,
            members: int = 1) -> None:
    """Temporal coherence learning (TC; Beal and Smith 1999, as Jaskowski 2018 uses it for 2048) on the
    rows a minibatch used: each weight has its own step size, ``lr * |E| / A``, from the sum ``E`` of
    the gradients it got and the sum ``A`` of their magnitudes (a weight never updated steps at
    ``lr``). A weight whose errors keep one sign keeps a large step; one whose errors cancel out, as
    they do once it has learned what it can, slows to a halt. Then ``E += g``, ``A += |g|``.
    ``weights`` ``(R,)`` float32 and ``sums`` ``(R, 2)`` float32 (``E``, ``A`` side by side: one cache line
    holds both of an entry's), in place; ``rows`` ``(B, P)`` int64 and ``slopes`` ``(B,)`` float32 as
    :func:`sgd_rows`, in the same order (a row used twice takes both steps), and with a team, as it."""
    for i in range(rows.shape[0]):
        g = slopes[i]
        for p in range(rows.shape[1]):
            r = rows[i, p]
            if owns(r, member, members):
                _tc_step(weights, sums, r, g, lr)


@kernel
def tc_entries(weights: np.ndarray, sums: np.ndarray, entries: np.ndarray, grads: np.ndarray, lr: float) -> None:
    """:func:`tc_rows` on entries of a flat table: entry ``entries[k]`` (``(K,)`` int64) gets the gradient
    ``grads[k]`` (``(K,)`` float32), in order (an entry whose gradient is 0 is left as it is)."""
    for k in range(entries.shape[0]):
        _tc_step(weights, sums, entries[k], grads[k], lr)


@kernel
def sparse_grad_norm(rows: np.ndarray, slopes: np.ndarray) -> float:
    """The L2 norm of the sparse gradient whose row ``rows[i, p]`` gets ``slopes[i]``, rows used more
    than once summed first (as a coalesced sparse tensor)."""
    flat = rows.reshape(-1)
    vals = np.empty(flat.size, np.float64)
    for i in range(rows.shape[0]):
        for p in range(rows.shape[1]):
            vals[i * rows.shape[1] + p] = slopes[i]
    order = np.argsort(flat, kind="mergesort")
    total = 0.0
    acc = 0.0
    for j in range(flat.size):
        acc += vals[order[j]]
        if j + 1 == flat.size or flat[order[j + 1]] != flat[order[j]]:
            total += acc * acc
            acc = 0.0
    return np.sqrt(total)
