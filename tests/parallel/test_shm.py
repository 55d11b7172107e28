"""Shared memory: the shared replay buffer across processes; the block is removed after a run and on an error."""

from __future__ import annotations

import gc
import multiprocessing
import os

import joblib
import numpy as np
import pytest

import dqnlab
from dqnlab.parallel.shm import SharedArrays, SharedBlock, SharedParameters, SharedReplay, shared_replay
from dqnlab.schemes.shared import shared_layout


# ----------------------------------------------------------------------------- shared memory
def _write_marker(handle, worker, workers):
    arrays = SharedArrays.attach(handle)
    replay = SharedReplay(arrays, worker, workers, seed=worker)
    n = 3
    replay.add_batch(np.full((n, 4, 4), 5, np.uint8), np.full(n, 2), np.full(n, 12345.0, np.float32),
                     np.full((n, 4, 4), 6, np.uint8), np.zeros(n, bool), np.ones((n, 4), bool))
    del replay
    arrays.close()
    return os.getpid()


def _sum_in_a_fork(view, queue):
    queue.put(float(view.sum()))


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="the populated mapping is Linux's")
def test_a_blocks_views_outlive_its_close_and_unlink_in_this_process_and_its_forks():
    """Each process maps the block with all its pages at once, and a view of it stays valid, here and in a fork,
    after the block is closed and its name removed: a run's final result reads the model without a copy."""
    arrays = SharedArrays.create({"theta": ((1 << 20,), "float32")})
    assert arrays.lasting
    view = arrays["theta"]
    view[:] = 3.0
    arrays.close()
    arrays.unlink()
    gc.collect()
    assert float(view.sum()) == 3.0 * (1 << 20)
    fork = multiprocessing.get_context("fork")
    queue = fork.Queue()
    child = fork.Process(target=_sum_in_a_fork, args=(view, queue))
    child.start()
    assert queue.get(timeout=60) == 3.0 * (1 << 20)
    child.join(60)
    assert child.exitcode == 0


def test_shared_replay_transition_written_by_one_worker_is_sampled_by_another(cfg):
    config = cfg.replace(buffer_size=64)
    arrays = SharedArrays.create(shared_layout(config, 2, n_params=10, n_tensors=2))
    try:
        pid = joblib.Parallel(n_jobs=2)(joblib.delayed(_write_marker)(arrays.handle, 1, 2) for _ in range(1))[0]
        assert pid != os.getpid()  # written by another process
        assert list(arrays["seg_size"]) == [0, 3]  # into worker 1's segment only
        reader = SharedReplay(arrays, 0, 2, seed=0)
        assert len(reader) == 3
        batch = reader.sample(50)
        assert np.all(batch.rewards == 12345.0) and np.all(batch.actions == 2)
        assert np.all(batch.boards == 5) and np.all(batch.next_boards == 6)
        # worker 0 writes too: samples now come from both segments
        reader.add_batch(np.zeros((4, 4, 4), np.uint8), np.zeros(4, np.int64), np.ones(4, np.float32),
                         np.zeros((4, 4, 4), np.uint8), np.zeros(4, bool), np.ones((4, 4), bool))
        rewards = set(reader.sample(200).rewards.tolist())
        assert rewards == {1.0, 12345.0}
        del reader, batch
    finally:
        arrays.close()
        arrays.unlink()


def _add(replay, n, reward):
    replay.add_batch(np.zeros((n, 4, 4), np.uint8), np.zeros(n, np.int64), np.full(n, reward, np.float32),
                     np.zeros((n, 4, 4), np.uint8), np.zeros(n, bool), np.ones((n, 4), bool))


def test_a_worker_sampling_its_own_segment_draws_only_its_transitions(cfg):
    arrays = SharedArrays.create(shared_layout(cfg.replace(buffer_size=64), 2, n_params=10, n_tensors=2))
    try:
        mine, other = SharedReplay(arrays, 0, 2, seed=0, own=True), SharedReplay(arrays, 1, 2, seed=1)
        _add(other, 5, 2.0)
        assert len(other) == 5 and len(mine) == 0  # (what it samples from: nothing of its own yet)
        with pytest.raises(ValueError, match="empty"):
            mine.sample(4)
        _add(mine, 3, 1.0)
        assert len(mine) == 3 and len(other) == 8
        assert set(mine.sample(200).rewards.tolist()) == {1.0}
        assert set(other.sample(200).rewards.tolist()) == {1.0, 2.0}  # (the default: every segment)
        with pytest.raises(ValueError, match="own=True needs a worker"):
            SharedReplay(arrays, None, 2, own=True)
        with pytest.raises(ValueError, match="uniform replay"):
            shared_replay(arrays, 0, 2, cfg.replace(buffer_size=64, prioritized=True), own=True)
        del mine, other
    finally:
        arrays.close()
        arrays.unlink()


def test_shared_memory_is_removed_after_a_run(cfg, monkeypatch):
    created = []
    original = SharedArrays.create.__func__

    def spy(cls, spec, private=False):
        arrays = original(cls, spec, private)
        created.append(arrays.shm.name)
        return arrays

    monkeypatch.setattr(SharedArrays, "create", classmethod(spy))
    dqnlab.train("shared", cfg.replace(total_env_steps=400), workers=1, progress=False)
    assert created
    from multiprocessing import shared_memory

    with pytest.raises(FileNotFoundError):
        shared_memory.SharedMemory(name=created[0])


def test_a_shared_block_is_attached_by_its_handle_and_removed_on_an_error(cfg):
    config = cfg.replace(buffer_size=64, prioritized=True)
    model = {"w": np.zeros((2, 3), np.float32), "b": np.zeros(3, np.float32)}
    weights = {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.full(3, 7.0, np.float32)}
    layout = shared_layout(config, 2, n_params=9, n_tensors=2)
    from multiprocessing import shared_memory

    with pytest.raises(RuntimeError, match="on the way"), SharedBlock.create(layout, model, config, 2,
                                                                             lock=True) as block:
        name, lock_paths = block.arrays.shm.name, block.handle[1:]
        assert all(path is not None and os.path.exists(path) for path in lock_paths)  # update and tree locks
        block.set_model(weights)
        with SharedBlock.attach(block.handle) as worker:  # a worker's view: the same memory
            assert worker.lock.path == lock_paths[0] and worker.tree_lock.path == lock_paths[1]
            np.testing.assert_array_equal(worker.arrays["theta"], np.r_[weights["w"].ravel(), weights["b"]])
            worker.arrays["theta"][-1] = -1.0
        assert os.path.exists(lock_paths[0])  # a worker's exit removes nothing
        got = block.model()
        np.testing.assert_array_equal(got["w"], weights["w"])
        np.testing.assert_array_equal(got["b"], [7.0, 7.0, -1.0])
        assert block.replay_statistics([None, None])["size"] == 0
        raise RuntimeError("an error on the way")
    with pytest.raises(FileNotFoundError):
        shared_memory.SharedMemory(name=name)
    assert not any(os.path.exists(path) for path in lock_paths)


# ----------------------------------------------------------------------------- a network's parameters
def _read_parameters(handle):
    """In another process: a network of the same shape attached to the block, read once."""
    import torch

    net = torch.nn.Linear(3, 2)
    shared = SharedParameters.attach(handle, net)
    seen = (shared.updates, float(net.weight[0, 0]), float(net.bias[1]), os.getpid())
    del net
    shared.close()
    return seen


def test_shared_parameters_are_what_another_process_reads_and_go_back_to_the_owner_at_the_end():
    from multiprocessing import shared_memory

    import torch

    net = torch.nn.Linear(3, 2)
    before = {k: v.clone() for k, v in net.state_dict().items()}
    shared = SharedParameters.create(net)
    name = shared.arrays.shm.name
    try:
        for k, v in net.state_dict().items():
            assert torch.equal(v, before[k])  # the values moved into the block as they were
        with joblib.Parallel(n_jobs=2, backend="loky") as pool:
            for step in (1, 2):  # the owner trains; the reader sees its weights as they are now, not a copy
                with torch.no_grad():
                    net.weight[0, 0] = 10.0 * step
                shared.updates = step
                updates, weight, bias, pid = pool(joblib.delayed(_read_parameters)(shared.handle) for _ in range(1))[0]
                assert pid != os.getpid() and (updates, weight) == (step, 10.0 * step)
                assert bias == float(before["bias"][1])
    finally:
        shared.close()
    with pytest.raises(FileNotFoundError):
        shared_memory.SharedMemory(name=name)
    with torch.no_grad():
        net.weight[0, 0] = 9.0  # the owner's network is in its own memory again, and still works
    assert float(net.weight[0, 0].detach()) == 9.0 and float(net.bias[1].detach()) == float(before["bias"][1])
