"""The update benchmarks' set-up: they measure the MLP Q-network's update and refuse other presets;
the legacy per-transition loop they time computes what the batched update computes."""

import numpy as np
import pytest
from helpers import filled_buffer

from dqnlab import DQNAgent, TrainConfig
from dqnlab.bench.learner import bench_learner
from dqnlab.bench.peers import compare_sb3
from dqnlab.bench.update import legacy_update


@pytest.mark.parametrize("preset", ["default", "mlp-afterstate"])
def test_mlp_update_benchmarks_refuse_other_networks(preset):
    with pytest.raises(ValueError, match="MLP Q-network"):
        bench_learner(presets=(preset,), rounds=1)
    with pytest.raises(ValueError, match="MLP Q-network"):
        compare_sb3(preset, seconds=0.1)


def test_legacy_update_matches_batched_update_on_one_transition():
    # MSE over four outputs vs over the taken action differs by a factor 4; Adam's step
    # does not depend on the loss scale, so one step of each must agree.
    config = TrainConfig(hidden=(16,), batch_size=1, buffer_size=10, double_dqn=False, mask_illegal=False,
                         loss="mse", max_grad_norm=None, target_update=0)
    buf = filled_buffer(1)
    batch = buf.sample(1)
    a, b = DQNAgent(config, seed=3), DQNAgent(config, seed=3)
    legacy_update(a, batch)
    b.update(batch)
    for k, v in a.get_weights().items():
        np.testing.assert_allclose(v, b.get_weights()[k], atol=1e-6)
