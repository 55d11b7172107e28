"""The notebooks' experiments: their trials, data and figures, and ``reproduce``.

A notebook reads ``from dqnlab import experiments as ex``, then e.g.
``data = ex.serial_data()`` and ends with ``ex.serial_figure(data)``: one
``*_data`` / ``*_figure`` pair per notebook (``game``, ``serial``, ``independent``,
``shared``, ``sharded``, ``averaged``, ``actors``, ``compare``, ``learning``), the same pair
that ``python -m dqnlab reproduce`` calls (:mod:`dqnlab.experiments.reproduce`).
:mod:`~dqnlab.experiments.budgets` holds the budgets (:class:`Budget`: full, or smoke mode's, chosen
once for every ``*_data`` call), and
:mod:`~dqnlab.experiments.trials` the runs and greedy curves the notebooks compare.
"""

from .actors import actors_data, actors_figure
from .averaged import averaged_data, averaged_figure, local_sgd_table
from .budgets import FULL, SMOKE, SMOKE_ENV, Budget, budget, chosen, explore_config, setup, smoke_mode, use
from .compare import USER_CLAIMS, claims_table, compare_data, compare_figure
from .game import game_data, game_figure
from .independent import independent_data, independent_figure
from .learning import (
    METHOD_VARIANTS,
    REPLAY_VARIANTS,
    learning_config,
    learning_data,
    learning_figure,
    methods_data,
    replay_data,
    scheme_learning,
    step_size_figure,
    step_sizes,
    versus_serial,
)
from .reading import (
    SCHEME_COLOURS,
    SUMMARY_COLUMNS,
    fmt_number,
    readable,
    td_settings,
    versus_serial_figure,
    versus_serial_table,
    versus_serial_text,
)
from .reproduce import NOTEBOOKS, Notebook, reproduce
from .serial import project_days, serial_data, serial_figure, user_play_moves
from .sharded import channels_table, sharded_data, sharded_figure
from .shared import shared_data, shared_figure
from .trials import Trial, greedy_at, greedy_curve, run_trial, summary_table

__all__ = [
    "SMOKE_ENV", "Budget", "FULL", "SMOKE", "chosen", "use", "smoke_mode", "budget", "setup", "explore_config",
    "Trial", "run_trial", "greedy_curve", "greedy_at", "summary_table",
    "game_data", "game_figure", "user_play_moves", "project_days", "serial_data", "serial_figure",
    "independent_data", "independent_figure", "shared_data", "shared_figure", "sharded_data", "sharded_figure",
    "channels_table", "averaged_data", "averaged_figure", "local_sgd_table", "actors_data", "actors_figure",
    "compare_data", "compare_figure", "claims_table", "USER_CLAIMS",
    "learning_config", "learning_data", "learning_figure", "replay_data", "REPLAY_VARIANTS", "methods_data",
    "METHOD_VARIANTS", "step_sizes", "step_size_figure", "scheme_learning", "versus_serial",
    "SUMMARY_COLUMNS", "fmt_number", "readable", "td_settings", "versus_serial_table", "versus_serial_text", "versus_serial_figure", "SCHEME_COLOURS",
    "Notebook", "NOTEBOOKS", "reproduce",
]
