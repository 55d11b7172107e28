"""A trained player in one line: ``player = dqnlab.load_player("runs/x")``, then ``player.act(boards)``.

A :class:`Player` plays the best legal move of a run's Q-function (greedy, or by an expectimax search
over the spawns, ``search=2``). It is also a policy
``player(boards, masks) -> actions`` as :func:`dqnlab.evaluate` and :func:`dqnlab.play`
take one, and it answers Stable-Baselines3's ``predict(obs, deterministic=True)``, so it
drops into code written for SB3 models.
"""

from __future__ import annotations

import os
from typing import Any, Union

import numpy as np

from .agent.dqn import DQNAgent
from .config import TrainConfig
from .core import search as core_search
from .core.compile import notice
from .game import legal_actions_batch
from .game.rules import check_boards
from .runtime.results import RunResult

__all__ = ["Player", "load_player", "PlayerLike", "MAX_SEARCH", "check_search"]

#: What :func:`load_player` accepts.
PlayerLike = Union[str, "os.PathLike[str]", RunResult, dict, DQNAgent, "Player"]


#: A board of two 2-tiles, which a searching :class:`Player` searches once when made.
_TWO_TILES = np.array([[[1, 1, 0, 0], [0] * 4, [0] * 4, [0] * 4]], np.uint8)

#: The most plies :class:`Player` searches (each ply multiplies a move's work by about 8 x the empty cells;
#: :func:`dqnlab.core.search.transposition_table`'s tags hold plies below 4).
MAX_SEARCH = 3


def check_search(search: Any, config: TrainConfig | None) -> int:
    """``search`` (plies of expectimax, 1: greedy) checked against the network of ``config``.

    Raises
    ------
    ValueError
        If ``search`` is not an integer in 1..:data:`MAX_SEARCH`, or is above 1 for a network
        that is not an n-tuple network of afterstate values (``config=None``: no network).
    """
    if not isinstance(search, (int, np.integer)) or isinstance(search, bool) or not 1 <= search <= MAX_SEARCH:
        raise ValueError(f"search must be an integer in 1..{MAX_SEARCH} (plies of expectimax; 1: greedy), "
                         f"got {search!r}")
    search = int(search)
    if search > 1 and (config is None or config.network != "ntuple" or not config.afterstate):
        what = "no network" if config is None else f"network={config.network!r}, afterstate={config.afterstate}"
        raise ValueError(f"search={search} needs a player of an n-tuple network of afterstate values "
                         f"(network='ntuple', afterstate=True); this one has {what}")
    return search


class Player:
    """A trained Q-network playing 2048: the best legal move by its Q-values, or by an expectimax
    search over the tiles the game spawns (``search`` plies: :mod:`dqnlab.core.search`).

    Made by :func:`load_player`; ``Player(agent)`` wraps an agent directly.

    Parameters
    ----------
    agent : DQNAgent
        Its online network plays.
    seed : int
        Seeds the exploration of ``predict(..., deterministic=False)``.
    search : int
        Plies of expectimax (1, the default: the greedy move; 2-3 look ahead over every spawn, for an
        n-tuple network of afterstate values; see :mod:`dqnlab.core.search`). A searching player searches one
        board when made: the first in a process compiles the search's kernels (or loads them from numba's
        cache), under the compile notice (:func:`dqnlab.core.compile.notice`).

    Attributes
    ----------
    agent : DQNAgent
    config : TrainConfig
        The agent's config (network, afterstates).
    network : torch.nn.Module
        The online network: ``(N, 4, 4)`` uint8 boards -> ``(N, 4)`` Q-values, or ``(N, 1)``
        afterstate values with ``config.afterstate`` (see :meth:`dqnlab.DQNAgent.q_values`).

    Notes
    -----
    A board with no legal move (game over) gets action 0 and all-NaN Q-values.
    """

    def __init__(self, agent: DQNAgent, seed: int = 0, search: int = 1):
        if not isinstance(agent, DQNAgent):
            raise ValueError(f"agent must be a DQNAgent, got {type(agent).__name__}")
        self.agent = agent
        self.config: TrainConfig = agent.config
        self.network = agent.online
        self.search = check_search(search, agent.config)
        self._rng = np.random.default_rng(seed)
        self._table: tuple[np.ndarray, ...] | None = None  # the search's transposition table, made when first used
        self._generation = 0
        if self.search > 1:  # its kernels compiled (or loaded from the cache) now, said if it takes long
            with notice("the expectimax search"):
                self._searched(_TWO_TILES)

    def moves(self, boards: np.ndarray, masks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The player's moves (greedy, or searched) and Q-values of boards whose legal moves are known
        (no input checks).

        Parameters
        ----------
        boards : (N, 4, 4) uint8
            Exponent boards.
        masks : (N, 4) bool
            Legal moves of each board.

        Returns
        -------
        actions : (N,) int64
            The legal move of largest Q-value (0 where no move is legal).
        q_values : (N, 4) float32
            Q-values in the learner's reward units (with ``search`` > 1, each move's expectimax
            value), NaN for illegal moves.
        """
        q = self.agent.q_values(boards) if self.search == 1 else self._searched(boards)
        q = np.where(masks, q, np.nan).astype(np.float32)
        return np.where(masks, q, -np.inf).argmax(axis=1), q

    def _searched(self, boards: np.ndarray) -> np.ndarray:
        """``(N, 4)`` float64 expectimax values of each move, ``search`` plies deep (-inf: illegal).
        Each call reads the weights afresh, with a new generation of the transposition table."""
        if self._table is None:
            self._table = core_search.transposition_table()
        self._generation += 1  # (the weights may have changed since the last call: its entries are not read)
        net = self.agent.acting
        cells = np.ascontiguousarray(boards, dtype=np.uint8).reshape(len(boards), 16)
        actions, q = np.empty(len(boards), np.int64), np.empty((len(boards), 4))
        core_search.expectimax(cells, self.search, net.weight.detach().numpy().reshape(-1), net.placements,
                               self.config.reward_transform == "log", float(self.config.gamma), self._table,
                               self._generation, actions, q)
        return q

    def __call__(self, boards: np.ndarray, masks: np.ndarray) -> np.ndarray:
        """The policy protocol of :func:`dqnlab.evaluate`: ``(N, 4, 4)`` boards and ``(N, 4)``
        legal moves -> ``(N,)`` int64 legal actions (greedy, or searched)."""
        return self.moves(boards, masks)[0]

    def q_values(self, boards) -> np.ndarray:
        """Q-values of the four moves of each board.

        Parameters
        ----------
        boards : array_like
            ``(N, 4, 4)`` integer log2 exponents in ``0..17``.

        Returns
        -------
        numpy.ndarray
            ``(N, 4)`` float32 by move (0 up, 1 right, 2 down, 3 left), in the learner's
            reward units (points, or log points with ``reward_transform="log"``), each move's
            expectimax value when the player searches; NaN for an illegal move (one that
            changes nothing).

        Raises
        ------
        ValueError
            If ``boards`` is not ``(N, 4, 4)`` exponents.
        """
        boards = check_boards(boards, "boards", 3)
        return self.moves(boards, legal_actions_batch(boards))[1]

    def act(self, boards) -> np.ndarray:
        """The best legal move of each board: greedy, or by the player's search.

        Parameters
        ----------
        boards : array_like
            ``(N, 4, 4)`` integer log2 exponents in ``0..17``.

        Returns
        -------
        numpy.ndarray
            ``(N,)`` int64 action ids (0 up, 1 right, 2 down, 3 left); 0 for a board
            with no legal move.

        Raises
        ------
        ValueError
            If ``boards`` is not ``(N, 4, 4)`` exponents.
        """
        boards = check_boards(boards, "boards", 3)
        return self.moves(boards, legal_actions_batch(boards))[0]

    def predict(self, observation, state: Any = None, episode_start: Any = None,
                deterministic: bool = False) -> tuple[np.ndarray, None]:
        """Stable-Baselines3's ``model.predict``: actions for one observation or a batch.

        Parameters
        ----------
        observation : array_like
            One board or a batch, as :class:`dqnlab.Game2048` observes it (``(4, 4)`` or
            ``(N, 4, 4)`` integer exponents), or as the ``gymnasium-2048`` package's
            ``TwentyFortyEightEnv`` does (one-hot ``(4, 4, K)`` or ``(N, 4, 4, K)``, plane
            k marking the cells of exponent k, K = 16 by default; K = 4 would read as a
            batch of four exponent boards). Both number the moves as dqnlab does.
        state, episode_start
            Ignored (the player has no recurrent state); accepted for SB3's signature.
        deterministic : bool
            True: the player's move (greedy, or searched). False (SB3's default): as SB3's DQN does, a
            uniformly random legal move with probability ``config.epsilon_end`` (the
            final exploration rate of training), else the player's.

        Returns
        -------
        actions : numpy.ndarray
            int64 action ids: shape ``()`` for one board, ``(N,)`` for a batch.
        state : None

        Raises
        ------
        ValueError
            If ``observation`` has none of these shapes, or its values are not exponents
            in ``0..17`` / a one-hot encoding.
        """
        boards, single = _boards_of(observation)
        masks = legal_actions_batch(boards)
        actions = self(boards, masks)
        if not deterministic:
            explore = self._rng.random(len(boards)) < self.config.epsilon_end
            random_legal = np.where(masks, self._rng.random(masks.shape), -1.0).argmax(axis=1)
            actions = np.where(explore, random_legal, actions)
        return (actions[0] if single else actions), None


def _boards_of(observation) -> tuple[np.ndarray, bool]:
    """``(N, 4, 4)`` uint8 exponent boards of an observation (see :meth:`Player.predict`), and
    whether it was a single board."""
    obs = np.asarray(observation)
    if obs.ndim in (2, 3) and obs.shape[-2:] == (4, 4):
        single = obs.ndim == 2
        return check_boards(obs[None] if single else obs, "observation", 3), single
    if obs.ndim in (3, 4) and obs.shape[-3:-1] == (4, 4) and 2 <= obs.shape[-1] <= 18:
        single = obs.ndim == 3
        one_hot = obs[None] if single else obs
        if not (np.isin(one_hot, (0, 1)).all() and (one_hot.sum(axis=-1) == 1).all()):
            raise ValueError("observation of shape (..., 4, 4, K) must be one-hot: exactly one 1 per cell, "
                             "the rest 0 (gymnasium-2048's encoding)")
        return one_hot.argmax(axis=-1).astype(np.uint8), single
    raise ValueError(f"observation must be a (4, 4) or (N, 4, 4) exponent board, or a one-hot (4, 4, K) or "
                     f"(N, 4, 4, K) board, got shape {obs.shape}")


def load_player(run: PlayerLike, config: TrainConfig | None = None, seed: int = 0,
                search: int | None = None) -> Player:
    """A trained player in one line: ``load_player("runs/x").act(boards)``.

    Parameters
    ----------
    run : path, RunResult, dict of arrays, DQNAgent or Player
        A run directory (written by a training run or :meth:`RunResult.save`: its
        ``summary.json`` gives the network, ``model.pt`` the weights), a run, bare
        weights (``RunResult.weights``, :meth:`DQNAgent.get_weights`), an agent, or a
        player (returned as is).
    config : TrainConfig, optional
        The network of bare weights (default: the ``mlp`` preset); ignored otherwise.
    seed : int
        Seeds the player's exploration (``predict(..., deterministic=False)``).
    search : int, optional
        Plies of expectimax the player searches (1: greedy; see :class:`Player`). None (the default):
        a player given as ``run`` keeps its own, any other source plays greedily; a player given with
        another ``search`` is remade on the same agent.

    Returns
    -------
    Player

    Raises
    ------
    ValueError
        If ``run`` names no directory or one that holds no run, the weights do not fit
        the network, ``run`` is none of the accepted kinds, or ``search`` is not one the
        network can play (see :func:`check_search`).
    """
    if isinstance(run, Player):
        return run if search is None or search == run.search else Player(run.agent, seed=seed, search=search)
    if isinstance(run, (str, os.PathLike)):
        if not os.path.isdir(run):
            raise ValueError(f"run must be a run directory; no directory {str(run)!r} exists")
        run = RunResult.load(run)
    if isinstance(run, RunResult):
        config, run = run.config, run.weights
    if isinstance(run, dict):
        agent = DQNAgent(config or TrainConfig.preset("mlp"), seed=seed)
        agent.set_weights(run)
        run = agent
    if isinstance(run, DQNAgent):
        return Player(run, seed=seed, search=1 if search is None else search)
    raise ValueError(f"cannot load a player from a {type(run).__name__} (give a run directory, a RunResult, "
                     f"weights or a DQNAgent)")
