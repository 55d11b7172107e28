"""Helpers shared by several test modules (importable because pytest puts tests/ on sys.path)."""

import numpy as np
from hypothesis import HealthCheck, settings

from dqnlab import ReplayBuffer, VecGame2048
from dqnlab.game import board_from_tiles, legal_actions_batch

# The settings of the fuzz tests (tests/test_fuzz.py, tests/game/test_fuzz_game.py).
FUZZ = settings(max_examples=150, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# A full board with no move left but LEFT, after which it is over whatever spawns:
# row 0 becomes 16 32 64 _ and the empty corner sits next to 64 and 128.
ALMOST_OVER = board_from_tiles([[8, 8, 32, 64],
                                [2, 4, 8, 128],
                                [4, 2, 4, 2],
                                [2, 4, 2, 4]])
NO_LEFT_MOVE = board_from_tiles([[2, 0, 0, 0],
                                 [4, 2, 0, 0],
                                 [0, 0, 0, 0],
                                 [8, 0, 0, 0]])


def filled_buffer(n: int, seed: int = 0) -> ReplayBuffer:
    """A replay buffer of capacity ``n`` filled with ``n`` transitions of uniformly random moves on 32 boards."""
    buf = ReplayBuffer(n, seed=seed)
    env = VecGame2048(32, seed=seed)
    rng = np.random.default_rng(seed)
    boards = env.boards
    while len(buf) < n:
        actions = rng.integers(0, 4, 32)
        out = env.step(actions)
        buf.add_batch(boards, actions, out.rewards, out.next_boards, out.terminated,
                      legal_actions_batch(out.next_boards))
        boards = out.boards
    return buf
