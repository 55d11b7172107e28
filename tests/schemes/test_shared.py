"""``shared``: the lock counts every update; Hogwild runs."""

from __future__ import annotations

from helpers import check_totals

import dqnlab


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
