"""The vector environment: N games of 2048 stepped together with automatic reset (``VecGame2048``)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .board import max_tiles
from .rules import advance, check_actions, check_boards, check_max_moves, legal_actions_unchecked, new_boards


class VecStep(NamedTuple):
    """Result of :meth:`VecGame2048.step` (arrays over the ``n`` environments)."""

    next_boards: np.ndarray
    """(n, 4, 4) uint8 boards after each move and spawn, before any auto-reset."""
    rewards: np.ndarray
    """(n,) float32 merge points, or ``invalid_move_reward`` where unchanged."""
    terminated: np.ndarray
    """(n,) bool, the game is over."""
    truncated: np.ndarray
    """(n,) bool, ``max_moves`` reached and not terminated."""
    boards: np.ndarray
    """(n, 4, 4) uint8 boards to act on next (finished games replaced by new ones)."""
    action_masks: np.ndarray
    """(n, 4) bool legal actions of ``boards``."""
    episode_scores: np.ndarray
    """(n,) int64 final score of episodes that finished this step, else 0."""
    episode_max_tiles: np.ndarray
    """(n,) int64 final largest tile value of finished episodes, else 0."""
    episode_moves: np.ndarray
    """(n,) int64 move count of finished episodes, else 0."""


class VecGame2048:
    """N games of 2048 stepped together, with automatic reset of finished games.

    Parameters
    ----------
    n_envs : int
        Number of games, >= 1.
    seed : int, optional
        Seed of the numpy Generator ``rng`` used for all spawns.
    max_moves : int or None, optional
        Truncate an episode after this many moves (illegal ones included).
    invalid_move_reward : float, optional
        Reward of a move that changes nothing (default 0.0).

    Attributes
    ----------
    boards : numpy.ndarray
        ``(n, 4, 4)`` uint8 current boards.
    scores : numpy.ndarray
        ``(n,)`` int64 points of the current episodes.
    moves : numpy.ndarray
        ``(n,)`` int64 moves made in the current episodes.
    rng : numpy.random.Generator
        Source of randomness.

    Raises
    ------
    ValueError
        If ``n_envs`` < 1 or ``max_moves`` < 1.
    """

    def __init__(self, n_envs: int, seed: int | None = None, max_moves: int | None = None,
                 invalid_move_reward: float = 0.0):
        if not isinstance(n_envs, (int, np.integer)) or n_envs < 1:
            raise ValueError(f"n_envs must be an integer >= 1, got {n_envs!r}")
        check_max_moves(max_moves)
        self.n_envs = int(n_envs)
        self.max_moves = max_moves
        self.invalid_move_reward = float(invalid_move_reward)
        self.rng = np.random.default_rng(seed)
        self.reset()

    def reset(self, seed: int | None = None) -> np.ndarray:
        """Start new games in all environments.

        Parameters
        ----------
        seed : int, optional
            If given, reseed ``rng`` first.

        Returns
        -------
        numpy.ndarray
            ``(n, 4, 4)`` uint8 copy of the new boards.
        """
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.boards = new_boards(self.n_envs, self.rng)
        self.scores = np.zeros(self.n_envs, np.int64)
        self.moves = np.zeros(self.n_envs, np.int64)
        return self.boards.copy()

    def step(self, actions) -> VecStep:
        """Play one move in every environment; reset the games that end.

        Parameters
        ----------
        actions : array_like
            ``(n,)`` integer actions in ``0..3``.

        Returns
        -------
        VecStep
            Named tuple of arrays; see :class:`VecStep`.

        Raises
        ------
        ValueError
            If ``actions`` has the wrong shape, dtype or range.
        """
        actions = check_actions(actions, self.n_envs)
        next_boards, points, changed, action_masks = advance(self.boards, actions, self.rng)
        self.scores += points
        self.moves += 1
        rewards = np.where(changed, points, self.invalid_move_reward).astype(np.float32)
        terminated = ~action_masks.any(axis=1)
        if self.max_moves is None:
            truncated = np.zeros(self.n_envs, bool)
        else:
            truncated = ~terminated & (self.moves >= self.max_moves)
        done = terminated | truncated
        boards = next_boards.copy()
        if not done.any():  # the usual step: no episode ends
            episode_scores, episode_max_tiles, episode_moves = (np.zeros(self.n_envs, np.int64) for _ in range(3))
        else:
            episode_scores = np.where(done, self.scores, 0)
            episode_max_tiles = np.where(done, max_tiles(next_boards), 0)
            episode_moves = np.where(done, self.moves, 0)
            fresh = new_boards(int(done.sum()), self.rng)
            boards[done] = fresh
            action_masks[done] = legal_actions_unchecked(fresh)
            self.scores[done] = 0
            self.moves[done] = 0
        self.boards = boards
        return VecStep(next_boards, rewards, terminated, truncated, boards.copy(),
                       action_masks, episode_scores, episode_max_tiles, episode_moves)

    def state_dict(self) -> dict:
        """The games in progress and the random stream, for checkpoints.

        Returns
        -------
        dict
            ``boards`` ``(n, 4, 4)`` uint8, ``scores`` and ``moves`` ``(n,)`` int64
            (copies), ``rng`` (the Generator's bit-generator state) and the settings
            ``n_envs``, ``max_moves``, ``invalid_move_reward``.
        """
        return {"n_envs": self.n_envs, "max_moves": self.max_moves,
                "invalid_move_reward": self.invalid_move_reward, "boards": self.boards.copy(),
                "scores": self.scores.copy(), "moves": self.moves.copy(), "rng": self.rng.bit_generator.state}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict` output: the same games continue with the same spawns.

        Raises
        ------
        ValueError
            If the settings differ from this env's, or the boards are not valid
            ``(n_envs, 4, 4)`` exponent boards.
        """
        for key in ("n_envs", "max_moves", "invalid_move_reward"):
            if state.get(key) != getattr(self, key):
                raise ValueError(f"env state has {key}={state.get(key)!r}, this env has {getattr(self, key)!r}")
        boards = check_boards(state["boards"], "boards", 3)
        if len(boards) != self.n_envs:
            raise ValueError(f"env state holds {len(boards)} boards, this env has n_envs={self.n_envs}")
        rng = np.random.default_rng()
        rng.bit_generator.state = state["rng"]
        self.boards = boards.copy()
        self.scores = np.array(state["scores"], np.int64).reshape(self.n_envs)
        self.moves = np.array(state["moves"], np.int64).reshape(self.n_envs)
        self.rng = rng
