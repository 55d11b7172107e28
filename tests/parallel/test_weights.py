"""Weight maths: averages, divergence, optimiser-state packing."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import filled_learner

from dqnlab.parallel.weights import (
    apply_changes,
    average_optimizer_states,
    average_weights,
    changed_entries,
    combine_changes,
    divergence,
    optimizer_state,
)


def whole(ws):
    """Learners' whole weights as changes from a zero base (every entry given)."""
    base = {n: np.zeros_like(v, np.float32) for n, v in ws[0].items()}
    return base, [{n: (None, np.asarray(v, np.float32)) for n, v in w.items()} for w in ws]


# ----------------------------------------------------------------------------- averaging maths
def test_plain_and_weighted_average_of_known_vectors():
    w = [{"a": np.array([0.0, 2.0], np.float32), "b": np.array([[1.0]], np.float32)},
         {"a": np.array([4.0, 6.0], np.float32), "b": np.array([[3.0]], np.float32)}]
    mean = average_weights(w)
    np.testing.assert_allclose(mean["a"], [2.0, 4.0])
    np.testing.assert_allclose(mean["b"], [[2.0]])
    assert mean["a"].dtype == np.float32
    weighted = average_weights(w, [3.0, 1.0])  # normalised to 0.75 / 0.25
    np.testing.assert_allclose(weighted["a"], [1.0, 3.0])
    with pytest.raises(ValueError, match="coefficients"):
        average_weights(w, [1.0, -1.0])
    with pytest.raises(ValueError, match="same names"):
        average_weights([w[0], {"a": w[1]["a"]}])


def test_divergence_of_known_vectors():
    same = [{"x": np.ones(4, np.float32)}] * 3
    assert divergence(*whole(same)) == (0.0, 0.0)
    d, rel = divergence(*whole([{"x": np.array([0.0, 0.0])}, {"x": np.array([2.0, 0.0])}]))
    assert d == pytest.approx(1.0) and rel == pytest.approx(1.0)


def test_changed_entries_are_sparse_where_few_changed_and_combine_as_the_whole_weights_average():
    rng = np.random.default_rng(3)
    base = {"t": rng.normal(size=(1000, 1)).astype(np.float32), "b": rng.normal(size=4).astype(np.float32)}
    ws = []
    for k in range(3):
        w = {n: v.copy() for n, v in base.items()}
        w["t"][rng.choice(1000, 20 + 10 * k, replace=False)] += rng.normal(size=(20 + 10 * k, 1)).astype(np.float32)
        w["b"] += 1.0  # every entry changed: travels whole
        ws.append(w)
    changes = [changed_entries(w, base) for w in ws]
    for k, c in enumerate(changes):
        index, values = c["t"]
        assert index is not None and index.size == 20 + 10 * k and np.all(np.diff(index) > 0)
        np.testing.assert_array_equal(values, ws[k]["t"].reshape(-1)[index])
        assert c["b"][0] is None
        back = {n: v.copy() for n, v in base.items()}
        apply_changes(back, c)
        for n in base:
            np.testing.assert_array_equal(back[n], ws[k][n])
    for coefficients in (None, [0.2, 0.3, 0.5], [0.0, 1.0, 0.0]):
        combined = {n: v.copy() for n, v in base.items()}
        apply_changes(combined, combine_changes(base, changes, coefficients))
        want = average_weights(ws, coefficients)
        for n in base:
            np.testing.assert_array_equal(combined[n], want[n])  # (one-hot: learner 1's values exactly)
    flat = np.stack([np.concatenate([w["t"].ravel(), w["b"]]).astype(np.float64) for w in ws])
    mean = flat.mean(axis=0)
    d = np.linalg.norm(flat - mean, axis=1).mean()
    assert divergence(base, changes) == pytest.approx((d, d / np.linalg.norm(mean)), rel=1e-9)
    with pytest.raises(ValueError, match="coefficients"):
        combine_changes(base, changes, [1.0, -1.0, 0.0])
    summed = {n: v.copy() for n, v in base.items()}  # normalise=False, ones: every learner's changes added
    apply_changes(summed, combine_changes(base, changes, np.ones(3), normalise=False))
    for n, b in base.items():
        want = b.astype(np.float64) + sum(w[n].astype(np.float64) - b for w in ws)
        np.testing.assert_array_equal(summed[n], want.astype(np.float32))
    untouched = np.setdiff1d(np.arange(1000), np.concatenate([c["t"][0] for c in changes]))
    np.testing.assert_array_equal(summed["t"].reshape(-1)[untouched], base["t"].reshape(-1)[untouched])


def test_optimizer_state_average_and_roundtrip(cfg):
    learner = filled_learner(cfg)
    learner.agent.update(learner.buffer.sample(cfg.batch_size))
    st = optimizer_state(learner.agent)
    assert set(st) == set(learner.agent.get_weights())
    assert all(set(v) == {"step", "exp_avg", "exp_avg_sq"} for v in st.values())
    doubled = {n: {k: (v * 3 if isinstance(v, np.ndarray) else v) for k, v in s.items()} for n, s in st.items()}
    avg = average_optimizer_states([st, doubled])
    name = next(iter(st))
    np.testing.assert_allclose(avg[name]["exp_avg"], 2 * st[name]["exp_avg"], rtol=1e-6)
    assert avg[name]["step"] == st[name]["step"] == 1.0


def test_tables_larger_than_a_chunk_average_exactly_as_in_float64_and_give_the_divergence():
    from dqnlab.parallel.weights import CHUNK

    rng = np.random.default_rng(1)
    n = 3 * CHUNK + 5  # (several chunks and a ragged end)
    ws = [{"t": rng.normal(size=(n, 1)).astype(np.float32), "b": rng.normal(size=7).astype(np.float32)}
          for _ in range(3)]
    c = np.array([0.2, 0.3, 0.5])
    got = average_weights(ws, c)
    for name in ("t", "b"):
        want = sum(ck * w[name].astype(np.float64) for ck, w in zip(c, ws)).astype(np.float32)
        assert got[name].dtype == np.float32 and got[name].shape == ws[0][name].shape
        np.testing.assert_array_equal(got[name], want)
    flat = np.stack([np.concatenate([w["t"].ravel(), w["b"]]).astype(np.float64) for w in ws])
    mean = flat.mean(axis=0)
    d = np.linalg.norm(flat - mean, axis=1).mean()
    assert divergence(*whole(ws)) == pytest.approx((d, d / np.linalg.norm(mean)), rel=1e-9)
