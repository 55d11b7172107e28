"""Smoke mode and budgets: the switch that lets the test suite execute every notebook in seconds.

Every ``*_data`` function of :mod:`dqnlab.experiments` takes ``smoke``: ``True`` shrinks
every budget to seconds; ``None`` reads the environment variable ``DQNLAB_SMOKE``
(see :func:`smoke_mode`), which is how the notebooks learn it. Numbers measured in smoke
mode are real measurements of tiny runs: fine to check that the code works, too short to
conclude anything from.
"""

from __future__ import annotations

import os
from typing import Any

from ..config import TrainConfig

__all__ = ["SMOKE_ENV", "smoke_mode", "resolve_smoke", "budget", "setup", "explore_config"]


#: Environment variable that turns on smoke mode (tiny budgets) when set to 1.
SMOKE_ENV = "DQNLAB_SMOKE"


def smoke_mode() -> bool:
    """Whether smoke mode is on: ``DQNLAB_SMOKE`` is set to 1 (or true / yes / on)."""
    return os.environ.get(SMOKE_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def resolve_smoke(smoke: bool | None) -> bool:
    """``smoke`` as a bool: None reads :func:`smoke_mode` (the environment)."""
    return smoke_mode() if smoke is None else bool(smoke)


def budget(full: Any, smoke_value: Any, smoke: bool | None = None) -> Any:
    """``smoke_value`` in smoke mode, else ``full`` (``smoke=None`` reads :func:`smoke_mode`)."""
    return smoke_value if resolve_smoke(smoke) else full


def setup(smoke: bool | None = None) -> bool:
    """The first cell of every notebook: read the smoke flag and prepare the process.

    In smoke mode PyTorch is pinned to one intra-op thread (the test machines are
    small and shared). Returns whether smoke mode is on.
    """
    smoke = resolve_smoke(smoke)
    if smoke:
        import torch

        torch.set_num_threads(1)
    return smoke


def explore_config(smoke: bool | None = None, **overrides: Any) -> TrainConfig:
    """The configuration the notebooks and control panels train with.

    The ``mlp`` preset with a faster exploration schedule (epsilon reaches its final
    value after 50,000 env steps per learner, learning starts after 5,000), so that
    runs of a minute or two already show learning. In smoke mode: a small network
    (one hidden layer of 64 units), a 5,000-transition buffer, minibatches of 64 and
    learning after 500 env steps. The budget is ``max_seconds`` (60 s; 2 s in smoke
    mode) with no env-step limit; ``overrides`` replace any field.
    """
    if resolve_smoke(smoke):
        base = dict(hidden=(64,), buffer_size=5_000, batch_size=64, learning_starts=500, n_envs=16,
                    epsilon_decay_steps=5_000, target_update=200, max_seconds=2.0)
    else:
        base = dict(learning_starts=5_000, epsilon_decay_steps=50_000, max_seconds=60.0)
    return TrainConfig.preset("mlp", total_env_steps=None, **{**base, **overrides})
