"""Weight maths: averages, divergence, optimiser-state packing."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import filled_learner

from dqnlab.parallel.weights import average_optimizer_states, average_weights, divergence, optimizer_state


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
    assert divergence(same) == (0.0, 0.0)
    d, rel = divergence([{"x": np.array([0.0, 0.0])}, {"x": np.array([2.0, 0.0])}])
    assert d == pytest.approx(1.0) and rel == pytest.approx(1.0)


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
