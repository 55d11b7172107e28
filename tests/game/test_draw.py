"""Tests of dqnlab.game.draw: drawing a board with matplotlib."""

from dqnlab.game.board import board_from_tiles, board_to_tiles
from dqnlab.game.draw import draw_board


def test_draw_board_labels_each_tile():
    from matplotlib.figure import Figure

    ax = Figure().add_subplot()
    board = board_from_tiles([[2, 0, 0, 0], [0, 1024, 0, 0], [0] * 4, [0, 0, 0, 65536]])
    assert draw_board(exponents=board, ax=ax, title="t") is ax
    assert sorted(t.get_text() for t in ax.texts) == ["1024", "2", "65536"]
    same = Figure().add_subplot()
    draw_board(tiles=board_to_tiles(board), ax=same)
    assert [t.get_text() for t in same.texts] == [t.get_text() for t in ax.texts]
