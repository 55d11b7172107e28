"""Torch threads of learner processes and of the caller; a task run at a lower priority."""

from __future__ import annotations

import os
import sys
import threading

import pytest
import torch

import dqnlab
from dqnlab.parallel import threads
from dqnlab.parallel.messages import SyncPost


def test_torch_threads_left_alone_by_in_process_runs(cfg):
    before = torch.get_num_threads()
    dqnlab.train("averaged", cfg.replace(total_env_steps=300), workers=1, progress=False)
    assert torch.get_num_threads() == before


@pytest.mark.parametrize("policy,expected", [("PASSIVE", 1), ("passive", 1), ("ACTIVE", 3), (None, 3)])
def test_learner_threads_follow_the_openmp_wait_policy(monkeypatch, policy, expected):
    if policy is None:
        monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    else:
        monkeypatch.setenv("OMP_WAIT_POLICY", policy)
    monkeypatch.setattr(threads.joblib, "cpu_count", lambda: 6)
    assert threads.torch_threads(2) == expected
    assert threads.torch_threads(12) == 1


@pytest.mark.parametrize("policy", ["PASSIVE", "ACTIVE"])
def test_a_run_learns_on_the_learner_thread_count_and_restores_the_callers(cfg, monkeypatch, policy):
    monkeypatch.setenv("OMP_WAIT_POLICY", policy)  # read when the run starts (torch's own pool is already set up)
    seen = []
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        dqnlab.train("serial", cfg.replace(total_env_steps=400), progress=False,
                     callback=lambda snapshot: seen.append(torch.get_num_threads()))
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    assert seen and set(seen) == {threads.torch_threads(1)}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a thread's own niceness is Linux's")
def test_run_niced_runs_the_function_at_the_raised_niceness_and_leaves_the_caller_as_it_was():
    before = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    assert threads.thread_niceness() == before
    seen = threads.run_niced(lambda: (threads.thread_niceness(), threading.get_native_id()), 5)
    assert seen[0] == min(19, before + 5) and seen[1] != threading.get_native_id()  # in a thread of its own
    assert threads.thread_niceness() == before
    assert threads.run_niced(threads.thread_niceness, 0) == before  # 0: here, as it is


def test_run_niced_raises_what_the_function_raises_and_rejects_a_bad_niceness():
    def fails():
        raise KeyError("inside")

    with pytest.raises(KeyError, match="inside"):
        threads.run_niced(fails, 3)
    for bad in (-1, 20, 2.5, True):
        with pytest.raises(ValueError, match="nice must be an integer in"):
            threads.run_niced(lambda: None, bad)


def _post(ch, *, changes):
    ch.send(SyncPost(ch.worker, 1, True, changes, 0.0, 0, 0))
    ch.wait()  # (until the group stops it)


def test_a_threads_task_group_hands_messages_over_by_reference():
    """Tasks on joblib's threading backend talk through plain queues: no manager process, no copy."""
    import numpy as np

    from dqnlab.parallel.tasks import TaskGroup

    changes = {"weight": (np.arange(5), np.ones(5, np.float32))}
    with TaskGroup(_post, [dict(changes=changes), dict(changes=changes)], backend="threading") as group:
        got = [group.get(30.0) for _ in range(2)]
        assert group.manager is None and group.spill_dir is None
    assert sorted(msg.worker for msg in got) == [0, 1]
    for msg in got:
        assert msg.changes["weight"][0] is changes["weight"][0] and msg.changes["weight"][1] is changes["weight"][1]
