"""Smoke mode and budgets: the switch that lets the test suite execute every notebook in seconds.

The budgets are one object, a :class:`Budget`: :data:`FULL` or :data:`SMOKE` (every budget
shrunk to a second or so). It is chosen once, where a session starts, and every ``*_data``
function of :mod:`dqnlab.experiments`, the configurations and the panels read it
(:func:`chosen`): it is the one chosen in code (:func:`use`, as ``reproduce --smoke`` does),
else the environment's: the variable ``DQNLAB_SMOKE`` set to 1 (see :func:`smoke_mode`)
chooses :data:`SMOKE`, which is how the notebooks learn it. Numbers measured in smoke mode
are real measurements of tiny runs: fine to check that the code works, too short to
conclude anything from.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ..config import TrainConfig

__all__ = ["SMOKE_ENV", "Budget", "FULL", "SMOKE", "chosen", "use", "smoke_mode", "budget", "setup",
           "explore_config"]


#: Environment variable that turns on smoke mode (tiny budgets) when set to 1.
SMOKE_ENV = "DQNLAB_SMOKE"


@dataclass(frozen=True)
class Budget:
    """How long the experiments run: the full budgets (:data:`FULL`) or smoke mode's (:data:`SMOKE`).

    Attributes
    ----------
    smoke : bool
        Whether these are smoke mode's budgets.
    run_s : float
        Seconds of wall time of one training run of a notebook's experiments and panels.
    greedy_games : int
        Greedy games each checkpoint of a run plays.
    checkpoints : int
        About how many checkpoints of a run play them (and the final weights).
    """

    smoke: bool
    run_s: float
    greedy_games: int
    checkpoints: int

    def pick(self, full: Any, smoke: Any) -> Any:
        """``smoke`` with smoke mode's budgets, else ``full``: a figure of one experiment."""
        return smoke if self.smoke else full


#: The budgets the notebooks' conclusions are drawn from.
FULL = Budget(smoke=False, run_s=60.0, greedy_games=100, checkpoints=6)
#: Smoke mode's: a run that trains for half a second and a figure with data (the test suite's).
SMOKE = Budget(smoke=True, run_s=0.5, greedy_games=16, checkpoints=2)

_chosen: Budget | None = None  # chosen in code (use); None: the environment's


def smoke_mode() -> bool:
    """Whether smoke mode is on: chosen with :func:`use`, else ``DQNLAB_SMOKE`` set to 1 (or true / yes / on)."""
    if _chosen is not None:
        return _chosen.smoke
    return os.environ.get(SMOKE_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def chosen() -> Budget:
    """The budget in force: :data:`SMOKE` in smoke mode (:func:`smoke_mode`), else :data:`FULL`."""
    return SMOKE if smoke_mode() else FULL


@contextmanager
def use(chosen_budget: Budget) -> Iterator[Budget]:
    """Choose ``chosen_budget`` for the block (whatever ``DQNLAB_SMOKE`` says): ``with use(SMOKE): ...``."""
    global _chosen
    before, _chosen = _chosen, chosen_budget
    try:
        yield chosen_budget
    finally:
        _chosen = before


def budget(full: Any, smoke: Any) -> Any:
    """``smoke`` in smoke mode, else ``full`` (:meth:`Budget.pick` of the :func:`chosen` budget)."""
    return chosen().pick(full, smoke)


def setup() -> Budget:
    """The first cell of every notebook: read the budget chosen and prepare the process.

    In smoke mode PyTorch is pinned to one intra-op thread (the test machines are
    small and shared). Returns the :func:`chosen` budget.
    """
    b = chosen()
    if b.smoke:
        import torch

        torch.set_num_threads(1)
    return b


def explore_config(b: Budget | None = None, **overrides: Any) -> TrainConfig:
    """The MLP configuration of the notebooks' ``ex.*_data()`` runs and the panels' ``mlp`` learner, for budget ``b``
    (default :func:`chosen`).

    The ``mlp`` preset with a faster exploration schedule (epsilon reaches its final
    value after 50,000 env steps per learner, learning starts after 5,000), so that
    runs of a minute or two already show learning. In smoke mode: a small network
    (one hidden layer of 64 units), a 5,000-transition buffer, minibatches of 64 and
    learning after 500 env steps. The budget is ``max_seconds`` (60 s; 2 s in smoke mode:
    a panel's default) with no env-step limit; ``overrides`` replace any field.
    """
    b = b or chosen()
    if b.smoke:
        base = dict(hidden=(64,), buffer_size=5_000, batch_size=64, learning_starts=500, n_envs=16,
                    epsilon_decay_steps=5_000, target_update=200, max_seconds=2.0)
    else:
        base = dict(learning_starts=5_000, epsilon_decay_steps=50_000, max_seconds=60.0)
    return TrainConfig.preset("mlp", total_env_steps=None, **{**base, **overrides})
