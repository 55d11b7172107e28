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

Moves are computed with lookup tables over the 65536 rows whose exponents are
all <= 15 (each row packed into a 16-bit key of four 4-bit nibbles); rows with
larger exponents take a slower vectorised fallback.

Each public function checks its input (``check_boards``, ``check_action``, ...) and calls
an unchecked fast path (``move_batch_unchecked``, ``legal_actions_unchecked``,
``advance``) that the env, the vector env and the agent call directly on boards they
know to be valid.
"""

from __future__ import annotations

import array
import functools
import operator
import struct

import numpy as np

UP, RIGHT, DOWN, LEFT = 0, 1, 2, 3
N_ACTIONS = 4
MAX_EXPONENT = 17
ACTION_NAMES = ("up", "right", "down", "left")
SIZE = 4  # the board is SIZE x SIZE
_CELLS = SIZE * SIZE
_P_FOUR = 0.1
_TABLE_MAX = 15  # the largest exponent a 4-bit table key can hold


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
    for j in range(SIZE - 1):
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
            lines = np.rot90(boards[sel], k, axes=(1, 2)).reshape(-1, SIZE)
            slid, line_rewards = _slide_lines(lines)
            new[sel] = np.rot90(slid.reshape(-1, SIZE, SIZE), -k, axes=(1, 2))
            rewards[sel] = line_rewards.reshape(-1, SIZE).sum(axis=1)


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
    boards = np.ascontiguousarray(boards)
    b = boards.astype(np.uint16)
    row_keys = b[:, :, 0] | b[:, :, 1] << 4 | b[:, :, 2] << 8 | b[:, :, 3] << 12
    col_keys = b[:, 0] | b[:, 1] << 4 | b[:, 2] << 8 | b[:, 3] << 12
    vertical = (actions & 1) == 0  # UP, DOWN
    idx = np.where(vertical[:, None], col_keys, row_keys).astype(np.intp)
    idx += _TABLE_OFFSET[actions][:, None]
    new = _LINE_TABLE[idx].view(np.uint8).reshape(n, SIZE, SIZE)  # one line per row
    new[vertical] = new[vertical].transpose(0, 2, 1)
    points = _REWARD_TABLE[idx]
    rewards = (points[:, 0] + points[:, 1] + points[:, 2] + points[:, 3]).astype(np.int64)
    if n and boards.max() > _TABLE_MAX:
        _move_fallback(boards, actions, new, rewards)
    # Compare each 16-byte board as two 64-bit words.
    differs = new.reshape(n, _CELLS).view(np.uint64) != boards.reshape(n, _CELLS).view(np.uint64)
    return new, rewards, differs[:, 0] | differs[:, 1]


# Flat cell i pairs with its right neighbour i + 1 / its lower neighbour i + 4.
_ROW_PAIRS = np.arange(_CELLS) % SIZE != SIZE - 1
_COL_PAIRS = np.arange(_CELLS) < _CELLS - SIZE


def legal_actions_unchecked(boards: np.ndarray) -> np.ndarray:
    """Legal actions of N boards, without validation (the hot path of :func:`legal_actions_batch`).

    A move toward a wall changes the board iff some neighbour pair can merge,
    or has an empty cell on the wall side of a tile.

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
    flat = np.ascontiguousarray(boards).reshape(-1)
    # pair_flags[action, p]: the pair starting at flat cell p makes action legal.
    pair_flags = np.zeros((N_ACTIONS, flat.size), bool)
    for step, toward_first, toward_second in ((1, LEFT, RIGHT), (SIZE, UP, DOWN)):
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
    return ~legal_actions_unchecked(boards).any(axis=1)


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
# than the arithmetic, so :func:`advance` reads the same tables as Python integers.
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
    """:func:`advance` for one ``(4, 4)`` board with tiles below ``2**15`` (None for
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
    return (np.frombuffer(bytearray(new), np.uint8).reshape(1, SIZE, SIZE), np.array([points], np.int64),
            np.array([changed]), np.array([legal]))


def advance(boards: np.ndarray, actions: np.ndarray, rng: np.random.Generator):
    """Move, spawn a tile on the boards that changed, and find the legal actions after.

    The core of every env step, without validation. A single board takes
    :func:`_advance_one` (same results and random draws as the batched path).

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
    if len(boards) == 1:
        out = _advance_one(boards[0], int(actions[0]), rng)
        if out is not None:
            return out
    next_boards, points, changed = move_batch_unchecked(boards, actions)
    _spawn_unchecked(next_boards, rng, changed)
    return next_boards, points, changed, legal_actions_unchecked(next_boards)



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

