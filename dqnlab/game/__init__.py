"""The game 2048: rules and lookup tables, board helpers, the gymnasium env and the vector env.

Nothing here imports from the rest of dqnlab: the game is the bottom layer.
"""

from .env import (
    ACTION_NAMES,
    MAX_EXPONENT,
    N_ACTIONS,
    Game2048,
    VecGame2048,
    VecStep,
    board_from_tiles,
    board_text,
    board_to_tiles,
    is_game_over,
    is_game_over_batch,
    legal_actions,
    legal_actions_batch,
    max_tile,
    move,
    move_batch,
    new_board,
    new_boards,
    register_env,
    spawn,
    spawn_batch,
)

__all__ = [
    "ACTION_NAMES", "MAX_EXPONENT", "N_ACTIONS", "Game2048", "VecGame2048", "VecStep", "board_from_tiles",
    "board_text", "board_to_tiles", "is_game_over", "is_game_over_batch", "legal_actions", "legal_actions_batch",
    "max_tile", "move", "move_batch", "new_board", "new_boards", "register_env", "spawn", "spawn_batch",
]
