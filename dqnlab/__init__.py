"""dqnlab: parallel DQN training schemes for the game 2048, with benchmarks, notebooks and a CLI.

The public API, grouped by purpose:

* game: :class:`Game2048` (a gymnasium env), :class:`VecGame2048`, :func:`move`,
  :func:`move_batch`, :func:`legal_actions`, :func:`is_game_over`, :func:`spawn`, and
  :func:`board_from_tiles` / :func:`board_to_tiles` (boards as people write them: tile values)
  to and from the log2-exponent boards the game uses;
* agent: :class:`MLPNetwork`, :class:`DQNAgent`, :class:`ReplayBuffer`;
* training: :class:`TrainConfig`, :func:`train`, :data:`SCHEMES`;
* results: :class:`RunResult`, :func:`evaluate`, :class:`EvalResult`;
* players: :func:`load_player` (a trained player in one line), :class:`Player`, :func:`play`
  (one game recorded move by move; watch it with :func:`dqnlab.plots.animate`), :class:`RecordedGame`.
"""

import os as _os

# PyTorch's OpenMP threads spin while waiting for work. On a small machine where anything
# else runs (another worker, a notebook, a test), spinning threads starve each other and a
# 2-thread update can run many times slower than a 1-thread one; passive waiting avoids that, and
# learners then take one thread each (see dqnlab.parallel.threads.torch_threads).
# It only takes effect if torch is not imported yet; a value already in the environment wins.
_os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from ._version import __version__ as __version__  # pyproject.toml's (dqnlab._version)
from .agent import DQNAgent, MLPNetwork
from .config import PRESETS, TrainConfig
from .evaluation import EvalResult, RecordedGame, evaluate, play
from .game import (
    Game2048,
    VecGame2048,
    board_from_tiles,
    board_to_tiles,
    is_game_over,
    legal_actions,
    move,
    move_batch,
    new_board,
    register_env,
    spawn,
)
from .player import Player, load_player
from .replay import Minibatch, ReplayBuffer
from .runtime.results import RunResult
from .schemes import SCHEMES, train

register_env()


__all__ = [
    # game
    "Game2048", "VecGame2048", "move", "move_batch", "legal_actions", "is_game_over", "spawn", "new_board",
    "board_from_tiles", "board_to_tiles",
    # agent
    "MLPNetwork", "DQNAgent", "ReplayBuffer", "Minibatch",
    # training
    "TrainConfig", "PRESETS", "train", "SCHEMES",
    # results
    "RunResult", "evaluate", "EvalResult",
    # players
    "load_player", "Player", "play", "RecordedGame",
]
