"""Boards as people write and read them: tile values <-> the log2 exponents the game uses.

``board_from_tiles`` / ``board_to_tiles`` convert, ``board_argument`` takes a board handed over
by keyword naming its form (``tiles=`` or ``exponents=``), ``board_text`` prints one, and
``max_tile`` / ``max_tiles`` give the largest tile.
"""

from __future__ import annotations

import numpy as np

from .rules import MAX_EXPONENT, SIZE, check_boards


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
    if arr.shape != (SIZE, SIZE) or not np.issubdtype(arr.dtype, np.integer):
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
    exps = check_boards(board, "board", 2).astype(np.int64)
    return np.where(exps > 0, np.int64(1) << exps, 0)


def board_argument(where: str, positional: tuple, tiles, exponents) -> np.ndarray:
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
    return board_from_tiles(tiles) if exponents is None else check_boards(exponents, "exponents", 2)


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
    return int(max_tiles(check_boards(board, "board", 2)[None])[0])


def max_tiles(boards: np.ndarray) -> np.ndarray:
    """Values of the largest tiles of N boards, without validation (the batched :func:`max_tile`).

    Parameters
    ----------
    boards : numpy.ndarray
        ``(N, 4, 4)`` integer valid exponent boards.

    Returns
    -------
    numpy.ndarray
        ``(N,)`` int64 tile values (0 for an empty board).
    """
    top = boards.max(axis=(1, 2)).astype(np.int64)
    return np.where(top > 0, np.int64(1) << top, 0)
