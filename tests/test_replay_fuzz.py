"""Fuzzing the replay buffer: driven with arbitrary legal and illegal input.

The game is fuzzed in tests/game/test_fuzz_game.py.

Property: every call either succeeds with its invariants kept, or raises the
documented ``ValueError`` and leaves the object as it was. No other exception, ever.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import FUZZ
from hypothesis import event, given
from hypothesis import strategies as st

from dqnlab import ReplayBuffer


# ----------------------------------------------------------------------------- replay buffer
def _transitions(start: int, n: int) -> dict[str, np.ndarray]:
    """``n`` valid transitions; transition ``i`` carries reward ``start + i`` (its id)."""
    ids = np.arange(start, start + n)
    boards = (ids[:, None, None] % 17 + np.zeros((1, 4, 4), int)).astype(np.uint8)
    return {"boards": boards, "actions": ids % 4, "rewards": ids.astype(np.float32), "next_boards": boards + 1,
            "dones": ids % 3 == 0, "next_masks": np.ones((n, 4), bool)}


def _spoil(batch: dict, how: str) -> dict:
    b = dict(batch)
    n = len(b["actions"])
    if how == "action 4":
        b["actions"] = np.full(n, 4)
    elif how == "action -1":
        b["actions"] = np.full(n, -1)
    elif how == "float actions":
        b["actions"] = b["actions"].astype(float)
    elif how == "exponent 18":
        b["next_boards"] = np.full((n, 4, 4), 18, np.uint8)
    elif how == "negative board":
        b["boards"] = -b["boards"].astype(np.int64) - 1
    elif how == "nan reward":
        b["rewards"] = np.full(n, np.nan, np.float32)
    elif how == "int dones":
        b["dones"] = b["dones"].astype(int)
    elif how == "short rewards":
        b["rewards"] = b["rewards"][:-1]
    elif how == "wide masks":
        b["next_masks"] = np.ones((n, 5), bool)
    elif how == "scalar actions":
        b["actions"] = np.int64(1)
    elif how == "string boards":
        b["boards"] = np.full((n, 4, 4), "x")
    return b


SPOILS = ["action 4", "action -1", "float actions", "exponent 18", "negative board", "nan reward", "int dones",
          "short rewards", "wide masks", "scalar actions", "string boards"]
OPS = st.one_of(
    st.tuples(st.just("add"), st.integers(0, 12), st.sampled_from([None, None, *SPOILS])),
    st.tuples(st.just("sample"), st.one_of(st.integers(-2, 40), st.floats(0, 5), st.booleans(), st.just("3"))),
    st.tuples(st.just("restore"), st.sampled_from([None, "size", "pos", "short", "capacity"])),
)


def _buffer_state(buf: ReplayBuffer) -> tuple:
    return (buf.pos, buf.size, buf.added, {k: v.copy() for k, v in buf.arrays.items()})


@FUZZ
@given(capacity=st.integers(1, 20), ops=st.lists(OPS, max_size=25))
def test_replay_buffer_keeps_the_newest_transitions_whatever_it_is_fed(capacity, ops):
    buf = ReplayBuffer(capacity, seed=1)
    model: list[int] = []  # ids of the transitions it should hold, oldest first
    next_id = 0
    for op in ops:
        before = _buffer_state(buf)
        if op[0] == "add":
            _, n, spoil = op
            if spoil is not None and n == 0 and spoil != "scalar actions":
                spoil = None  # spoiling zero rows may leave nothing wrong
            batch = _spoil(_transitions(next_id, n), spoil) if spoil else _transitions(next_id, n)
            event(f"add {spoil or 'valid'}")
            if spoil is None:
                buf.add_batch(**batch)
                model = (model + list(range(next_id, next_id + n)))[-capacity:]
                next_id += n
            else:
                with pytest.raises(ValueError):
                    buf.add_batch(**batch)
                pos, size, added, arrays = _buffer_state(buf)
                assert (pos, size, added) == before[:3]
                assert all(np.array_equal(arrays[k], before[3][k]) for k in arrays)
        elif op[0] == "sample":
            k = op[1]
            ok = isinstance(k, int) and not isinstance(k, bool) and k >= 1 and len(model) > 0
            if not ok:
                with pytest.raises(ValueError):
                    buf.sample(k)
                continue
            mb = buf.sample(k)
            assert mb.boards.shape == (k, 4, 4) and mb.actions.dtype == np.int64
            ids = mb.rewards.astype(int)
            assert set(ids) <= set(model)
            assert np.array_equal(mb.actions, ids % 4) and np.array_equal(mb.dones, ids % 3 == 0)
            assert np.array_equal(mb.next_boards, mb.boards + 1)
        else:
            state = buf.state_dict()
            broken = op[1]
            if broken == "size":
                state["size"] = capacity + 1
            elif broken == "pos":
                state["pos"] = capacity
            elif broken == "short" and state["size"] > 0:
                state["rewards"] = state["rewards"][:-1]
            elif broken == "capacity":
                state["capacity"] = capacity + 1
            else:
                broken = None
            other = ReplayBuffer(capacity, seed=99)
            if broken:
                with pytest.raises(ValueError):
                    other.load_state_dict(state)
                assert len(other) == 0
                continue
            other.load_state_dict(state)
            if model:
                assert np.array_equal(other.sample(8).rewards, buf.sample(8).rewards)  # same stream too
            buf = other
        assert len(buf) == len(model) and buf.added == next_id
        assert sorted(buf.arrays["rewards"][: len(buf)].astype(int)) == sorted(model)
