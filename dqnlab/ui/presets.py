"""The learners a panel offers (its preset dropdown) and the configuration each run of one trains."""

from __future__ import annotations

from typing import Any

from ..config import PRESETS, TrainConfig
from ..experiments.budgets import Budget, chosen, explore_config

__all__ = ["PANEL_PRESETS", "PRESET_WORDS", "SCHEME_PRESETS", "default_preset", "panel_config"]

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


#: The preset a panel starts on where it is not ``default``: the schemes that combine a whole model's gradients
#: or weights between processes at every update get the small n-tuple network, which they can send in time.
#: Measured in 60 s panel runs of 2 workers on the 2-core machine: ``sharded`` on ``default`` made no update
#: (3,712 env steps, its time in communication), on ``ntuple-small`` 1,156 updates and a greedy mean of 8,798.
SCHEME_PRESETS = {"sharded": "ntuple-small", "averaged": "ntuple-small"}


def default_preset(scheme: str) -> str:
    """The preset a panel of ``scheme`` starts on: ``default``, the strong learner, except where the scheme
    sends a whole model between processes every update (:data:`SCHEME_PRESETS`)."""
    return SCHEME_PRESETS.get(scheme, "default")


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
