"""The rules of 2048: moves, legal moves, game over, spawning and new games, for one board and batches.

Rules (as in Gabriele Cirulli's original game, https://github.com/gabrielecirulli/2048):

* The board is 4 x 4. It is stored as a ``(4, 4)`` ``numpy.uint8`` array of
  log2 exponents: 0 is an empty cell and ``k`` is the tile ``2**k``
  (``1 <= k <= MAX_EXPONENT = 17``, i.e. up to 131072).
* Actions are ``UP, RIGHT, DOWN, LEFT = 0, 1, 2, 3`` (the numbering of the
  gymnasium-2048 package). Every tile slides toward the wall of the move;
  equal tiles merge starting from that wall, and a tile created by a merge
  does not merge again in the same move (``2 2 2 2`` left gives ``4 4 0 0``).
* The reward of a move is the sum of the values of the merged tiles it
  creates (``2 2`` -> ``4`` scores 4). A move that changes nothing scores 0,
  spawns nothing and is *illegal*.
* After a legal move one tile spawns on a uniformly chosen empty cell:
  a 2 with probability 0.9, a 4 with probability 0.1. A game starts with two
  spawned tiles and is over when no cell is empty and no two horizontal or
  vertical neighbours can merge.
* Two 131072 tiles do not merge (so boards never leave the exponent range);
  they cannot both occur in real play, whose largest reachable tile is 131072.

Moves are computed by the compiled core's bitboard tables (see
:mod:`dqnlab.core.bitboard`), exact for exponents up to 17: a board with a tile
above 32768, or a move merging two 32768s, takes the core's exact byte-wise path.
Legal moves, spawns and whole env steps are the core's kernels too, with the
random draws described in :func:`_spawn_unchecked`.

Each public function checks its input (``check_boards``, ``check_action``, ...) and calls
an unchecked fast path (``move_batch_unchecked``, ``legal_actions_unchecked``,
``advance``) that the env, the vector env and the agent call directly on boards they
know to be valid.
"""

from __future__ import annotations

import operator

import numpy as np

from ..core import bitboard
from ..core.bitboard import MAX_EXPONENT

UP, RIGHT, DOWN, LEFT = 0, 1, 2, 3
N_ACTIONS = 4
ACTION_NAMES = ("up", "right", "down", "left")
SIZE = 4  # the board is SIZE x SIZE
_CELLS = SIZE * SIZE


# --------------------------------------------------------------------------
# Input validation
# --------------------------------------------------------------------------

def check_boards(boards, name: str, ndim: int) -> np.ndarray:
    """Return ``boards`` as a uint8 array after checking shape, dtype and range.

    Parameters
    ----------
    boards : array_like
        Exponent board(s).
    name : str
        Parameter name used in error messages.
    ndim : int
        2 for a single ``(4, 4)`` board, 3 for a batch ``(N, 4, 4)``.

    Returns
    -------
    numpy.ndarray
        ``boards`` as uint8 (not copied when it already is uint8).

    Raises
    ------
    ValueError
        If the shape, dtype or exponent range is wrong.
    """
    arr = np.asarray(boards)
    expected = "(4, 4)" if ndim == 2 else "(N, 4, 4)"
    if arr.ndim != ndim or arr.shape[-2:] != (SIZE, SIZE):
        raise ValueError(f"{name} must have shape {expected}, got shape {arr.shape}")
    if not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"{name} must have an integer dtype, got {arr.dtype}")
    if arr.size and (arr.max() > MAX_EXPONENT
                     or (np.issubdtype(arr.dtype, np.signedinteger) and arr.min() < 0)):
        raise ValueError(f"{name} must hold log2 exponents in 0..{MAX_EXPONENT} (0 = empty, k = the tile 2**k), "
                         f"got values in {arr.min()}..{arr.max()}")
    return arr.astype(np.uint8, copy=False)


def check_action(action) -> int:
    """Return ``action`` as an int after checking it is an action.

    Parameters
    ----------
    action : int
        ``UP, RIGHT, DOWN, LEFT = 0, 1, 2, 3``; any integer type (``operator.index``).

    Returns
    -------
    int
        The action, in ``0..3``.

    Raises
    ------
    ValueError
        If ``action`` is not an integer (a float, a string) or not in ``0..3``.
    """
    try:
        value = operator.index(action)
    except TypeError:
        raise ValueError(f"action must be an integer in 0..3, got {action!r}") from None
    if not 0 <= value < N_ACTIONS:
        raise ValueError(f"action must be an integer in 0..3 (up, right, down, left), "
                         f"got {value}")
    return value


def check_actions(actions, n: int) -> np.ndarray:
    """Return ``actions`` as an int64 array after checking it holds one action per board.

    Parameters
    ----------
    actions : array_like
        ``(n,)`` integer actions in ``0..3``.
    n : int
        Number of boards.

    Returns
    -------
    numpy.ndarray
        ``(n,)`` int64 (not copied when it already is int64).

    Raises
    ------
    ValueError
        If the shape is not ``(n,)``, the dtype is not integer or a value is not in ``0..3``.
    """
    arr = np.asarray(actions)
    if arr.shape != (n,):
        raise ValueError(f"actions must have shape ({n},), got shape {arr.shape}")
    if not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"actions must have an integer dtype, got {arr.dtype}")
    if n and (arr.min() < 0 or arr.max() >= N_ACTIONS):
        raise ValueError(f"actions must be in 0..3 (up, right, down, left), "
                         f"got values in {arr.min()}..{arr.max()}")
    return arr.astype(np.int64, copy=False)


def _check_rng(rng) -> None:
    if not isinstance(rng, np.random.Generator):
        raise ValueError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")


def check_max_moves(max_moves) -> None:
    """Check an episode's move limit (of :class:`Game2048` and :class:`VecGame2048`).

    Parameters
    ----------
    max_moves : int or None
        None (no limit) or an integer >= 1.

    Raises
    ------
    ValueError
        If ``max_moves`` is neither.
    """
    if max_moves is not None and (not isinstance(max_moves, (int, np.integer))
                                  or max_moves < 1):
        raise ValueError(f"max_moves must be None or an integer >= 1, got {max_moves!r}")


# --------------------------------------------------------------------------
# Unchecked hot paths (the compiled core's kernels)
# --------------------------------------------------------------------------

def _actions_int64(actions) -> np.ndarray:
    """``actions`` as a C-contiguous int64 array (one signature for the kernels)."""
    return np.ascontiguousarray(actions, dtype=np.int64)


def move_batch_unchecked(boards: np.ndarray, actions: np.ndarray):
    """Apply one move to each board, without validation (the hot path of :func:`move_batch`).

    Parameters
    ----------
    boards : numpy.ndarray
        ``(N, 4, 4)`` uint8 valid exponent boards.
    actions : numpy.ndarray
        ``(N,)`` integer actions in ``0..3``.

    Returns
    -------
    new_boards, rewards, changed
        See :func:`move_batch`.
    """
    n = len(boards)
    cells = np.ascontiguousarray(boards).reshape(n, _CELLS)
    new = np.empty((n, SIZE, SIZE), np.uint8)
    rewards = np.empty(n, np.int64)
    changed = np.empty(n, bool)
    bitboard.move_batch(cells, _actions_int64(actions), new.reshape(n, _CELLS), rewards, changed)
    return new, rewards, changed


def legal_actions_unchecked(boards: np.ndarray) -> np.ndarray:
    """Legal actions of N boards, without validation (the hot path of :func:`legal_actions_batch`).

    An action is legal iff its move changes the board.

    Parameters
    ----------
    boards : numpy.ndarray
        ``(N, 4, 4)`` uint8 valid exponent boards (see :func:`check_boards`).

    Returns
    -------
    numpy.ndarray
        ``(N, 4)`` bool, indexed by board then action.
    """
    n = len(boards)
    legal = np.empty((n, N_ACTIONS), bool)
    bitboard.legal_batch(np.ascontiguousarray(boards).reshape(n, _CELLS), legal)
    return legal


def _is_game_over_unchecked(boards: np.ndarray) -> np.ndarray:
    """``(N,)`` bool game-over flags of valid uint8 boards ``(N, 4, 4)``."""
    return ~legal_actions_unchecked(boards).any(axis=1)


def _spawn_unchecked(boards: np.ndarray, rng: np.random.Generator, mask=None) -> None:
    """Spawn a tile in place on each board where ``mask`` holds and a cell is empty.

    ``boards`` is a C-contiguous uint8 ``(N, 4, 4)`` array. The draws: one uniform per board
    (all N) picks the ``floor(u * E)``-th of its ``E`` empty cells, then one per spawning board
    picks the tile (a 4 below 0.1, else a 2); see :func:`dqnlab.core.bitboard.spawn_batch`.
    """
    n = len(boards)
    cells = boards.reshape(n, _CELLS)  # a view, as boards is C-contiguous
    mask = np.ones(n, bool) if mask is None else np.ascontiguousarray(mask, dtype=bool)
    bitboard.spawn_batch(cells, rng, mask)


def advance(boards: np.ndarray, actions: np.ndarray, rng: np.random.Generator):
    """Move, spawn a tile on the boards that changed, and find the legal actions after.

    The core of every env step, without validation: one call of the compiled kernel
    :func:`dqnlab.core.bitboard.advance_batch` for any N (a single board included), with the
    same results and random draws as :func:`move_batch` then :func:`spawn_batch` on the
    boards that changed.

    Parameters
    ----------
    boards : numpy.ndarray
        ``(N, 4, 4)`` uint8 valid exponent boards; not modified.
    actions : numpy.ndarray
        ``(N,)`` integer actions in ``0..3``.
    rng : numpy.random.Generator
        Source of the spawns.

    Returns
    -------
    next_boards : numpy.ndarray
        ``(N, 4, 4)`` uint8 boards after the move and spawn (a new array).
    points : numpy.ndarray
        ``(N,)`` int64 points of the moves.
    changed : numpy.ndarray
        ``(N,)`` bool, whether each move changed its board (was legal).
    legal : numpy.ndarray
        ``(N, 4)`` bool legal actions of ``next_boards``.
    """
    n = len(boards)
    next_boards = np.empty((n, SIZE, SIZE), np.uint8)
    points = np.empty(n, np.int64)
    changed = np.empty(n, bool)
    legal = np.empty((n, N_ACTIONS), bool)
    bitboard.advance_batch(np.ascontiguousarray(boards).reshape(n, _CELLS), _actions_int64(actions), rng,
                           next_boards.reshape(n, _CELLS), points, changed, legal)
    return next_boards, points, changed, legal


# --------------------------------------------------------------------------
# Public functional API
# --------------------------------------------------------------------------

def move(board, action) -> tuple[np.ndarray, int, bool]:
    """Apply one move to a board, without spawning a tile.

    Parameters
    ----------
    board : array_like
        ``(4, 4)`` integer log2 exponents in ``0..17``; not modified.
    action : int
        ``UP, RIGHT, DOWN, LEFT = 0, 1, 2, 3``.

    Returns
    -------
    new_board : numpy.ndarray
        ``(4, 4)`` uint8, a new array.
    reward : int
        Points scored: the sum of the tile values created by merges.
    changed : bool
        Whether the move changed the board (i.e. was legal).

    Raises
    ------
    ValueError
        If ``board`` or ``action`` is invalid.
    """
    board = check_boards(board, "board", 2)
    action = check_action(action)
    new, rewards, changed = move_batch_unchecked(board[None], np.array([action]))
    return new[0], int(rewards[0]), bool(changed[0])


def move_batch(boards, actions) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Apply one move to each of N boards, without spawning tiles.

    Parameters
    ----------
    boards : array_like
        ``(N, 4, 4)`` integer log2 exponents in ``0..17``; not modified.
    actions : array_like
        ``(N,)`` integer actions in ``0..3``, one per board.

    Returns
    -------
    new_boards : numpy.ndarray
        ``(N, 4, 4)`` uint8.
    rewards : numpy.ndarray
        ``(N,)`` int64 points per board.
    changed : numpy.ndarray
        ``(N,)`` bool, whether each board changed.

    Raises
    ------
    ValueError
        If ``boards`` or ``actions`` is invalid.
    """
    boards = check_boards(boards, "boards", 3)
    actions = check_actions(actions, len(boards))
    return move_batch_unchecked(boards, actions)


def legal_actions(board) -> np.ndarray:
    """Legal actions of a board (an action is legal iff it changes the board).

    Parameters
    ----------
    board : array_like
        ``(4, 4)`` integer log2 exponents in ``0..17``.

    Returns
    -------
    numpy.ndarray
        ``(4,)`` bool, indexed by action.

    Raises
    ------
    ValueError
        If ``board`` is invalid.
    """
    return legal_actions_unchecked(check_boards(board, "board", 2)[None])[0]


def legal_actions_batch(boards) -> np.ndarray:
    """Legal actions of N boards.

    Parameters
    ----------
    boards : array_like
        ``(N, 4, 4)`` integer log2 exponents in ``0..17``.

    Returns
    -------
    numpy.ndarray
        ``(N, 4)`` bool, indexed by board then action.

    Raises
    ------
    ValueError
        If ``boards`` is invalid.
    """
    return legal_actions_unchecked(check_boards(boards, "boards", 3))


def is_game_over(board) -> bool:
    """Whether no move can change the board.

    Parameters
    ----------
    board : array_like
        ``(4, 4)`` integer log2 exponents in ``0..17``.

    Returns
    -------
    bool
        True when no cell is empty and no two neighbours can merge.

    Raises
    ------
    ValueError
        If ``board`` is invalid.
    """
    return bool(_is_game_over_unchecked(check_boards(board, "board", 2)[None])[0])


def is_game_over_batch(boards) -> np.ndarray:
    """Game-over flags of N boards.

    Parameters
    ----------
    boards : array_like
        ``(N, 4, 4)`` integer log2 exponents in ``0..17``.

    Returns
    -------
    numpy.ndarray
        ``(N,)`` bool.

    Raises
    ------
    ValueError
        If ``boards`` is invalid.
    """
    return _is_game_over_unchecked(check_boards(boards, "boards", 3))


def spawn(board, rng: np.random.Generator) -> np.ndarray:
    """Return a copy of a board with one random tile added.

    The tile goes to a uniformly chosen empty cell and is a 2 (exponent 1)
    with probability 0.9, else a 4 (exponent 2).

    Parameters
    ----------
    board : array_like
        ``(4, 4)`` integer log2 exponents in ``0..17``; not modified.
    rng : numpy.random.Generator
        Source of randomness.

    Returns
    -------
    numpy.ndarray
        ``(4, 4)`` uint8 new board.

    Raises
    ------
    ValueError
        If ``board`` or ``rng`` is invalid or the board has no empty cell.
    """
    board = check_boards(board, "board", 2).copy()
    _check_rng(rng)
    if board.all():
        raise ValueError("board has no empty cell to spawn a tile on")
    _spawn_unchecked(board[None], rng)
    return board


def spawn_batch(boards: np.ndarray, rng: np.random.Generator, mask=None) -> None:
    """Spawn one random tile in place on each selected board (vectorised).

    Boards without an empty cell are left unchanged.

    Parameters
    ----------
    boards : numpy.ndarray
        ``(N, 4, 4)`` uint8 C-contiguous exponent boards, modified in place.
    rng : numpy.random.Generator
        Source of randomness.
    mask : array_like, optional
        ``(N,)`` bool, the boards to spawn on (default: all).

    Raises
    ------
    ValueError
        If ``boards`` is not a writeable C-contiguous uint8 ndarray of valid
        boards, or ``rng`` or ``mask`` is invalid.
    """
    if (not isinstance(boards, np.ndarray) or boards.dtype != np.uint8
            or not boards.flags.c_contiguous or not boards.flags.writeable):
        raise ValueError("boards must be a writeable C-contiguous numpy.ndarray of "
                         "dtype uint8 (it is modified in place)")
    check_boards(boards, "boards", 3)
    _check_rng(rng)
    if mask is not None:
        mask = np.asarray(mask)
        if mask.shape != (len(boards),) or mask.dtype != bool:
            raise ValueError(f"mask must be a bool array of shape ({len(boards)},), "
                             f"got {mask.dtype} array of shape {mask.shape}")
    _spawn_unchecked(boards, rng, mask)


def new_boards(n: int, rng: np.random.Generator) -> np.ndarray:
    """Start ``n`` games: empty boards with two spawned tiles each.

    Parameters
    ----------
    n : int
        Number of boards, >= 0.
    rng : numpy.random.Generator
        Source of randomness.

    Returns
    -------
    numpy.ndarray
        ``(n, 4, 4)`` uint8.

    Raises
    ------
    ValueError
        If ``n`` is negative or ``rng`` is invalid.
    """
    if operator.index(n) < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    _check_rng(rng)
    boards = np.zeros((n, SIZE, SIZE), np.uint8)
    bitboard.new_boards_into(boards.reshape(n, _CELLS), rng)  # two spawns, as two spawn_batch calls
    return boards


def new_board(rng: np.random.Generator) -> np.ndarray:
    """Start a game: an empty board with two spawned tiles.

    Parameters
    ----------
    rng : numpy.random.Generator
        Source of randomness.

    Returns
    -------
    numpy.ndarray
        ``(4, 4)`` uint8.

    Raises
    ------
    ValueError
        If ``rng`` is invalid.
    """
    return new_boards(1, rng)[0]

