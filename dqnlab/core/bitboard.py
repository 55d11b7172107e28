"""2048 on 64-bit bitboards: compiled kernels for moves, legal moves, spawns and symmetries.

A bitboard is a ``uint64`` holding the 16 cells of a board, 4 bits a cell: cell ``i``
(row-major, ``i = 4 r + c``) is the nibble at bits ``4 i .. 4 i + 3``, so row ``r`` is the
16-bit word ``(b >> 16 r) & 0xFFFF`` with its first cell lowest. A move slides each of the four
lines through a table of all 65,536 lines (the slid line and its points), rows directly and
columns through a transpose; this is how the fast C++ players and learners of the field
represent the game (nneonneo's 2048-ai; Szubert and Jaskowski 2014; moporgic's TDL2048+).

**Exponents above 15.** 4 bits hold exponents 0..15 (tiles up to 32768), but the rules go to
17 (131072, :data:`MAX_EXPONENT`). The kernels keep every board exact: a board is stored as its
16 exponent bytes (the package's ``(4, 4)`` uint8 board), packed to a bitboard for the move; a
board holding a tile above 15, or a move that would merge two 32768s into 65536 (the tables
flag such lines), takes the exact byte-wise path (:func:`move_exact`), which applies the same
rule as the tables' construction. The bitboard of such a board, as :func:`pack` makes it,
reads every exponent above 15 as 15 -- exactly what an n-tuple network's features read.

Every kernel is ``numba.njit(nogil=True, cache=True)``: compiled on first use (cached on disk
for later runs where a folder can be written, see :mod:`dqnlab.core`), and free of the GIL, so threads can run them at once.
Plain arrays in and out; the checked API is :mod:`dqnlab.game.rules`.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .compile import kernel_cache

__all__ = ["MAX_EXPONENT", "P_FOUR", "LINE", "SCORE", "WRAP", "slide_line", "pack", "unpack", "transpose",
           "move_bits", "move_exact", "move_cells", "afterstate", "spawn_cell",
           "move_batch", "legal_batch", "spawn_batch", "advance_batch", "new_boards_into", "pack_batch",
           "unpack_batch", "CELL_PERMUTATIONS", "symmetry"]

MAX_EXPONENT = 17  # the largest tile is 2**17 = 131072; two of them do not merge
P_FOUR = 0.1  # probability that a spawned tile is a 4
_NIBBLE = np.uint64(0xF)
_WORD = np.uint64(0xFFFF)

kernel = njit(nogil=True, cache=kernel_cache())
#: For the small helpers of the hot loops: inlined into their callers by numba itself.
inline = njit(nogil=True, cache=kernel_cache(), inline="always")


@kernel
def slide_line(line: np.ndarray) -> int:
    """Slide and merge one line of 4 exponents toward index 0, in place; return its points.

    The rule of Cirulli's game: tiles slide to the wall, equal neighbours merge starting at the
    wall, a merged tile does not merge again in the same move, and two 131072s do not merge.
    """
    w = 0
    for j in range(4):  # compact
        if line[j]:
            line[w] = line[j]
            w += 1
    for j in range(w, 4):
        line[j] = 0
    points = 0
    r = 0
    j = 0
    out = np.zeros(4, np.uint8)
    while j < w:
        v = line[j]
        if j + 1 < w and line[j + 1] == v and v < MAX_EXPONENT:
            out[r] = v + 1
            points += 2 << v
            j += 2
        else:
            out[r] = v
            j += 1
        r += 1
    for j in range(4):
        line[j] = out[j]
    return points


def _build_tables() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``LINE[d, key]`` (uint16 slid line), ``SCORE[d, key]`` (uint32 points), ``WRAP[d, key]`` (bool:
    the slide merges two 15s, so its result leaves 4 bits) for the 65,536 line keys, slid toward
    index 0 (``d = 0``: left, up) and toward index 3 (``d = 1``: right, down)."""
    line_t = np.zeros((2, 1 << 16), np.uint16)
    score_t = np.zeros((2, 1 << 16), np.uint32)
    wrap_t = np.zeros((2, 1 << 16), np.bool_)
    _fill_tables(line_t, score_t, wrap_t)
    return line_t, score_t, wrap_t


@kernel
def _fill_tables(line_t, score_t, wrap_t):
    cells = np.zeros(4, np.uint8)
    for key in range(1 << 16):
        for d in range(2):
            for j in range(4):
                v = (key >> (4 * j)) & 15
                cells[j if d == 0 else 3 - j] = v
            score_t[d, key] = slide_line(cells)
            out = 0
            for j in range(4):
                v = cells[j if d == 0 else 3 - j]
                if v > 15:
                    wrap_t[d, key] = True
                out |= (v & 15) << (4 * j)
            line_t[d, key] = out


LINE, SCORE, WRAP = _build_tables()


@inline
def pack(cells: np.ndarray) -> tuple[np.uint64, bool]:
    """16 exponent bytes -> ``(bitboard, big)``: exponents above 15 read as 15, ``big`` says one was."""
    b = np.uint64(0)
    big = False
    for i in range(16):
        v = cells[i]
        if v > 15:
            big = True
            v = 15
        b |= np.uint64(v) << np.uint64(4 * i)
    return b, big


@inline
def unpack(b: np.uint64, out: np.ndarray) -> None:
    """Bitboard -> its 16 exponent bytes, written into ``out``."""
    for i in range(16):
        out[i] = (b >> np.uint64(4 * i)) & _NIBBLE


@inline
def transpose(x: np.uint64) -> np.uint64:
    """Swap rows and columns (cell ``4 r + c`` <-> ``4 c + r``) by masks and shifts."""
    a1 = x & np.uint64(0xF0F00F0FF0F00F0F)
    a2 = x & np.uint64(0x0000F0F00000F0F0)
    a3 = x & np.uint64(0x0F0F00000F0F0000)
    a = a1 | (a2 << np.uint64(12)) | (a3 >> np.uint64(12))
    b1 = a & np.uint64(0xFF00FF0000FF00FF)
    b2 = a & np.uint64(0x00FF00FF00000000)
    b3 = a & np.uint64(0x00000000FF00FF00)
    return b1 | (b2 >> np.uint64(24)) | (b3 << np.uint64(24))


@inline
def _slide(x: np.uint64, d: int) -> tuple[np.uint64, int, bool]:
    """The four 16-bit rows of ``x`` slid through the line tables, toward index 0 (``d = 0``) or 3
    (``d = 1``): ``(new bitboard, points, wrap)``."""
    out = np.uint64(0)
    points = 0
    wrap = False
    for k in range(4):
        shift = np.uint64(16 * k)
        key = (x >> shift) & _WORD
        out |= np.uint64(LINE[d, key]) << shift
        points += SCORE[d, key]
        wrap |= WRAP[d, key]
    return out, points, wrap


@inline
def _move_rows(b: np.uint64, t: np.uint64, action: int) -> tuple[np.uint64, int, bool]:
    """:func:`move_bits` with ``t = transpose(b)`` given (read by the vertical moves only)."""
    if (action & 1) == 0:  # vertical: the columns are the rows of the transpose
        out, points, wrap = _slide(t, 1 if action == 2 else 0)
        return transpose(out), points, wrap
    return _slide(b, 1 if action == 1 else 0)


@inline
def move_bits(b: np.uint64, action: int) -> tuple[np.uint64, int, bool]:
    """Move a bitboard: ``(new bitboard, points, wrap)``; ``wrap``: two 15s merged, so the result
    is not exact (take :func:`move_exact`). Actions 0 up, 1 right, 2 down, 3 left."""
    return _move_rows(b, transpose(b) if (action & 1) == 0 else b, action)


@kernel
def move_exact(cells: np.ndarray, action: int, out: np.ndarray) -> int:
    """Move 16 exponent bytes cell by cell (any exponents 0..17) into ``out``; return the points."""
    line = np.zeros(4, np.uint8)
    points = 0
    vertical = (action & 1) == 0
    toward_end = action == 1 or action == 2
    for k in range(4):
        for j in range(4):
            jj = 3 - j if toward_end else j
            line[j] = cells[4 * jj + k] if vertical else cells[4 * k + jj]
        points += slide_line(line)
        for j in range(4):
            jj = 3 - j if toward_end else j
            if vertical:
                out[4 * jj + k] = line[j]
            else:
                out[4 * k + jj] = line[j]
    return points


@inline
def move_cells(cells: np.ndarray, action: int, out: np.ndarray) -> tuple[int, bool]:
    """Move 16 exponent bytes into ``out`` (bitboard tables, or :func:`move_exact` where they
    cannot be exact); ``(points, changed)``."""
    b, big = pack(cells)
    if not big:
        nb, points, wrap = move_bits(b, action)
        if not wrap:
            unpack(nb, out)
            return points, nb != b
    points = move_exact(cells, action, out)
    changed = False
    for i in range(16):
        changed |= out[i] != cells[i]
    return points, changed


@inline
def afterstate(cells: np.ndarray, b: np.uint64, t: np.uint64, big: bool, action: int,
               scratch: np.ndarray) -> tuple[np.uint64, int, bool]:
    """The afterstate of a move as a bitboard (exponents above 15 read as 15: an n-tuple network's
    view), its points, and whether the move changes the board. ``b, big = pack(cells)`` and ``t =
    transpose(b)`` (taken once for a board's four moves: the vertical moves slide its rows);
    ``scratch``: 16 bytes of workspace for the exact path."""
    if not big:
        nb, points, wrap = _move_rows(b, t, action)
        if not wrap:
            return nb, points, nb != b
    points = move_exact(cells, action, scratch)
    changed = False
    for i in range(16):
        changed |= scratch[i] != cells[i]
    return pack(scratch)[0], points, changed


@inline
def spawn_cell(cells: np.ndarray, u_cell: float) -> int:
    """The empty cell a spawn takes for a uniform draw ``u_cell`` in [0, 1): the ``floor(u_cell * E)``-th
    of the ``E`` empty cells in cell order; -1 when none is empty (the rule of :mod:`dqnlab.game.rules`)."""
    count = 0
    for i in range(16):
        count += cells[i] == 0
    if count == 0:
        return -1
    nth = int(u_cell * count)
    for i in range(16):
        if cells[i] == 0:
            if nth == 0:
                return i
            nth -= 1
    return -1


# ----------------------------------------------------------------------------- batch kernels
@kernel
def pack_batch(cells: np.ndarray, out: np.ndarray) -> None:
    """``(N, 16)`` uint8 exponents -> ``(N,)`` uint64 bitboards (exponents above 15 read as 15)."""
    for n in range(cells.shape[0]):
        out[n] = pack(cells[n])[0]


@kernel
def unpack_batch(bits: np.ndarray, out: np.ndarray) -> None:
    """``(N,)`` uint64 bitboards -> ``(N, 16)`` uint8 exponents."""
    for n in range(bits.shape[0]):
        unpack(bits[n], out[n])


@kernel
def move_batch(cells: np.ndarray, actions: np.ndarray, out: np.ndarray, points: np.ndarray,
               changed: np.ndarray) -> None:
    """Move board ``n`` of ``(N, 16)`` uint8 ``cells`` by ``actions[n]`` into ``out[n]``, with its points and
    whether it changed (``(N,)`` int64 and bool), no spawn."""
    for n in range(cells.shape[0]):
        points[n], changed[n] = move_cells(cells[n], actions[n], out[n])


@kernel
def legal_batch(cells: np.ndarray, legal: np.ndarray) -> None:
    """``(N, 16)`` uint8 exponents -> ``(N, 4)`` bool: whether each move changes the board."""
    scratch = np.zeros(16, np.uint8)
    for n in range(cells.shape[0]):
        b, big = pack(cells[n])
        t = transpose(b)
        for a in range(4):
            legal[n, a] = afterstate(cells[n], b, t, big, a, scratch)[2]


@kernel
def spawn_batch(cells: np.ndarray, rng, mask: np.ndarray) -> None:
    """Spawn one tile on each board of ``(N, 16)`` uint8 ``cells`` where ``mask`` holds and a cell is
    empty, drawing from the NumPy Generator ``rng`` in the order of :mod:`dqnlab.game.rules`: first
    one cell draw per board (all ``N``), then one tile draw (2 or 4) per board that spawns."""
    n = cells.shape[0]
    target = np.empty(n, np.int64)
    for i in range(n):
        target[i] = spawn_cell(cells[i], rng.random())
    for i in range(n):
        if mask[i] and target[i] >= 0:
            cells[i, target[i]] = 2 if rng.random() < P_FOUR else 1


@kernel
def new_boards_into(cells: np.ndarray, rng) -> None:
    """Start new games on the ``(N, 16)`` uint8 boards ``cells``: cleared, then two spawns (the draws of
    :func:`dqnlab.game.rules.new_boards`)."""
    cells[:] = 0
    mask = np.ones(cells.shape[0], np.bool_)
    spawn_batch(cells, rng, mask)
    spawn_batch(cells, rng, mask)


@kernel
def advance_batch(cells: np.ndarray, actions: np.ndarray, rng, out: np.ndarray, points: np.ndarray,
                  changed: np.ndarray, legal: np.ndarray) -> None:
    """One env step of ``N`` boards: move (into ``out``), spawn where the move changed the board, and the
    legal moves after. Same results and draws as the NumPy rules (``move_batch`` then ``spawn_batch``)."""
    move_batch(cells, actions, out, points, changed)
    spawn_batch(out, rng, changed)
    legal_batch(out, legal)


# ----------------------------------------------------------------------------- symmetries
def _cell_permutations() -> np.ndarray:
    """``(8, 16)`` int64: cell ``i`` of the board under symmetry ``g`` is cell ``[g, i]`` of the board;
    ``g = 4 f + k``: ``k`` quarter turns (``numpy.rot90``) of the board, transposed first when ``f = 1``."""
    grid = np.arange(16).reshape(4, 4)
    return np.array([np.rot90(grid.T if flip else grid, k).reshape(16) for flip in (False, True) for k in range(4)],
                    dtype=np.int64)


#: ``(8, 16)`` int64 cell permutations of the board's 8 symmetries (the dihedral group D4), 0 the identity.
CELL_PERMUTATIONS = _cell_permutations()


@inline
def _mirror(x: np.uint64) -> np.uint64:
    """Reverse the cells within each row."""
    return (((x & np.uint64(0x000F000F000F000F)) << np.uint64(12)) | ((x & np.uint64(0x00F000F000F000F0)) << np.uint64(4))
            | ((x >> np.uint64(4)) & np.uint64(0x00F000F000F000F0)) | ((x >> np.uint64(12)) & np.uint64(0x000F000F000F000F)))


@inline
def _flip(x: np.uint64) -> np.uint64:
    """Reverse the order of the rows."""
    return (((x & np.uint64(0xFFFF)) << np.uint64(48)) | ((x & np.uint64(0xFFFF0000)) << np.uint64(16))
            | ((x >> np.uint64(16)) & np.uint64(0xFFFF0000)) | (x >> np.uint64(48)))


@inline
def _by_code(b: np.uint64, code: int) -> np.uint64:
    """Mirror the rows (bit 0 of ``code``), flip their order (bit 1), then transpose (bit 2)."""
    if code & 1:
        b = _mirror(b)
    if code & 2:
        b = _flip(b)
    if code & 4:
        b = transpose(b)
    return b


def _symmetry_codes() -> np.ndarray:
    """The :func:`_by_code` code of each of the 8 :data:`CELL_PERMUTATIONS` (found on a board of 16
    distinct cells)."""
    b = np.uint64(sum(i << (4 * i) for i in range(16)))
    codes = np.empty(8, np.int64)
    for g, perm in enumerate(CELL_PERMUTATIONS):
        want = np.uint64(sum(int(perm[i]) << (4 * i) for i in range(16)))
        codes[g] = next(c for c in range(8) if _by_code(b, c) == want)
    return codes


_CODES = tuple(int(c) for c in _symmetry_codes())  # (a tuple global: folded into the kernels as constants)


@inline
def symmetry(b: np.uint64, g: int) -> np.uint64:
    """Symmetry ``g`` of a bitboard by masks and shifts: cell ``i`` of the result is cell
    ``CELL_PERMUTATIONS[g, i]`` of ``b``."""
    return _by_code(b, _CODES[g])
