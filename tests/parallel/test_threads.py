"""Torch threads of learner processes and of the caller."""

from __future__ import annotations

import pytest
import torch

import dqnlab
from dqnlab.parallel import threads


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
