"""Stable-Baselines3 on dqnlab's game: the settings that match a config, and the network input."""

import numpy as np
import pytest
import torch

from dqnlab import MLPNetwork, TrainConfig
from dqnlab.bench.sb3 import OneHotObservation, RawObservation, sb3_dqn_settings


@pytest.mark.parametrize("preset", ["seed", "mlp"])
def test_sb3_settings_map_the_replay_ratio_and_list_every_field(preset):
    config = TrainConfig.preset(preset)
    kwargs, mapping = sb3_dqn_settings(config, total_env_steps=20_000)
    updates_per_env_step = kwargs["gradient_steps"] / (kwargs["train_freq"] * config.n_envs)
    assert updates_per_env_step == pytest.approx(config.updates_per_env_step)
    assert kwargs["batch_size"] == config.batch_size and kwargs["buffer_size"] == config.buffer_size
    assert kwargs["policy_kwargs"]["net_arch"] == list(config.hidden) and kwargs["tau"] == 1.0
    assert 0 < kwargs["exploration_fraction"] <= 1
    assert {"field", "dqnlab", "sb3", "same", "note"} == set(mapping[0])
    different = {r["field"] for r in mapping if not r["same"]}
    assert all(r["note"] for r in mapping if not r["same"])
    if preset == "seed":
        assert different == {"target_update", "epsilon", "loss", "max_grad_norm"}
    else:
        assert different == {"double_dqn", "mask_illegal"}
    with pytest.raises(ValueError, match="whole number"):
        sb3_dqn_settings(config.replace(n_envs=3, batch_size=64, replay_ratio=2.0), 1_000)


def test_observation_wrappers_give_the_network_input():
    from dqnlab import Game2048

    env = OneHotObservation(Game2048())
    obs, _ = env.reset(seed=0)
    board = torch.from_numpy(env.unwrapped._board[None].copy())
    assert obs.shape == (288,) and obs.dtype == np.uint8
    assert np.array_equal(obs, MLPNetwork("onehot", (4,)).encode(board)[0].numpy())
    raw = RawObservation(Game2048())
    obs, _ = raw.reset(seed=0)
    assert np.array_equal(obs, MLPNetwork("raw", (4,)).encode(torch.from_numpy(raw.unwrapped._board[None].copy()))[0])
