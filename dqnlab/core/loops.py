"""The acting loop and the learner's loop of afterstate DQN on an n-tuple network, as kernels.

One call runs a whole chunk of a :class:`~dqnlab.runtime.learner.Learner`'s work -- many act steps
of its ``N`` boards, the transitions made n-step and stored in its replay buffer, and the updates
owed at the replay ratio -- so that Python runs once per chunk of thousands of env steps, not once
per step. Each step is the same computation, with the same random draws in the same order, as the
Python path it replaces (``DQNAgent.act``, ``VecGame2048.step``, ``NStepReturns.push``,
``ReplayBuffer.add_batch`` and ``sample``, ``DQNAgent.update``): ``tests/core/test_native.py``
runs both side by side.

The algorithm is DQN (Mnih et al. 2015) learning afterstate values V (Szubert and Jaskowski 2014:
TD(0) on afterstates with an n-tuple network): the target of ``V(afterstate(s, a))`` is
``gamma^k (1 - done) max_a' [r(s', a') + V_target(afterstate(s', a'))]`` (plus, for an n-step
transition of ``k`` steps, its return less the move's own reward), the online V chooses ``a'`` with
Double DQN and a separate target, and the minibatch's MSE or Huber loss takes one plain SGD step
on the rows it used (or a temporal coherence step, :func:`dqnlab.core.ntuple.tc_rows`). Every array is the caller's and is changed in place: the env's boards, scores
and move counts, the replay's arrays and positions, the n-step ring, the weights and the counters,
and the NumPy Generators' states (so checkpoints see the state as it is after the chunk).

Groups of arguments (plain tuples, in this order):

* ``env`` = ``(boards (N, 16) uint8, scores (N,) int64, moves (N,) int64, masks (N, 4) bool, values (N, 4)
  float32)``: ``values`` the boards' ``r + V(afterstate)`` (``-inf`` for an illegal move), evaluated as each
  board became current (``Learner.values``);
* ``replay`` = ``(boards (C, 16) uint8, actions (C,) uint8, rewards (C,) float32, next_boards (C, 16)
  uint8, dones (C,) bool, next_masks (C, 4) bool, steps (C,) uint8, seg_lo (K,), seg_cap (K,),
  seg_pos (K,), seg_size (K,) int64)``: K segments, this learner writing segment ``me`` and sampling
  all of them, or with ``hp.own_segment`` its own (one segment for a learner's own buffer; one a worker in
  ``shared``);
* ``nstep`` = ``(boards (n, N, 16) uint8, actions (n, N) uint8, rewards (n, N) float32, pending (N,)
  int64)``;
* ``net`` = ``(online (R,) float32, target (R,) float32, layout, sums (R, 2) float32)``:
  the weights, the :func:`dqnlab.core.ntuple.layout` and, for temporal coherence learning
  (``hp.tc``; :func:`dqnlab.core.ntuple.tc_rows`), its sums of errors and of their magnitudes
  (``(0, 2)`` without it);
* ``hp``: :class:`Hyper`; ``ctr``: :data:`COUNTERS` int64 and ``times``: :data:`TIMES` float64 arrays;
* ``totals`` = ``(updates (1,), target_syncs (1,) int64)``: the updates of every learner that trains
  these weights and the target syncs so far (``shared``: the block's counters; else this learner's).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .bitboard import afterstate, inline, kernel, move_batch, new_boards_into, pack, spawn_batch, transpose
from .clock import clock_buffer, now
from .ntuple import afterstate_rows, features, gather, owns, prefetch, sgd_rows, tc_rows
from .team import (
    AVERAGE,
    AVERAGES,
    BAD,
    DONE,
    EVERY,
    FIRST,
    GENERATION,
    LOCKED,
    MEAN,
    MEMBERS,
    MODE,
    PHASE,
    READ,
    STEP,
    TC,
    UPDATE,
    acquire,
    atomic_add,
    release,
    share,
    wait_until,
)

__all__ = ["Hyper", "Work", "workspace", "COUNTERS", "TIMES", "RECORD_COLUMNS", "run_chunk", "learn_updates", "help_updates", "helper_work", "help_average", "member_work", "crew_of", "learning_ready", "OK", "RECORDS_FULL",
           "NON_FINITE"]

#: Status of a chunk: ran to its end (or deadline); stopped before a step whose games might not fit
#: the episode records; stopped at an update whose loss was not finite (its weights untouched).
OK, RECORDS_FULL, NON_FINITE = 0, 1, 2

#: Slots of the int64 counters array ``ctr``: this learner's env steps and updates, transitions added,
#: n-step pushes, episode records filled, and the learner's index ``me`` among ``steps_of_all``.
COUNTERS = ("env_steps", "updates", "added", "nstep_t", "records", "me")
#: Slots of the float64 array ``times``: the owed-update credit, the last TD loss, seconds acting and
#: learning (waiting for the update lock included), the last update's mean trained value, and seconds
#: waiting for the update lock.
TIMES = ("credit", "last_loss", "acting_s", "learning_s", "q_mean", "waiting_s")
#: Columns of an episode record.
RECORD_COLUMNS = ("env_steps", "wall_time", "score", "max_tile", "moves", "epsilon", "loss")

(_ENV_STEPS, _UPDATES, _ADDED, _NSTEP_T, _RECORDS, _ME) = range(6)
(_CREDIT, _LAST_LOSS, _ACTING, _LEARNING, _Q_MEAN, _WAITING) = range(6)


class Hyper(NamedTuple):
    """The settings a chunk reads (a :class:`~dqnlab.TrainConfig`'s, in the kernels' types)."""

    gamma: float
    lr: float  # (temporal coherence's lr with tc)
    tc: bool  # temporal coherence learning (TrainConfig.optimizer = "tc") from update tc_start on
    tc_start: int
    sgd_lr: float  # plain SGD's learning rate (before tc_start with tc)
    updates_per_env_step: float
    epsilon_start: float
    epsilon_end: float
    epsilon_decay_steps: float
    epsilon_decay_rate: float  # 0: linear decay
    invalid_move_reward: float
    huber: bool
    log_rewards: bool
    double_dqn: bool
    separate_target: bool
    target_update: int
    learning_starts: int
    batch_size: int
    max_moves: int  # 0: no limit
    n_step: int
    own_segment: bool = False  # sample segment ``me`` only (``shared`` with ``sample="own"``), not every segment


class Work(NamedTuple):
    """The scratch arrays of :func:`run_chunk` and :func:`learn_updates` (made once per learner by
    :func:`workspace`, so that a step allocates nothing).

    The *board cache*: an afterstate's weight rows are a function of the board alone, so each board's
    four afterstates are computed once, when it becomes current (after its step's move and spawn, or as
    a new game's first board), and serve every use: their legality is the board's legal moves, the
    board's values are gathered from them (``env``'s ``values``, which the act and the step's first update
    read), and an update whose transition leads to the board reads its rows from them. ``cached`` ``(N, 16)`` uint8 is the board whose four afterstates' weight rows ``rows[i]``
    ``(N, 4, P)`` int64, rewards ``(N, 4)`` float32 and legality ``(N, 4)`` bool hold (``cached_ok[i]``).
    ``own_rows`` ``(n, N, P)`` int64 are the rows of the afterstates the last ``n`` acts (``n = n_step``, one
    entry a step, round) played on board ``i``: entry ``k`` from board ``own_board[k, i]`` by move
    ``own_action[k, i]`` (-1: none), with its reward ``own_reward[k, i]`` float32, which an update of that
    transition trains.
    ``slot_env`` ``(C,)`` int64 is the board a replay slot was written from (-1: not by this learner).
    Every use compares the 16 bytes first, so a cache entry is never stale: it only saves the work of
    recomputing the same rows.

    Per update: for the ``B`` samples, their slots, values and targets ``(B,)``, whether each next board
    is alive, its move's own reward ``move_reward`` float32, ``src`` ``(B,)`` int64 (the cached board a
    sample's next board is, or -1: its rows are in ``next_rows`` ``(B, 4, P)``, ``next_rewards`` and
    ``next_legal``), and the bootstrap
    value of each cached board ``boot`` ``(N,)`` float32 once computed in this update (``boot_at`` ``(N,)``
    int64: the update it was computed in). Per act: the exploration draws ``(N,)`` bool and move scores
    ``(N, 4)`` float64. And 16 bytes for a board, 4 values, and the clock's buffer."""

    rows: np.ndarray
    rewards: np.ndarray
    legal: np.ndarray
    cached: np.ndarray
    cached_ok: np.ndarray
    own_rows: np.ndarray
    own_board: np.ndarray
    own_action: np.ndarray
    own_reward: np.ndarray
    slot_env: np.ndarray
    explore: np.ndarray
    scores: np.ndarray
    next_rows: np.ndarray
    next_rewards: np.ndarray
    next_legal: np.ndarray
    slots: np.ndarray
    q: np.ndarray
    y: np.ndarray
    alive: np.ndarray
    move_reward: np.ndarray
    src: np.ndarray
    boot: np.ndarray
    boot_at: np.ndarray
    cells: np.ndarray
    q4: np.ndarray
    c4: np.ndarray
    clock: np.ndarray


def workspace(n_envs: int, batch_size: int, placements: int, capacity: int, n_step: int = 1) -> Work:
    """The :class:`Work` arrays for ``n_envs`` boards, minibatches of ``batch_size``, ``placements``
    rows a board, a replay of ``capacity`` slots (all segments) and ``n_step`` returns."""
    n, b, p = n_envs, batch_size, placements
    return Work(np.empty((n, 4, p), np.int64), np.empty((n, 4), np.float32), np.empty((n, 4), np.bool_),
                np.zeros((n, 16), np.uint8), np.zeros(n, np.bool_),
                np.empty((n_step, n, p), np.int64), np.zeros((n_step, n, 16), np.uint8),
                np.full((n_step, n), -1, np.int64), np.zeros((n_step, n), np.float32),
                np.full(capacity, -1, np.int64),
                np.empty(n, np.bool_), np.empty((n, 4), np.float64),
                np.empty((b, 4, p), np.int64), np.empty((b, 4), np.float32), np.empty((b, 4), np.bool_),
                np.empty(b, np.int64), np.empty(b, np.float32), np.empty(b, np.float32), np.empty(b, np.bool_),
                np.empty(b, np.int64), np.empty(b, np.int64), np.empty(n, np.float32), np.full(n, -1, np.int64),
                np.empty(16, np.uint8), np.empty(4, np.float32), np.empty(4, np.float32), clock_buffer())


@inline
def _copy(dst, src):
    """``dst[:] = src`` for 1-d arrays, element by element (a slice assignment allocates a temporary
    wherever numba cannot rule out that the two overlap: far slower for 16 bytes)."""
    for k in range(src.shape[0]):
        dst[k] = src[k]


@inline
def _same(a, b):
    """Whether two 16-byte boards are equal."""
    for c in range(16):
        if a[c] != b[c]:
            return False
    return True


@kernel
def _epsilon(hp, env_steps, updates):
    """``dqnlab.agent.dqn.epsilon_at``."""
    if hp.epsilon_decay_rate > 0:
        return max(hp.epsilon_end, hp.epsilon_start * hp.epsilon_decay_rate ** updates)
    frac = min(1.0, env_steps / hp.epsilon_decay_steps)
    return hp.epsilon_start + frac * (hp.epsilon_end - hp.epsilon_start)


@kernel
def _reward(hp, points):
    """``dqnlab.agent.dqn.transform_rewards`` of one float32 reward."""
    r = np.float32(points)
    if hp.log_rewards and r != 0:
        a = np.float32(np.log2(np.float32(1.0) + abs(r)))
        return a if r > 0 else -a
    return r


@inline
def _cache_board(board, i, layout, hp, work):
    """Compute board ``i``'s four afterstates into the board cache (:class:`Work`); returns whether it has
    a legal move."""
    _copy(work.cached[i], board)
    work.cached_ok[i] = True
    return afterstate_rows(board, layout, hp.log_rewards, work.cells, work.rows[i], work.rewards[i], work.legal[i])


@inline
def _evaluate(board, i, net, hp, work, values):
    """``Learner.act_step``'s evaluation of a board as it becomes current: board ``i`` into the board cache,
    and ``values[i]`` its four ``r + V(afterstate)`` (``-inf`` for an illegal move) with the weights now."""
    _cache_board(board, i, net[2], hp, work)
    _values(i, net[0], work, values)


@inline
def _values(i, weights, work, values):
    """``values[i]``: the four ``r + V(afterstate)`` of the board the board cache holds at ``i``."""
    for a in range(4):
        values[i, a] = gather(weights, work.rows[i, a]) + work.rewards[i, a] if work.legal[i, a] else -np.inf


@kernel
def _choose(boards, masks, values, rng, epsilon, hp, layout, actions, work, k):
    """``DQNAgent.act`` on the boards' ``values``: epsilon-greedy over the legal moves, greedy the best
    ``r + V(afterstate)``. Then the rows and reward of each board's played afterstate, into entry ``k`` of
    ``work.own_*``, for the update of its transition (a board the board cache does not hold, as at a chunk's
    start, is computed first)."""
    n = boards.shape[0]
    explore, scores = work.explore, work.scores
    for i in range(n):
        explore[i] = rng.random() < epsilon
    for i in range(n):
        for a in range(4):
            scores[i, a] = rng.random()
    rows, legal = work.rows, work.legal
    for i in range(n):
        if not (work.cached_ok[i] and _same(work.cached[i], boards[i])):
            _cache_board(boards[i], i, layout, hp, work)
    for i in range(n):
        if not explore[i]:
            for a in range(4):
                scores[i, a] = values[i, a]
        best = -np.inf
        actions[i] = 0
        for a in range(4):
            if masks[i, a] and scores[i, a] > best:
                best = scores[i, a]
                actions[i] = a
        a = actions[i]
        _copy(work.own_board[k, i], boards[i])
        work.own_action[k, i] = a if legal[i, a] else -1
        if legal[i, a]:
            _copy(work.own_rows[k, i], rows[i, a])
            work.own_reward[k, i] = work.rewards[i, a]


@inline
def _store(replay, me, ctr, board, action, reward, next_board, done, next_mask, steps, env, slot_env):
    """``ReplayBuffer.add_batch`` of one transition of board ``env`` into segment ``me`` (data first, then
    its size)."""
    r_boards, r_actions, r_rewards, r_next, r_dones, r_masks, r_steps, lo, cap, pos, size = replay
    slot = lo[me] + pos[me]
    slot_env[slot] = env
    _copy(r_boards[slot], board)
    r_actions[slot] = action
    r_rewards[slot] = reward
    _copy(r_next[slot], next_board)
    r_dones[slot] = done
    _copy(r_masks[slot], next_mask)
    r_steps[slot] = steps
    pos[me] = (pos[me] + 1) % cap[me]
    size[me] = min(size[me] + 1, cap[me])
    ctr[_ADDED] += 1


@kernel
def _push(nstep, replay, ctr, hp, boards, actions, rewards, next_boards, dones, next_masks, ended, slot_env):
    """``NStepReturns.push`` then ``add_batch``: the transitions a step completes, oldest first."""
    me = ctr[_ME]
    n_envs = boards.shape[0]
    if hp.n_step == 1:
        for i in range(n_envs):
            _store(replay, me, ctr, boards[i], actions[i], rewards[i], next_boards[i], dones[i], next_masks[i], 1, i,
                   slot_env)
        return
    ring_b, ring_a, ring_r, pending = nstep
    n = hp.n_step
    slot = ctr[_NSTEP_T] % n
    for i in range(n_envs):
        _copy(ring_b[slot, i], boards[i])
        ring_a[slot, i] = actions[i]
        ring_r[slot, i] = rewards[i]
        pending[i] += 1
    ctr[_NSTEP_T] += 1
    back = np.empty((n, n_envs), np.float64)  # back[d, i]: return of board i from d steps back to now
    for i in range(n_envs):
        ret = 0.0
        for d in range(n):
            ret = np.float64(ring_r[(slot - d) % n, i]) + hp.gamma * ret
            back[d, i] = ret
    for d in range(n - 1, -1, -1):  # oldest first, then by board
        for i in range(n_envs):
            if d < pending[i] and (ended[i] or d == n - 1):
                t_slot = (slot - d) % n
                _store(replay, me, ctr, ring_b[t_slot, i], ring_a[t_slot, i], np.float32(back[d, i]),
                       next_boards[i], dones[i], next_masks[i], d + 1, i, slot_env)
    for i in range(n_envs):
        pending[i] = 0 if ended[i] else min(pending[i], n - 1)


@inline
def _argmax_legal(q):
    best = -np.inf
    arg = 0
    for a in range(4):
        if q[a] > best:
            best = q[a]
            arg = a
    return arg


@kernel
def learning_ready(learning_starts, env_steps_of_all, own_env_steps, learners):
    """Whether a learner's updates begin (the compiled loop's test, and ``shared``'s Python path's): ``learning_starts`` env steps of all ``learners`` that train the
    weights (``shared``'s workers count together, as one learner), and this learner's own share of them,
    ``learning_starts / learners``: its own games, started together, have drifted apart as far as the
    others' (a worker that joins late would otherwise train at once on its opening boards, whose shared
    rows take one summed step per sample: the blow-up ``learning_starts`` exists to avoid)."""
    return env_steps_of_all >= learning_starts and own_env_steps * learners >= learning_starts


@inline
def _filled(size, hp, me):
    """The filled slots a minibatch is drawn from: every segment's (``size`` ``(K,)`` int64), or with
    ``hp.own_segment`` segment ``me``'s."""
    if hp.own_segment:
        return size[me]
    total = 0
    for k in range(size.shape[0]):
        total += size[k]
    return total


@kernel
def _sample_slots(rng, lo, size, sizes, slots, hp, me):
    """``ReplayBuffer.sample``'s draw: ``slots`` ``(B,)`` uniform with replacement over the filled slots
    of every segment, segment by segment (``sizes`` ``(K,)`` int64 scratch), or with ``hp.own_segment``
    over segment ``me``'s (``SharedReplay.sample`` with ``own``)."""
    if hp.own_segment:
        for j in range(slots.shape[0]):
            slots[j] = lo[me] + rng.integers(0, size[me])
        return
    total = 0
    for k in range(size.shape[0]):
        sizes[k] = size[k]
        total += sizes[k]
    for j in range(slots.shape[0]):
        i = rng.integers(0, total)
        k = 0
        while i >= sizes[k]:
            i -= sizes[k]
            k += 1
        slots[j] = lo[k] + i


@kernel
def _minibatch_rows(replay, net, hp, rows, work, lo, hi):
    """The weight rows of samples ``lo`` to ``hi`` of the minibatch at ``work.slots``: ``rows[j]`` those of transition j's afterstate,
    and for its next board the rows, rewards and legality of its four afterstates (``work.src[j]``: the
    board of the board cache that holds them, or -1: computed into ``work.next_*[j]``), and
    ``work.alive[j]``: whether that board has a move and the transition did not end the game. Rows the
    caches hold (:class:`Work`) are read, not recomputed."""
    r_boards, r_actions, _, r_next, r_dones = replay[:5]
    layout = net[2]
    scratch = work.cells
    for j in range(lo, hi):
        s = work.slots[j]
        board = r_boards[s]
        i = work.slot_env[s]
        a = r_actions[s]
        hit = -1  # (the act that played this transition's move, if the last n_step acts hold it)
        for k in range(work.own_action.shape[0] if i >= 0 else 0):
            if work.own_action[k, i] == a and _same(work.own_board[k, i], board):
                hit = k
                break
        if hit >= 0:
            _copy(rows[j], work.own_rows[hit, i])
            work.move_reward[j] = work.own_reward[hit, i]
        else:
            b, big = pack(board)
            after, points, _ = afterstate(board, b, transpose(b), big, a, scratch)
            work.move_reward[j] = _reward(hp, points)
            features(after, layout, rows[j])
        nb = r_next[s]
        if i >= 0 and work.cached_ok[i] and _same(work.cached[i], nb):
            work.src[j] = i
            legal = work.legal[i]
        else:
            work.src[j] = -1
            afterstate_rows(nb, layout, hp.log_rewards, scratch, work.next_rows[j], work.next_rewards[j],
                            work.next_legal[j])
            legal = work.next_legal[j]
        work.alive[j] = (legal[0] or legal[1] or legal[2] or legal[3]) and not r_dones[s]


@kernel
def _bootstrap(net, hp, rows, rewards, legal, q4, c4):
    """``max_a' (r(s', a') + V_target(afterstate(s', a')))`` of one next board from its afterstates' rows
    ``(4, P)``, rewards and legality, ``a'`` chosen by the online V with Double DQN and a separate target."""
    online, target = net[0], net[1]
    for a in range(4):
        q4[a] = gather(target, rows[a]) + rewards[a] if legal[a] else -np.inf
    if hp.double_dqn and hp.separate_target:
        for a in range(4):
            c4[a] = gather(online, rows[a]) + rewards[a] if legal[a] else -np.inf
        return q4[_argmax_legal(c4)]
    return q4[_argmax_legal(q4)]


@kernel
def _td_targets(replay, net, hp, rows, work, update, values, lo, hi):
    """``DQNAgent.td_targets`` on afterstates, samples ``lo`` to ``hi``: ``work.q[j]`` = V(afterstate j) and ``work.y[j]`` =
    ``gamma^k [alive] max_a' (r(s', a') + V_target(afterstate(s', a')))`` (:func:`_bootstrap`; a cached
    next board's once per ``update``, however many samples lead to it, or its ``values`` when they hold
    it: ``values`` ``(N, 4)`` float32, the boards' evaluation with the weights as they are now and a
    target that is the online network, else ``(0, 4)``); for an n-step transition of ``k`` steps plus its
    return less the move's own reward (the afterstate already holds that reward)."""
    r_rewards, r_steps = replay[2], replay[6]
    online, sums = net[0], net[3]
    q, y = work.q, work.y
    for j in range(lo, hi):
        s = work.slots[j]
        q[j] = gather(online, rows[j])
        if sums.shape[0] > 0:  # (temporal coherence's step reads each row's sums: their misses overlap now)
            for p in range(rows.shape[1]):
                prefetch(sums, 2 * rows[j, p])
        t = np.float32(0.0)
        if work.alive[j]:
            i = work.src[j]
            if i < 0:
                t = _bootstrap(net, hp, work.next_rows[j], work.next_rewards[j], work.next_legal[j], work.q4, work.c4)
            elif work.boot_at[i] == update:
                t = work.boot[i]
            elif values.shape[0] > 0:
                t = max(max(values[i, 0], values[i, 1]), max(values[i, 2], values[i, 3]))
            else:
                t = _bootstrap(net, hp, work.rows[i], work.rewards[i], work.legal[i], work.q4, work.c4)
                work.boot[i] = t
                work.boot_at[i] = update
        if hp.n_step > 1:  # return less the move's own reward, discounted bootstrap from k steps on
            t = t * np.float32(hp.gamma) ** np.float32(r_steps[s]) + (r_rewards[s] - work.move_reward[j])
        else:
            t = t * np.float32(hp.gamma) + np.float32(0.0)
        y[j] = t


@kernel
def _loss_slopes(q, y, hp, slopes):
    """The TD loss (MSE or Huber) of ``q`` against ``y`` ``(B,)`` float32, and whether it is finite; when it
    is, ``slopes`` ``(B,)`` float32 gets its derivative in each ``q[j]``. Returns ``(loss, finite)``."""
    b_size = q.shape[0]
    loss = 0.0
    finite = True  # in float32, as the Python path's loss is: a square past float32's range is not finite
    for j in range(b_size):
        e32 = q[j] - y[j]
        e = np.float64(e32)
        if hp.huber:
            loss += 0.5 * e * e if abs(e) < 1.0 else abs(e) - 0.5
        else:
            loss += e * e
            finite &= np.isfinite(e32 * e32)
    finite &= np.isfinite(np.float32(loss))  # (the sum, too, is float32 there)
    loss /= b_size
    if finite:
        for j in range(b_size):
            e = q[j] - y[j]
            if hp.huber:
                slopes[j] = min(max(e, np.float32(-1.0)), np.float32(1.0)) / np.float32(b_size)
            else:
                slopes[j] = e * np.float32(2.0 / b_size)
    return loss, finite


@kernel
def learn_updates(updates, replay, rng, net, hp, ctr, totals, times, rows, slopes, work, values, team, crew):
    """``updates`` DQN updates (:meth:`dqnlab.DQNAgent.update` on ``ReplayBuffer.sample``), each on
    ``batch_size`` transitions drawn uniformly with replacement from the filled slots of every
    segment (``hp.own_segment``: of this learner's, ``ctr['me']``). ``rows`` ``(B, P)`` int64 and
    ``slopes`` ``(B,)`` float32 keep the last update's sparse gradient (for its norm); ``work``: the
    learner's :class:`Work`; ``values`` ``(N, 4)`` float32: the boards' evaluation with the weights as they
    are at the call, which the first update's targets read (``(0, 4)``: not known to be). ``team``: a
    :mod:`~dqnlab.core.team` array; with K members, this learner leads: sharing each minibatch, the K - 1
    helpers (:func:`help_updates`) each compute the rows and targets of a share of it, which this learner
    then applies as one step, as it would alone; averaging (:func:`help_average`), each member steps its own
    table ``crew[0][k]`` on a minibatch of its own, and every ``team[EVERY]`` updates the rows they changed
    are averaged (:func:`_average_rows`). A learner alone whose ``team[LOCKED]`` is set makes each update
    under the team's lock (:func:`~dqnlab.core.team.acquire`: learners that share the array and one table,
    ``shared``). ``crew``: :func:`crew_of`'s. Returns :data:`OK`, or
    :data:`NON_FINITE` at an update whose loss is NaN or infinite (nothing of it applied; the updates
    before it stay; averaging, at any member's)."""
    online, target = net[0], net[1]
    sizes = np.empty(replay[10].shape[0], np.int64)
    members = team[MEMBERS]
    locked = members == 1 and team[LOCKED] != 0
    b = work.slots.shape[0]
    for u in range(updates):
        ticket = 0
        if locked:
            t = now(work.clock)
            ticket = acquire(team)
            times[_WAITING] += now(work.clock) - t
        _sample_slots(rng, replay[7], replay[10], sizes, work.slots, hp, ctr[_ME])
        first = u == 0 and not hp.separate_target  # (the boards' values are the weights' now)
        if members > 1 and team[MODE] == AVERAGE:
            for k in range(1, members):  # the members' own minibatches, drawn after the learner's
                _sample_slots(rng, replay[7], replay[10], sizes, crew[4][k], hp, ctr[_ME])
            if not _averaged_update(team, crew, replay, net, hp, rows, slopes, work, values if first else values[:0],
                                    ctr[_UPDATES], hp.tc and totals[0][0] >= hp.tc_start, times):
                return NON_FINITE
            _count_update(ctr, totals, times, hp, work, online, target)
            continue
        if members > 1:  # open the update to the helpers: they compute the other shares meanwhile
            team[UPDATE] = ctr[_UPDATES]
            team[FIRST] = first
            atomic_add(team, GENERATION, 1)
        lo, hi = share(b, members, 0)
        _minibatch_rows(replay, net, hp, rows, work, lo, hi)  # the weight rows of every afterstate first ...
        _td_targets(replay, net, hp, rows, work, ctr[_UPDATES], values if first else values[:0], lo, hi)
        if members > 1:
            wait_until(team, DONE, (members - 1) * team[GENERATION], False)
        loss, finite = _loss_slopes(work.q, work.y, hp, slopes)
        times[_LAST_LOSS] = loss
        tc = hp.tc and totals[0][0] >= hp.tc_start
        if members > 1:  # the step, each member the rows it owns (none: no step)
            team[TC] = tc if finite else -1
            atomic_add(team, GENERATION, 1)
        if finite:
            _apply(online, net[3], rows, slopes, hp, tc, 0, members)
        if members > 1:
            wait_until(team, DONE, (members - 1) * team[GENERATION], False)
        if not finite:
            if locked:
                release(team, ticket)
            return NON_FINITE
        _count_update(ctr, totals, times, hp, work, online, target)
        if locked:
            release(team, ticket)
    return OK


@inline
def _count_update(ctr, totals, times, hp, work, online, target):
    """After an update: the counters, the target's sync when due, the mean trained value."""
    ctr[_UPDATES] += 1
    totals[0][0] += 1
    if hp.target_update > 1 and totals[0][0] // hp.target_update > totals[1][0]:
        totals[1][0] = totals[0][0] // hp.target_update
        target[:] = online
    q_sum = 0.0
    for j in range(work.q.shape[0]):
        q_sum += work.q[j]
    times[_Q_MEAN] = q_sum / work.q.shape[0]


@kernel
def _own_step(replay, net, hp, rows, slopes, work, values, update, tc, crew, team, member):
    """An ``averaged`` member's update: the rows, targets and step of its own minibatch (``work.slots``), read
    from ``net``'s tables and applied to its own, ``crew[0][member]``, the rows it changed logged in ``crew``
    for the next average. Averaging every update, every table equals the leader's when the update opens, so
    the members read the leader's (``net``: warm in the cache, where their own are cold), and the leader steps
    its own only once every member has read (``team[READ]``). Returns ``(loss, finite)`` (not finite: no
    step)."""
    b = work.slots.shape[0]
    _minibatch_rows(replay, net, hp, rows, work, 0, b)
    _td_targets(replay, net, hp, rows, work, update, values, 0, b)
    if team[EVERY] == 1 and team[MEMBERS] > 1:
        if member > 0:
            atomic_add(team, READ, 1)
        else:
            wait_until(team, READ, team[MEMBERS] - 1, False)
    loss, finite = _loss_slopes(work.q, work.y, hp, slopes)
    if finite:
        _apply(crew[0][member], net[3], rows, slopes, hp, tc, 0, 1)
        logs, logged = crew[2], crew[3]
        n = logged[member]
        for j in range(b):
            for p in range(rows.shape[1]):
                logs[member, n + j, p] = rows[j, p]
        logged[member] = n + b
    return loss, finite


@kernel
def _averaged_update(team, crew, replay, net, hp, rows, slopes, work, values, update, tc, times):
    """The leader's part of an ``averaged`` team's update: every member's own step at once, then, every
    ``team[EVERY]`` updates, the average of the rows they changed. Returns whether every loss was finite."""
    members = team[MEMBERS]
    team[UPDATE] = update
    team[TC] = tc
    team[PHASE] = STEP
    # averaging every update, every table is the one the boards were evaluated with: the members read their values
    team[FIRST] = values.shape[0] > 0 and team[EVERY] == 1
    team[BAD] = 0
    team[READ] = 0
    atomic_add(team, GENERATION, 1)
    loss, finite = _own_step(replay, net, hp, rows, slopes, work, values, update, tc, crew, team, 0)
    times[_LAST_LOSS] = loss
    wait_until(team, DONE, (members - 1) * team[GENERATION], False)
    if not finite or team[BAD] > 0:
        return False
    if (update + 1) % team[EVERY] == 0:
        team[PHASE] = MEAN
        atomic_add(team, GENERATION, 1)
        _average_rows(crew, 0, members, team[AVERAGES])
        wait_until(team, DONE, (members - 1) * team[GENERATION], False)
        crew[3][:] = 0
        team[AVERAGES] += 1
    return True


#: An averaging member's filter of the rows it has averaged: ``2 ** FILTER_BITS`` entries (512 KB).
FILTER_BITS = 16


@kernel
def _average_rows(crew, member, members, stamp):
    """Member ``member``'s share of average number ``stamp``: every table row any member changed since the last
    average (``crew``'s logs) that this member owns (:func:`dqnlab.core.ntuple.owns`) set, in every member's table,
    to the members' mean (summed in float64). A row the logs name again is skipped where this member's filter
    ``crew[5][member]`` (a direct-mapped set of the rows averaged under ``stamp``) remembers it; one it has
    forgotten is averaged again, which finds the mean already there and leaves the same bits."""
    tables, logs, logged, seen = crew[0], crew[2], crew[3], crew[5][member]
    for k in range(members):
        for i in range(logged[k]):
            for p in range(logs.shape[2]):
                r = logs[k, i, p]
                if owns(r, member, members):
                    key = (stamp << 32) | r
                    h = ((r * 2654435761) & 0xFFFFFFFF) >> (32 - FILTER_BITS)  # (Knuth's multiplicative hash)
                    if seen[h] == key:
                        continue
                    seen[h] = key
                    total = 0.0
                    for m in range(members):
                        total += tables[m, r]
                    mean = np.float32(total / members)
                    for m in range(members):
                        tables[m, r] = mean


@inline
def _apply(online, sums, rows, slopes, hp, tc, member, members):
    """The update's step: temporal coherence (``tc``) or plain SGD, on the rows team member ``member`` owns."""
    if tc:
        tc_rows(online, sums, rows, slopes, hp.lr, member, members)
    else:
        sgd_rows(online, rows, slopes, hp.sgd_lr, member, members)


@kernel
def _outcomes(hp, points, changed, legal, scores, moves, rewards, terminated, done):
    """``VecGame2048.step``'s outcome of a step of ``N`` boards: scores and move counts advanced by the
    step's ``points`` ``(N,)`` int64, ``rewards`` ``(N,)`` float32 (``invalid_move_reward`` where the move
    ``changed`` nothing), ``terminated`` (no legal move left) and ``done`` (terminated, or truncated at
    ``max_moves``) ``(N,)`` bool. Returns how many games ended."""
    finished = 0
    for i in range(points.shape[0]):
        scores[i] += points[i]
        moves[i] += 1
        rewards[i] = _reward(hp, points[i] if changed[i] else hp.invalid_move_reward)
        terminated[i] = not (legal[i, 0] or legal[i, 1] or legal[i, 2] or legal[i, 3])
        truncated = not terminated[i] and hp.max_moves > 0 and moves[i] >= hp.max_moves
        done[i] = terminated[i] or truncated
        finished += done[i]
    return finished


@kernel
def _end_games(done, nxt, scores, moves, records, ctr, wall, epsilon, loss, rng, fresh, net, hp, work, values):
    """``VecGame2048``'s autoreset: for every board whose game ended (``done`` ``(N,)`` bool), its episode
    record (:data:`RECORD_COLUMNS`, at ``wall`` seconds, ``epsilon`` and ``loss``) at ``ctr['records']``,
    a new board from ``rng`` in ``nxt``, evaluated (:func:`_evaluate`), and its score and moves zeroed.
    ``fresh`` ``(N, 16)`` uint8 is scratch."""
    k = 0
    for i in range(done.shape[0]):
        if done[i]:
            k += 1
    new_boards_into(fresh[:k], rng)
    k = 0
    for i in range(done.shape[0]):
        if done[i]:
            top = 0
            for c in range(16):
                top = max(top, nxt[i, c])
            rec = records[ctr[_RECORDS]]
            rec[0] = ctr[_ENV_STEPS]
            rec[1] = wall
            rec[2] = scores[i]
            rec[3] = 0 if top == 0 else 1 << top
            rec[4] = moves[i]
            rec[5] = epsilon
            rec[6] = loss
            ctr[_RECORDS] += 1
            _copy(nxt[i], fresh[k])
            _evaluate(nxt[i], i, net, hp, work, values)
            k += 1
            scores[i] = 0
            moves[i] = 0


@kernel
def run_chunk(act_steps, learn, deadline, update_limit, env, env_rng, agent_rng, replay, replay_rng, nstep, net, hp,
              ctr, totals, times, records, steps_of_all, rows, slopes, work, team, crew):
    """Up to ``act_steps`` steps of ``Learner.act_step`` then, with ``learn``, ``Learner.learn`` (the
    updates owed); stops early at ``deadline`` (seconds of :func:`dqnlab.core.clock.now`), before a step
    whose finished games might not fit ``records`` ``(M, 7)`` float64 (:data:`RECORD_COLUMNS`, filled
    from ``ctr['records']``), after the step that brings this learner's updates to ``update_limit``
    (a sync round of ``independent``), or at a non-finite loss. ``steps_of_all`` ``(K,)`` int64: every learner's
    env steps, entry ``me`` written after each step (``shared``; epsilon and ``learning_starts`` count
    them all: :func:`learning_ready`); ``team``, ``crew``: :func:`learn_updates`'. Returns ``(status, act steps
    done)``."""
    cells, scores, moves, masks, values = env
    n = cells.shape[0]
    me = ctr[_ME]
    layout = net[2]
    actions = np.empty(n, np.uint8)
    nxt = np.empty((n, 16), np.uint8)
    points = np.empty(n, np.int64)
    changed = np.empty(n, np.bool_)
    rewards = np.empty(n, np.float32)
    terminated = np.empty(n, np.bool_)
    done = np.empty(n, np.bool_)
    fresh = np.empty((n, 16), np.uint8)
    before = np.empty((n, 16), np.uint8)
    legal = work.legal  # (the board cache's: the legal moves of every board it holds)
    for step in range(act_steps):
        t0 = now(work.clock)
        if t0 >= deadline:
            return OK, step
        if ctr[_RECORDS] + n > records.shape[0]:
            return RECORDS_FULL, step
        others = 0
        for k in range(steps_of_all.shape[0]):
            if k != me:
                others += steps_of_all[k]
        epsilon = _epsilon(hp, others + ctr[_ENV_STEPS], totals[0][0])
        _choose(cells, masks, values, agent_rng, epsilon, hp, layout, actions, work, ctr[_NSTEP_T] % hp.n_step)
        # VecGame2048.step: the move, the spawn, and each new board evaluated (its legal moves, its values)
        move_batch(cells, actions, nxt, points, changed)
        spawn_batch(nxt, env_rng, changed)
        for i in range(n):  # (the rows of every board first, then their values: the lookups overlap)
            _cache_board(nxt[i], i, layout, hp, work)
        for i in range(n):
            _values(i, net[0], work, values)
        finished = _outcomes(hp, points, changed, legal, scores, moves, rewards, terminated, done)
        before[:] = cells
        _push(nstep, replay, ctr, hp, before, actions, rewards, nxt, terminated, legal, done, work.slot_env)
        ctr[_ENV_STEPS] += n
        steps_of_all[me] = ctr[_ENV_STEPS]
        if finished:
            _end_games(done, nxt, scores, moves, records, ctr, now(work.clock),
                       _epsilon(hp, others + ctr[_ENV_STEPS], totals[0][0]), times[_LAST_LOSS], env_rng, fresh,
                       net, hp, work, values)
            if hp.target_update == 0:  # sync at the end of every episode
                net[1][:] = net[0]
        masks[:] = legal
        cells[:] = nxt
        if learning_ready(hp.learning_starts, others + ctr[_ENV_STEPS], ctr[_ENV_STEPS], steps_of_all.shape[0]) \
                and _filled(replay[10], hp, me) >= hp.batch_size:
            times[_CREDIT] += n * hp.updates_per_env_step
        t1 = now(work.clock)
        times[_ACTING] += t1 - t0
        if learn:
            owed = int(times[_CREDIT])
            if owed > 0:  # (the boards' values are the weights' now only where no other learner steps them)
                status = learn_updates(owed, replay, replay_rng, net, hp, ctr, totals, times, rows, slopes, work,
                                       values if steps_of_all.shape[0] == 1 else values[:0], team, crew)
                if status != OK:
                    return status, step + 1
                times[_CREDIT] -= owed
            times[_LEARNING] += now(work.clock) - t1
        if ctr[_UPDATES] >= update_limit:
            return OK, step + 1
    return OK, act_steps


@kernel
def help_updates(team, member, replay, net, hp, rows, slopes, work, values):
    """Member ``member`` (1 to K - 1) of a team led by :func:`learn_updates`: for every update the leader
    opens, the rows and targets of this member's share of its minibatch, then the step on the weight rows
    it owns (:func:`dqnlab.core.ntuple.owns`), until the team stops. ``work``: the leader's :class:`Work`
    with scratch of this thread's own (``cells``, ``boot``, ``boot_at``, ``q4``, ``c4``, ``clock``:
    :func:`helper_work`); ``rows``, ``slopes`` and ``values``: the leader's."""
    members = team[MEMBERS]
    lo, hi = share(work.slots.shape[0], members, member)
    seen = 0  # (the team is new: the leader has opened no update yet, or waits for this member's share of it)
    while not wait_until(team, GENERATION, seen + 1, True):  # the targets of this member's share
        seen += 1
        _minibatch_rows(replay, net, hp, rows, work, lo, hi)
        _td_targets(replay, net, hp, rows, work, team[UPDATE], values if team[FIRST] else values[:0], lo, hi)
        atomic_add(team, DONE, 1)
        if wait_until(team, GENERATION, seen + 1, True):  # the step on the rows this member owns
            return
        seen += 1
        if team[TC] >= 0:
            _apply(net[0], net[3], rows, slopes, hp, team[TC] != 0, member, members)
        atomic_add(team, DONE, 1)


def helper_work(work: Work) -> Work:
    """A helper thread's :class:`Work`: the leader's arrays, with scratch of its own."""
    n = work.boot.shape[0]
    return work._replace(cells=np.empty(16, np.uint8), boot=np.empty(n, np.float32), boot_at=np.full(n, -1, np.int64),
                         q4=np.empty(4, np.float32), c4=np.empty(4, np.float32), clock=clock_buffer())


@kernel
def help_average(team, member, crew, replay, net, hp, rows, slopes, work, values):
    """Member ``member`` (1 to K - 1) of an ``averaged`` team led by :func:`learn_updates`: for every update,
    one step of its own table ``net`` on its own minibatch, which the learner drew into ``crew[4][member]``
    (:func:`_own_step`); for every average, its share of it (:func:`_average_rows`); until the team stops.
    ``work``: :func:`member_work`'s, its ``slots`` that row of ``crew[4]``; ``values``: the learner's, which a
    step reads where the leader says every table is the one they were evaluated with (``team[FIRST]``)."""
    seen = 0
    while not wait_until(team, GENERATION, seen + 1, True):
        seen += 1
        if team[PHASE] == STEP:
            _, finite = _own_step(replay, net, hp, rows, slopes, work, values if team[FIRST] else values[:0],
                                  team[UPDATE], team[TC] != 0, crew, team, member)
            if not finite:
                atomic_add(team, BAD, 1)
        else:
            _average_rows(crew, member, team[MEMBERS], team[AVERAGES])
        atomic_add(team, DONE, 1)


def member_work(work: Work, slots: np.ndarray) -> Work:
    """An ``averaged`` member's :class:`Work`: the leader's board cache, with ``slots`` ``(B,)`` int64 (its
    minibatch, which the learner draws), every other per-sample array and the scratch of its own."""
    b, p = work.next_rows.shape[0], work.next_rows.shape[2]
    return helper_work(work)._replace(
        next_rows=np.empty((b, 4, p), np.int64), next_rewards=np.empty((b, 4), np.float32),
        next_legal=np.empty((b, 4), np.bool_), slots=slots, q=np.empty(b, np.float32),
        y=np.empty(b, np.float32), alive=np.empty(b, np.bool_), move_reward=np.empty(b, np.float32),
        src=np.empty(b, np.int64))


def crew_of(tables: np.ndarray, sums: np.ndarray, log_rows: int = 0, placements: int = 0, batch_size: int = 0) -> tuple:
    """The ``crew`` argument of :func:`learn_updates`: every member's table ``(K, R)`` float32 and
    temporal coherence's sums ``(K, R, 2)`` float32 (``(K, 0, 2)`` without them), each member's log of the rows
    it changed since the last average ``(K, log_rows, placements)`` int64 and their count ``(K,)`` int64,
    each member's minibatch ``(K, batch_size)`` int64, and each member's filter of the rows it has averaged
    ``(K, 2 ** FILTER_BITS)`` int64 (:func:`_average_rows`). A learner alone, or a team sharing one minibatch: its own
    table as ``(1, R)``, empty logs and filters."""
    k = tables.shape[0]
    return (tables, sums, np.zeros((k, log_rows, placements), np.int64), np.zeros(k, np.int64),
            np.zeros((k, batch_size), np.int64), np.full((k, 1 << FILTER_BITS if log_rows else 1), -1, np.int64))
