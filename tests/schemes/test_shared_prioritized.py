"""``shared`` with prioritized replay and n-step returns: one sum tree over every worker's segment.

The buffer tests use one block and several workers' views of it in this process (the
segments are what differs between workers); the lock test and the runs use processes.
"""

from __future__ import annotations

import os
import tempfile

import joblib
import numpy as np
import pytest
from test_replay import _batch

import dqnlab
from dqnlab.parallel.shm import FileLock, SharedArrays, SharedPrioritizedReplay, SharedReplay, shared_replay
from dqnlab.replay import importance_weights
from dqnlab.runtime.checkpoint import load_checkpoint
from dqnlab.schemes.shared import shared_layout

EPS = 1e-6


@pytest.fixture
def block(cfg):
    """A prioritized block of capacity 30 for 3 workers (segments at slots 0, 10, 20), and its config."""
    config = cfg.replace(buffer_size=30, batch_size=8, prioritized=True, priority_alpha=1.0, priority_eps=EPS)
    arrays = SharedArrays.create(shared_layout(config, 3, n_params=10, n_tensors=2))
    yield arrays, config
    arrays.close()
    arrays.unlink()


def _views(arrays, config, seed=0):
    """Worker 0..2's views and a reader's (the parent's)."""
    views = [shared_replay(arrays, k, 3, config, seed=seed + k) for k in range(3)]
    return views, shared_replay(arrays, None, 3, config, seed=seed + 3)


def _consistent(tree: np.ndarray) -> bool:
    """Whether every inner node is exactly the sum of its two children (they are recomputed, not moved by differences)."""
    inner = np.arange(1, len(tree) // 2)
    return bool(np.array_equal(tree[inner], tree[2 * inner] + tree[2 * inner + 1]))


def _assert_consistent(tree: np.ndarray) -> None:
    assert _consistent(tree)


def _filled(arrays) -> np.ndarray:
    return np.concatenate([np.arange(lo, lo + n) for lo, n in zip((0, 10, 20), arrays["seg_size"])])


# ----------------------------------------------------------------------------- the buffer
def test_sampling_frequencies_follow_the_priorities_across_segments(block):
    """Chi-square goodness of fit of 200,000 draws to P(i) = p_i / sum p over two segments with gaps (fixed seed)."""
    arrays, config = block
    (w0, w1, w2), reader = _views(arrays, config)
    assert isinstance(w0, SharedPrioritizedReplay) and isinstance(reader, SharedPrioritizedReplay)
    w0.add_batch(**_batch(4))  # slots 0-3; worker 1's segment stays empty (10-19), worker 2: slots 20-26
    w2.add_batch(**_batch(7, start=4))
    held = _filled(arrays)
    assert held.tolist() == [0, 1, 2, 3, 20, 21, 22, 23, 24, 25, 26] and len(reader) == 11
    p = np.array([1, 2, 3, 30, 4, 5, 6, 7, 8, 9, 0.5])
    w1.update_priorities(held, p)  # any worker may re-prioritise any filled slot
    counts = np.zeros(30)
    for _ in range(400):
        counts += np.bincount(reader.sample(500).indices, minlength=30)
    assert counts.sum() == 200_000 and counts[np.setdiff1d(np.arange(30), held)].sum() == 0  # never an unfilled slot
    expected = counts.sum() * (p + EPS) / (p + EPS).sum()
    chi2 = ((counts[held] - expected) ** 2 / expected).sum()
    assert chi2 < 29.59  # the 99.9% quantile of chi-square with 10 degrees of freedom
    mb = reader.sample(64)  # and each sample is its slot's transition
    np.testing.assert_array_equal(mb.rewards, arrays["rewards"][mb.indices])


def test_importance_weights_use_the_filled_slots_of_all_segments(block):
    arrays, config = block
    (w0, w1, w2), _ = _views(arrays, config)
    w0.add_batch(**_batch(5))
    w2.add_batch(**_batch(8, start=5))
    held = _filled(arrays)
    w0.update_priorities(held, np.linspace(0.1, 5.0, len(held)))
    w1.beta = 0.4
    mb = w1.sample(64)
    prob = w1.tree[mb.indices] / w1.tree.total
    w = (13 * prob) ** -0.4  # N = 13 filled slots (5 + 0 + 8), not a segment's
    assert mb.weights.dtype == np.float32
    np.testing.assert_allclose(mb.weights, w / w.max(), rtol=1e-6)
    np.testing.assert_array_equal(mb.weights, importance_weights(prob, 13, 0.4))
    assert w1.weights_n == 64 and w0.weights_n == 0  # each worker counts its own samples


def test_priority_updates_with_repeated_indices_and_a_shared_max(block):
    arrays, config = block
    (w0, w1, w2), reader = _views(arrays, config)
    w0.add_batch(**_batch(3))  # slots 0-2
    w1.add_batch(**_batch(4, start=3))  # slots 10-13
    assert np.allclose(w0.tree[np.array([0, 1, 2, 10, 11, 12, 13])], 1.0)  # new transitions: the max so far
    w1.update_priorities(np.array([11, 0, 11, 11, 2]), np.array([1.0, 2.0, 3.0, 7.0, 4.0]))
    assert w0.tree[11] == pytest.approx(7.0 + EPS)  # the last error of a slot drawn three times
    assert w0.tree[0] == pytest.approx(2.0 + EPS) and w0.tree[2] == pytest.approx(4.0 + EPS)
    assert w0.tree.total == pytest.approx(7 + 2 + 4 + 4 * 1.0 + 3 * EPS)
    assert w1.priority_updates == 5 and w0.priority_updates == 0  # counted by the worker that set them
    assert w0.max_priority == w2.max_priority == pytest.approx(7.0 + EPS)  # one max, in the block
    w2.add_batch(**_batch(2, start=7))  # another worker's new transitions get it
    assert np.allclose(w0.tree[np.array([20, 21])], 7.0 + EPS)
    _assert_consistent(arrays["priority_tree"])
    with pytest.raises(ValueError, match="filled slots"):
        w0.update_priorities(np.array([0, 14]), np.array([1.0, 1.0]))  # slot 14: worker 1's, not filled
    with pytest.raises(ValueError, match="filled slots"):
        w0.update_priorities(np.array([30]), np.array([1.0]))
    stats = reader.statistics()
    assert stats["size"] == 9 and stats["capacity"] == 30 and stats["prioritized"]
    assert stats["priority_max"] == pytest.approx(7.0 + EPS) and stats["priority_min"] == pytest.approx(1.0)
    assert set(stats) == set(w0.statistics()) >= {"priority_mean", "max_priority", "priority_updates",
                                                   "given_priorities", "is_weight_mean"}


def test_a_draw_onto_a_priority_zero_leaf_is_drawn_again(block, monkeypatch):
    """Rounding in the tree's descent, or a read in the middle of another worker's write, can end on a leaf of
    priority 0 (an unfilled slot): such draws are drawn again, or at last replaced by a filled slot."""
    arrays, config = block
    (w0, w1, _), _ = _views(arrays, config)
    w0.add_batch(**_batch(4))
    w1.add_batch(**_batch(4, start=4))
    real = type(w0.tree).sample
    calls = []

    def first_into_the_gap(self, n, rng, high=None):
        leaves = real(self, n, rng, high)
        if not calls:
            leaves[::2] = 7  # unfilled: the gap between the two segments
        calls.append(n)
        return leaves

    monkeypatch.setattr(type(w0.tree), "sample", first_into_the_gap)
    mb = w0.sample(32)
    assert calls == [32, 16] and np.isin(mb.indices, _filled(arrays)).all() and np.isfinite(mb.weights).all()
    monkeypatch.setattr(type(w0.tree), "sample", lambda self, n, rng, high=None: np.full(n, 29))  # never filled
    mb = w0.sample(32)
    assert np.isin(mb.indices, _filled(arrays)).all() and np.isfinite(mb.weights).all()
    # a write caught half-way: a leaf raised, the sums above it not yet
    monkeypatch.setattr(type(w0.tree), "sample", real)
    w0.tree.tree[w0.tree.leaves + 12] = 1e6
    for _ in range(20):
        mb = w0.sample(64)
        assert np.isin(mb.indices, _filled(arrays)).all() and np.isfinite(mb.weights).all()


def test_add_batch_takes_steps_and_td_errors_as_a_replay_buffer(block):
    arrays, config = block
    (w0, _, w2), _ = _views(arrays, config)
    assert w2.add_batch(**_batch(3), steps=np.array([1, 3, 2])) == slice(20, 23)
    np.testing.assert_array_equal(arrays["steps"][20:23], [1, 3, 2])
    assert sorted(set(w2.sample(200).steps.tolist())) == [1, 2, 3]
    # a batch larger than the segment keeps its newest 10, with their own priorities
    td = np.arange(12.0)
    w0.add_batch(**_batch(12), td_errors=td)
    assert arrays["seg_size"][0] == 10 and w0.added == 12 and w0.given_priorities == 12
    np.testing.assert_allclose(w0.tree[np.arange(10)], arrays["rewards"][:10] + EPS)  # (reward i: td[i] = i)
    np.testing.assert_array_equal(arrays["rewards"][:10], td[2:])
    with pytest.raises(ValueError, match="actions must be"):
        w0.add_batch(**{**_batch(2), "actions": np.array([0.5, 1.0])})
    with pytest.raises(ValueError, match="steps must"):
        w0.add_batch(**_batch(2), steps=np.array([0, 1]))
    with pytest.raises(RuntimeError, match="reader"):
        shared_replay(arrays, None, 3, config).add_batch(**_batch(1))


def test_counters_are_each_workers_and_sum_in_the_parent(block):
    arrays, config = block
    (w0, w1, _), reader = _views(arrays, config)
    w0.add_batch(**_batch(6))
    w1.add_batch(**_batch(5))
    w0.beta, w1.beta = 0.5, 0.6
    for w in (w0, w1):
        mb = w.sample(8)
        w.update_priorities(mb.indices, mb.rewards)
    state = w0.state_dict()
    assert set(state) == {"rng", *SharedPrioritizedReplay.COUNTERS, "beta"}
    again = shared_replay(arrays, 0, 3, config, seed=99)
    again.load_state_dict(state)
    np.testing.assert_array_equal(again.sample(8).indices, w0.sample(8).indices)
    summed = reader.sum_counters([w0.counters(), None, w1.counters()])
    assert summed["added"] == 11 and summed["priority_updates"] == w0.priority_updates + w1.priority_updates
    assert summed["weights_n"] == 24 and summed["beta"] == 0.6
    reader.load_counters(summed)
    stats = reader.statistics()
    assert stats["added"] == 11 and stats["beta"] == 0.6
    assert stats["is_weight_mean"] == pytest.approx((w0.weights_sum + w1.weights_sum) / 24)


def test_a_uniform_shared_buffer_has_no_tree(cfg):
    config = cfg.replace(buffer_size=20, batch_size=8)
    layout = shared_layout(config, 2, n_params=10, n_tensors=2)
    assert "priority_tree" not in layout and layout["steps"] == ((20,), "uint8")
    arrays = SharedArrays.create(layout)
    try:
        replay = shared_replay(arrays, 1, 2, config, seed=0)
        assert type(replay) is SharedReplay
        assert replay.add_batch(**_batch(3), steps=np.array([2, 2, 2])) == slice(10, 13)
        mb = replay.sample(16)
        assert mb.indices is None and mb.weights is None and (mb.steps == 2).all()
        assert replay.statistics() == {"capacity": 20, "size": 3, "added": 3}
        del replay, mb
    finally:
        arrays.close()
        arrays.unlink()


def _hammer(handle, config, worker, lock_path, rounds):
    """Re-prioritise random filled slots ``rounds`` times from another process, under the tree lock; every
    10 rounds, holding the lock, count whether the tree is consistent (it must be whenever no write is going on)."""
    arrays = SharedArrays.attach(handle)
    lock = FileLock(lock_path)
    replay = shared_replay(arrays, worker, 3, config, seed=worker, tree_lock=lock)
    rng = np.random.default_rng(worker)
    held, top, torn = _filled(arrays), 0.0, 0
    for r in range(rounds):
        idx, td = held[rng.integers(0, len(held), 16)], rng.random(16) * (10.0 + worker)
        replay.update_priorities(idx, td)
        top = max(top, replay.priorities(td).max())
        if r % 10 == 0:
            with lock:
                torn += not _consistent(arrays["priority_tree"])
    counted = replay.priority_updates
    del replay
    lock.close()
    arrays.close()
    return counted, top, torn


def test_tree_writes_from_two_processes_leave_every_sum_consistent(block):
    arrays, config = block
    (w0, w1, w2), _ = _views(arrays, config)
    for k, w in enumerate((w0, w1, w2)):
        w.add_batch(**_batch(10, start=10 * k))
    fd, lock_path = tempfile.mkstemp(suffix=".tree.lock")
    os.close(fd)
    try:
        done = joblib.Parallel(n_jobs=2)(joblib.delayed(_hammer)(arrays.handle, config, k, lock_path, 3_000)
                                         for k in range(2))
    finally:
        os.unlink(lock_path)
    assert [counted for counted, _, _ in done] == [48_000, 48_000]
    assert [torn for _, _, torn in done] == [0, 0]  # (writes unlocked: about a third are torn)
    _assert_consistent(arrays["priority_tree"])
    assert w0.max_priority == max(top for _, top, _ in done)  # raised by both, never lowered


# ----------------------------------------------------------------------------- the scheme
@pytest.mark.parametrize("lock", [True, False])
def test_two_workers_train_with_prioritized_n_step_replay(cfg, tmp_path, monkeypatch, lock):
    made = []
    real_mkstemp = tempfile.mkstemp

    def spy(*args, **kwargs):
        fd, path = real_mkstemp(*args, **kwargs)
        made.append(path)
        return fd, path

    monkeypatch.setattr("dqnlab.parallel.shm.tempfile.mkstemp", spy)
    config = cfg.replace(total_env_steps=2_000, prioritized=True, n_step=3)
    run = dqnlab.train("shared", config, workers=2, progress=False, lock=lock, run_dir=tmp_path)
    assert run.status == "completed" and run.updates > 0
    replay, per = run.extra["replay"], run.extra["per_worker"]
    assert replay["prioritized"] and replay["priority_updates"] > 0 and replay["given_priorities"] == 0
    assert replay["priority_updates"] == sum(w["replay"]["priority_updates"] for w in per)
    assert replay["priority_updates"] == run.updates * config.batch_size  # every update re-prioritises its sample
    assert replay["added"] == sum(w["replay"]["added"] for w in per) and 0 < replay["added"] <= run.env_steps
    assert replay["capacity"] == config.buffer_size and replay["beta"] == pytest.approx(1.0, abs=0.01)
    assert 0 < replay["is_weight_mean"] <= 1 and replay["max_priority"] >= replay["priority_max"] > 0
    # the block at the end (the final checkpoint's copy): one consistent tree over both segments
    block = load_checkpoint(tmp_path)["state"]["arrays"]
    tree, sizes = block["priority_tree"], block["seg_size"]
    _assert_consistent(tree)
    leaves = tree[len(tree) // 2:][:config.buffer_size]
    filled = np.zeros(config.buffer_size, bool)
    for lo, n in zip((0, config.buffer_size // 2), sizes):
        filled[lo:lo + n] = True
    assert replay["size"] == sizes.sum() == filled.sum() and (leaves[filled] > 0).all() and (leaves[~filled] == 0).all()
    assert replay["priority_mean"] == pytest.approx(leaves[filled].mean())
    steps = block["steps"][filled]
    assert steps.min() >= 1 and steps.max() == 3  # n-step returns, shorter where games ended
    assert (steps < 3).any() == (len(run.episodes) > 0)
    locks = [p for p in made if os.path.basename(p).startswith("dqnlab-shared-")]
    assert sorted(p.endswith(".tree.lock") for p in locks) == ([False, True] if lock else [True])
    assert not any(os.path.exists(p) for p in locks)  # the lock files are removed
