"""Greedy evaluation of trained agents, the reference policies they are compared with, and
recorded games (:func:`play`)."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Union

import numpy as np

from .agent.dqn import DQNAgent
from .bars import progress_bar
from .config import TrainConfig
from .game import ACTION_NAMES, VecGame2048, board_text, legal_actions_batch, max_tile
from .player import Player, check_search, load_player
from .runtime.results import RunResult

__all__ = ["evaluate", "EvalResult", "percent", "REFERENCE_POLICIES", "reference_results", "make_policy", "play",
           "RecordedGame"]

Policy = Callable[[np.ndarray, np.ndarray], np.ndarray]
PolicyLike = Union[str, RunResult, DQNAgent, Player, dict, "os.PathLike[str]", Policy]

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


def make_policy(policy: PolicyLike, seed: int = 0, config: TrainConfig | None = None,
                search: int | None = None) -> Policy:
    """Turn anything :func:`evaluate` accepts into ``act(boards, masks) -> actions``.

    ``boards`` is ``(N, 4, 4)`` uint8, ``masks`` ``(N, 4)`` bool legal moves; the
    result is ``(N,)`` int action ids, always legal where a legal move exists. A run,
    its directory, weights or an agent become a :class:`~dqnlab.player.Player`, greedy or
    searching ``search`` plies (None: a player keeps its own; see :func:`~dqnlab.load_player`).

    Raises
    ------
    ValueError
        For an unknown policy name, a path that is not a run, weights that do not fit the
        network of ``config``, or a ``search`` above 1 for a policy that cannot search.
    """
    reference = isinstance(policy, str) and policy in REFERENCE_POLICIES
    if search is not None and (reference or (callable(policy) and not isinstance(policy, Player))):
        check_search(search, None)  # a reference policy or a callable has no network: only 1 (greedy) passes
    if reference:
        return _random_policy(seed) if policy == "random" else _corner_policy
    if isinstance(policy, (str, os.PathLike)) and not os.path.isdir(policy):
        raise ValueError(f"policy must be one of {REFERENCE_POLICIES} or a run directory, a RunResult, "
                         f"weights or a DQNAgent; no directory {str(policy)!r} exists")
    if callable(policy) and not isinstance(policy, Player):
        return policy
    return load_player(policy, config=config, seed=seed, search=search)


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
        max_tile_counts ({tile value: games}) and reach_512 / reach_1024 / reach_2048 / reach_4096 / reach_8192."""
        tiles, counts = np.unique(self.max_tiles, return_counts=True)
        return {
            "games": len(self.scores), "score_mean": float(self.scores.mean()),
            "score_median": float(np.median(self.scores)), "score_std": float(self.scores.std()),
            "score_max": int(self.scores.max()), "moves_mean": float(self.moves.mean()),
            "max_tile_counts": {int(t): int(c) for t, c in zip(tiles, counts)},
            **{f"reach_{t}": self.reach(t) for t in (512, 1024, 2048, 4096, 8192)},
        }

    def describe(self) -> str:
        """The games in one line, as every command says them: the score's mean, median and best, then the
        share of games that reached each tile from the largest one all of them reached to the largest one
        any reached (the four largest of those), e.g.
        ``"mean 105,906, median 98,112, best 180,332; 2048 in 96% of games, 4096 in 71%, 8192 in 3%"``."""
        every = int(self.max_tiles.min())
        reached = [2 ** k for k in range(every.bit_length() - 1, int(self.max_tiles.max()).bit_length())][-4:]
        shares = [f"{tile} in {percent(self.reach(tile))}" for tile in reached]
        return (f"mean {self.scores.mean():,.0f}, median {np.median(self.scores):,.0f}, best {self.scores.max():,}; "
                + ", ".join([shares[0] + " of games", *shares[1:]]))

    def plot(self):
        """The largest-tile distribution (bars, share of games written on each) and the score
        histogram; returns the :class:`matplotlib.figure.Figure` (2 axes).

        ``python -m dqnlab evaluate RUN --plot FILE`` saves it.
        """
        from .plots import plot_eval

        return plot_eval(self)


def percent(share: float) -> str:
    """``share`` (0..1) in percent, whole (``"96%"``) except near its ends, where one decimal keeps a game
    or two visible (``"0.5%"``, ``"99.5%"``)."""
    return f"{share:.1%}" if 0 < share < 0.01 or 0.99 < share < 1 else f"{share:.0%}"


def evaluate(policy: PolicyLike, games: int = 200, seed: int = 0, config: TrainConfig | None = None,
             max_moves: int | None = None, search: int | None = None, progress: bool = False) -> EvalResult:
    """Play ``games`` games of 2048 and report their scores.

    The games are played side by side (one batched forward pass per move). Every
    policy picks only among legal moves, so every game ends.

    Parameters
    ----------
    policy : str, RunResult, path, dict of arrays, DQNAgent, Player or callable
        ``"random"`` or ``"corner"`` (see :data:`REFERENCE_POLICIES`); a run (object or
        directory written by :meth:`RunResult.save`), weights, an agent or a player, played
        greedily (argmax Q over legal moves) or searching (``search``); or
        ``act(boards, masks) -> actions``.
    games : int
        Games to play (>= 1).
    seed : int
        Seeds the games' tile spawns (and the random policy).
    config : TrainConfig, optional
        Network shape for bare weights (default: the ``mlp`` preset).
    max_moves : int, optional
        Cap on moves per game (truncation); default none.
    search : int, optional
        Plies of expectimax a trained n-tuple afterstate player searches (1: greedy; see
        :class:`~dqnlab.player.Player`). None (the default): a player keeps its own, others play greedily.
    progress : bool
        Show a bar of the games finished (:func:`dqnlab.bars.progress_bar`), with the time left from the
        rate they finish at (the games run side by side, so the first ones finish late).

    Returns
    -------
    EvalResult

    Raises
    ------
    ValueError
        If ``games`` < 1, ``seed`` < 0, ``policy`` is not one of the accepted kinds, or
        ``search`` is not one it can play.
    """
    _check_int(games, "games", 1)
    _check_int(seed, "seed", 0)
    act = make_policy(policy, seed=seed, config=config, search=search)
    env = VecGame2048(games, seed=seed, max_moves=max_moves)
    boards = env.reset()
    masks = legal_actions_batch(boards)
    done = np.zeros(games, bool)
    scores, tiles, moves = (np.zeros(games, np.int64) for _ in range(3))
    with progress_bar(total=games, desc="games", unit=" games", disable=not progress) as bar:
        while not done.all():
            active = np.flatnonzero(~done)
            actions = np.zeros(games, np.int64)
            actions[active] = act(boards[active], masks[active])
            out = env.step(actions)
            ended = (out.terminated | out.truncated) & ~done
            scores[ended], tiles[ended], moves[ended] = (out.episode_scores[ended], out.episode_max_tiles[ended],
                                                         out.episode_moves[ended])
            done |= ended
            bar.update(int(ended.sum()))
            boards, masks = out.boards, out.action_masks
    return EvalResult(scores, tiles, moves)


@dataclass
class RecordedGame:
    """One game of 2048, move by move: what :func:`play` returns.

    Watch it with :func:`dqnlab.plots.animate` (a notebook animation or a GIF) or
    :meth:`text` (a terminal replay).

    Attributes
    ----------
    boards : numpy.ndarray
        ``(T + 1, 4, 4)`` uint8 log2 exponents (0 = empty, k = the tile ``2**k``;
        :func:`dqnlab.board_to_tiles` gives tile values): the start, then the board after
        each move and its new tile.
    actions : numpy.ndarray
        ``(T,)`` int64 move played on ``boards[t]`` (0 up, 1 right, 2 down, 3 left).
    rewards : numpy.ndarray
        ``(T,)`` int64 points scored by each move.
    q_values : numpy.ndarray
        ``(T, 4)`` float32 Q-values of the four moves of ``boards[t]`` that chose
        ``actions[t]``, in the learner's reward units; NaN for an illegal move, and
        all NaN for a policy without Q-values (``"random"``, ``"corner"``, a callable).
    seed : int
        Seed of the tile spawns: ``VecGame2048(1, seed=seed)`` stepped with
        ``actions`` plays the same game again.
    truncated : bool
        The game was stopped by ``max_moves`` before it was over.
    """

    boards: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    q_values: np.ndarray
    seed: int
    truncated: bool = False

    @property
    def moves(self) -> int:
        """Moves played (T)."""
        return len(self.actions)

    @property
    def score(self) -> int:
        """Points of the whole game."""
        return int(self.rewards.sum())

    @property
    def scores(self) -> np.ndarray:
        """``(T + 1,)`` int64 score on ``boards[t]``: the points of the first t moves."""
        return np.concatenate([[0], np.cumsum(self.rewards)]).astype(np.int64)

    @property
    def max_tile(self) -> int:
        """Largest tile value at the end, e.g. 2048."""
        return max_tile(self.boards[-1])

    def frames(self, every: int = 1, max_frames: int | None = None) -> np.ndarray:
        """The boards to show: every ``every``-th from the start, and always the last.

        Parameters
        ----------
        every : int
            Moves between shown boards (>= 1); 1 shows the start and every move.
        max_frames : int, optional
            At most this many boards (>= 2): ``every`` is raised to the smallest step
            that fits; a long game of a strong player has thousands of moves.

        Returns
        -------
        numpy.ndarray
            ``(k,)`` int64 increasing indices into :attr:`boards`, from 0 to T.

        Raises
        ------
        ValueError
            If ``every`` < 1 or ``max_frames`` < 2.
        """
        _check_int(every, "every", 1)
        if max_frames is not None:
            _check_int(max_frames, "max_frames", 2)
            every = max(every, -(-self.moves // (max_frames - 1)))
        return np.unique(np.r_[np.arange(0, self.moves + 1, every), self.moves]).astype(np.int64)

    def animate(self, **options):
        """:func:`dqnlab.plots.animate` of this game: the board and the Q-values of the four moves, move by move.

        Parameters
        ----------
        **options
            ``every``, ``max_frames``, ``interval_ms``, ``dpi`` (see :func:`dqnlab.plots.animate`).

        Returns
        -------
        matplotlib.animation.FuncAnimation
            ``IPython.display.HTML(anim.to_jshtml())`` in a notebook; ``anim.save("game.gif", writer="pillow")``.
        """
        from .plots import animate

        return animate(self, **options)

    def text(self, t: int) -> str:
        """Board ``t`` as text, for a terminal replay.

        A header line (the move that led to the board, its points and the Q-values that
        chose it, the score; "game over" at the end) and four rows of tile values
        (``.`` = empty).

        Raises
        ------
        IndexError
            If ``t`` is not in ``0..T``.
        """
        if not 0 <= t <= self.moves:
            raise IndexError(f"t must be in 0..{self.moves}, got {t}")
        if t == 0:
            header = f"start, score 0 ({self.moves:,} moves to come)"
        else:
            q = self.q_values[t - 1]
            header = (f"move {t:,}/{self.moves:,}: {ACTION_NAMES[self.actions[t - 1]]} +{self.rewards[t - 1]:,}, "
                      f"score {self.scores[t]:,}")
            if np.isfinite(q).any():
                header += "  (Q: " + ", ".join(f"{name} {v:,.1f}" if np.isfinite(v) else f"{name} -"
                                               for name, v in zip(ACTION_NAMES, q)) + ")"
        if t == self.moves:
            header += "; stopped (max_moves)" if self.truncated else "; game over"
        return header + "\n" + board_text(self.boards[t])


def _check_int(value: Any, name: str, minimum: int) -> None:
    """Raise ValueError unless ``value`` is an integer (not a bool) >= ``minimum``."""
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")


def play(policy: PolicyLike, seed: int = 0, max_moves: int | None = None,
         config: TrainConfig | None = None, search: int | None = None, progress: bool = False) -> RecordedGame:
    """Play one game and record it move by move, to watch it, replay it or study it.

    Trained players play as in :func:`evaluate` (greedily, or searching); the game is the first of
    ``evaluate(policy, games=1, seed=seed)`` (the same spawns and moves).

    Parameters
    ----------
    policy : str, RunResult, path, dict of arrays, DQNAgent, Player or callable
        What :func:`evaluate` takes: ``"random"`` or ``"corner"``, a run (object or
        directory), weights, an agent or a player (see :func:`dqnlab.load_player`), or
        ``act(boards, masks) -> actions`` (which must pick legal moves, or the game
        never ends unless ``max_moves`` is given).
    seed : int
        Seeds the tile spawns (and the random policy).
    max_moves : int, optional
        Stop after this many moves (``truncated`` is then True); default: play to the end.
    config : TrainConfig, optional
        Network shape for bare weights (default: the ``mlp`` preset).
    search : int, optional
        Plies of expectimax for a trained n-tuple afterstate player, as in :func:`evaluate`; when it
        searches, the recorded Q-values are each move's expectimax value.
    progress : bool
        Count the moves as they are played (:func:`dqnlab.bars.progress_bar`; a game's length is not
        known before its end, so no time left).

    Returns
    -------
    RecordedGame
        With the Q-values of every move for a Q-network (NaN for other policies).

    Raises
    ------
    ValueError
        If ``seed`` < 0, ``max_moves`` < 1, ``policy`` is not one of the accepted kinds, or
        ``search`` is not one it can play.
    """
    _check_int(seed, "seed", 0)
    act = make_policy(policy, seed=seed, config=config, search=search)
    env = VecGame2048(1, seed=seed, max_moves=max_moves)
    boards, actions, rewards, q_values = [env.reset()], [], [], []
    masks = legal_actions_batch(boards[0])
    with progress_bar(desc="playing", unit=" moves", disable=not progress) as bar:
        while True:
            if isinstance(act, Player):
                action, q = act.moves(boards[-1], masks)
            else:
                action, q = np.asarray(act(boards[-1], masks)), np.full((1, 4), np.nan, np.float32)
            out = env.step(action)
            boards.append(out.next_boards)
            actions.append(action)
            rewards.append(out.rewards)
            q_values.append(q)
            bar.update()
            if out.terminated[0] or out.truncated[0]:
                break
            masks = out.action_masks
    return RecordedGame(np.concatenate(boards), np.concatenate(actions).astype(np.int64),
                        np.concatenate(rewards).astype(np.int64), np.concatenate(q_values), seed=int(seed),
                        truncated=bool(out.truncated[0]))


@functools.lru_cache(maxsize=4)
def reference_results(games: int, seed: int) -> dict[str, EvalResult]:
    """``{"random": EvalResult, "corner": EvalResult}``: :func:`evaluate` of each of :data:`REFERENCE_POLICIES` on
    ``games`` games with tile-spawn seed ``seed``, once per process (cached): notebook 00's table of them and the
    panels' reference lines are these games."""
    return {name: evaluate(name, games=games, seed=seed) for name in REFERENCE_POLICIES}
