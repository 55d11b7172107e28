"""The update benchmarks' set-up: they measure the MLP Q-network's update and refuse other presets."""

import pytest

from dqnlab.bench.learner import bench_learner
from dqnlab.bench.peers import compare_sb3


@pytest.mark.parametrize("preset", ["default", "mlp-afterstate"])
def test_mlp_update_benchmarks_refuse_other_networks(preset):
    with pytest.raises(ValueError, match="MLP Q-network"):
        bench_learner(presets=(preset,), rounds=1)
    with pytest.raises(ValueError, match="MLP Q-network"):
        compare_sb3(preset, seconds=0.1)
