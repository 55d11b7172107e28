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
    assert data["stages"] == (32,) and len(rates) == len(stage) == len(data["trained"]) > 0
    assert ((rates >= 0) & (rates <= 1)).all() and (rates < 1).any()  # some errors have cancelled
    assert (data["trained"] > 0).all()
    assert set(np.unique(stage)) == {0, 1}  # boards below 32 and from 32 on were both trained
    fig = ex.step_size_figure(tmp_path)
    assert len(fig.axes) == 2 and len(fig.axes[0].lines) == 2  # one line a stage
    assert [p.get_height() for p in fig.axes[1].patches] == [(stage == 0).sum(), (stage == 1).sum()]


def test_the_step_sizes_figure_shows_the_median_rate_per_amount_of_training(tmp_path, monkeypatch):
    # by hand: entries trained a little step near lr, entries trained a lot have slowed down
    data = {"rates": np.array([1.0, 0.9, 0.1, 0.05], np.float32), "trained": np.array([1, 1, 1e4, 1e4], np.float32),
            "stage": np.zeros(4, np.int64), "stages": ()}
    import dqnlab.experiments.learning as module

    monkeypatch.setattr(module, "step_sizes", lambda run_dir: data)
    line = ex.step_size_figure(tmp_path).axes[0].lines[0]
    assert line.get_ydata().tolist() == pytest.approx([0.95, 0.075])
    assert line.get_xdata()[0] == pytest.approx(1.0, rel=0.5) and line.get_xdata()[1] == pytest.approx(1e4, rel=0.5)  # (log bins)


def test_a_run_without_temporal_coherence_is_a_clear_error(tmp_path):
    dqnlab.train("serial", small(total_env_steps=600), run_dir=tmp_path, progress=False)
    with pytest.raises(ValueError, match="optimizer='tc'"):
        ex.step_sizes(tmp_path)
