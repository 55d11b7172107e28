"""The agent: Q-function networks (mlp, cnn, n-tuple) and the DQN update."""

from .dqn import DQNAgent, epsilon_at, transform_rewards
from .networks import MLPNetwork, make_network

__all__ = ["DQNAgent", "MLPNetwork", "make_network", "epsilon_at", "transform_rewards"]
