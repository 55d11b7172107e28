"""Prioritized replay: the sum tree, sampling frequencies, importance weights, priority updates."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_replay import _batch

from dqnlab.replay import PrioritizedReplayBuffer, ReplayBuffer, SumTree, importance_weights


def test_sum_tree_sums_and_find():
    tree = SumTree(5)
    assert tree.leaves == 8 and len(tree.tree) == SumTree.size_for(5) == 16
    tree.set(np.arange(5), np.array([1.0, 2.0, 3.0, 4.0, 0.5]))
    assert tree.total == pytest.approx(10.5)
    # running sums 1, 3, 6, 10, 10.5: a value lands on the leaf whose interval holds it
    values = np.array([0.0, 0.99, 1.0, 2.99, 3.0, 5.99, 6.0, 9.99, 10.0, 10.49])
    assert tree.find(values).tolist() == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]


@settings(max_examples=50, deadline=None)
@given(capacity=st.integers(1, 70), ops=st.lists(
    st.tuples(st.lists(st.integers(0, 69), min_size=1, max_size=20), st.floats(0, 100)), min_size=1, max_size=10))
def test_sum_tree_inner_nodes_stay_sums_of_children(capacity, ops):
    tree, leaves = SumTree(capacity), np.zeros(capacity)
    rng = np.random.default_rng(0)
    for idx, scale in ops:
        idx = np.array(idx) % capacity
        p = rng.random(len(idx)) * scale
        tree.set(idx, p)
        leaves[idx] = p  # NumPy assignment: a repeated index keeps its last value, as the tree must
        assert np.allclose(tree[np.arange(capacity)], leaves)
        inner = np.arange(1, tree.leaves)
        assert np.allclose(tree.tree[inner], tree.tree[2 * inner] + tree.tree[2 * inner + 1])
        assert tree.total == pytest.approx(leaves.sum())


def test_sampling_frequencies_match_priorities():
    """Chi-square goodness of fit of 200,000 stratified draws to P(i) = p_i / sum p (fixed seed)."""
    buf = PrioritizedReplayBuffer(16, alpha=1.0, eps=1e-6, seed=3)
    buf.add_batch(**_batch(10))
    p = np.array([1, 2, 3, 4, 5, 6, 7, 8, 9, 30], float)
    buf.update_priorities(np.arange(10), p)
    counts = np.zeros(10)
    for _ in range(400):
        mb = buf.sample(500)
        assert 0 <= mb.indices.min() and mb.indices.max() < 10  # never a slot past the transitions held
        counts += np.bincount(mb.indices, minlength=10)
    expected = counts.sum() * p / p.sum()
    chi2 = ((counts - expected) ** 2 / expected).sum()
    assert chi2 < 27.9  # the 99.9% quantile of chi-square with 9 degrees of freedom


def test_alpha_zero_is_uniform_and_alpha_shapes_priorities():
    buf = PrioritizedReplayBuffer(8, alpha=0.0, seed=0)
    buf.add_batch(**_batch(8))
    buf.update_priorities(np.arange(8), np.arange(8.0) * 100)
    assert np.allclose(buf.tree[np.arange(8)], 1.0)
    buf = PrioritizedReplayBuffer(8, alpha=0.5, eps=0.01, seed=0)
    buf.add_batch(**_batch(8))
    buf.update_priorities(np.arange(8), -np.arange(8.0))  # |delta|: the sign does not matter
    assert np.allclose(buf.tree[np.arange(8)], (np.arange(8.0) + 0.01) ** 0.5)


def test_importance_weights_match_their_formula():
    buf = PrioritizedReplayBuffer(32, alpha=0.7, eps=1e-3, seed=4)
    buf.add_batch(**_batch(20))
    buf.update_priorities(np.arange(20), np.linspace(0.1, 5.0, 20))
    buf.beta = 0.4
    mb = buf.sample(64)
    prob = buf.tree[mb.indices] / buf.tree.total
    w = (20 * prob) ** -0.4
    assert np.allclose(mb.weights, w / w.max(), rtol=1e-6)
    assert mb.weights.dtype == np.float32 and mb.weights.max() == pytest.approx(1.0)
    # beta 0: no correction; beta 1: w proportional to 1/P(i)
    assert np.allclose(importance_weights(prob, 20, 0.0), 1.0)
    w1 = importance_weights(prob, 20, 1.0)
    assert np.allclose(w1 * prob, (w1 * prob)[0], rtol=1e-5)
    # the sampled transitions are the slots' own
    assert np.array_equal(mb.rewards, buf.arrays["rewards"][mb.indices])


def test_batch_priority_updates_with_repeated_indices():
    buf = PrioritizedReplayBuffer(8, alpha=1.0, eps=1e-6, seed=0)
    buf.add_batch(**_batch(6))
    buf.update_priorities(np.array([2, 5, 2, 2, 0]), np.array([1.0, 2.0, 3.0, 7.0, 4.0]))
    assert buf.tree[2] == pytest.approx(7.0 + 1e-6)  # the last error of a slot drawn three times
    assert buf.tree[5] == pytest.approx(2.0 + 1e-6) and buf.tree[0] == pytest.approx(4.0 + 1e-6)
    assert buf.tree.total == pytest.approx(7 + 2 + 4 + 3 * 1.0 + 3e-6)  # slots 1, 3, 4 keep the first max (1)
    assert buf.max_priority == pytest.approx(7.0 + 1e-6) and buf.priority_updates == 5


def test_new_transitions_get_the_max_priority_or_their_own():
    buf = PrioritizedReplayBuffer(6, alpha=1.0, eps=1e-6, seed=0)
    buf.add_batch(**_batch(2))
    assert np.allclose(buf.tree[np.arange(2)], 1.0)
    buf.update_priorities(np.array([0]), np.array([9.0]))
    buf.add_batch(**_batch(2, start=2))
    assert np.allclose(buf.tree[np.arange(2, 4)], 9.0 + 1e-6)
    buf.add_batch(**_batch(3, start=4), td_errors=np.array([0.5, 0.25, 20.0]))  # wraps: slots 4, 5, 0
    assert np.allclose(buf.tree[np.array([4, 5, 0])], np.array([0.5, 0.25, 20.0]) + 1e-6)
    assert buf.max_priority == pytest.approx(20.0 + 1e-6)


def test_errors_name_the_parameter():
    with pytest.raises(ValueError, match="alpha"):
        PrioritizedReplayBuffer(4, alpha=1.5)
    with pytest.raises(ValueError, match="eps"):
        PrioritizedReplayBuffer(4, eps=0.0)
    buf = PrioritizedReplayBuffer(4)
    with pytest.raises(ValueError, match="empty"):
        buf.sample(2)
    with pytest.raises(ValueError, match="td_errors must have shape"):
        buf.add_batch(**_batch(2), td_errors=np.ones(3))
    assert len(buf) == 0
    buf.add_batch(**_batch(2))
    with pytest.raises(ValueError, match="slots in 0..1"):
        buf.update_priorities(np.array([3]), np.array([1.0]))
    with pytest.raises(ValueError, match="finite"):
        buf.update_priorities(np.array([0]), np.array([np.nan]))


def test_state_dict_round_trip_continues_identically():
    a = PrioritizedReplayBuffer(20, alpha=0.6, seed=5)
    a.add_batch(**_batch(25))
    a.update_priorities(np.arange(10), np.arange(10.0))
    b = PrioritizedReplayBuffer(20, alpha=0.6, seed=99)
    b.load_state_dict(a.state_dict())
    for _ in range(3):
        ma, mb = a.sample(8), b.sample(8)
        assert np.array_equal(ma.indices, mb.indices) and np.array_equal(ma.weights, mb.weights)
        a.update_priorities(ma.indices, ma.rewards)
        b.update_priorities(mb.indices, mb.rewards)
    assert np.array_equal(a.tree.tree, b.tree.tree)
    with pytest.raises(ValueError, match="without prioritized replay"):
        b.load_state_dict(ReplayBuffer(20, seed=0).state_dict())


@pytest.mark.parametrize("scheme, workers", [("serial", 1), ("independent", 2)])
def test_beta_reaches_one_over_the_budget_in_every_learner(scheme, workers):
    import dqnlab

    config = dqnlab.TrainConfig(total_env_steps=4_000, n_envs=8, hidden=(16,), buffer_size=2_000, batch_size=16,
                                learning_starts=64, prioritized=True, priority_beta=0.4, seed=3)
    run = dqnlab.train(scheme, config, workers=workers, progress=False)
    per = run.extra.get("per_worker") or [{"replay": run.extra["replay"]}]
    betas = [w["replay"]["beta"] for w in per]
    # each learner anneals over its own share of the env steps: beta0 + (1 - beta0) / K (0.7) was the fault
    assert len(betas) == workers and min(betas) > 0.97, betas
