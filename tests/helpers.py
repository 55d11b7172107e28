"""Helpers shared by several test modules (importable because pytest puts tests/ on sys.path)."""

import numpy as np

from dqnlab import ReplayBuffer, VecGame2048
from dqnlab.game.env import legal_actions_batch


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
