"""``shared``: the lock counts every update; Hogwild runs; each worker's replay segment holds its step; a worker
sampling its own segment learns as a serial learner does; a worker that starts late waits for its own share of
``learning_starts``."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
from helpers import check_totals

import dqnlab
from dqnlab import TrainConfig
from dqnlab.agent.dqn import DQNAgent
from dqnlab.core.team import new_team
from dqnlab.game.rules import new_boards
from dqnlab.parallel.shm import SharedBlock, SharedReplay
from dqnlab.runtime.learner import Learner, worker_seeds
from dqnlab.schemes.shared import _SharedLearner, shared_layout


def test_shared_with_lock_counts_every_update(cfg):
    run = dqnlab.train("shared", cfg, workers=2, progress=False, lock=True)
    check_totals(run, cfg, 2)
    per = run.extra["per_worker"]
    assert all(w["updates"] > 0 for w in per)
    assert run.extra["updates_counter"] == sum(w["updates"] for w in per) == run.updates
    assert run.extra["lost_increments"] == 0
    assert run.extra["lock_wait_s"] >= 0 and run.extra["optimizer_state"] == "shared"
    assert run.extra["target_syncs"] == run.updates // cfg.target_update


@pytest.mark.parametrize(("lock", "threads"), [(True, True), (True, False), (False, True)],
                         ids=["locked-threads", "locked-processes", "hogwild-threads"])
def test_the_compiled_cores_workers_run_whole_chunks_on_the_block(lock, threads):
    """Each update under the block's ticket lock: no update's count is lost, and the lock's waits are
    reported as communication. Locked or not, a worker never bootstraps from the values its acting computed
    once the other worker may have stepped the weights since (that diverged on this config, both ways)."""
    config = TrainConfig.preset("ntuple-small", n_envs=16, buffer_size=64, batch_size=13, learning_starts=64,
                                total_env_steps=8_000, seed=3)
    run = dqnlab.train("shared", config, workers=2, progress=False, lock=lock, threads=threads)
    per = run.extra["per_worker"]
    assert run.status == "completed" and all(w["updates"] > 50 for w in per)
    if not threads:  # the final model: views of the block, which outlive it (no copy of the table at the end)
        table = run.weights["weight"]
        assert not table.flags.owndata and np.isfinite(table).all() and np.abs(table).sum() > 0
    if lock:
        assert run.extra["updates_counter"] == sum(w["updates"] for w in per) == run.updates
        assert run.extra["lost_increments"] == 0 and run.extra["lock_wait_s"] > 0
    else:
        assert run.extra["lock_wait_s"] == 0


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



def _worker_beside_another(config, stack, own, native):
    """Worker 0 of a 2-worker block whose other segment holds transitions worker 0 never made."""
    init = DQNAgent(config, seed=worker_seeds(config.seed, 0)[2])
    model = init.online.state_dict()
    layout = shared_layout(config, 2, sum(v.numel() for v in model.values()), len(model))
    block = stack.enter_context(SharedBlock.create(layout, model, config, 2, lock=False, private=True))
    block.set_model(init.get_weights())
    new_team(1, out=block.arrays["team"])  # (as the run sets it: learners alone, no lock)
    other = SharedReplay(block.arrays, 1, 2, seed=1)
    boards = new_boards(config.n_envs, np.random.default_rng(1))
    other.add_batch(boards, np.zeros(config.n_envs, np.int64), np.zeros(config.n_envs, np.float32), boards,
                    np.zeros(config.n_envs, bool), np.ones((config.n_envs, 4), bool))
    learner = _SharedLearner(config, 0, 2, block, own=own)
    if not native:
        learner.native = None
    return learner


@pytest.mark.parametrize("native", [True, False], ids=["native", "python"])
def test_a_worker_sampling_its_own_segment_learns_as_a_serial_learner_whatever_the_others_hold(native):
    """``sample="own"``: worker 0's updates draw from its segment alone, with the draws a serial learner makes
    from its own buffer, so its weights are the serial learner's whatever the other segment holds; sampling
    every segment (the default) trains on the other worker's transitions too."""
    config = TrainConfig.preset("ntuple-small", n_envs=16, buffer_size=16, batch_size=16, learning_starts=0,
                                total_env_steps=10**6, seed=0, lr=0.005)
    serial = Learner(config)
    if not native:
        serial.native = None
    with contextlib.ExitStack() as stack:
        own, every = (_worker_beside_another(config, stack, o, native) for o in (True, False))
        for learner in (serial, own, every):
            for _ in range(40):
                learner.advance(config.n_envs)
        assert serial.updates == own.updates > 20
        theta = serial.agent.online.weight.detach().numpy()
        np.testing.assert_allclose(own.agent.online.weight.detach().numpy(), theta, rtol=1e-6, atol=1e-6)
        assert own.buffer.rng.bit_generator.state == serial.buffer.rng.bit_generator.state
        assert not np.allclose(every.agent.online.weight.detach().numpy(), theta, rtol=1e-6, atol=1e-6)
        del own, every


@pytest.mark.parametrize("native", [True, False], ids=["native", "python"])
def test_a_worker_that_starts_late_waits_for_its_own_share_of_learning_starts(native):
    """The other worker has made all of ``learning_starts`` already: worker 0 still waits for ``learning_starts /
    K`` env steps of its own, so that its games, started together, have drifted apart before it trains on them."""
    config = TrainConfig.preset("ntuple-small", n_envs=16, buffer_size=16, batch_size=16, learning_starts=320,
                                total_env_steps=10**6, seed=0, lr=0.005)
    with contextlib.ExitStack() as stack:
        learner = _worker_beside_another(config, stack, True, native)
        learner.arrays["env_steps"][1] = config.learning_starts
        for _ in range(9):
            learner.advance(config.n_envs)
        assert learner.env_steps == 9 * config.n_envs and learner.updates == 0
        learner.advance(config.n_envs)  # its own 160th env step: 2 x 160 = learning_starts
        assert learner.updates > 0
        del learner


def test_sampling_ones_own_segment_runs_and_needs_uniform_replay():
    config = TrainConfig.preset("ntuple-small", n_envs=16, buffer_size=16, batch_size=16, learning_starts=0,
                                total_env_steps=1_280, seed=0, lr=0.005)
    run = dqnlab.train("shared", config, workers=2, progress=False, lock=False, threads=True, sample="own")
    assert run.status == "completed" and run.updates > 0 and run.options["sample"] == "own"
    assert run.extra["replay"]["added"] == run.env_steps
    with pytest.raises(ValueError, match="sample='own' needs uniform replay"):
        dqnlab.train("shared", config.replace(prioritized=True, buffer_size=64), workers=2, progress=False,
                     lock=False, sample="own")
    with pytest.raises(ValueError, match="sample"):
        dqnlab.train("shared", config, workers=2, progress=False, sample="mine")
    # a segment that can never hold a minibatch (32 slots split in two: 16 each, batch 32)
    with pytest.raises(ValueError, match=r"holds 16 transitions, fewer than batch_size \(32\).*at least 64"):
        dqnlab.train("shared", config.replace(buffer_size=32, batch_size=32), workers=2, progress=False, lock=False,
                     sample="own")


@pytest.mark.parametrize("copy_agent", [True, False])
def test_a_workers_state_never_holds_the_blocks_model(copy_agent):
    """A worker's checkpoint state is its own: the model lives in the block (copied once by the parent), so
    the state names no weight, and sparsifying it never reads tables another worker is writing."""
    config = TrainConfig.preset("ntuple-small", n_envs=16, buffer_size=16, batch_size=16, learning_starts=0,
                                total_env_steps=10**6, seed=0, lr=0.005)
    with contextlib.ExitStack() as stack:
        learner = _worker_beside_another(config, stack, False, True)
        learner.advance(config.n_envs)
        agent = learner.state_dict(copy_agent=copy_agent)["agent"]
        assert set(agent) == {"rng", "updates"}
        del learner
