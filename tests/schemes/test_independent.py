"""``independent``: score coefficients, combined weights, the sync schedule, end-to-end runs."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import check_totals

import dqnlab
from dqnlab import TrainConfig
from dqnlab.schemes.independent import SyncSchedule, score_coefficients, sync_coefficients


def test_softmax_score_coefficients():
    c = score_coefficients([0.0, 500.0], temperature=500.0)
    np.testing.assert_allclose(c, [1 / (1 + np.e), np.e / (1 + np.e)])
    np.testing.assert_allclose(score_coefficients([1e6, 1e6 + 10], 1.0).sum(), 1.0)  # no overflow
    np.testing.assert_allclose(score_coefficients([np.nan, np.nan], 10.0), [0.5, 0.5])
    nan_low = score_coefficients([np.nan, 100.0, 0.0], 100.0)  # NaN counts as the lowest score
    assert nan_low[0] == pytest.approx(nan_low[2]) and nan_low[1] > nan_low[0]


def test_sync_coefficients_per_schedule():
    scores = [10.0, 30.0, 20.0]
    np.testing.assert_array_equal(sync_coefficients("best", scores), [0, 1, 0])
    np.testing.assert_array_equal(sync_coefficients("none", scores), [0, 1, 0])
    np.testing.assert_allclose(sync_coefficients("periodic", scores), 1 / 3)
    np.testing.assert_allclose(sync_coefficients("final", scores), 1 / 3)
    np.testing.assert_allclose(sync_coefficients("weighted", scores, temperature=10.0), score_coefficients(scores, 10.0))
    np.testing.assert_array_equal(sync_coefficients("sum", scores), [1, 1, 1])
    with pytest.raises(ValueError, match="sync must be one of"):
        sync_coefficients("sometimes", scores)


# ----------------------------------------------------------------------------- sync schedules
def test_periodic_schedule_fires_at_every_multiple_even_across_jumps():
    s = SyncSchedule("periodic", sync_every=10)
    fired = [u for u in range(101) if s.check(u, 0.5)]
    assert fired == [10, 20, 30, 40, 50, 60, 70, 80, 90, 100]
    s = SyncSchedule("periodic", sync_every=10)
    assert [s.check(u, 0.5) for u in (9, 12, 15, 31, 33)] == [None, (1, True), None, (3, True), None]


def test_none_schedule_checks_in_but_never_syncs():
    s = SyncSchedule("none", sync_every=5)
    checks = [s.check(u, u / 50) for u in range(51)]
    assert [c for c in checks if c] == [(r, False) for r in range(1, 11)]


def _simulate(schedule: SyncSchedule, budget: int, n_envs: int, updates_per_step: float, learning_starts: int):
    """Drive a schedule like a Learner does: returns (env_steps, active) at each check-in."""
    env, credit, updates, out = 0, 0.0, 0, []
    while env < budget:
        env += n_envs
        if env >= learning_starts:
            credit += n_envs * updates_per_step
        updates += int(credit) - updates if int(credit) > updates else 0
        due = schedule.check(updates, env / budget)
        if due:
            out.append((env, due[1]))
    return out


@pytest.mark.parametrize("fraction", [0.25, 0.5, 0.1])
def test_final_schedule_never_syncs_before_its_fraction(fraction):
    budget = 100_000
    checks = _simulate(SyncSchedule("final", sync_every=50, final_fraction=fraction), budget, 32, 1 / 32, 5_000)
    active = [env for env, a in checks if a]
    inactive = [env for env, a in checks if not a]
    assert active and inactive
    assert min(active) >= (1 - fraction) * budget
    assert max(inactive) < (1 - fraction) * budget
    # every check-in in the final phase syncs: ~ fraction x (updates / sync_every)
    assert len(active) == pytest.approx(fraction * budget / 32 / 50, abs=2)


def test_final_schedule_default_starts_at_75_percent():
    s = SyncSchedule("final", sync_every=1)
    assert not s.active(0.7499) and s.active(0.75) and s.active(1.0)


def test_independent_final_schedule_end_to_end(cfg):
    run = dqnlab.train("independent", cfg, workers=2, progress=False, sync="final", sync_every=10)
    check_totals(run, cfg, 2)
    rounds = run.extra["divergence"]
    synced = [r for r in rounds if r["synced"]]
    assert synced and len(synced) < len(rounds)
    assert all(r["env_steps"] >= 0.75 * cfg.total_env_steps for r in synced)  # never before 75% of the budget
    assert all(r["divergence"] > 0 for r in rounds)
    assert run.extra["syncs"] == len(synced)
    assert run.options == {"sync": "final", "sync_every": 10, "final_fraction": 0.25, "temperature": 500.0,
                           "threads": False}
    assert {w["env_steps"] for w in run.extra["per_worker"]} == {1504}  # 3000 split in two, in steps of 8


def test_independent_best_makes_learners_identical_after_each_sync(cfg):
    run = dqnlab.train("independent", cfg.replace(total_env_steps=2_000), workers=2, progress=False,
                       sync="best", sync_every=10)
    rounds = run.extra["divergence"]
    assert all(r["synced"] for r in rounds) and len(rounds) >= 3
    assert all(sorted(r["coefficients"]) == [0.0, 1.0] for r in rounds)
    # After a sync both learners continue from one model: divergence stays small (10 updates apart)
    none = dqnlab.train("independent", cfg.replace(total_env_steps=2_000), workers=2, progress=False,
                        sync="none", sync_every=10)
    assert rounds[-1]["divergence"] < none.extra["divergence"][-1]["divergence"]


def test_independent_sum_gives_every_learner_the_common_weights_plus_all_changes(cfg):
    """sync='sum' on the n-tuple learner: after a round both learners hold the last common weights with each
    one's changes added (an entry one learner moved keeps its whole step, not half of it)."""
    from types import SimpleNamespace

    from dqnlab.parallel.messages import SyncPost
    from dqnlab.parallel.weights import apply_changes, changed_entries
    from dqnlab.schemes.independent import _IndependentCoordinator

    base = {"w": np.array([1.0, 2.0, 3.0, 4.0], np.float32)}
    mine = [np.array([1.5, 2.0, 3.0, 4.0], np.float32), np.array([1.25, 2.0, 2.0, 4.0], np.float32)]
    sent = []
    parent = _IndependentCoordinator(2, 8, {"w": base["w"].copy()}, "sum", 500.0)
    parent.group = SimpleNamespace(stopping=False, checkpoint_pending=False,
                                   send_all=lambda ks, msg: sent.extend((k, msg) for k in ks))
    parent.loop = SimpleNamespace(elapsed=1.0)
    for k in range(2):
        parent.receive(SyncPost(k, 1, True, changed_entries({"w": mine[k]}, base), 0.0, 100, 50))
    np.testing.assert_array_equal(parent.base["w"], [1.75, 2.0, 2.0, 4.0])
    for k, msg in sent:
        w = {"w": mine[k].copy()}
        apply_changes(w, msg.weights)
        np.testing.assert_array_equal(w["w"], parent.base["w"])
    assert parent.divergence[-1]["coefficients"] == [1.0, 1.0]

    ntuple = TrainConfig.preset("ntuple-small", total_env_steps=6_000, n_envs=16, buffer_size=256, batch_size=32,
                                learning_starts=512, seed=0)
    run = dqnlab.train("independent", ntuple, workers=2, progress=False, sync="sum", sync_every=20)
    check_totals(run, ntuple, 2)
    rounds = run.extra["divergence"]
    assert len(rounds) >= 3 and all(r["synced"] for r in rounds) and run.extra["syncs"] == len(rounds)
    assert run.extra["final_weights"] == "the last common weights with every learner's changes added"


def test_once_the_learners_are_told_to_stop_no_round_closes_and_a_learner_stopped_at_the_barrier_still_awaits_it():
    from types import SimpleNamespace

    from dqnlab.parallel.messages import NewWeights, Stop, SyncPost
    from dqnlab.parallel.weights import changed_entries
    from dqnlab.schemes.independent import _IndependentCoordinator, _IndependentWorker

    sent = []
    group = SimpleNamespace(stopping=True, checkpoint_pending=False,
                            send_all=lambda ks, msg: sent.extend((k, msg) for k in ks))
    w = [{"w": np.full(3, float(k), np.float32)} for k in range(2)]
    parent = _IndependentCoordinator(2, 8, {"w": w[0]["w"].copy()}, "periodic", 500.0)
    parent.group, parent.loop = group, SimpleNamespace(elapsed=1.0)
    for k in range(2):
        parent.receive(SyncPost(k, 1, True, changed_entries(w[k], parent.base), 0.0, 100, 50))
    assert sent == [] and set(parent.own_state()["parent"]["rounds"][1]) == {0, 1}  # kept open for the checkpoint
    group.stopping = False  # as a resumed run: the round closes, every learner gets the average
    parent.complete_rounds()
    assert [k for k, _ in sent] == [0, 1] and all(isinstance(m, NewWeights) for _, m in sent)
    np.testing.assert_array_equal(parent.base["w"], np.full(3, 0.5, np.float32))  # the new common weights
    assert parent.changes[1]["w"][0].size == 0 and parent.bytes_sent > 0

    mine = {"w": w[1]["w"].copy()}  # learner 1's network, at the barrier
    learner = object.__new__(_IndependentWorker)  # only its barrier: the learner's wait for round 1
    learner.learner = SimpleNamespace(agent=SimpleNamespace(weight_views=lambda: mine, refresh_acting=lambda: None,
                                                            device=SimpleNamespace(type="cpu")))
    learner.base = {"w": w[0]["w"].copy()}
    learner.ch, learner.awaiting = SimpleNamespace(wait=Stop, stopped=True), 1
    learner.sync_wait()
    assert learner.awaiting == 1 and mine["w"][0] == 1.0  # its checkpoint state says it waits on round 1
    learner.ch = SimpleNamespace(wait=lambda: sent[1][1], stopped=False)
    learner.sync_wait()
    assert learner.awaiting is None
    np.testing.assert_array_equal(mine["w"], np.full(3, 0.5, np.float32))
    np.testing.assert_array_equal(learner.base["w"], np.full(3, 0.5, np.float32))


def test_ntuple_learners_sync_by_the_entries_that_changed():
    config = dqnlab.TrainConfig.preset("ntuple-small", total_env_steps=6_000, n_envs=16, buffer_size=2_000,
                                       batch_size=32, learning_starts=256, seed=0)
    run = dqnlab.train("independent", config, workers=2, progress=False, sync="periodic", sync_every=20)
    table = run.weights["weight"].nbytes  # 17 4-tuples: 4.5 MB
    rounds = run.extra["divergence"]
    assert run.extra["syncs"] == len(rounds) >= 3 and run.options["sync_every"] == 20
    assert all(r["divergence"] > 0 for r in rounds)  # 20 updates apart before each sync
    # every post and every reply carries a few thousand entries, not the table
    moves = 2 * 2 * run.extra["syncs"] + 2
    assert 0 < run.extra["bytes_moved"] < 0.1 * moves * table
    assert run.extra["bytes_moved_per_s"] == pytest.approx(run.extra["bytes_moved"] / run.wall_time_s, rel=0.05)
    assert all(w["bytes_sent"] > 0 for w in run.extra["per_worker"])


def test_a_sync_leaves_every_ntuple_learner_with_the_average_of_their_weights():
    from types import SimpleNamespace

    from dqnlab.parallel.messages import NewWeights, SyncPost
    from dqnlab.parallel.weights import apply_changes, average_weights, changed_entries
    from dqnlab.schemes.independent import _IndependentCoordinator

    rng = np.random.default_rng(0)
    base = {"weight": rng.normal(size=(1000, 1)).astype(np.float32)}
    learners = []
    for k in range(3):  # each trained a different few entries since the last sync (one entry by two of them)
        w = {"weight": base["weight"].copy()}
        w["weight"][[k, 10 + k, 500]] += 1.0 + k
        learners.append(w)
    sent = []
    parent = _IndependentCoordinator(3, 8, {"weight": base["weight"].copy()}, "periodic", 500.0)
    parent.group = SimpleNamespace(stopping=False, checkpoint_pending=False,
                                   send_all=lambda ks, msg: sent.extend((k, msg) for k in ks))
    parent.loop = SimpleNamespace(elapsed=1.0)
    for k, w in enumerate(learners):
        parent.receive(SyncPost(k, 1, True, changed_entries(w, base), 0.0, 100, 50))
    want = average_weights(learners)
    assert [k for k, _ in sent] == [0, 1, 2] and all(isinstance(m, NewWeights) for _, m in sent)
    for (k, msg), w in zip(sent, learners):
        assert msg.weights["weight"][0].size == 7  # the union of what the three changed
        apply_changes(w, msg.weights)
        np.testing.assert_array_equal(w["weight"], want["weight"])
    np.testing.assert_array_equal(parent.base["weight"], want["weight"])
