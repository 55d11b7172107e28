"""Shared fixtures: tiny configs so every test runs in seconds."""

import matplotlib
import pytest
import torch

matplotlib.use("Agg")
# Tests run beside other work on 2 cores; one intra-op thread avoids OpenMP spin contention.
torch.set_num_threads(1)

from dqnlab import TrainConfig  # noqa: E402


@pytest.fixture
def tiny_config() -> TrainConfig:
    """A config that trains a small network for a few thousand env steps."""
    return TrainConfig(total_env_steps=2_000, n_envs=8, buffer_size=2_000, batch_size=32,
                       learning_starts=200, replay_ratio=8.0, hidden=(32,), target_update=50,
                       epsilon_decay_steps=1_000, seed=0)


@pytest.fixture
def cfg() -> TrainConfig:
    """The parallel schemes' tests' config: 3,000 env steps of a 32-unit network."""
    return TrainConfig(total_env_steps=3_000, n_envs=8, buffer_size=2_000, batch_size=32,
                       learning_starts=200, replay_ratio=8.0, hidden=(32,), target_update=50,
                       epsilon_decay_steps=1_000, seed=0)
