"""All-reduce over a real gloo process group (``comm="allreduce"``): the update maths and faults."""

from __future__ import annotations

import os
import time

import numpy as np
import psutil
import pytest
import torch
import torch.distributed as dist
from helpers import assert_priorities, filled_learner, max_diff, unequal_priorities

import dqnlab
from dqnlab import DQNAgent, TrainConfig
from dqnlab.parallel.addresses import route_interface
from dqnlab.parallel.allreduce import AllReduceGroup
from dqnlab.parallel.collectives import COLLECTIVE_TIMEOUT_S, Collectives
from dqnlab.parallel.faults import inject
from dqnlab.parallel.parts import HEADER, pack_minibatch, shipped_columns, unpack_minibatch
from dqnlab.parallel.weights import average_weights
from dqnlab.runtime.errors import WorkerError
from dqnlab.schemes import averaged, sharded


def _sgd(batch_size: int = 33, optimizer: str = "sgd") -> TrainConfig:
    return TrainConfig(total_env_steps=1_000, n_envs=8, buffer_size=1_000, batch_size=batch_size,
                       learning_starts=0, hidden=(32,), max_grad_norm=None, lr=0.05, seed=3, optimizer=optimizer)


@pytest.mark.parametrize("prioritized,n_step", [(False, 1), (True, 3)])
def test_minibatches_survive_packing(prioritized, n_step):
    config = _sgd().replace(prioritized=prioritized, n_step=n_step)
    batch = filled_learner(config).buffer.sample(33)
    columns = shipped_columns(config)
    buf = np.zeros(HEADER + 40 * 54, np.uint8)
    pack_minibatch(batch, buf, columns)
    got = unpack_minibatch(buf, 33, columns)
    for name in columns:
        assert getattr(got, name).dtype == getattr(batch, name).dtype
        assert np.array_equal(getattr(got, name), getattr(batch, name))
    # n-step spans and importance weights travel when used; the slots stay at rank 0
    assert (got.steps is None) == (n_step == 1) and (got.weights is None) == (not prioritized)
    assert got.indices is None


def test_sharded_allreduce_prioritized_step_is_one_weighted_step_and_sets_every_shards_priorities():
    """Importance weights and n-step spans travel with the shards; the shards' TD errors come back to
    rank 0 in the all-reduce and become the priorities one agent would set on the whole minibatch."""
    config = _sgd(optimizer="adam").replace(prioritized=True, n_step=3)
    learner = unequal_priorities(filled_learner(config))
    reference = DQNAgent(config, seed=99)
    reference.load_state_dict(learner.agent.state_dict())
    batch = learner.buffer.sample(config.batch_size)
    assert batch.weights.min() < 1 and (batch.steps > 1).any()
    reference.update(batch)
    shards, sizes = sharded.shard(batch, 2)
    assert all(s.indices is not None for s in shards) and np.array_equal(shards[1].indices, batch.indices[17:])
    updated = learner.buffer.priority_updates
    with AllReduceGroup(sharded.Replica, learner.agent, {"comm": "allreduce"}, 2) as group:
        group.update(shards, sizes / sizes.sum(), buffer=learner.buffer)
        errors = group.replica.td_errors
    assert max_diff(learner.agent.get_weights(), reference.get_weights()) < 1e-6
    assert errors.shape == (33,) and np.abs(errors - reference.td_errors()).max() < 1e-6
    assert learner.buffer.priority_updates == updated + 33
    assert_priorities(learner.buffer, batch.indices, reference.td_errors())


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


def test_averaged_ntuple_tables_travel_as_their_changed_rows():
    """An n-tuple network's average is a sparse all-reduce of the rows the ranks' local steps changed: the
    same weights as averaging the whole tables, bit-identical at every rank, and far fewer bytes."""
    config = TrainConfig(network="ntuple", ntuples=((0, 1, 2, 3), (4, 5, 6, 7)), optimizer="sgd", lr=0.01,
                         max_grad_norm=None, total_env_steps=1_000, n_envs=8, buffer_size=1_000, batch_size=32,
                         learning_starts=0, seed=3)
    learner = filled_learner(config)
    start = learner.agent.state_dict()
    batches = [[learner.buffer.sample(32) for _ in range(2)] for _ in range(2)]  # [update][rank]
    expected = []
    for rank in range(2):  # each rank's two local steps from the same start
        a = DQNAgent(config, seed=1)
        a.load_state_dict(start)
        for update in batches:
            a.update(update[rank])
        expected.append(a.get_weights())
    table = learner.agent.get_weights()["weight"].nbytes
    options = {"comm": "allreduce", "average_every": 2, "average_moments": False}
    with AllReduceGroup(averaged.Replica, learner.agent, options, 2) as group:
        group.update(batches[0], np.array([0.5, 0.5]))  # a local step: its rows are pending, in the state
        assert len(group.states()[0]["pending"][0]) == 1
        sent = group.coll.bytes_reduced
        group.update(batches[1], np.array([0.5, 0.5]))  # the average
        assert 0 < group.coll.bytes_reduced - sent < table / 20
        rank1 = {k: v.numpy() for k, v in group.states()[1]["agent"]["online"].items()}
        assert max_diff(rank1, learner.agent.get_weights()) == 0
        assert max_diff(learner.agent.get_weights(), average_weights(expected)) < 1e-7
        assert group.replica.stats()["divergence"][0]["divergence"] > 0


def test_changes_since_gives_the_change_from_before_the_first_record_and_sets_it_back():
    p = torch.arange(12, dtype=torch.float32).reshape(6, 2)
    start = p.clone()
    records = []
    for rows, step in ((torch.tensor([1, 4, 1]), 10.0), (torch.tensor([4, 5]), 100.0)):
        records.append((rows, p[rows]))
        p.index_add_(0, rows, torch.full((len(rows), 2), step))
    now = p.clone()
    change = averaged.changes_since(p, records)
    assert torch.equal(p, start)  # the changed rows are back as they were
    assert change.is_coalesced() and change._indices()[0].tolist() == [1, 4, 5]
    assert torch.equal(change.to_dense(), now - start)
    assert averaged.changes_since(p, [])._nnz() == 0


@pytest.mark.parametrize("changes", [{}, {"prioritized": True, "n_step": 3}])
def test_averaged_with_one_worker_equals_serial(cfg, changes):
    config = cfg.replace(total_env_steps=1_500, **changes)
    serial = dqnlab.train("serial", config, progress=False)
    avg = dqnlab.train("averaged", config, workers=1, progress=False, comm="allreduce")
    assert avg.updates == serial.updates > 0
    assert max_diff(avg.weights, serial.weights) < 1e-5
    replay = avg.extra["replay"]
    assert replay["added"] == serial.extra["replay"]["added"]
    if changes:  # the same priorities set after every update, so the same samples drawn
        assert replay["priority_updates"] == serial.extra["replay"]["priority_updates"] == 32 * avg.updates
        assert replay["priority_mean"] == pytest.approx(serial.extra["replay"]["priority_mean"], rel=1e-5)


@pytest.mark.parametrize("scheme,options", [("sharded", {}), ("averaged", {"average_every": 2})])
def test_prioritized_n_step_runs_over_the_allreduce_set_every_samples_priority(cfg, scheme, options):
    config = cfg.replace(total_env_steps=1_500, prioritized=True, n_step=3)
    run = dqnlab.train(scheme, config, workers=2, progress=False, comm="allreduce", **options)
    assert run.status == "completed" and run.updates > 0
    replay = run.extra["replay"]
    assert replay["prioritized"] and replay["priority_updates"] == run.updates * run.extra["effective_batch"] > 0
    assert 0 < replay["is_weight_mean"] < 1 and replay["beta"] > config.priority_beta


@pytest.mark.parametrize("scheme", ["sharded", "averaged"])
def test_a_killed_worker_rank_ends_the_run_naming_it(cfg, scheme):
    t0 = time.monotonic()
    with pytest.raises(WorkerError, match="worker 1") as err, inject({"worker": 1, "after_updates": 5, "kind": "exit"}):
        dqnlab.train(scheme, cfg, workers=2, progress=False, comm="allreduce")
    # the dead rank's closed connections fail the collective at once: no wait for the timeout
    assert time.monotonic() - t0 < COLLECTIVE_TIMEOUT_S
    assert err.value.partial.env_steps > 0 and err.value.partial.updates >= 5


def test_a_raising_worker_rank_is_named_with_its_message(cfg):
    with pytest.raises(WorkerError, match="injected fault in worker 1"), inject({"worker": 1, "after_updates": 3}):
        dqnlab.train("sharded", cfg, workers=2, progress=False, comm="allreduce")


def test_gloo_listens_on_the_interface_of_the_route_to_the_store_and_the_environment_is_left_as_it_was(monkeypatch):
    """The group is made with torch's public constructor, gloo choosing its device from GLOO_SOCKET_IFNAME: set
    for the call to the interface that holds this machine's address on its route to the store's host."""
    loopback = route_interface("127.0.0.1")
    assert any(a.address == "127.0.0.1" for a in psutil.net_if_addrs()[loopback])
    monkeypatch.delenv("GLOO_SOCKET_IFNAME", raising=False)
    coll = Collectives(0, 1)
    coll.join(dist.HashStore(), "run", "127.0.0.1")
    try:
        assert coll.pg.size() == 1 and "GLOO_SOCKET_IFNAME" not in os.environ
    finally:
        coll.leave()
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "no-such-interface0")  # the user's choice is gloo's
    with pytest.raises(RuntimeError):
        Collectives(0, 1).join(dist.HashStore(), "run", "127.0.0.1")
    assert os.environ["GLOO_SOCKET_IFNAME"] == "no-such-interface0"
