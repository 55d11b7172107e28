"""The learners a panel offers (its preset dropdown) and the configuration each run of one trains."""

from __future__ import annotations

from typing import Any

from ..config import PRESETS, TrainConfig
from ..experiments.budgets import Budget, chosen, explore_config

__all__ = ["PANEL_PRESETS", "PRESET_WORDS", "panel_config"]

#: The presets a panel's dropdown offers, the strong learner first.
PANEL_PRESETS = ("default", "ntuple-small", "ntuple", "mlp", "mlp-afterstate", "cnn")

#: Each preset in a few words (the dropdown's tooltip).
PRESET_WORDS = {
    "default": "the strong learner: an n-tuple network of four 6-cell patterns with adaptive step sizes and "
               "two-step returns",
    "ntuple-small": "a smaller n-tuple network (seventeen 4-cell patterns), quick to copy between processes",
    "ntuple": "the n-tuple network of four 6-cell patterns with a fixed step size",
    "mlp": "a neural network of two hidden layers (the classic DQN learner; slow to learn 2048)",
    "mlp-afterstate": "the neural network valuing the board after each move",
    "cnn": "a small convolutional network valuing the board after each move",
}


def panel_config(preset: str, b: Budget | None = None, **overrides: Any) -> TrainConfig:
    """The configuration a panel trains for ``preset`` (budget ``b``, default the chosen one): the preset with no
    env-step limit and the budget's run time; ``mlp`` is :func:`~dqnlab.experiments.budgets.explore_config` (faster
    exploration). In smoke mode, small tables, networks and buffers that learn from the first few hundred steps
    (the n-tuple presets with a small step, as :func:`~dqnlab.experiments.learning.learning_config`'s).

    Raises
    ------
    ValueError
        For a preset not in :data:`dqnlab.PRESETS`.
    """
    b = b or chosen()
    if preset == "mlp":
        return explore_config(b, **overrides)
    if preset not in PRESETS:
        raise ValueError(f"preset must be one of {sorted(PRESETS)}, got {preset!r}")
    config = TrainConfig.preset(preset, total_env_steps=None, max_seconds=2.0 if b.smoke else 60.0)
    fields: dict[str, Any] = {}
    if b.smoke:
        fields = dict(n_envs=16, learning_starts=256, max_seconds=2.0)
        if config.network == "ntuple":  # as learning_config's: a larger step blows up on near-identical boards
            fields.update(ntuples="17x4", buffer_size=4_000, batch_size=64, lr=0.01)
        else:
            fields.update(hidden=(32,), channels=8, buffer_size=4_000, batch_size=64, epsilon_decay_steps=2_000)
    return config.replace(**{**fields, **overrides})
