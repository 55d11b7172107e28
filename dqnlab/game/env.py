"""The gymnasium environment: one game of 2048 (``Game2048``), registered as ``dqnlab/Game2048-v0``."""

from __future__ import annotations

from typing import Any, ClassVar

import gymnasium
import numpy as np
from gymnasium import spaces

from .board import board_argument, board_text
from .draw import draw_board
from .rules import (
    MAX_EXPONENT,
    N_ACTIONS,
    SIZE,
    advance,
    check_action,
    check_max_moves,
    legal_actions_unchecked,
    new_board,
)

_ENV_ID = "dqnlab/Game2048-v0"


class Game2048(gymnasium.Env):
    """Single-game 2048 Gymnasium environment.

    Observations are the ``(4, 4)`` uint8 exponent board; actions are
    ``UP, RIGHT, DOWN, LEFT = 0, 1, 2, 3``. The reward is the merge points of
    the move as a float, or ``invalid_move_reward`` for a move that changes
    nothing (no tile spawns then). ``terminated`` is game over after the spawn.

    ``info`` always holds ``board`` (a copy), ``action_mask`` ((4,) int8 legal
    actions of the returned board), ``score`` (cumulative points, int),
    ``max_tile`` (tile value, int) and ``moves`` (moves made this episode,
    illegal ones included).

    Parameters
    ----------
    max_moves : int or None, optional
        Truncate the episode after this many moves (illegal moves count, so a
        repeated illegal move cannot loop forever). None: no limit.
    invalid_move_reward : float, optional
        Reward of a move that changes nothing (default 0.0).
    render_mode : {None, "ansi", "rgb_array"}, optional
        "ansi": :meth:`render` returns a text grid; "rgb_array": an
        ``(H, W, 3)`` uint8 image.

    Raises
    ------
    ValueError
        If ``max_moves`` < 1 or ``render_mode`` is not supported.
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi", "rgb_array"], "render_fps": 4}

    def __init__(self, max_moves: int | None = None, invalid_move_reward: float = 0.0,
                 render_mode: str | None = None):
        check_max_moves(max_moves)
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be None or one of "
                             f"{self.metadata['render_modes']}, got {render_mode!r}")
        self.max_moves = max_moves
        self.invalid_move_reward = float(invalid_move_reward)
        self.render_mode = render_mode
        self.observation_space = spaces.Box(0, MAX_EXPONENT, (SIZE, SIZE), np.uint8)
        self.action_space = spaces.Discrete(N_ACTIONS)
        self._board = np.zeros((SIZE, SIZE), np.uint8)
        self._score = 0
        self._moves = 0

    def _info(self, legal: np.ndarray | None = None) -> dict:
        """The info dict of the current board (``legal``: its (4,) bool legal actions, if known)."""
        if legal is None:
            legal = legal_actions_unchecked(self._board[None])[0]
        top = int(self._board.max())
        return {
            "board": self._board.copy(),
            "action_mask": legal.astype(np.int8),
            "score": self._score,
            "max_tile": 1 << top if top else 0,
            "moves": self._moves,
        }

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        """Start a new game.

        Parameters
        ----------
        seed : int, optional
            Seed of the environment's random generator.
        options : dict, optional
            Unused.

        Returns
        -------
        observation : numpy.ndarray
            ``(4, 4)`` uint8 board.
        info : dict
            See the class docstring.
        """
        super().reset(seed=seed)
        self._board = new_board(self.np_random)
        self._score = 0
        self._moves = 0
        return self._board.copy(), self._info()

    def step(self, action):
        """Play one move.

        Parameters
        ----------
        action : int
            ``UP, RIGHT, DOWN, LEFT = 0, 1, 2, 3``.

        Returns
        -------
        observation : numpy.ndarray
            ``(4, 4)`` uint8 board after the move and spawn.
        reward : float
            Merge points, or ``invalid_move_reward`` if nothing changed.
        terminated : bool
            The game is over.
        truncated : bool
            ``max_moves`` moves were made and the game is not over.
        info : dict
            See the class docstring.

        Raises
        ------
        ValueError
            If ``action`` is not in 0..3.
        """
        action = check_action(action)
        new, points, changed, legal = advance(self._board[None], np.array([action]), self.np_random)
        self._board = new[0]
        self._score += int(points[0])
        self._moves += 1
        reward = float(points[0]) if changed[0] else self.invalid_move_reward
        info = self._info(legal[0])
        terminated = not legal[0].any()
        truncated = (not terminated and self.max_moves is not None
                     and self._moves >= self.max_moves)
        return self._board.copy(), reward, terminated, truncated, info

    def set_board(self, *positional, tiles=None, exponents=None) -> None:
        """Replace the current board (score and move count are kept).

        The board is given by keyword, in the form it is written in: exactly one of
        ``tiles`` and ``exponents``. There is no default form on purpose: people
        write tile values (``[[2, 4, 8, 16], ...]``) while observations hold
        exponents, and each form is a valid board of the other for many boards
        (``[[2, 4, 8, 16], ...]`` read as exponents is a 4, a 16, a 256 and a
        65536), so a guessed form would be silently wrong.

        Parameters
        ----------
        *positional
            Refused (TypeError): a board passed without naming its form.
        tiles : array_like, optional
            4 x 4 integer tile values: 0 for an empty cell, else a power of two
            from 2 to 131072 (see :func:`board_from_tiles`).
        exponents : array_like, optional
            ``(4, 4)`` integer log2 exponents in ``0..17`` (0 = empty, k = the
            tile ``2**k``): the form of observations and ``info["board"]``.

        Raises
        ------
        TypeError
            If the board is passed positionally, or both or neither of ``tiles``
            and ``exponents`` are given.
        ValueError
            If the board is not of the form named: a tile that is not 0 or a power
            of two in 2..131072 (a 3, a 6), an exponent outside ``0..17`` (a 2048),
            or not 4 x 4 integers. The message names the parameter.

        Examples
        --------
        >>> env = Game2048()
        >>> _ = env.reset(seed=0)
        >>> env.set_board(tiles=[[2, 4, 8, 16], [0] * 4, [0] * 4, [0, 0, 0, 2048]])
        >>> env.set_board(exponents=[[1, 2, 3, 4], [0] * 4, [0] * 4, [0, 0, 0, 11]])  # the same board
        """
        self._board = board_argument("Game2048.set_board", positional, tiles, exponents).copy()

    def render(self):
        """Render the current board.

        Returns
        -------
        str or numpy.ndarray or None
            A text grid of tile values ("ansi"), an ``(H, W, 3)`` uint8 image
            ("rgb_array"), or None when ``render_mode`` is None.
        """
        if self.render_mode == "ansi":
            return f"score: {self._score}  moves: {self._moves}\n{board_text(self._board)}\n"
        if self.render_mode == "rgb_array":
            from matplotlib.backends.backend_agg import FigureCanvasAgg
            from matplotlib.figure import Figure

            fig = Figure(figsize=(4, 4), dpi=64)
            canvas = FigureCanvasAgg(fig)
            draw_board(exponents=self._board, ax=fig.add_axes((0, 0, 1, 1)))
            canvas.draw()
            return np.asarray(canvas.buffer_rgba())[:, :, :3].copy()
        return None


def register_env() -> None:
    """Register ``Game2048`` with Gymnasium as ``"dqnlab/Game2048-v0"`` (idempotent)."""
    if _ENV_ID not in gymnasium.registry:
        gymnasium.register(id=_ENV_ID, entry_point="dqnlab.game.env:Game2048")

