"""dqnlab: parallel DQN training schemes for the game 2048, measured and explorable.

The public API, grouped by purpose:

* game: :class:`Game2048` (a gymnasium env), :class:`VecGame2048`, :func:`move`,
  :func:`move_batch`, :func:`legal_actions`, :func:`is_game_over`, :func:`spawn`;
* agent: :class:`QNetwork`, :class:`DQNAgent`, :class:`ReplayBuffer`;
* training: :class:`TrainConfig`, :func:`train`, :data:`SCHEMES`;
* results: :class:`RunResult`, :func:`evaluate`, :class:`EvalResult`.
"""

from .agent import DQNAgent, QNetwork
from .config import PRESETS, TrainConfig
from .env import (
    Game2048,
    VecGame2048,
    is_game_over,
    legal_actions,
    move,
    move_batch,
    new_board,
    register_env,
    spawn,
)
from .evaluation import EvalResult, evaluate
from .replay import Minibatch, ReplayBuffer
from .results import RunResult
from .schemes import SCHEMES, train

register_env()

__version__ = "0.1.0"

__all__ = [
    # game
    "Game2048", "VecGame2048", "move", "move_batch", "legal_actions", "is_game_over", "spawn", "new_board",
    # agent
    "QNetwork", "DQNAgent", "ReplayBuffer", "Minibatch",
    # training
    "TrainConfig", "PRESETS", "train", "SCHEMES",
    # results
    "RunResult", "evaluate", "EvalResult",
]
