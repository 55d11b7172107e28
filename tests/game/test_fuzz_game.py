"""Fuzzing the game: every function and env driven with arbitrary legal and illegal input.

Property: every call either succeeds with its invariants kept, or raises the
documented ``ValueError`` and leaves the object as it was. No other exception, ever.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import FUZZ
from hypothesis import event, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from dqnlab.game import (
    MAX_EXPONENT,
    Game2048,
    VecGame2048,
    board_to_tiles,
    is_game_over,
    is_game_over_batch,
    legal_actions,
    legal_actions_batch,
    max_tile,
    move,
    move_batch,
)

DTYPES = [np.uint8, np.int8, np.int16, np.int64, np.uint16, np.uint64, np.float32, np.float64, np.bool_]


def _elements(dtype, small: bool) -> st.SearchStrategy:
    """Values of ``dtype``: anything it holds, or (``small``) exponents 0..17 as that dtype."""
    dtype = np.dtype(dtype)
    if not small or dtype.kind == "b":
        return hnp.from_dtype(dtype)
    values = st.one_of(st.integers(0, 17), st.integers(0, 3))
    return values.map(float) if dtype.kind == "f" else values


def _arrays(shapes: st.SearchStrategy) -> st.SearchStrategy:
    """Arrays of any dtype and shape; half of them with small values only (many valid inputs)."""
    return st.tuples(st.sampled_from(DTYPES), shapes, st.booleans()).flatmap(
        lambda dsv: hnp.arrays(dsv[0], dsv[1], elements=_elements(dsv[0], dsv[2])))


ANY_SHAPE = hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=5)
BOARD_SHAPES = st.one_of(st.just((4, 4)), st.just((4, 4)), ANY_SHAPE)
BATCH_SHAPES = st.one_of(st.integers(0, 4).map(lambda n: (n, 4, 4)), ANY_SHAPE)
ACTIONS = st.one_of(st.integers(-3, 7), st.sampled_from([0, 1, 2, 3]), st.floats(allow_nan=True),
                    st.text(max_size=3), st.none(), st.booleans(), st.integers(0, 3).map(np.int64),
                    st.integers(0, 3).map(np.float64))


def _is_board(a: np.ndarray, ndim: int) -> bool:
    return (a.ndim == ndim and a.shape[-2:] == (4, 4) and a.dtype.kind in "iu"
            and (a.size == 0 or (int(a.min()) >= 0 and int(a.max()) <= MAX_EXPONENT)))


def _mass(boards: np.ndarray) -> np.ndarray:
    """Sum of tile values per board (merges keep it)."""
    b = boards.astype(np.int64)
    return np.where(b > 0, 2 ** b, 0).reshape(len(b), 16).sum(axis=1)


# ----------------------------------------------------------------------------- single boards
@FUZZ
@given(board=_arrays(BOARD_SHAPES), action=ACTIONS)
def test_board_functions_accept_exactly_valid_boards(board, action):
    valid_action = (isinstance(action, (int, np.integer)) and not isinstance(action, bool) and 0 <= action <= 3)
    event("valid board" if _is_board(board, 2) else "invalid board")
    if not _is_board(board, 2):
        for fn in (legal_actions, is_game_over, max_tile, board_to_tiles, lambda b: move(b, 0)):
            with pytest.raises(ValueError, match="board"):
                fn(board)
        return
    legal = legal_actions(board)
    assert legal.shape == (4,) and legal.dtype == bool
    assert is_game_over(board) == (not legal.any())
    assert max_tile(board) == (0 if not board.any() else 2 ** int(board.max()))
    if not valid_action:
        if isinstance(action, bool):  # a bool is an int to Python; move takes it as 0 / 1
            return
        with pytest.raises(ValueError, match="action"):
            move(board, action)
        return
    new, reward, changed = move(board, action)
    assert new.shape == (4, 4) and new.dtype == np.uint8 and int(new.max()) <= MAX_EXPONENT
    assert reward >= 0 and changed == bool(legal[int(action)]) and changed == (not np.array_equal(new, board))
    assert _mass(new[None])[0] == _mass(board.astype(np.uint8)[None])[0]


# ----------------------------------------------------------------------------- batches
@FUZZ
@given(boards=_arrays(BATCH_SHAPES), actions=_arrays(st.one_of(st.integers(0, 4).map(lambda n: (n,)), ANY_SHAPE)))
def test_batch_functions_accept_exactly_valid_batches(boards, actions):
    event("valid batch" if _is_board(boards, 3) else "invalid batch")
    if not _is_board(boards, 3):
        zeros = np.zeros(boards.shape[0] if boards.ndim else 0, int)
        for fn in (legal_actions_batch, is_game_over_batch, lambda b: move_batch(b, zeros)):
            with pytest.raises(ValueError, match="boards"):
                fn(boards)
        return
    n = len(boards)
    masks = legal_actions_batch(boards)
    assert masks.shape == (n, 4) and np.array_equal(is_game_over_batch(boards), ~masks.any(axis=1))
    valid = (actions.shape == (n,) and actions.dtype.kind in "iu"
             and (n == 0 or (int(actions.min()) >= 0 and int(actions.max()) <= 3)))
    if not valid:
        with pytest.raises(ValueError, match="actions"):
            move_batch(boards, actions)
        return
    new, rewards, changed = move_batch(boards, actions)
    assert new.shape == (n, 4, 4) and new.dtype == np.uint8 and (rewards >= 0).all()
    assert np.array_equal(changed, masks[np.arange(n), actions.astype(np.int64)])
    assert np.array_equal(_mass(new), _mass(boards.astype(np.uint8)))


# ----------------------------------------------------------------------------- the vector env
def _env_state(env: VecGame2048) -> tuple:
    return env.boards.copy(), env.scores.copy(), env.moves.copy(), env.rng.bit_generator.state


@FUZZ
@given(n=st.integers(1, 4), seed=st.integers(0, 2**32 - 1), max_moves=st.one_of(st.none(), st.integers(1, 30)),
       steps=st.lists(st.one_of(st.integers(0, 3), _arrays(st.one_of(st.integers(0, 5).map(lambda m: (m,)),
                                                                             ANY_SHAPE))), max_size=40),
       clone_at=st.integers(0, 40))
def test_vec_env_keeps_its_invariants_under_any_actions(n, seed, max_moves, steps, clone_at):
    env = VecGame2048(n, seed=seed, max_moves=max_moves)
    rng = np.random.default_rng(seed)
    twin = None
    for i, step in enumerate(steps):
        if i == clone_at:  # a restored copy must continue identically
            twin = VecGame2048(n, seed=0, max_moves=max_moves)
            twin.load_state_dict(env.state_dict())
        if isinstance(step, int):  # a valid batch: legal random moves
            masks = legal_actions_batch(env.boards)
            actions = np.array([rng.choice(np.flatnonzero(m)) for m in masks])
        else:
            actions = step
        before = _env_state(env)
        valid = (np.shape(actions) == (n,) and actions.dtype.kind in "iu"
                 and int(actions.min()) >= 0 and int(actions.max()) <= 3)
        event("valid step" if valid else "invalid step")
        if not valid:
            with pytest.raises(ValueError, match="actions"):
                env.step(actions)
            after = _env_state(env)
            assert all(np.array_equal(a, b) for a, b in zip(before[:3], after[:3])) and before[3] == after[3]
            continue
        out = env.step(actions)
        if twin is not None:
            twin_out = twin.step(actions)
            assert all(np.array_equal(a, b) for a, b in zip(out, twin_out))
        assert _is_board(out.next_boards, 3) and _is_board(out.boards, 3)
        assert np.array_equal(out.action_masks, legal_actions_batch(out.boards))
        assert np.array_equal(out.terminated, ~legal_actions_batch(out.next_boards).any(axis=1))
        done = out.terminated | out.truncated
        assert not (out.terminated & out.truncated).any()
        assert (env.moves[done] == 0).all() and (env.moves[~done] == before[2][~done] + 1).all()
        assert (env.scores[~done] >= before[1][~done]).all() and (env.scores[done] == 0).all()
        assert (out.episode_scores[done] >= before[1][done]).all() and not out.episode_scores[~done].any()
        if max_moves is not None:
            assert (env.moves < max_moves).all()


@settings(max_examples=100, deadline=None, database=None)
@given(actions=st.lists(ACTIONS, min_size=1, max_size=20))
def test_gymnasium_env_rejects_bad_actions_and_goes_on(actions):
    env = Game2048()
    env.reset(seed=0)
    for action in actions:
        ok = isinstance(action, (int, np.integer)) and 0 <= action <= 3  # bool is an int: 0 / 1
        if not ok:
            board, score = env._board.copy(), env._score
            with pytest.raises(ValueError, match="action"):
                env.step(action)
            assert np.array_equal(env._board, board) and env._score == score  # nothing happened
            continue
        obs, reward, terminated, truncated, _info = env.step(action)
        assert _is_board(np.asarray(obs), 2) and reward >= 0
        if terminated or truncated:
            env.reset()
