"""Threads that share one update, inside the compiled core: atomics and a generation counter.

A *team* is K threads, each in a kernel that releases the GIL: a leader, which acts and applies every
update, and K - 1 helpers, which each compute a share of every update's minibatch
(:func:`dqnlab.core.loops.help_updates`). They meet at one ``(TEAM_SLOTS,)`` int64 array ``team``
without the operating system: the leader fills the update's inputs, then opens it by adding one to
``team[GENERATION]`` (an atomic read-modify-write, so everything written before it is seen by whoever
reads the new generation); each helper, waiting for that generation, computes its share and adds one
to ``team[DONE]``; the leader, having done its own share, waits until ``DONE`` counts every helper's.
A meeting needs no system call, where a ``threading.Barrier`` wakes each thread through the operating
system, at a cost of the order of the whole update's. A waiting thread spins, yielding its core after
:data:`SPINS` turns, so a team of more threads than cores still moves.

The same array serves learners that each make their own updates on one shared table (``shared``): with
``team[LOCKED]`` set, :func:`acquire` and :func:`release` make a ticket lock around each update (Mellor-Crummey
and Scott, "Algorithms for scalable synchronization on shared-memory multiprocessors", ACM TOCS 1991): a
learner takes the next ticket with one atomic add and waits until ``team[SERVING]`` reaches it, so the
updates are made one at a time, in the order asked, by threads or by processes on one shared-memory block.

The atomics are LLVM's (``atomicrmw``, ``load atomic``, ``store atomic``, sequentially consistent),
emitted through numba's public :func:`numba.extending.intrinsic`.
"""

from __future__ import annotations

import sys

import numpy as np
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from .bitboard import inline, kernel

__all__ = ["TEAM_SLOTS", "GENERATION", "DONE", "STOP", "MEMBERS", "UPDATE", "FIRST", "TC", "MODE", "PHASE", "BAD",
           "EVERY", "AVERAGES", "LOCKED", "TICKET", "SERVING", "READ", "SHARE", "AVERAGE", "STEP", "MEAN", "SPINS", "new_team",
           "atomic_add", "atomic_load", "atomic_store", "wait_until", "share", "acquire", "release"]

#: Slots of a team's array: the generation the leader opened, the shares done (summed over generations),
#: whether the team stops, its size K, the opened update's id, whether it is its call's first, whether its
#: step is temporal coherence's; how the team shares an update (:data:`SHARE` or :data:`AVERAGE`), what the
#: opened generation is (:data:`STEP` or :data:`MEAN`), the members whose loss was not finite, the updates
#: between two averages and the averages made; whether learners sharing the array take its update lock, the
#: lock's next ticket and the ticket it serves; the members that have read the leader's table in this step.
(GENERATION, DONE, STOP, MEMBERS, UPDATE, FIRST, TC, MODE, PHASE, BAD, EVERY, AVERAGES, LOCKED, TICKET,
 SERVING, READ) = range(16)
TEAM_SLOTS = 16
#: Modes: one minibatch shared (``sharded``), or each member its own minibatch and table, averaged (``averaged``).
SHARE, AVERAGE = 0, 1
#: Phases of an ``averaged`` team's generation: each member's own step, or the average of the rows they changed.
STEP, MEAN = 0, 1
#: Turns of a wait loop before it yields the core (``sched_yield``) on each further turn.
SPINS = 2000

if sys.platform == "win32":  # pragma: no cover - exercised on Windows only
    _yield = types.ExternalFunction("SwitchToThread", types.int32())
else:
    _yield = types.ExternalFunction("sched_yield", types.int32())


def new_team(members: int, average_every: int = 0, locked: bool = False, out: np.ndarray | None = None) -> np.ndarray:
    """A team's ``(TEAM_SLOTS,)`` int64 array for ``members`` threads (1: a learner alone, which meets
    nobody); ``average_every`` > 0: an ``averaged`` team whose tables are averaged every that many updates;
    ``locked``: learners alone that share the array take its update lock (:func:`acquire`). ``out``: fill
    this array (a shared-memory block's) rather than a new one."""
    team = np.zeros(TEAM_SLOTS, np.int64) if out is None else out
    team[:] = 0
    team[MEMBERS] = members
    team[LOCKED] = locked
    team[MODE] = AVERAGE if average_every > 0 else SHARE
    team[EVERY] = max(1, average_every)
    return team


def _pointer(context, builder, array_type, array, index, index_type):
    """The address of a 1-d int64 array's element ``index``."""
    i = context.cast(builder, index, index_type, types.intp)
    return cgutils.get_item_pointer(context, builder, array_type, context.make_array(array_type)(context, builder, array),
                                    [i])


def _int64_array(array) -> bool:
    return isinstance(array, types.Array) and array.dtype == types.int64 and array.ndim == 1


@intrinsic
def atomic_add(typingctx, array, index, value):
    """``array[index] += value`` in one atomic step; returns the value before. ``array``: 1-d int64."""
    if not (_int64_array(array) and isinstance(index, types.Integer) and isinstance(value, types.Integer)):
        return None

    def codegen(context, builder, signature, args):
        ptr = _pointer(context, builder, signature.args[0], args[0], args[1], signature.args[1])
        v = context.cast(builder, args[2], signature.args[2], types.int64)
        return builder.atomic_rmw("add", ptr, v, "seq_cst")

    return types.int64(array, index, value), codegen


@intrinsic
def atomic_load(typingctx, array, index):
    """``array[index]`` read in one atomic step (never from a register: a wait loop sees other threads'
    writes). ``array``: 1-d int64."""
    if not (_int64_array(array) and isinstance(index, types.Integer)):
        return None

    def codegen(context, builder, signature, args):
        ptr = _pointer(context, builder, signature.args[0], args[0], args[1], signature.args[1])
        return builder.load_atomic(ptr, "seq_cst", 8)

    return types.int64(array, index), codegen


@intrinsic
def atomic_store(typingctx, array, index, value):
    """``array[index] = value`` in one atomic step. ``array``: 1-d int64."""
    if not (_int64_array(array) and isinstance(index, types.Integer) and isinstance(value, types.Integer)):
        return None

    def codegen(context, builder, signature, args):
        ptr = _pointer(context, builder, signature.args[0], args[0], args[1], signature.args[1])
        v = context.cast(builder, args[2], signature.args[2], types.int64)
        builder.store_atomic(v, ptr, "seq_cst", 8)
        return context.get_dummy_value()

    return types.void(array, index, value), codegen


@kernel
def wait_until(team, slot, target, stop_too):
    """Wait until ``team[slot] >= target`` (or, with ``stop_too``, the team stops); returns whether it
    stops."""
    turns = 0
    while atomic_load(team, slot) < target:
        if stop_too and atomic_load(team, STOP) != 0:
            return True
        turns += 1
        if turns > SPINS:
            _yield()
    return False


@inline
def share(b, members, i):
    """Member ``i``'s share ``[lo, hi)`` of ``b`` samples: contiguous, sizes differing by at most one."""
    lo = i * (b // members) + min(i, b % members)
    return lo, lo + b // members + (1 if i < b % members else 0)


@kernel
def acquire(team):
    """Take ``team``'s update lock (wait for this caller's ticket); returns the ticket, for :func:`release`."""
    ticket = atomic_add(team, TICKET, 1)
    wait_until(team, SERVING, ticket, False)
    return ticket


@kernel
def release(team, ticket):
    """Give back the update lock that :func:`acquire` returned ``ticket`` for (the next ticket's turn)."""
    atomic_store(team, SERVING, ticket + 1)
