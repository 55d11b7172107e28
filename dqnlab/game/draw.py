"""Drawing a 2048 board with matplotlib, as the familiar grid of coloured tiles.

matplotlib is imported when a board is drawn, not when the game is imported.
"""

from __future__ import annotations

import numpy as np

from .board import board_argument, board_to_tiles

# Colours of the original game, indexed by exponent (0 = empty cell).
_TILE_COLOURS = (
    "#cdc1b4", "#eee4da", "#ede0c8", "#f2b179", "#f59563", "#f67c5f", "#f65e3b",
    "#edcf72", "#edcc61", "#edc850", "#edc53f", "#edc22e",
)
_BIG_TILE_COLOUR = "#3c3a32"  # 4096 and above
_BACKGROUND = "#bbada0"
_DARK_TEXT, _LIGHT_TEXT = "#776e65", "#f9f6f2"


def draw_board(*positional, tiles=None, exponents=None, ax=None, title: str | None = None):
    """Draw a 2048 board as the familiar grid of coloured tiles.

    The board is given by keyword, naming its form, as in
    :meth:`dqnlab.Game2048.set_board`: exactly one of ``tiles`` and ``exponents``.

    Parameters
    ----------
    *positional
        Refused (TypeError): a board passed without naming its form.
    tiles : array_like, optional
        4 x 4 integer tile values: 0 for an empty cell, else a power of two from 2
        to 131072, as people write boards.
    exponents : array_like, optional
        ``(4, 4)`` integer log2 exponents in ``0..17`` (0 = empty, k = the tile
        ``2**k``): the form of observations and of :func:`dqnlab.move`'s boards.
    ax : matplotlib.axes.Axes, optional
        Axes to draw on; a new 4 x 4 inch figure is created if None.
    title : str, optional
        Axes title.

    Returns
    -------
    matplotlib.axes.Axes
        The axes drawn on.

    Raises
    ------
    TypeError
        If the board is passed positionally, or both or neither of ``tiles`` and
        ``exponents`` are given.
    ValueError
        If the board is not of the form named (a 3 as a tile, a 2048 as an
        exponent, not 4 x 4 integers).
    """
    from matplotlib.patches import FancyBboxPatch  # here: importing the game imports no matplotlib

    tiles = board_to_tiles(board_argument("draw_board", positional, tiles, exponents))
    if ax is None:
        import matplotlib.pyplot as plt

        _, ax = plt.subplots(figsize=(4, 4))
    size = len(tiles)
    ax.set_xlim(0, size)
    ax.set_ylim(size, 0)  # row 0 at the top
    ax.set_aspect("equal")
    ax.axis("off")
    ax.add_patch(FancyBboxPatch((0, 0), size, size, boxstyle="round,pad=0,rounding_size=0.1",
                                facecolor=_BACKGROUND, edgecolor="none"))
    # Font size in points from the axes' width, so text fits any figure size.
    bbox = ax.get_window_extent()
    cell_pt = bbox.width / ax.figure.dpi * 72 / size
    for (row, col), value in np.ndenumerate(tiles):
        exponent = int(value).bit_length() - 1 if value else 0
        colour = (_TILE_COLOURS[exponent] if exponent < len(_TILE_COLOURS)
                  else _BIG_TILE_COLOUR)
        ax.add_patch(FancyBboxPatch((col + 0.06, row + 0.06), 0.88, 0.88,
                                    boxstyle="round,pad=0,rounding_size=0.06",
                                    facecolor=colour, edgecolor="none"))
        if value:
            digits = len(str(value))
            ax.text(col + 0.5, row + 0.5, str(value), ha="center", va="center",
                    fontweight="bold", fontsize=cell_pt * min(0.45, 1.1 / digits),
                    color=_DARK_TEXT if exponent <= 2 else _LIGHT_TEXT)
    if title is not None:
        ax.set_title(title)
    return ax
