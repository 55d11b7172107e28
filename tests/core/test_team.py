"""A team's atomics, its wait and its shares (:mod:`dqnlab.core.team`)."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from numba import njit

from dqnlab.core.team import (
    GENERATION,
    LOCKED,
    SERVING,
    STOP,
    TICKET,
    acquire,
    atomic_add,
    atomic_load,
    atomic_store,
    new_team,
    release,
    share,
    wait_until,
)


@njit(nogil=True)
def _bump(a, n):
    for _ in range(n):
        atomic_add(a, 1, 1)


@njit(nogil=True)
def _pass_back_and_forth(team, me, rounds):
    for g in range(1, rounds + 1):
        if me == 0:
            atomic_add(team, 0, 1)
            wait_until(team, 1, g, False)
        else:
            wait_until(team, 0, g, False)
            atomic_add(team, 1, 1)


@njit(nogil=True)
def _bump_under_the_lock(team, counts, me, n):
    for _ in range(n):
        ticket = acquire(team)
        seen = counts[0]  # a plain read, some work, a plain write: two holders at once would lose one
        for _ in range(50):
            counts[1 + me] += 1
        counts[0] = seen + 1
        release(team, ticket)


@njit
def _store_then_load(a, v):
    atomic_store(a, 0, v)
    return atomic_load(a, 0)


@njit
def _share(b, k, i):
    return share(b, k, i)


def _threads(target, args_of):
    threads = [threading.Thread(target=target, args=args) for args in args_of]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads)


def test_additions_from_threads_at_once_are_never_lost():
    a = np.zeros(3, np.int64)
    _threads(_bump, [(a, 200_000)] * 3)
    assert a.tolist() == [0, 600_000, 0]
    assert _store_then_load(a, -7) == -7 and a[0] == -7


def test_the_update_lock_lets_one_thread_in_at_a_time():
    team, counts = new_team(1, locked=True), np.zeros(4, np.int64)
    assert team[LOCKED] == 1
    _threads(_bump_under_the_lock, [(team, counts, k, 20_000) for k in range(3)])
    assert counts.tolist() == [60_000] + [1_000_000] * 3
    assert team[TICKET] == team[SERVING] == 60_000  # every ticket served, the lock free


def test_two_threads_meet_at_every_generation():
    team = np.zeros(2, np.int64)
    _threads(_pass_back_and_forth, [(team, 0, 5_000), (team, 1, 5_000)])
    assert team.tolist() == [5_000, 5_000]


def test_a_wait_ends_when_the_team_stops():
    team = new_team(2)
    done = []
    waiter = threading.Thread(target=lambda: done.append(wait_until(team, GENERATION, 1, True)))
    waiter.start()
    team[STOP] = 1
    waiter.join(30)
    assert done == [True]
    team[STOP], team[GENERATION] = 0, 1
    assert wait_until(team, GENERATION, 1, True) is False


@pytest.mark.parametrize(("b", "k"), [(64, 1), (64, 2), (64, 3), (5, 5), (7, 4)])
def test_shares_cover_the_minibatch_in_order_and_differ_by_one_at_most(b, k):
    bounds = [_share(b, k, i) for i in range(k)]
    assert bounds[0][0] == 0 and bounds[-1][1] == b
    assert all(bounds[i][1] == bounds[i + 1][0] for i in range(k - 1))
    sizes = [hi - lo for lo, hi in bounds]
    assert max(sizes) - min(sizes) <= 1 and min(sizes) >= 1
