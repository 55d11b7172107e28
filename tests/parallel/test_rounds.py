"""Synchronous rounds: one round's update equals the step it should (``sharded``, ``averaged``)."""

from __future__ import annotations

import joblib
import numpy as np
import pytest
from helpers import assert_priorities, filled_learner, max_diff, unequal_priorities

import dqnlab
from dqnlab import DQNAgent, TrainConfig
from dqnlab.parallel.joblib_round import parallel_update
from dqnlab.parallel.weights import average_weights, optimizer_state
from dqnlab.replay import update_priorities
from dqnlab.schemes.averaged import draw_minibatches
from dqnlab.schemes.sharded import shard


# ----------------------------------------------------------------------------- sharded / averaged update maths
@pytest.mark.parametrize("batch_size,workers", [(32, 2), (33, 2)])
def test_sharded_sgd_step_equals_one_big_batch_step(batch_size, workers):
    config = TrainConfig(total_env_steps=1_000, n_envs=8, buffer_size=1_000, batch_size=batch_size,
                         learning_starts=0, hidden=(32,), max_grad_norm=None, lr=0.05, seed=3, optimizer="sgd")
    learner = filled_learner(config)
    reference = DQNAgent(config, seed=99)
    reference.set_weights(learner.agent.get_weights(), target=True)
    batch = learner.buffer.sample(batch_size)
    reference.update(batch)
    shards, sizes = shard(batch, workers)
    assert sizes.sum() == batch_size and sizes.max() - sizes.min() <= 1
    with joblib.Parallel(n_jobs=workers) as parallel:  # real worker processes, as the scheme uses
        parallel_update(parallel, learner.agent, shards, sizes)
    moved = max_diff(learner.agent.get_weights(), DQNAgent(config, seed=99).get_weights())
    assert moved > 1e-3  # the step did something
    assert max_diff(learner.agent.get_weights(), reference.get_weights()) < 1e-6
    assert learner.agent.updates == 1


def test_sharded_prioritized_sgd_step_is_one_weighted_step_and_sets_every_shards_priorities():
    """joblib: the parent computes the n-step targets, the workers get the importance weights
    and return their TD errors, which become the priorities one agent sets on the whole minibatch."""
    config = TrainConfig(total_env_steps=1_000, n_envs=8, buffer_size=1_000, batch_size=33, learning_starts=0,
                         hidden=(32,), max_grad_norm=None, lr=0.05, seed=3, optimizer="sgd", prioritized=True,
                         n_step=3)
    learner = unequal_priorities(filled_learner(config))
    reference = DQNAgent(config, seed=99)
    reference.set_weights(learner.agent.get_weights(), target=True)
    batch = learner.buffer.sample(33)
    assert batch.weights.min() < 1 and (batch.steps > 1).any()
    reference.update(batch)
    updated = learner.buffer.priority_updates
    with joblib.Parallel(n_jobs=2) as parallel:
        parallel_update(parallel, learner.agent, *shard(batch, 2), buffer=learner.buffer)
    assert max_diff(learner.agent.get_weights(), reference.get_weights()) < 1e-6
    assert learner.buffer.priority_updates == updated + 33
    assert_priorities(learner.buffer, batch.indices, reference.td_errors())


def test_sharded_adam_is_not_a_big_batch_step(cfg):
    """With Adam the averaged shard steps differ from one big step (the documented cost)."""
    config = cfg.replace(max_grad_norm=None, learning_starts=0)
    learner = filled_learner(config)
    reference = DQNAgent(config, seed=5)
    reference.set_weights(learner.agent.get_weights(), target=True)
    batch = learner.buffer.sample(config.batch_size)
    reference.update(batch)
    with joblib.Parallel(n_jobs=1) as parallel:
        parallel_update(parallel, learner.agent, *shard(batch, 2))
    assert max_diff(learner.agent.get_weights(), reference.get_weights()) > 1e-6


@pytest.mark.parametrize("prioritized", [False, True])
def test_averaged_with_one_worker_equals_serial_updates(cfg, prioritized):
    config = cfg.replace(prioritized=prioritized, n_step=3 if prioritized else 1)
    serial, averaged = filled_learner(config), filled_learner(config)
    assert max_diff(serial.agent.get_weights(), averaged.agent.get_weights()) == 0
    with joblib.Parallel(n_jobs=1) as parallel:
        for _ in range(3):  # several updates: the Adam state (and the priorities) must carry over too
            batch = serial.buffer.sample(config.batch_size)
            loss_serial = serial.agent.update(batch)
            update_priorities(serial.buffer, batch, serial.agent.td_errors)  # (as Learner.learn: none if uniform)
            loss_avg = parallel_update(parallel, averaged.agent, draw_minibatches(averaged, 1), None,
                                       buffer=averaged.buffer)
            assert loss_avg == pytest.approx(loss_serial, rel=1e-6)
    assert max_diff(serial.agent.get_weights(), averaged.agent.get_weights()) < 1e-6
    assert max_diff(optimizer_state(serial.agent), optimizer_state(averaged.agent)) < 1e-6
    assert averaged.agent.updates == serial.agent.updates == 3
    if prioritized:  # the same priorities set, so the same samples drawn
        assert averaged.buffer.priority_updates == serial.buffer.priority_updates == 3 * config.batch_size
        assert np.allclose(averaged.buffer.tree.tree, serial.buffer.tree.tree, rtol=1e-6, atol=0)


def test_averaged_two_workers_is_the_mean_of_two_steps(cfg):
    config = cfg.replace(learning_starts=0)
    learner = filled_learner(config)
    start = learner.agent.get_weights()
    batches = [learner.buffer.sample(config.batch_size) for _ in range(2)]
    expected = []
    for b in batches:
        a = DQNAgent(config, seed=1)
        a.set_weights(start, target=True)
        a.update(b)
        expected.append(a.get_weights())
    with joblib.Parallel(n_jobs=2) as parallel:
        parallel_update(parallel, learner.agent, batches, None)
    assert max_diff(learner.agent.get_weights(), average_weights(expected)) < 1e-6


@pytest.mark.parametrize("scheme", ["sharded", "averaged"])
def test_prioritized_n_step_runs_over_joblib_set_every_samples_priority(cfg, scheme):
    config = cfg.replace(total_env_steps=1_000, prioritized=True, n_step=3)
    run = dqnlab.train(scheme, config, workers=2, progress=False, comm="joblib")
    assert run.status == "completed" and run.updates > 0
    replay = run.extra["replay"]
    assert replay["prioritized"] and replay["priority_updates"] == run.updates * run.extra["effective_batch"] > 0
