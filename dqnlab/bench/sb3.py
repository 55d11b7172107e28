"""Stable-Baselines3 on dqnlab's game with dqnlab's settings, for ``bench peers``.

Observation wrappers that give SB3's network dqnlab's network input, the vectorised
env, and the keyword arguments of SB3's ``DQN`` that match a :class:`TrainConfig`
(with a field-by-field mapping that says where the two cannot be the same).
"""

from __future__ import annotations

import functools
import math
from typing import Any

import gymnasium
import numpy as np

from ..agent.dqn import N_EXPONENTS, transform_rewards
from ..config import TrainConfig
from ..game.env import Game2048

__all__ = ["OneHotObservation", "RawObservation", "sb3_env", "sb3_dqn_settings"]


class OneHotObservation(gymnasium.ObservationWrapper):
    """A :class:`Game2048` observation as dqnlab's one-hot network input.

    ``(4, 4)`` uint8 exponents -> ``(288,)`` uint8 with a 1 at ``cell * 18 + exponent``
    for each of the 16 cells: exactly the input of dqnlab's ``"onehot"`` Q-network
    (SB3 turns a non-image Box into float32 before its first layer).
    """

    def __init__(self, env: gymnasium.Env):
        super().__init__(env)
        self.observation_space = gymnasium.spaces.Box(0, 1, (16 * N_EXPONENTS,), np.uint8)
        self._offsets = np.arange(16) * N_EXPONENTS

    def observation(self, board: np.ndarray) -> np.ndarray:
        out = np.zeros(16 * N_EXPONENTS, np.uint8)
        out[self._offsets + board.reshape(16)] = 1
        return out


class RawObservation(gymnasium.ObservationWrapper):
    """A :class:`Game2048` observation as dqnlab's ``"raw"`` input: ``(16,)`` float32 tile values."""

    def __init__(self, env: gymnasium.Env):
        super().__init__(env)
        self.observation_space = gymnasium.spaces.Box(0.0, float(2 ** 17), (16,), np.float32)

    def observation(self, board: np.ndarray) -> np.ndarray:
        b = board.reshape(16)
        return np.where(b > 0, np.exp2(b, dtype=np.float32), np.float32(0))


def _learner_reward(config: TrainConfig, reward: float) -> float:
    return float(transform_rewards(config, np.array([reward], np.float32))[0])


def sb3_env(config: TrainConfig) -> Any:
    """``config.n_envs`` :class:`Game2048` envs for SB3: a ``DummyVecEnv`` of
    Monitor -> reward transform (as dqnlab's learner sees rewards) -> observation as
    dqnlab's network input.

    Raises
    ------
    ImportError
        If Stable-Baselines3 is not installed (``pip install dqnlab[bench]``).
    """
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.vec_env import DummyVecEnv

    def make() -> gymnasium.Env:
        env: gymnasium.Env = Monitor(Game2048(max_moves=config.max_moves,
                                              invalid_move_reward=config.invalid_move_reward))
        if config.reward_transform != "none":
            env = gymnasium.wrappers.TransformReward(env, functools.partial(_learner_reward, config))
        return OneHotObservation(env) if config.encoding == "onehot" else RawObservation(env)

    return DummyVecEnv([make] * config.n_envs)


def sb3_dqn_settings(config: TrainConfig, total_env_steps: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Keyword arguments of SB3's ``DQN`` that match ``config``, and the field-by-field mapping.

    Parameters
    ----------
    config : TrainConfig
    total_env_steps : int
        Env steps of the first ``learn`` call (SB3's epsilon schedule is a fraction of it).

    Returns
    -------
    kwargs : dict
        For ``stable_baselines3.DQN("MlpPolicy", env, **kwargs)``.
    mapping : list of dict
        ``field``, ``dqnlab``, ``sb3``, ``same`` (bool), ``note``: one row per field.

    Raises
    ------
    ValueError
        If the replay ratio gives no whole number of updates per vectorised step (or
        of vectorised steps per update), which SB3's ``train_freq`` / ``gradient_steps``
        cannot express.
    """
    import torch

    c = config
    per_update = c.batch_size / c.replay_ratio if c.replay_ratio else math.inf  # env steps per update
    per_vec_step = c.n_envs / per_update  # updates per vectorised step
    if per_vec_step >= 1 and float(per_vec_step).is_integer():
        train_freq, gradient_steps = 1, int(per_vec_step)
    elif 0 < per_vec_step < 1 and float(1 / per_vec_step).is_integer():
        train_freq, gradient_steps = int(1 / per_vec_step), 1
    else:
        raise ValueError(f"replay_ratio {c.replay_ratio} with n_envs {c.n_envs} and batch_size {c.batch_size} "
                         "is not a whole number of updates per vectorised step (or steps per update)")
    if c.target_update:
        target_interval, target_same = round(c.target_update * per_update), True
    else:
        target_interval, target_same = int(c.max_moves or 1_000), False
    if c.epsilon_decay_rate is None:
        decay_steps, eps_same = c.epsilon_decay_steps, True
    else:
        updates = math.ceil(math.log(c.epsilon_end / c.epsilon_start) / math.log(c.epsilon_decay_rate))
        decay_steps, eps_same = int(c.learning_starts + updates * per_update), False
    kwargs = dict(
        learning_rate=c.lr, buffer_size=c.buffer_size, learning_starts=c.learning_starts,
        batch_size=c.batch_size, tau=1.0, gamma=c.gamma, train_freq=train_freq, gradient_steps=gradient_steps,
        target_update_interval=target_interval, exploration_fraction=min(1.0, decay_steps / total_env_steps),
        exploration_initial_eps=c.epsilon_start, exploration_final_eps=c.epsilon_end,
        max_grad_norm=c.max_grad_norm if c.max_grad_norm is not None else 1e10,
        policy_kwargs=dict(net_arch=list(c.hidden), activation_fn=torch.nn.ReLU),
        seed=c.seed, device="cpu", verbose=0,
    )
    enc = "one-hot (288 inputs)" if c.encoding == "onehot" else "raw tile values (16 inputs)"

    def row(name: str, ours: Any, theirs: Any, same: bool, note: str = "") -> dict[str, Any]:
        return {"field": name, "dqnlab": str(ours), "sb3": str(theirs), "same": same, "note": note}

    mapping = [
        row("network", f"{enc} -> {' -> '.join(map(str, c.hidden))} -> 4, ReLU",
            f"{'OneHotObservation' if c.encoding == 'onehot' else 'RawObservation'} wrapper, "
            f"net_arch={list(c.hidden)}, ReLU", True),
        row("n_envs", c.n_envs, f"DummyVecEnv of {c.n_envs}", True),
        row("lr (Adam)", c.lr, f"learning_rate={c.lr} (Adam)", True),
        row("gamma", c.gamma, c.gamma, True),
        row("buffer_size", c.buffer_size, c.buffer_size, True),
        row("batch_size", c.batch_size, c.batch_size, True),
        row("learning_starts", c.learning_starts, c.learning_starts, True),
        row("replay_ratio", f"{c.replay_ratio:g} samples per env step",
            f"train_freq={train_freq}, gradient_steps={gradient_steps}", True,
            f"{gradient_steps}/{train_freq} update(s) of {c.batch_size} per step of {c.n_envs} env(s)"),
        row("target_update", c.target_update or "end of each episode", f"target_update_interval={target_interval}, "
            "tau=1", target_same, "" if target_same else "SB3 syncs every N env steps, not at episode ends"),
        row("epsilon", f"{c.epsilon_start} -> {c.epsilon_end}, " + (
            f"linear over {c.epsilon_decay_steps:,} env steps" if eps_same
            else f"x{c.epsilon_decay_rate} per update"), f"linear over {decay_steps:,} env steps", eps_same,
            "" if eps_same else "SB3 has only a linear schedule: same end, reached at the same env step"),
        row("loss", c.loss, "huber (fixed)", c.loss == "huber", "" if c.loss == "huber" else "SB3's DQN has no MSE "
            "option; same cost"),
        row("max_grad_norm", c.max_grad_norm, c.max_grad_norm if c.max_grad_norm is not None else "1e10 (never clips)",
            c.max_grad_norm is not None, "" if c.max_grad_norm is not None else "SB3 always clips; 1e10 never binds, "
            "but SB3 still computes the norm"),
        row("double_dqn", c.double_dqn, "no (plain DQN target)", not c.double_dqn,
            "SB3 has no Double DQN: one forward pass less per update than dqnlab" if c.double_dqn else ""),
        row("mask_illegal", c.mask_illegal, "no (all four actions)", not c.mask_illegal,
            "SB3's DQN cannot mask actions" if c.mask_illegal else ""),
        row("reward_transform", c.reward_transform, "TransformReward wrapper" if c.reward_transform != "none"
            else "none", True),
        row("invalid_move_reward, max_moves", f"{c.invalid_move_reward:g}, {c.max_moves}",
            "the same Game2048 arguments", True),
    ]
    return kwargs, mapping
