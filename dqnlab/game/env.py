"""The game 2048: fast vectorised rules, a Gymnasium environment and a vector env.

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

Moves are computed with lookup tables over the 65536 rows whose exponents are
all <= 15 (each row packed into a 16-bit key of four 4-bit nibbles); rows with
larger exponents take a slower vectorised fallback.
"""

from __future__ import annotations

import array
import functools
import operator
import struct
from typing import NamedTuple

import gymnasium
import numpy as np
from gymnasium import spaces

UP, RIGHT, DOWN, LEFT = 0, 1, 2, 3
N_ACTIONS = 4
MAX_EXPONENT = 17
ACTION_NAMES = ("up", "right", "down", "left")

_SIZE = 4
_CELLS = _SIZE * _SIZE
_P_FOUR = 0.1
_TABLE_MAX = 15  # the largest exponent a 4-bit table key can hold
_ENV_ID = "dqnlab/Game2048-v0"


# --------------------------------------------------------------------------
# Input validation
# --------------------------------------------------------------------------

def _check_boards(boards, name: str, ndim: int) -> np.ndarray:
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
    if arr.ndim != ndim or arr.shape[-2:] != (_SIZE, _SIZE):
        raise ValueError(f"{name} must have shape {expected}, got shape {arr.shape}")
    if not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"{name} must have an integer dtype, got {arr.dtype}")
    if arr.size and (arr.max() > MAX_EXPONENT
                     or (np.issubdtype(arr.dtype, np.signedinteger) and arr.min() < 0)):
        raise ValueError(f"{name} must hold log2 exponents in 0..{MAX_EXPONENT} (0 = empty, k = the tile 2**k), "
                         f"got values in {arr.min()}..{arr.max()}")
    return arr.astype(np.uint8, copy=False)


def _check_action(action) -> int:
    """Return ``action`` as an int in ``0..3``; raise ValueError otherwise."""
    try:
        value = operator.index(action)
    except TypeError:
        raise ValueError(f"action must be an integer in 0..3, got {action!r}") from None
    if not 0 <= value < N_ACTIONS:
        raise ValueError(f"action must be an integer in 0..3 (up, right, down, left), "
                         f"got {value}")
    return value


def _check_actions(actions, n: int) -> np.ndarray:
    """Return ``actions`` as an int64 array of shape ``(n,)`` with values in ``0..3``."""
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


def _check_max_moves(max_moves) -> None:
    if max_moves is not None and (not isinstance(max_moves, (int, np.integer))
                                  or max_moves < 1):
        raise ValueError(f"max_moves must be None or an integer >= 1, got {max_moves!r}")


# --------------------------------------------------------------------------
# Line sliding and lookup tables
# --------------------------------------------------------------------------

def _compact(lines: np.ndarray) -> np.ndarray:
    """Move the non-zero entries of each row of ``lines`` to the front, keeping order."""
    order = np.argsort(lines == 0, axis=1, kind="stable")
    return np.take_along_axis(lines, order, axis=1)


def _slide_lines(lines: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Slide and merge lines toward index 0 (the reference rule, vectorised).

    Parameters
    ----------
    lines : numpy.ndarray
        ``(M, 4)`` uint8 exponents.

    Returns
    -------
    slid : numpy.ndarray
        ``(M, 4)`` uint8 lines after the move.
    reward : numpy.ndarray
        ``(M,)`` int64 points scored by each line.
    """
    tiles = _compact(lines)
    out = tiles.copy()
    reward = np.zeros(len(lines), np.int64)
    merged_before = np.zeros(len(lines), bool)
    for j in range(_SIZE - 1):
        a, b = tiles[:, j], tiles[:, j + 1]
        merge = (a != 0) & (a == b) & (a < MAX_EXPONENT) & ~merged_before
        out[merge, j] += 1
        out[merge, j + 1] = 0
        reward += np.where(merge, np.int64(2) << a.astype(np.int64), 0)
        merged_before = merge
    return _compact(out), reward


def _build_tables() -> tuple[np.ndarray, np.ndarray]:
    """Slid lines and rewards for every 16-bit key, for both slide directions.

    Returns
    -------
    lines : numpy.ndarray
        ``(2 * 65536,)`` uint32; entry ``d * 65536 + key`` holds the 4 uint8
        exponents of the slid line (in line order) packed into one word, where
        ``key = l[0] | l[1] << 4 | l[2] << 8 | l[3] << 12`` and ``d`` is 0 for
        a slide toward index 0 (left, up) and 1 toward index 3 (right, down).
    rewards : numpy.ndarray
        ``(2 * 65536,)`` uint32 points of the same slides.
    """
    keys = np.arange(1 << 16)
    rows = ((keys[:, None] >> np.arange(0, 16, 4)) & 0xF).astype(np.uint8)
    to_start, reward_start = _slide_lines(rows)
    to_end, reward_end = _slide_lines(rows[:, ::-1])
    lines = np.concatenate([to_start, to_end[:, ::-1]])
    rewards = np.concatenate([reward_start, reward_end]).astype(np.uint32)
    return np.ascontiguousarray(lines).view(np.uint32).ravel(), rewards


_LINE_TABLE, _REWARD_TABLE = _build_tables()
# Offset into the tables per action: toward index 3 for RIGHT and DOWN.
_TABLE_OFFSET = np.array([0, 1, 1, 0], np.intp) << 16


def _move_fallback(boards, actions, new, rewards) -> None:
    """Recompute, in place in ``new`` and ``rewards``, the boards holding exponents > 15."""
    big = (boards > _TABLE_MAX).any(axis=(1, 2))
    for action in range(N_ACTIONS):
        sel = np.flatnonzero(big & (actions == action))
        if sel.size:
            # Rotating counter-clockwise (action + 1) times turns the move into "left".
            k = action + 1
            lines = np.rot90(boards[sel], k, axes=(1, 2)).reshape(-1, _SIZE)
            slid, line_rewards = _slide_lines(lines)
            new[sel] = np.rot90(slid.reshape(-1, _SIZE, _SIZE), -k, axes=(1, 2))
            rewards[sel] = line_rewards.reshape(-1, _SIZE).sum(axis=1)


def _move_batch_unchecked(boards: np.ndarray, actions: np.ndarray):
    """Apply one move to each board, without validation (the hot path).

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
    boards = np.ascontiguousarray(boards)
    b = boards.astype(np.uint16)
    row_keys = b[:, :, 0] | b[:, :, 1] << 4 | b[:, :, 2] << 8 | b[:, :, 3] << 12
    col_keys = b[:, 0] | b[:, 1] << 4 | b[:, 2] << 8 | b[:, 3] << 12
    vertical = (actions & 1) == 0  # UP, DOWN
    idx = np.where(vertical[:, None], col_keys, row_keys).astype(np.intp)
    idx += _TABLE_OFFSET[actions][:, None]
    new = _LINE_TABLE[idx].view(np.uint8).reshape(n, _SIZE, _SIZE)  # one line per row
    new[vertical] = new[vertical].transpose(0, 2, 1)
    points = _REWARD_TABLE[idx]
    rewards = (points[:, 0] + points[:, 1] + points[:, 2] + points[:, 3]).astype(np.int64)
    if n and boards.max() > _TABLE_MAX:
        _move_fallback(boards, actions, new, rewards)
    # Compare each 16-byte board as two 64-bit words.
    differs = new.reshape(n, _CELLS).view(np.uint64) != boards.reshape(n, _CELLS).view(np.uint64)
    return new, rewards, differs[:, 0] | differs[:, 1]


# Flat cell i pairs with its right neighbour i + 1 / its lower neighbour i + 4.
_ROW_PAIRS = np.arange(_CELLS) % _SIZE != _SIZE - 1
_COL_PAIRS = np.arange(_CELLS) < _CELLS - _SIZE


def _legal_actions_unchecked(boards: np.ndarray) -> np.ndarray:
    """``(N, 4)`` bool legal actions of valid uint8 boards ``(N, 4, 4)``.

    A move toward a wall changes the board iff some neighbour pair can merge,
    or has an empty cell on the wall side of a tile.
    """
    n = len(boards)
    flat = np.ascontiguousarray(boards).reshape(-1)
    # pair_flags[action, p]: the pair starting at flat cell p makes action legal.
    pair_flags = np.zeros((N_ACTIONS, flat.size), bool)
    for step, toward_first, toward_second in ((1, LEFT, RIGHT), (_SIZE, UP, DOWN)):
        first, second = flat[:-step], flat[step:]
        first_empty, second_empty = first == 0, second == 0
        merge = (first == second) & ~first_empty & (first < MAX_EXPONENT)
        np.logical_or(merge, first_empty & ~second_empty, out=pair_flags[toward_first, :-step])
        np.logical_or(merge, second_empty & ~first_empty, out=pair_flags[toward_second, :-step])
    pair_flags = pair_flags.reshape(N_ACTIONS, n, _CELLS)
    pair_flags[[LEFT, RIGHT]] &= _ROW_PAIRS  # drop pairs that wrap to the next row or board
    pair_flags[[UP, DOWN]] &= _COL_PAIRS
    words = pair_flags.view(np.uint64)  # (4, N, 2): any flag set among a board's 16 pairs
    return ((words[:, :, 0] | words[:, :, 1]) != 0).T.copy()


def _is_game_over_unchecked(boards: np.ndarray) -> np.ndarray:
    """``(N,)`` bool game-over flags of valid uint8 boards ``(N, 4, 4)``."""
    return ~_legal_actions_unchecked(boards).any(axis=1)


def _spawn_unchecked(boards: np.ndarray, rng: np.random.Generator, mask=None) -> None:
    """Spawn a tile in place on each board where ``mask`` holds and a cell is empty.

    ``boards`` is a C-contiguous uint8 ``(N, 4, 4)`` array.
    """
    n = len(boards)
    cells = boards.reshape(n, _CELLS)  # a view, as boards is C-contiguous
    # running[p, i]: empty cells among cells 0..p of board i; laid out (16, N)
    # so that the running sum is 15 vector additions.
    running = np.ascontiguousarray((cells == 0).T, dtype=np.uint8)
    for p in range(1, _CELLS):
        running[p] += running[p - 1]
    counts = running[-1]
    nth = (rng.random(n) * counts).astype(np.uint8)  # uniform in 0..counts-1
    # The (nth + 1)-th empty cell is the first cell whose running count exceeds nth.
    target = (running <= nth).sum(axis=0, dtype=np.uint8)
    rows = np.flatnonzero(counts > 0 if mask is None else (counts > 0) & mask)
    cells[rows, target[rows]] = np.where(rng.random(rows.size) < _P_FOUR, 2, 1)


# One board in pure Python: for a single board, a dozen NumPy calls on 16 cells cost more
# than the arithmetic, so :func:`_advance` reads the same tables as Python integers.
_PACK_LINES = struct.Struct("<4I").pack  # four table lines (uint32, cell 0 in the low byte) -> 16 bytes


@functools.cache
def _one_board_tables() -> tuple[array.array, array.array, bytes]:
    """The move tables as ``array`` (indexed as Python ints) and, per line key and
    table offset, whether that move changes the line (legal-move checks)."""
    keys = np.arange(1 << 16, dtype=np.uint32)
    unpacked = (keys & 15) | (keys >> 4 & 15) << 8 | (keys >> 8 & 15) << 16 | (keys >> 12 & 15) << 24
    movable = (_LINE_TABLE != np.tile(unpacked, 2)).astype(np.uint8).tobytes()
    return array.array("I", _LINE_TABLE.tobytes()), array.array("I", _REWARD_TABLE.tobytes()), movable


def _line_keys(cells: bytes | bytearray) -> tuple[list[int], list[int]]:
    """Table keys (4-bit nibbles, first cell lowest) of the four rows and the four
    columns of a board given as its 16 row-major exponent bytes (all <= 15)."""
    rows = [cells[i] | cells[i + 1] << 4 | cells[i + 2] << 8 | cells[i + 3] << 12 for i in (0, 4, 8, 12)]
    cols = [cells[j] | cells[j + 4] << 4 | cells[j + 8] << 8 | cells[j + 12] << 12 for j in range(4)]
    return rows, cols


def _advance_one(board: np.ndarray, action: int, rng: np.random.Generator):
    """:func:`_advance` for one ``(4, 4)`` board with tiles below ``2**15`` (None for
    others: a 32768 + 32768 merge would leave the tables). Same results and the same
    random draws as the batched path."""
    cells = board.tobytes()  # row-major exponents
    if max(cells) >= _TABLE_MAX:
        return None
    line, reward, movable = _one_board_tables()
    offset = int(_TABLE_OFFSET[action])
    rows, cols = _line_keys(cells)
    keys = rows if action & 1 else cols  # RIGHT, LEFT move rows; UP, DOWN columns
    packed = _PACK_LINES(*[line[k + offset] for k in keys])
    new = packed if action & 1 else packed[0::4] + packed[1::4] + packed[2::4] + packed[3::4]  # columns: transpose
    points = sum(reward[k + offset] for k in keys)
    changed = new != cells
    nth = rng.random()  # drawn for every board, as _spawn_unchecked does
    if changed:  # a move that changes the board leaves an empty cell
        empty = [i for i, v in enumerate(new) if not v]
        new = bytearray(new)
        new[empty[int(nth * len(empty))]] = 2 if rng.random() < _P_FOUR else 1
    rows, cols = _line_keys(new)
    far = 1 << 16  # offset of the moves toward index 3 (RIGHT, DOWN)
    legal = (any(movable[k] for k in cols), any(movable[k + far] for k in rows),
             any(movable[k + far] for k in cols), any(movable[k] for k in rows))
    return (np.frombuffer(bytearray(new), np.uint8).reshape(1, _SIZE, _SIZE), np.array([points], np.int64),
            np.array([changed]), np.array([legal]))


def _advance(boards: np.ndarray, actions: np.ndarray, rng: np.random.Generator):
    """Move, spawn a tile on the boards that changed, and find the legal actions after.

    The core of every env step. ``boards`` ``(N, 4, 4)`` uint8 valid, ``actions``
    ``(N,)`` ints in 0..3. Returns ``next_boards`` ``(N, 4, 4)`` uint8 (new array),
    ``points`` ``(N,)`` int64, ``changed`` ``(N,)`` bool, ``legal`` ``(N, 4)`` bool.
    A single board takes :func:`_advance_one` (same results and random draws).
    """
    if len(boards) == 1:
        out = _advance_one(boards[0], int(actions[0]), rng)
        if out is not None:
            return out
    next_boards, points, changed = _move_batch_unchecked(boards, actions)
    _spawn_unchecked(next_boards, rng, changed)
    return next_boards, points, changed, _legal_actions_unchecked(next_boards)


def _max_tiles(boards: np.ndarray) -> np.ndarray:
    """``(N,)`` int64 largest tile values (0 for empty boards)."""
    top = boards.max(axis=(1, 2)).astype(np.int64)
    return np.where(top > 0, np.int64(1) << top, 0)


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
    board = _check_boards(board, "board", 2)
    action = _check_action(action)
    new, rewards, changed = _move_batch_unchecked(board[None], np.array([action]))
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
    boards = _check_boards(boards, "boards", 3)
    actions = _check_actions(actions, len(boards))
    return _move_batch_unchecked(boards, actions)


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
    return _legal_actions_unchecked(_check_boards(board, "board", 2)[None])[0]


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
    return _legal_actions_unchecked(_check_boards(boards, "boards", 3))


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
    return bool(_is_game_over_unchecked(_check_boards(board, "board", 2)[None])[0])


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
    return _is_game_over_unchecked(_check_boards(boards, "boards", 3))


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
    board = _check_boards(board, "board", 2).copy()
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
    _check_boards(boards, "boards", 3)
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
    boards = np.zeros((n, _SIZE, _SIZE), np.uint8)
    _spawn_unchecked(boards, rng)
    _spawn_unchecked(boards, rng)
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


def board_from_tiles(tiles) -> np.ndarray:
    """Build an exponent board from tile values, as people write boards.

    Parameters
    ----------
    tiles : array_like
        4 x 4 nested lists (or array) of integer tile values: 0 for an empty
        cell, else a power of two from 2 to 131072, e.g.
        ``[[2, 4, 8, 16], [0, 0, 2, 2], ...]``.

    Returns
    -------
    numpy.ndarray
        ``(4, 4)`` uint8 log2 exponents (0 = empty, k = the tile ``2**k``), the
        form of the package's boards and observations.

    Raises
    ------
    ValueError
        If ``tiles`` is not 4 x 4 integers, or holds a value that is not 0 or a
        power of two in 2..131072 (a 3, a 6, a 1); the message lists those values.

    See Also
    --------
    board_to_tiles : the inverse.
    """
    arr = np.asarray(tiles)
    if arr.shape != (_SIZE, _SIZE) or not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"tiles must be 4 x 4 integer tile values (0 = empty, else 2, 4, 8, ... 131072), "
                         f"got {arr.dtype} array of shape {arr.shape}")
    arr = arr.astype(np.int64)
    valid = (arr == 0) | ((arr >= 2) & (arr <= 1 << MAX_EXPONENT) & (arr & (arr - 1) == 0))
    if not valid.all():
        raise ValueError(f"tiles must hold 0 (empty) or powers of two from 2 to {1 << MAX_EXPONENT}, "
                         f"got {np.unique(arr[~valid]).tolist()}")
    return np.log2(np.maximum(arr, 1)).astype(np.uint8)


def board_to_tiles(board) -> np.ndarray:
    """Tile values of an exponent board (an observation), as people read boards.

    Parameters
    ----------
    board : array_like
        ``(4, 4)`` integer log2 exponents in ``0..17``.

    Returns
    -------
    numpy.ndarray
        ``(4, 4)`` int64 tile values (0 for empty cells).

    Raises
    ------
    ValueError
        If ``board`` is invalid.
    """
    exps = _check_boards(board, "board", 2).astype(np.int64)
    return np.where(exps > 0, np.int64(1) << exps, 0)


def _board_argument(where: str, positional: tuple, tiles, exponents) -> np.ndarray:
    """The exponent board a person handed to ``where`` as exactly one of ``tiles=`` and
    ``exponents=`` (the form named, never guessed: ``[[2, 4, 8, 16], ...]`` read as
    exponents would be a 4, a 16, a 256 and a 65536).

    Parameters
    ----------
    where : str
        The function's name, for the messages (e.g. ``"Game2048.set_board"``).
    positional : tuple
        The positional arguments the function was given; any is refused.
    tiles, exponents : array_like or None
        See :func:`board_from_tiles` and :func:`board_to_tiles`.

    Returns
    -------
    numpy.ndarray
        ``(4, 4)`` uint8 log2 exponents (a new array when converted from tiles).

    Raises
    ------
    TypeError
        If the board came positionally, or as both or neither keyword.
    ValueError
        If the board is not of the form named (see :func:`board_from_tiles`, and
        exponents outside ``0..17`` or not ``(4, 4)`` integers).
    """
    forms = ("tiles=[[2, 4, 8, 16], ...] for tile values (0 = empty), or exponents=obs for log2 "
             "exponents (0 = empty, k = the tile 2**k: the form of observations)")
    if positional:
        raise TypeError(f"{where} takes the board by keyword, naming its form: {forms}")
    if (tiles is None) == (exponents is None):
        given = "both" if tiles is not None else "neither"
        raise TypeError(f"{where} takes exactly one of tiles= and exponents=, got {given}: {forms}")
    return board_from_tiles(tiles) if exponents is None else _check_boards(exponents, "exponents", 2)


def board_text(board) -> str:
    """A board as four lines of tile values, as a terminal shows it (``.`` = empty).

    Parameters
    ----------
    board : array_like
        ``(4, 4)`` integer log2 exponents in ``0..17``.

    Returns
    -------
    str
        Four lines, each cell right-aligned in 7 characters, no trailing newline.

    Raises
    ------
    ValueError
        If ``board`` is invalid.
    """
    return "\n".join("".join(f"{t if t else '.':>7}" for t in row) for row in board_to_tiles(board))


def max_tile(board) -> int:
    """Value of the largest tile on a board (0 for an empty board).

    Parameters
    ----------
    board : array_like
        ``(4, 4)`` integer log2 exponents in ``0..17``.

    Returns
    -------
    int
        Tile value, e.g. 2048.

    Raises
    ------
    ValueError
        If ``board`` is invalid.
    """
    return int(_max_tiles(_check_boards(board, "board", 2)[None])[0])


# --------------------------------------------------------------------------
# Gymnasium environment
# --------------------------------------------------------------------------

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

    metadata = {"render_modes": ["ansi", "rgb_array"], "render_fps": 4}

    def __init__(self, max_moves: int | None = None, invalid_move_reward: float = 0.0,
                 render_mode: str | None = None):
        _check_max_moves(max_moves)
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be None or one of "
                             f"{self.metadata['render_modes']}, got {render_mode!r}")
        self.max_moves = max_moves
        self.invalid_move_reward = float(invalid_move_reward)
        self.render_mode = render_mode
        self.observation_space = spaces.Box(0, MAX_EXPONENT, (_SIZE, _SIZE), np.uint8)
        self.action_space = spaces.Discrete(N_ACTIONS)
        self._board = np.zeros((_SIZE, _SIZE), np.uint8)
        self._score = 0
        self._moves = 0

    def _info(self, legal: np.ndarray | None = None) -> dict:
        """The info dict of the current board (``legal``: its (4,) bool legal actions, if known)."""
        if legal is None:
            legal = _legal_actions_unchecked(self._board[None])[0]
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
        action = _check_action(action)
        new, points, changed, legal = _advance(self._board[None], np.array([action]), self.np_random)
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
        self._board = _board_argument("Game2048.set_board", positional, tiles, exponents).copy()

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

            from dqnlab.plots import draw_board

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


# --------------------------------------------------------------------------
# Vector environment
# --------------------------------------------------------------------------

class VecStep(NamedTuple):
    """Result of :meth:`VecGame2048.step` (arrays over the ``n`` environments)."""

    next_boards: np.ndarray
    """(n, 4, 4) uint8 boards after each move and spawn, before any auto-reset."""
    rewards: np.ndarray
    """(n,) float32 merge points, or ``invalid_move_reward`` where unchanged."""
    terminated: np.ndarray
    """(n,) bool, the game is over."""
    truncated: np.ndarray
    """(n,) bool, ``max_moves`` reached and not terminated."""
    boards: np.ndarray
    """(n, 4, 4) uint8 boards to act on next (finished games replaced by new ones)."""
    action_masks: np.ndarray
    """(n, 4) bool legal actions of ``boards``."""
    episode_scores: np.ndarray
    """(n,) int64 final score of episodes that finished this step, else 0."""
    episode_max_tiles: np.ndarray
    """(n,) int64 final largest tile value of finished episodes, else 0."""
    episode_moves: np.ndarray
    """(n,) int64 move count of finished episodes, else 0."""


class VecGame2048:
    """N games of 2048 stepped together, with automatic reset of finished games.

    Parameters
    ----------
    n_envs : int
        Number of games, >= 1.
    seed : int, optional
        Seed of the numpy Generator ``rng`` used for all spawns.
    max_moves : int or None, optional
        Truncate an episode after this many moves (illegal ones included).
    invalid_move_reward : float, optional
        Reward of a move that changes nothing (default 0.0).

    Attributes
    ----------
    boards : numpy.ndarray
        ``(n, 4, 4)`` uint8 current boards.
    scores : numpy.ndarray
        ``(n,)`` int64 points of the current episodes.
    moves : numpy.ndarray
        ``(n,)`` int64 moves made in the current episodes.
    rng : numpy.random.Generator
        Source of randomness.

    Raises
    ------
    ValueError
        If ``n_envs`` < 1 or ``max_moves`` < 1.
    """

    def __init__(self, n_envs: int, seed: int | None = None, max_moves: int | None = None,
                 invalid_move_reward: float = 0.0):
        if not isinstance(n_envs, (int, np.integer)) or n_envs < 1:
            raise ValueError(f"n_envs must be an integer >= 1, got {n_envs!r}")
        _check_max_moves(max_moves)
        self.n_envs = int(n_envs)
        self.max_moves = max_moves
        self.invalid_move_reward = float(invalid_move_reward)
        self.rng = np.random.default_rng(seed)
        self.reset()

    def reset(self, seed: int | None = None) -> np.ndarray:
        """Start new games in all environments.

        Parameters
        ----------
        seed : int, optional
            If given, reseed ``rng`` first.

        Returns
        -------
        numpy.ndarray
            ``(n, 4, 4)`` uint8 copy of the new boards.
        """
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.boards = new_boards(self.n_envs, self.rng)
        self.scores = np.zeros(self.n_envs, np.int64)
        self.moves = np.zeros(self.n_envs, np.int64)
        return self.boards.copy()

    def step(self, actions) -> VecStep:
        """Play one move in every environment; reset the games that end.

        Parameters
        ----------
        actions : array_like
            ``(n,)`` integer actions in ``0..3``.

        Returns
        -------
        VecStep
            Named tuple of arrays; see :class:`VecStep`.

        Raises
        ------
        ValueError
            If ``actions`` has the wrong shape, dtype or range.
        """
        actions = _check_actions(actions, self.n_envs)
        next_boards, points, changed, action_masks = _advance(self.boards, actions, self.rng)
        self.scores += points
        self.moves += 1
        rewards = np.where(changed, points, self.invalid_move_reward).astype(np.float32)
        terminated = ~action_masks.any(axis=1)
        if self.max_moves is None:
            truncated = np.zeros(self.n_envs, bool)
        else:
            truncated = ~terminated & (self.moves >= self.max_moves)
        done = terminated | truncated
        boards = next_boards.copy()
        if not done.any():  # the usual step: no episode ends
            episode_scores, episode_max_tiles, episode_moves = (np.zeros(self.n_envs, np.int64) for _ in range(3))
        else:
            episode_scores = np.where(done, self.scores, 0)
            episode_max_tiles = np.where(done, _max_tiles(next_boards), 0)
            episode_moves = np.where(done, self.moves, 0)
            fresh = new_boards(int(done.sum()), self.rng)
            boards[done] = fresh
            action_masks[done] = _legal_actions_unchecked(fresh)
            self.scores[done] = 0
            self.moves[done] = 0
        self.boards = boards
        return VecStep(next_boards, rewards, terminated, truncated, boards.copy(),
                       action_masks, episode_scores, episode_max_tiles, episode_moves)

    def state_dict(self) -> dict:
        """The games in progress and the random stream, for checkpoints.

        Returns
        -------
        dict
            ``boards`` ``(n, 4, 4)`` uint8, ``scores`` and ``moves`` ``(n,)`` int64
            (copies), ``rng`` (the Generator's bit-generator state) and the settings
            ``n_envs``, ``max_moves``, ``invalid_move_reward``.
        """
        return {"n_envs": self.n_envs, "max_moves": self.max_moves,
                "invalid_move_reward": self.invalid_move_reward, "boards": self.boards.copy(),
                "scores": self.scores.copy(), "moves": self.moves.copy(), "rng": self.rng.bit_generator.state}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict` output: the same games continue with the same spawns.

        Raises
        ------
        ValueError
            If the settings differ from this env's, or the boards are not valid
            ``(n_envs, 4, 4)`` exponent boards.
        """
        for key in ("n_envs", "max_moves", "invalid_move_reward"):
            if state.get(key) != getattr(self, key):
                raise ValueError(f"env state has {key}={state.get(key)!r}, this env has {getattr(self, key)!r}")
        boards = _check_boards(state["boards"], "boards", 3)
        if len(boards) != self.n_envs:
            raise ValueError(f"env state holds {len(boards)} boards, this env has n_envs={self.n_envs}")
        rng = np.random.default_rng()
        rng.bit_generator.state = state["rng"]
        self.boards = boards.copy()
        self.scores = np.array(state["scores"], np.int64).reshape(self.n_envs)
        self.moves = np.array(state["moves"], np.int64).reshape(self.n_envs)
        self.rng = rng
