"""Greedy evaluation of trained agents, and the reference policies they are compared with."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Union

import numpy as np

from .agent import DQNAgent
from .config import TrainConfig
from .env import VecGame2048, legal_actions_batch
from .results import RunResult

__all__ = ["evaluate", "EvalResult", "REFERENCE_POLICIES", "make_policy"]

Policy = Callable[[np.ndarray, np.ndarray], np.ndarray]
PolicyLike = Union[str, RunResult, DQNAgent, dict, "os.PathLike[str]", Policy]

_CORNER_ORDER = np.array([2, 3, 1, 0])  # down > left > right > up


def _random_policy(seed: int) -> Policy:
    rng = np.random.default_rng(seed)

    def act(boards: np.ndarray, masks: np.ndarray) -> np.ndarray:
        return np.where(masks, rng.random(masks.shape), -1.0).argmax(axis=1)

    return act


def _corner_policy(boards: np.ndarray, masks: np.ndarray) -> np.ndarray:
    first_legal = masks[:, _CORNER_ORDER].argmax(axis=1)
    return _CORNER_ORDER[first_legal]


#: Reference policies by name: ``random`` (uniform over legal moves) and ``corner``
#: (the first legal move of down > left > right > up).
REFERENCE_POLICIES = ("random", "corner")


def _greedy(agent: DQNAgent) -> Policy:
    def act(boards: np.ndarray, masks: np.ndarray) -> np.ndarray:
        return np.where(masks, agent.q_values(boards), -np.inf).argmax(axis=1)

    return act


def make_policy(policy: PolicyLike, seed: int = 0, config: TrainConfig | None = None) -> Policy:
    """Turn anything :func:`evaluate` accepts into ``act(boards, masks) -> actions``.

    ``boards`` is ``(N, 4, 4)`` uint8, ``masks`` ``(N, 4)`` bool legal moves; the
    result is ``(N,)`` int action ids, always legal where a legal move exists.

    Raises
    ------
    ValueError
        For an unknown policy name, a path that is not a run, or weights that do not
        fit the network of ``config``.
    """
    if isinstance(policy, str) and policy in REFERENCE_POLICIES:
        return _random_policy(seed) if policy == "random" else _corner_policy
    if isinstance(policy, (str, os.PathLike)):
        if not os.path.isdir(policy):
            raise ValueError(f"policy must be one of {REFERENCE_POLICIES} or a run directory, a RunResult, "
                             f"weights or a DQNAgent; no directory {str(policy)!r} exists")
        policy = RunResult.load(policy)
    if isinstance(policy, RunResult):
        config, policy = policy.config, policy.weights
    if isinstance(policy, dict):
        agent = DQNAgent(config or TrainConfig.preset("mlp"), seed=seed)
        agent.set_weights(policy)
        policy = agent
    if isinstance(policy, DQNAgent):
        return _greedy(policy)
    if callable(policy):
        return policy
    raise ValueError(f"cannot evaluate a {type(policy).__name__}")


@dataclass
class EvalResult:
    """Scores of ``games`` finished games.

    Attributes
    ----------
    scores : (games,) int64 points.
    max_tiles : (games,) int64 largest tile value of each game.
    moves : (games,) int64 moves of each game.
    """

    scores: np.ndarray
    max_tiles: np.ndarray
    moves: np.ndarray

    def reach(self, tile: int) -> float:
        """Fraction of games whose largest tile is at least ``tile``."""
        return float(np.mean(self.max_tiles >= tile))

    def summary(self) -> dict[str, Any]:
        """score_mean, score_median, score_std, score_max, moves_mean, games,
        max_tile_counts ({tile value: games}) and reach_512 / reach_1024 / reach_2048 / reach_4096."""
        tiles, counts = np.unique(self.max_tiles, return_counts=True)
        return {
            "games": int(len(self.scores)), "score_mean": float(self.scores.mean()),
            "score_median": float(np.median(self.scores)), "score_std": float(self.scores.std()),
            "score_max": int(self.scores.max()), "moves_mean": float(self.moves.mean()),
            "max_tile_counts": {int(t): int(c) for t, c in zip(tiles, counts)},
            **{f"reach_{t}": self.reach(t) for t in (512, 1024, 2048, 4096)},
        }


def evaluate(policy: PolicyLike, games: int = 200, seed: int = 0, config: TrainConfig | None = None,
             max_moves: int | None = None) -> EvalResult:
    """Play ``games`` games of 2048 and report their scores.

    The games are played side by side (one batched forward pass per move). Every
    policy picks only among legal moves, so every game ends.

    Parameters
    ----------
    policy : str, RunResult, path, dict of arrays, DQNAgent or callable
        ``"random"`` or ``"corner"`` (see :data:`REFERENCE_POLICIES`); a run (object or
        directory written by :meth:`RunResult.save`), weights, or an agent, played
        greedily (argmax Q over legal moves); or ``act(boards, masks) -> actions``.
    games : int
        Games to play (>= 1).
    seed : int
        Seeds the games' tile spawns (and the random policy).
    config : TrainConfig, optional
        Network shape for bare weights (default: the ``mlp`` preset).
    max_moves : int, optional
        Cap on moves per game (truncation); default none.

    Returns
    -------
    EvalResult

    Raises
    ------
    ValueError
        If ``games`` < 1, ``seed`` < 0, or ``policy`` is not one of the accepted kinds.
    """
    if not isinstance(games, (int, np.integer)) or isinstance(games, bool) or games < 1:
        raise ValueError(f"games must be an integer >= 1, got {games!r}")
    if not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be an integer >= 0, got {seed!r}")
    act = make_policy(policy, seed=seed, config=config)
    env = VecGame2048(games, seed=seed, max_moves=max_moves)
    boards = env.reset()
    masks = legal_actions_batch(boards)
    done = np.zeros(games, bool)
    scores, tiles, moves = (np.zeros(games, np.int64) for _ in range(3))
    while not done.all():
        active = np.flatnonzero(~done)
        actions = np.zeros(games, np.int64)
        actions[active] = act(boards[active], masks[active])
        out = env.step(actions)
        ended = (out.terminated | out.truncated) & ~done
        scores[ended], tiles[ended], moves[ended] = (out.episode_scores[ended], out.episode_max_tiles[ended],
                                                     out.episode_moves[ended])
        done |= ended
        boards, masks = out.boards, out.action_masks
    return EvalResult(scores, tiles, moves)
