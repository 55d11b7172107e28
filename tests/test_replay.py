import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dqnlab import ReplayBuffer


def _batch(n, start=0):
    boards = np.full((n, 4, 4), 1, np.uint8)
    boards[:, 0, 0] = (np.arange(start, start + n) % 17).astype(np.uint8)
    return dict(boards=boards, actions=np.arange(start, start + n) % 4, rewards=np.arange(start, start + n, dtype=np.float32),
                next_boards=boards + 1, dones=np.arange(n) % 2 == 0, next_masks=np.ones((n, 4), bool))


def test_add_and_sample_keep_transitions_together():
    buf = ReplayBuffer(100, seed=0)
    buf.add_batch(**_batch(50))
    mb = buf.sample(256)
    assert mb.boards.shape == (256, 4, 4) and mb.boards.dtype == np.uint8
    assert mb.actions.dtype == np.int64
    idx = mb.rewards.astype(int)  # reward i was stored with transition i
    assert np.array_equal(mb.actions, idx % 4)
    assert np.array_equal(mb.boards[:, 0, 0], idx % 17)
    assert np.array_equal(mb.next_boards, mb.boards + 1)
    assert np.array_equal(mb.dones, idx % 2 == 0)


def test_ring_overwrites_oldest():
    buf = ReplayBuffer(10, seed=0)
    buf.add_batch(**_batch(7))
    buf.add_batch(**_batch(7, start=7))
    assert len(buf) == 10 and buf.added == 14
    assert set(buf.arrays["rewards"].astype(int)) == set(range(4, 14))


@settings(max_examples=60, deadline=None)
@given(capacity=st.integers(1, 40), sizes=st.lists(st.integers(1, 60), min_size=1, max_size=8))
def test_buffer_holds_the_newest_transitions(capacity, sizes):
    buf = ReplayBuffer(capacity, seed=1)
    start = 0
    for n in sizes:
        buf.add_batch(**_batch(n, start))
        start += n
    assert len(buf) == min(capacity, start)
    assert set(buf.arrays["rewards"][: len(buf)].astype(int)) == set(range(start - len(buf), start))
    assert set(buf.sample(32).rewards.astype(int)) <= set(range(start - len(buf), start))


def test_errors():
    with pytest.raises(ValueError, match="capacity"):
        ReplayBuffer(0)
    buf = ReplayBuffer(10)
    with pytest.raises(ValueError, match="empty"):
        buf.sample(4)
    bad = _batch(3)
    bad["next_masks"] = np.ones((3, 5), bool)
    with pytest.raises(ValueError, match="next_masks"):
        buf.add_batch(**bad)
    assert len(buf) == 0


def test_state_dict_round_trip_continues_identically():
    a = ReplayBuffer(20, seed=5)
    a.add_batch(**_batch(25))
    b = ReplayBuffer(20, seed=99)
    b.load_state_dict(a.state_dict())
    assert np.array_equal(a.sample(8).rewards, b.sample(8).rewards)
