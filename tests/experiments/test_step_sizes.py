"""Temporal coherence's step sizes read back from a run's checkpoint (notebook 08's figure)."""

import matplotlib
import numpy as np
import pytest

import dqnlab
from dqnlab import experiments as ex

matplotlib.use("Agg")


def small(**kw):
    return dqnlab.TrainConfig.preset("ntuple-small", **{**dict(total_env_steps=3_000, n_envs=16, buffer_size=500,
                                                              batch_size=32, learning_starts=200, lr=0.01), **kw})


def test_step_sizes_are_the_checkpoints_rates_per_stage(tmp_path):
    dqnlab.train("serial", small(optimizer="tc", stages=(32,)), run_dir=tmp_path, progress=False)
    data = ex.step_sizes(tmp_path)
    rates, stage = data["rates"], data["stage"]
    assert data["stages"] == (32,) and len(rates) == len(stage) > 0
    assert ((rates >= 0) & (rates <= 1)).all() and (rates < 1).any()  # some errors have cancelled
    assert set(np.unique(stage)) == {0, 1}  # boards below 32 and from 32 on were both trained
    fig = ex.step_size_figure(tmp_path)
    assert len(fig.axes) == 2 and len(fig.axes[0].patches) == 2  # one histogram a stage


def test_a_run_without_temporal_coherence_is_a_clear_error(tmp_path):
    dqnlab.train("serial", small(total_env_steps=600), run_dir=tmp_path, progress=False)
    with pytest.raises(ValueError, match="optimizer='tc'"):
        ex.step_sizes(tmp_path)
