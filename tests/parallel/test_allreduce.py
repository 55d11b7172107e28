"""All-reduce over a real gloo process group (``comm="allreduce"``): the update maths and faults."""

from __future__ import annotations

import time

import numpy as np
import pytest
from helpers import filled_learner, max_diff

import dqnlab
from dqnlab.runtime.errors import WorkerError
from dqnlab import DQNAgent, TrainConfig
from dqnlab.parallel.allreduce import COLLECTIVE_TIMEOUT_S, AllReduceGroup, pack_minibatch, unpack_minibatch, _HEADER
from dqnlab.parallel.weights import average_weights
from dqnlab.schemes import averaged, sharded


def _sgd(batch_size: int = 33, optimizer: str = "sgd") -> TrainConfig:
    return TrainConfig(total_env_steps=1_000, n_envs=8, buffer_size=1_000, batch_size=batch_size,
                       learning_starts=0, hidden=(32,), max_grad_norm=None, lr=0.05, seed=3, optimizer=optimizer)


def test_minibatches_survive_packing():
    learner = filled_learner(_sgd())
    batch = learner.buffer.sample(33)
    buf = np.zeros(_HEADER + 40 * 49, np.uint8)
    pack_minibatch(batch, buf)
    for got, want in zip(unpack_minibatch(buf, 33), batch):
        assert got.dtype == want.dtype and np.array_equal(got, want)


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_sharded_allreduce_step_equals_one_big_batch_step(optimizer):
    """DDP's contract: gradients averaged by all-reduce, the same step everywhere = one step on the
    whole minibatch (Adam included, unlike the joblib variant)."""
    config = _sgd(optimizer=optimizer)
    learner = filled_learner(config)
    reference = DQNAgent(config, seed=99)
    reference.load_state_dict(learner.agent.state_dict())
    batch = learner.buffer.sample(config.batch_size)
    reference.update(batch)
    shards, sizes = sharded.shard(batch, 2)  # 17 and 16 transitions
    with AllReduceGroup(sharded.Replica, learner.agent, {"comm": "allreduce"}, 2) as group:
        group.update(shards, sizes / sizes.sum())
        states = group.states()  # (rank 1's model equals rank 0's: its agent is not sent)
        assert states[1]["agent"] is None and states[1]["timing"]["comm"] > 0
    assert max_diff(learner.agent.get_weights(), DQNAgent(config, seed=99).get_weights()) > 1e-4
    assert max_diff(learner.agent.get_weights(), reference.get_weights()) < 1e-6
    assert learner.agent.updates == 1


def test_averaged_allreduce_is_the_mean_of_the_ranks_steps_and_local_sgd_defers_it():
    config = _sgd(batch_size=32, optimizer="adam")
    learner = filled_learner(config)
    start = learner.agent.state_dict()
    batches = [learner.buffer.sample(32) for _ in range(2)]
    expected = []
    for b in batches:
        a = DQNAgent(config, seed=1)
        a.load_state_dict(start)
        a.update(b)
        expected.append(a.get_weights())
    options = {"comm": "allreduce", "average_every": 2, "average_moments": True}
    with AllReduceGroup(averaged.Replica, learner.agent, options, 2) as group:
        group.update(batches, np.array([0.5, 0.5]))  # update 1 of 2: local steps only
        assert max_diff(learner.agent.get_weights(), expected[0]) < 1e-6
        states = group.states()  # the ranks differ: every rank's agent comes
        rank1 = {k: v.numpy() for k, v in states[1]["agent"]["online"].items()}
        assert max_diff(rank1, expected[1]) < 1e-6
        assert max_diff(group.final_weights(), average_weights(expected)) < 1e-6
        group.update(batches, np.array([0.5, 0.5]))  # update 2: averaged
        assert group.replica.averages == 1 and group.replica.last_divergence["divergence"] > 0


def test_averaged_with_one_worker_equals_serial(cfg):
    config = cfg.replace(total_env_steps=1_500)
    serial = dqnlab.train("serial", config, progress=False)
    avg = dqnlab.train("averaged", config, workers=1, progress=False, comm="allreduce")
    assert avg.updates == serial.updates > 0
    assert max_diff(avg.weights, serial.weights) < 1e-5


@pytest.mark.parametrize("scheme", ["sharded", "averaged"])
def test_a_killed_worker_rank_ends_the_run_naming_it(cfg, scheme):
    t0 = time.monotonic()
    with pytest.raises(WorkerError, match="worker 1") as err:
        dqnlab.train(scheme, cfg, workers=2, progress=False, comm="allreduce",
                     _fault={"worker": 1, "after_updates": 5, "kind": "exit"})
    # the dead rank's closed connections fail the collective at once: no wait for the timeout
    assert time.monotonic() - t0 < COLLECTIVE_TIMEOUT_S
    assert err.value.partial.env_steps > 0 and err.value.partial.updates >= 5


def test_a_raising_worker_rank_is_named_with_its_message(cfg):
    with pytest.raises(WorkerError, match="injected fault in worker 1"):
        dqnlab.train("sharded", cfg, workers=2, progress=False, comm="allreduce",
                     _fault={"worker": 1, "after_updates": 3})
