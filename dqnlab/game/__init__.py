"""The game 2048: rules, board helpers, the gymnasium env, the vector env, drawing a board.

Nothing here imports from the rest of dqnlab but the compiled core (:mod:`dqnlab.core`, whose
kernels compute the moves, legal moves and spawns). Its modules:

* :mod:`~dqnlab.game.rules`: the rules (moves, legal moves, game over, spawning, new games) for one
  board and for batches, their input checks, and the unchecked fast paths the env and agent call;
* :mod:`~dqnlab.game.board`: boards as people write them (tile values) <-> the log2 exponents used here;
* :mod:`~dqnlab.game.env`: ``Game2048``, the gymnasium env, and ``register_env``;
* :mod:`~dqnlab.game.vector`: ``VecGame2048``, N games stepped together;
* :mod:`~dqnlab.game.draw`: ``draw_board`` (matplotlib, imported only when drawing);
* :mod:`~dqnlab.game.symmetry`: the board's 8 symmetries and how they permute the moves.
"""

from .board import board_from_tiles, board_text, board_to_tiles, max_tile
from .draw import draw_board
from .env import Game2048, register_env
from .rules import (
    ACTION_NAMES,
    MAX_EXPONENT,
    N_ACTIONS,
    is_game_over,
    is_game_over_batch,
    legal_actions,
    legal_actions_batch,
    move,
    move_batch,
    new_board,
    new_boards,
    spawn,
    spawn_batch,
)
from .vector import VecGame2048, VecStep

__all__ = [
    "ACTION_NAMES", "MAX_EXPONENT", "N_ACTIONS", "Game2048", "VecGame2048", "VecStep", "board_from_tiles",
    "board_text", "board_to_tiles", "draw_board", "is_game_over", "is_game_over_batch", "legal_actions",
    "legal_actions_batch", "max_tile", "move", "move_batch", "new_board", "new_boards", "register_env", "spawn",
    "spawn_batch",
]
