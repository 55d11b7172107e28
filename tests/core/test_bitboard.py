"""Tests of dqnlab.core.bitboard: moves, legal moves, packing, transposes, symmetries and spawns of the
compiled kernels, against small independent references written here."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from dqnlab.core import bitboard
from dqnlab.game import symmetry as game_symmetry

PROPERTY = settings(max_examples=150, deadline=None, database=None)
MAX = 17

# Exponents 0..17 with many empty cells; boards the tables hold (all <= 15); batches of 1..24 boards.
ANY_CELL = st.one_of(st.just(0), st.just(0), st.integers(1, 3), st.integers(14, MAX), st.integers(0, MAX))
SMALL_CELL = st.one_of(st.just(0), st.just(0), st.integers(1, 4), st.integers(12, 15), st.integers(0, 15))


def batches(cell):
    return st.integers(1, 24).flatmap(lambda n: hnp.arrays(np.uint8, (n, 16), elements=cell))


@st.composite
def with_adjacent_15s(draw):
    """Boards (exponents <= 15) with two 15s side by side (in a row or a column): their merge leaves the 4-bit
    tables (the WRAP flag) and must go to the exact path."""
    boards = draw(batches(SMALL_CELL)).copy()
    for b in boards:
        r, c = draw(st.integers(0, 3)), draw(st.integers(0, 2))
        cells = (4 * r + c, 4 * r + c + 1) if draw(st.booleans()) else (4 * c + r, 4 * c + r + 4)
        b[list(cells)] = 15
    return boards


BOARDS = st.one_of(batches(ANY_CELL), batches(SMALL_CELL), with_adjacent_15s())


def actions_for(boards):
    return hnp.arrays(np.int64, (len(boards),), elements=st.integers(0, 3))


# ----------------------------------------------------------------------------- references
def ref_slide(line):
    """Slide a list of exponents toward index 0: merges from the wall, once per tile, 17 + 17 stays."""
    tiles = [v for v in line if v]
    out, points, j = [], 0, 0
    while j < len(tiles):
        if j + 1 < len(tiles) and tiles[j] == tiles[j + 1] and tiles[j] < MAX:
            out.append(tiles[j] + 1)
            points += 2 ** (tiles[j] + 1)
            j += 2
        else:
            out.append(tiles[j])
            j += 1
    return out + [0] * (4 - len(out)), points


def ref_move(cells, action):
    """``(16,)`` exponents, action 0 up 1 right 2 down 3 left -> (new cells, points, changed)."""
    grid = np.asarray(cells, np.int64).reshape(4, 4)
    new, points = np.zeros((4, 4), np.int64), 0
    for k in range(4):
        line = grid[:, k] if action in (0, 2) else grid[k]
        line = list(line[::-1]) if action in (1, 2) else list(line)
        slid, p = ref_slide(line)
        points += p
        slid = slid[::-1] if action in (1, 2) else slid
        if action in (0, 2):
            new[:, k] = slid
        else:
            new[k] = slid
    new = new.reshape(16).astype(np.uint8)
    return new, points, not np.array_equal(new, np.asarray(cells, np.uint8))


def ref_spawn(cells, rng, mask):
    """The NumPy rule: one cell draw per board (all of them) first, the ``floor(u * E)``-th empty cell;
    then one tile draw per spawning board, a 4 (exponent 2) below 0.1, else a 2."""
    cells = cells.copy()
    u = rng.random(len(cells))
    empty = cells == 0
    counts = empty.sum(axis=1)
    nth = (u * counts).astype(np.int64)
    spawning = np.flatnonzero(mask & (counts > 0))
    tiles = np.where(rng.random(len(spawning)) < 0.1, 2, 1)
    for i, tile in zip(spawning, tiles):
        cells[i, np.flatnonzero(empty[i])[nth[i]]] = tile
    return cells


def run_move_batch(cells, actions):
    n = len(cells)
    out, points, changed = np.empty((n, 16), np.uint8), np.empty(n, np.int64), np.empty(n, bool)
    bitboard.move_batch(cells, actions, out, points, changed)
    return out, points, changed


def run_legal_batch(cells):
    legal = np.empty((len(cells), 4), bool)
    bitboard.legal_batch(cells, legal)
    return legal


def as_bits(cells):
    """A board's bitboard, built here: cell ``i`` at bits ``4i..4i+3``."""
    return np.uint64(sum(int(v) << (4 * i) for i, v in enumerate(cells)))


def cells_of(bits):
    return np.array([(int(bits) >> (4 * i)) & 15 for i in range(16)], np.uint8)


# ----------------------------------------------------------------------------- moves and legal moves
def test_line_tables_match_the_reference_for_every_key():
    for d in (0, 1):
        for key in range(1 << 16):
            line = [(key >> (4 * j)) & 15 for j in range(4)]
            slid, points = ref_slide(line if d == 0 else line[::-1])
            slid = slid if d == 0 else slid[::-1]
            assert bitboard.SCORE[d, key] == points
            assert bool(bitboard.WRAP[d, key]) == (max(slid) > 15)
            assert bitboard.LINE[d, key] == sum((v & 15) << (4 * j) for j, v in enumerate(slid))


@PROPERTY
@given(BOARDS.flatmap(lambda b: st.tuples(st.just(b), actions_for(b))))
def test_move_batch_matches_the_reference(data):
    cells, actions = data
    out, points, changed = run_move_batch(cells, actions)
    for i in range(len(cells)):
        new, p, ch = ref_move(cells[i], actions[i])
        np.testing.assert_array_equal(out[i], new)
        assert (points[i], changed[i]) == (p, ch)
        single = np.empty(16, np.uint8)
        assert bitboard.move_cells(cells[i], actions[i], single) == (p, ch)
        np.testing.assert_array_equal(single, new)
        exact = np.empty(16, np.uint8)
        assert bitboard.move_exact(cells[i], actions[i], exact) == p
        np.testing.assert_array_equal(exact, new)


@PROPERTY
@given(BOARDS)
def test_legal_batch_is_whether_the_move_changes_the_board(cells):
    legal = run_legal_batch(cells)
    for i in range(len(cells)):
        assert legal[i].tolist() == [ref_move(cells[i], a)[2] for a in range(4)]


@pytest.mark.parametrize("line, action, points", [
    ([15, 15, 0, 0], 3, 2**16),        # 32768 + 32768: past the 4-bit tables
    ([15, 15, 15, 15], 1, 2**17),
    ([16, 16, 2, 2], 0, 2**17 + 8),    # a board holding 65536s: the exact path
    ([17, 17, 0, 0], 3, 0),            # two 131072s do not merge
    ([17, 17, 16, 16], 2, 2**17),
])
def test_big_merges_are_exact(line, action, points):
    grid = np.zeros((4, 4), np.uint8)
    if action in (1, 3):
        grid[2] = line if action == 3 else line[::-1]
    else:
        grid[:, 1] = line if action == 0 else line[::-1]
    cells = grid.reshape(1, 16)
    out, got, changed = run_move_batch(cells, np.array([action]))
    new, p, ch = ref_move(cells[0], action)
    assert got[0] == p == points and changed[0] == ch
    np.testing.assert_array_equal(out[0], new)


# ----------------------------------------------------------------------------- packing, transpose, symmetries
@PROPERTY
@given(hnp.arrays(np.uint8, (16,), elements=SMALL_CELL))
def test_pack_unpack_round_trip(cells):
    bits, big = bitboard.pack(cells)
    assert not big and bits == as_bits(cells)
    out = np.empty(16, np.uint8)
    bitboard.unpack(np.uint64(bits), out)  # (numba returns a uint64 to Python as an int: typed back as uint64)
    np.testing.assert_array_equal(out, cells)


@PROPERTY
@given(hnp.arrays(np.uint8, (16,), elements=ANY_CELL))
def test_pack_reads_exponents_above_15_as_15(cells):
    bits, big = bitboard.pack(cells)
    assert big == bool((cells > 15).any())
    np.testing.assert_array_equal(cells_of(bits), np.minimum(cells, 15))
    packed = np.empty(1, np.uint64)
    bitboard.pack_batch(cells[None], packed)
    assert packed[0] == bits
    out = np.empty((1, 16), np.uint8)
    bitboard.unpack_batch(packed, out)
    np.testing.assert_array_equal(out[0], np.minimum(cells, 15))


@PROPERTY
@given(hnp.arrays(np.uint8, (16,), elements=SMALL_CELL))
def test_transpose_is_the_boards_transpose(cells):
    np.testing.assert_array_equal(cells_of(bitboard.transpose(as_bits(cells))), cells.reshape(4, 4).T.reshape(16))


@PROPERTY
@given(hnp.arrays(np.uint8, (16,), elements=SMALL_CELL), st.integers(0, 7))
def test_symmetry_applies_the_cell_permutation(cells, g):
    np.testing.assert_array_equal(cells_of(bitboard.symmetry(as_bits(cells), g)),
                                  cells[bitboard.CELL_PERMUTATIONS[g]])
    np.testing.assert_array_equal(game_symmetry.transform_boards(cells.reshape(1, 4, 4), np.array([g])).reshape(16),
                                  cells[bitboard.CELL_PERMUTATIONS[g]])


def test_the_games_cell_permutations_are_the_cores():
    assert game_symmetry.CELL_PERMUTATIONS is bitboard.CELL_PERMUTATIONS
    perms = bitboard.CELL_PERMUTATIONS
    assert perms.shape == (8, 16) and perms.dtype == np.int64
    np.testing.assert_array_equal(perms[0], np.arange(16))
    assert len({tuple(p) for p in perms}) == 8 and all(sorted(p) == list(range(16)) for p in perms)


# ----------------------------------------------------------------------------- spawns and env steps
@PROPERTY
@given(BOARDS.flatmap(lambda b: st.tuples(st.just(b), hnp.arrays(bool, (len(b),)))), st.integers(0, 2**32 - 1))
def test_spawn_batch_puts_one_tile_on_an_empty_cell(data, seed):
    cells, mask = data
    cells = cells.copy()
    cells[np.random.default_rng(seed).random(cells.shape) < 0.4] = 0
    before = cells.copy()
    rng, ref_rng = np.random.default_rng(seed), np.random.default_rng(seed)
    bitboard.spawn_batch(cells, rng, mask)
    for i in range(len(cells)):
        diff = np.flatnonzero(cells[i] != before[i])
        if mask[i] and (before[i] == 0).any():
            assert len(diff) == 1 and before[i, diff[0]] == 0 and cells[i, diff[0]] in (1, 2)
        else:
            assert len(diff) == 0
    np.testing.assert_array_equal(cells, ref_spawn(before, ref_rng, mask))
    assert rng.random() == ref_rng.random()  # the same number of draws


def test_spawn_batch_draws_twos_and_fours_uniformly():
    rng = np.random.default_rng(0)
    cells = np.zeros((20000, 16), np.uint8)
    cells[:, ::2] = 3  # eight empty cells a board
    bitboard.spawn_batch(cells, rng, np.ones(len(cells), bool))
    spawned = cells[:, 1::2]
    assert ((spawned != 0).sum(axis=1) == 1).all()
    assert abs((spawned == 2).sum() / len(cells) - 0.1) < 0.01
    counts = (spawned != 0).sum(axis=0) / len(cells)
    assert np.abs(counts - 1 / 8).max() < 0.01


def test_new_boards_into_spawns_two_tiles():
    rng, ref_rng = np.random.default_rng(3), np.random.default_rng(3)
    cells = np.full((50, 16), 7, np.uint8)
    bitboard.new_boards_into(cells, rng)
    ref = np.zeros((50, 16), np.uint8)
    ref = ref_spawn(ref_spawn(ref, ref_rng, np.ones(50, bool)), ref_rng, np.ones(50, bool))
    np.testing.assert_array_equal(cells, ref)
    assert ((cells != 0).sum(axis=1) == 2).all()


@PROPERTY
@given(BOARDS.flatmap(lambda b: st.tuples(st.just(b), actions_for(b))), st.integers(0, 2**32 - 1))
def test_advance_batch_is_move_spawn_and_legal(data, seed):
    cells, actions = data
    n = len(cells)
    rng, ref_rng = np.random.default_rng(seed), np.random.default_rng(seed)
    out, points, changed, legal = (np.empty((n, 16), np.uint8), np.empty(n, np.int64), np.empty(n, bool),
                                   np.empty((n, 4), bool))
    before = cells.copy()
    bitboard.advance_batch(cells, actions, rng, out, points, changed, legal)
    np.testing.assert_array_equal(cells, before)
    ref_out, ref_points, ref_changed = run_move_batch(cells, actions)
    bitboard.spawn_batch(ref_out, ref_rng, ref_changed)
    np.testing.assert_array_equal(out, ref_out)
    np.testing.assert_array_equal(points, ref_points)
    np.testing.assert_array_equal(changed, ref_changed)
    np.testing.assert_array_equal(legal, run_legal_batch(ref_out))
    assert rng.random() == ref_rng.random()
