"""``shared``: the lock counts every update; Hogwild runs; each worker's replay segment holds its step."""

from __future__ import annotations

from helpers import check_totals

import dqnlab
from dqnlab import TrainConfig


def test_shared_with_lock_counts_every_update(cfg):
    run = dqnlab.train("shared", cfg, workers=2, progress=False, lock=True)
    check_totals(run, cfg, 2)
    per = run.extra["per_worker"]
    assert all(w["updates"] > 0 for w in per)
    assert run.extra["updates_counter"] == sum(w["updates"] for w in per) == run.updates
    assert run.extra["lost_increments"] == 0
    assert run.extra["lock_wait_s"] >= 0 and run.extra["optimizer_state"] == "shared"
    assert run.extra["target_syncs"] == run.updates // cfg.target_update


def test_shared_hogwild_runs(cfg):
    run = dqnlab.train("shared", cfg.replace(total_env_steps=2_000), workers=2, progress=False, lock=False)
    assert run.status == "completed" and run.updates > 0 and run.extra["lock_wait_s"] == 0
    assert run.extra["updates_counter"] <= run.updates


def test_shared_segments_hold_each_workers_step():
    """A replay of one step (``buffer_size == n_envs``, as the n-tuple presets' is): the block holds every
    worker's last step whole (capacity K x n_envs), rather than half of each in a segment of C / K slots.
    (The preset's lr of 0.05 on minibatches of 16 early boards, which share most rows, diverged in about one
    Hogwild run in eight.)"""
    config = TrainConfig.preset("ntuple-small", n_envs=16, buffer_size=16, batch_size=16, learning_starts=0,
                                total_env_steps=1_280, seed=0, lr=0.005)
    run = dqnlab.train("shared", config, workers=2, progress=False, lock=False, threads=True)
    replay = run.extra["replay"]
    assert replay["capacity"] == replay["size"] == 2 * config.n_envs
    assert replay["added"] == run.env_steps and run.updates > 0

