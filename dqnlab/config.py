"""Training configuration: one dataclass shared by every scheme, and its presets.

Units used throughout dqnlab:

* **env step** -- one move on one board (a vectorised step of ``n_envs`` boards
  counts ``n_envs`` env steps);
* **update** -- one gradient step on one minibatch;
* **episode** -- one game of 2048, from two tiles to game over or truncation;
* **seconds** -- wall-clock time.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from .options import check_fields, option, when

__all__ = ["TrainConfig", "PRESETS", "family_preset", "NTUPLE_SETS", "resolve_tuples"]

_ENCODINGS = ("onehot", "raw")
_NETWORKS = ("mlp", "cnn", "ntuple")
_OPTIMIZERS = ("adam", "sgd", "tc")
_LOSSES = ("huber", "mse")
_REWARD_TRANSFORMS = ("none", "log")
_DEVICES = ("cpu", "cuda", "auto")


def _parse_tuples(text: str) -> str | tuple[tuple[int, ...], ...]:
    """``ntuples`` from text: a set name, or cell tuples ``0,1,2,3;4,5,6,7``."""
    if "," not in text:
        return text
    return tuple(tuple(int(c) for c in t.split(",")) for t in text.split(";"))


# ----------------------------------------------------------------------------- n-tuple sets
def _lines_and_squares() -> tuple[tuple[int, ...], ...]:
    rows = [tuple(range(4 * r, 4 * r + 4)) for r in range(4)]
    cols = [tuple(range(c, 16, 4)) for c in range(4)]
    squares = [(4 * r + c, 4 * r + c + 1, 4 * r + c + 4, 4 * r + c + 5) for r in range(3) for c in range(3)]
    return tuple(rows + cols + squares)


#: Named tuple sets (cells numbered row by row, 0 top-left .. 15 bottom-right), each
#: tuple applied at the board's 8 symmetric placements:
#:
#: * ``"4x6"``: two 6-cell "L" lines and two 2x3 rectangles (Yeh, Wu et al. 2017;
#:   Jaskowski 2018): 4 x 16^6 weights, 268 MB of float32;
#: * ``"2x4+2x6"``: two straight 4-cell lines and two 2x3 rectangles (Szubert and
#:   Jaskowski 2014): 134 MB;
#: * ``"8x6"``: eight 6-tuples (Matsuzaki 2016, as in Guei, Chen & Wu 2022's strongest
#:   player): 537 MB;
#: * ``"17x4"``: every straight line and every 2x2 square, 17 4-tuples (Szubert and
#:   Jaskowski 2014): 4.5 MB, the size to ship between processes.
NTUPLE_SETS: dict[str, tuple[tuple[int, ...], ...]] = {
    "4x6": ((0, 1, 2, 3, 4, 5), (4, 5, 6, 7, 8, 9), (0, 1, 2, 4, 5, 6), (4, 5, 6, 8, 9, 10)),
    "2x4+2x6": ((0, 1, 2, 3), (4, 5, 6, 7), (0, 1, 2, 4, 5, 6), (4, 5, 6, 8, 9, 10)),
    "8x6": ((0, 1, 2, 4, 5, 6), (4, 5, 6, 7, 8, 9), (0, 1, 2, 3, 4, 5), (2, 3, 4, 5, 6, 9), (0, 1, 2, 5, 9, 10),
            (3, 4, 5, 6, 7, 8), (1, 3, 4, 5, 6, 7), (0, 1, 4, 8, 9, 10)),
    "17x4": _lines_and_squares(),
}

#: Longest n-step return (``TrainConfig.n_step``): a transition's span is stored as uint8.
MAX_N_STEP = 255

#: Largest stage tile (``TrainConfig.stages``; its option's ``high``): a feature reads 4 bits a cell.
MAX_STAGE_TILE = 32768

#: Longest tuple: 16^6 entries, so that an index is exact in float32 (< 2^24).
MAX_TUPLE_LENGTH = 6


def resolve_tuples(tuples: str | tuple[tuple[int, ...], ...]) -> tuple[tuple[int, ...], ...]:
    """A tuple set: a name in :data:`NTUPLE_SETS`, or a tuple of cell tuples, checked.

    Raises
    ------
    ValueError
        For an unknown name, an empty set, a tuple of more than 6 cells, or cells
        outside ``0..15`` or repeated within a tuple.
    """
    if isinstance(tuples, str):
        if tuples not in NTUPLE_SETS:
            raise ValueError(f"ntuples must be one of {sorted(NTUPLE_SETS)} or a tuple of cell tuples, got {tuples!r}")
        return NTUPLE_SETS[tuples]
    def is_cell(c: Any) -> bool:
        return isinstance(c, (int, np.integer)) and not isinstance(c, bool) and 0 <= c < 16

    try:
        out = tuple(tuple(t) for t in tuples)
    except TypeError:
        raise ValueError(f"ntuples must be a set name or a tuple of cell tuples, got {tuples!r}") from None
    ok = out and all(1 <= len(t) <= MAX_TUPLE_LENGTH and all(is_cell(c) for c in t) and len(set(t)) == len(t)
                     for t in out)
    if not ok:
        raise ValueError("ntuples must be a non-empty tuple of tuples of 1..6 distinct integer cells in 0..15, "
                         f"got {tuples!r}")
    return tuple(tuple(int(c) for c in t) for t in out)


@dataclass(frozen=True)
class TrainConfig:
    """Every hyperparameter of a DQN run, with its unit.

    Every scheme takes the same ``TrainConfig``; scheme-specific knobs (worker
    count, sync schedule, ...) are keyword arguments of :func:`dqnlab.train`.
    Build one directly, or from a preset with :meth:`preset`. Each field is declared
    once with :func:`dqnlab.options.option` (its doc, unit and allowed values: see the
    source, :func:`dqnlab.options.specs` or ``python -m dqnlab train --help``, where
    each field is a flag).

    Raises
    ------
    ValueError
        If a field is outside its allowed range; the message names the field.

    Notes
    -----
    The algorithm is DQN (Mnih et al. 2015, *Nature* 518:529) with the Double DQN
    target (van Hasselt et al. 2016, AAAI) when ``double_dqn`` is true.
    """

    # --- budget -----------------------------------------------------------
    total_env_steps: int | None = option(
        200_000, "Budget in env steps, all boards and workers together; None = no step budget.",
        unit="env steps", low=1, flag="env-steps")
    max_seconds: float | None = option(
        None, "Budget in seconds of wall time; None = no time budget. The run ends at the first budget hit.",
        unit="seconds", low=0, low_open=True)
    seed: int = option(0, "Random seed; worker k derives its own streams from (seed, k).", low=0)

    # --- game -------------------------------------------------------------
    n_envs: int = option(16, "Boards each process steps at once (one batched forward pass per step).",
                         unit="boards", low=1, high=65_536)
    max_moves: int | None = option(
        None, "Moves (env steps of one board) after which an episode is truncated; None = never.",
        unit="moves", low=1)
    invalid_move_reward: float = option(
        0.0, "Reward for a move that changes nothing (the seed preset, the original trainer: -25).",
        unit="points")
    mask_illegal: bool = option(
        True, "Act only among moves that change the board (exploration and greedy); False = all four.")

    # --- network ----------------------------------------------------------
    network: str = option("mlp", "Q-function family (see dqnlab.agent.networks).", choices=_NETWORKS,
                          tip="The kind of value function: a neural network (mlp), a convolutional one (cnn) or "
                              "an n-tuple network (lookup tables of board patterns).")
    encoding: str = option("onehot", "mlp input: onehot (16 cells x 18 exponents) or raw (16 tile values).",
                           choices=_ENCODINGS)
    hidden: tuple[int, ...] = option(
        (256, 256), "Units of each hidden ReLU layer (mlp; the dense layers after the convolutions of cnn).",
        unit="units", low=1)
    channels: int = option(64, "cnn: channels of each 1x2 and 2x1 convolution.", low=1)
    ntuples: str | tuple[tuple[int, ...], ...] = option(
        "4x6", "ntuple: the tuple set, a name in dqnlab.config.NTUPLE_SETS (4x6: 268 MB of tables; 8x6: 537 MB; "
        "17x4: 4.5 MB, cheap to ship between processes; 2x4+2x6) or tuples of cells 0-15 (text: 0,1,2,3;4,5,6,7).",
        parse=_parse_tuples, allowed="a set name or a tuple of cell tuples")
    optimizer: str = option(
        "adam", "Optimiser: adam; sgd (plain SGD, for ntuple: its lookup tables get sparse gradients); or tc "
        "(ntuple: temporal coherence learning, Beal & Smith 1999, Jaskowski 2018: SGD with a step size per weight, "
        "lr x |sum of its errors| / sum of their magnitudes).", choices=_OPTIMIZERS)
    lr: float = option(1e-3, "Learning rate of the optimiser (per update; tc: the step of a weight never updated).",
                       low=0, low_open=True)
    tc_start: int = option(
        0, "tc: updates of plain SGD at tc_td_lr before temporal coherence takes over (Guei, Chen & Wu 2022: "
        "optimistic TD, then TC); 0 = TC from the first update.", unit="updates", low=0,
        applies=when("optimizer", "tc"))
    tc_td_lr: float = option(0.2, "tc: the learning rate of plain SGD before tc_start.", low=0, low_open=True,
                             applies=when("optimizer", "tc"))
    initial_value: float = option(
        0.0, "ntuple: the value every board has before training, spread evenly over the entries it reads "
        "(optimistic initialisation, Guei, Chen & Wu 2022: unseen boards look good, so the player tries them).",
        unit="points", applies=when("network", "ntuple"))
    stages: tuple[int, ...] = option(
        (), "ntuple: tiles at which another set of tables takes over, increasing (multi-stage TD, Wu, Yeh et al. "
        "2014): a board whose largest tile reaches stages[k] reads set k + 1; () = one set. Each set costs "
        "the tables' memory again.", unit="tile", low=4, high=MAX_STAGE_TILE, applies=when("network", "ntuple"))

    # --- afterstates and symmetry -----------------------------------------
    afterstate: bool = option(
        False, "Learn V over afterstates (the board after the slide, before the spawn): "
        "Q(s, a) = r + V(afterstate(s, a)).",
        tip="Value the board after each move's slide, before the new tile appears, and pick the move whose reward "
            "plus that value is highest.")
    augment_symmetry: bool = option(
        False, "mlp, cnn: train each minibatch transition under a random one of the board's 8 symmetries.",
        tip="Neural networks: learn each move under a random one of the board's 8 rotations and reflections.")

    # --- DQN --------------------------------------------------------------
    gamma: float = option(0.99, "Discount per env step.", low=0, high=1)
    buffer_size: int = option(100_000, "Replay buffer capacity, per learner.", unit="transitions", low=1)
    batch_size: int = option(128, "Transitions in one minibatch (one update), at most buffer_size.",
                             unit="transitions", low=1,
                             tip="Moves learned from in one update (at most the replay memory's size).")
    learning_starts: int = option(5_000, "Env steps (per learner) collected before the first update.",
                                  unit="env steps", low=0)
    replay_ratio: float = option(
        8.0, "Minibatch samples trained on per env step (updates per env step x batch_size).",
        unit="samples per env step", low=0)
    target_update: int = option(
        1_000, "Updates between target-network syncs; 0 = sync at the end of every episode (as the "
        "seed preset, the original trainer).",
        unit="updates", low=0)
    double_dqn: bool = option(True, "Use the Double DQN target (online net picks, target net evaluates).")
    loss: str = option("huber", "TD loss: huber (smooth L1, delta 1) or mse.", choices=_LOSSES)
    max_grad_norm: float | None = option(
        10.0, "Clip the gradient's global L2 norm to this per update; None = no clipping.", low=0, low_open=True)
    reward_transform: str = option(
        "none", "Reward fed to the learner: none (merge points) or log (sign(r) log2(1 + |r|)).",
        choices=_REWARD_TRANSFORMS)

    # --- replay: prioritized, n-step -----------------------------------------
    prioritized: bool = option(
        False, "Prioritized replay (Schaul et al. 2016, proportional): sample transitions in proportion to "
        "(|TD error| + priority_eps) ** priority_alpha, weight their loss by importance sampling. Needs "
        "buffer_size > batch_size.")
    priority_alpha: float = option(0.6, "Prioritized replay: priority exponent (0 = uniform).", low=0, high=1,
                                   applies=when("prioritized", True))
    priority_beta: float = option(
        0.4, "Prioritized replay: importance-sampling exponent at the start, annealed linearly to 1 over the "
        "budget (env steps, or seconds without a step budget).", low=0, high=1, applies=when("prioritized", True))
    priority_eps: float = option(1e-6, "Prioritized replay: added to |TD error| so that no priority is 0.",
                                 low=0, low_open=True, applies=when("prioritized", True))
    n_step: int = option(
        1, "Env steps of each return: the target is r_t + ... + gamma^(n-1) r_(t+n-1) + gamma^n max Q(s_(t+n)) "
        "(no bootstrap past a game over; a truncated game bootstraps from its last board).",
        unit="env steps", low=1, high=MAX_N_STEP)

    # --- device -------------------------------------------------------------
    device: str = option(
        "cpu", "Where the learner's networks and updates run: cpu, cuda, or auto (cuda when available). "
        "Acting stays on the CPU, with a copy of the weights refreshed on the scheme's schedule.",
        choices=_DEVICES)

    # --- exploration ------------------------------------------------------
    epsilon_start: float = option(1.0, "Epsilon of epsilon-greedy acting at the start.", low=0, high=1)
    epsilon_end: float = option(0.01, "Final epsilon.", low=0, high=1)
    epsilon_decay_steps: int = option(
        100_000, "Env steps (per learner) of linear decay from start to end; used when epsilon_decay_rate is None.",
        unit="env steps", low=1)
    epsilon_decay_rate: float | None = option(
        None, "If set, epsilon is multiplied by this after every update instead (the seed preset, the "
        "original trainer: 0.995).",
        low=0, high=1, low_open=True)

    extra: dict[str, Any] = option(doc="Free-form notes kept with the run (not used by training; text: JSON).",
                                   default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        check_fields(self, "TrainConfig.")

        def need(ok: bool, name: str, allowed: str) -> None:
            if not ok:
                raise ValueError(
                    f"TrainConfig.{name} must be {allowed}, got {getattr(self, name)!r}"
                )

        if self.total_env_steps is None and self.max_seconds is None:
            raise ValueError("TrainConfig needs a budget: set total_env_steps and/or max_seconds")
        try:
            tuples = resolve_tuples(self.ntuples)
        except ValueError as e:
            raise ValueError(f"TrainConfig.{e}") from None
        if not isinstance(self.ntuples, str):  # lists (from JSON) become tuples, so configs compare and hash
            object.__setattr__(self, "ntuples", tuples)
        need(self.optimizer != "tc" or self.network == "ntuple", "optimizer",
             "'adam' or 'sgd' unless network='ntuple' (tc learns lookup tables)")
        need(self.initial_value == 0 or self.network == "ntuple", "initial_value", "0 unless network='ntuple'")
        need(not self.stages or self.network == "ntuple", "stages", "() unless network='ntuple'")
        need(all(t & (t - 1) == 0 for t in self.stages) and list(self.stages) == sorted(set(self.stages)), "stages",
             f"increasing tiles, each a power of two in 4..{MAX_STAGE_TILE}")
        if self.network == "ntuple":
            need(self.optimizer in ("sgd", "tc"), "optimizer",
                 "'sgd' or 'tc' with network='ntuple' (its tables get sparse gradients)")
            need(self.max_grad_norm is None, "max_grad_norm", "None with network='ntuple' (sparse gradients)")
            need(not self.augment_symmetry, "augment_symmetry",
                 "False with network='ntuple' (the network is symmetric by construction)")
        if self.afterstate:
            need(self.mask_illegal, "mask_illegal", "True with afterstate=True (a move that changes nothing "
                 "has no afterstate of its own)")
        need(self.batch_size <= self.buffer_size, "batch_size", f"an integer in 1..buffer_size ({self.buffer_size})")
        # With the whole buffer in every minibatch, priorities choose nothing: they only replay the transitions
        # of largest TD error several times in one update, each copy a full step.
        need(not self.prioritized or self.batch_size < self.buffer_size, "buffer_size",
             f"larger than batch_size ({self.batch_size}) with prioritized=True (prioritized replay chooses a "
             "minibatch among more transitions than it holds)")

    # ------------------------------------------------------------------
    @classmethod
    def preset(cls, name: str, **overrides: Any) -> TrainConfig:
        """Return the named preset (see :data:`PRESETS`), with ``overrides`` applied.

        Raises
        ------
        ValueError
            If ``name`` is not a preset, or an override is not a field or is out of range.
        """
        if name not in PRESETS:
            raise ValueError(f"preset must be one of {sorted(PRESETS)}, got {name!r}")
        return cls.from_dict({**PRESETS[name], **overrides})

    def replace(self, **changes: Any) -> TrainConfig:
        """Return a copy with ``changes`` applied (validated like the constructor)."""
        return self.from_dict({**self.to_dict(), **changes})

    def to_dict(self) -> dict[str, Any]:
        """The fields as a JSON-serialisable dict (tuples become lists)."""
        d = dataclasses.asdict(self)
        d["hidden"] = list(self.hidden)
        if not isinstance(self.ntuples, str):
            d["ntuples"] = [list(t) for t in self.ntuples]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TrainConfig:
        """Build a config from :meth:`to_dict` output or keyword overrides.

        Raises
        ------
        ValueError
            If a key is not a field of TrainConfig, or a value is out of range.
        """
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise ValueError(f"unknown TrainConfig field(s) {unknown}; allowed: {sorted(names)}")
        d = dict(d)
        if "hidden" in d and isinstance(d["hidden"], list):
            d["hidden"] = tuple(d["hidden"])
        if "ntuples" in d and isinstance(d["ntuples"], list):
            d["ntuples"] = tuple(tuple(t) for t in d["ntuples"])
        return cls(**d)

    @property
    def updates_per_env_step(self) -> float:
        """Updates owed per env step: ``replay_ratio / batch_size``."""
        return self.replay_ratio / self.batch_size


#: The presets:
#:
#: * ``seed``: the user's original trainer: a dense 16-256-256-4 network on the raw tile values, Adam 1e-3,
#:   MSE, gamma 0.99, plain DQN targets, one board, epsilon 0.9 -> 0.01 (x0.995 per update), buffer 2,000,
#:   minibatch 64, one update per move, the target copied at the end of each episode, a 1,000-move cap,
#:   -25 for a move that changes nothing (not masked).
#: * ``mlp``: Double DQN with an MLP (256-256) over one-hot cells: Adam 5e-4, Huber loss, gradients
#:   clipped at norm 10, log rewards, gamma 0.99, 32 boards, buffer 200,000, minibatch 256, replay ratio 8,
#:   the target synced every 2,000 updates, epsilon 1 -> 0.01 over 200,000 env steps.
#: * ``mlp-afterstate``: the same MLP learning afterstate values, with symmetry augmentation and
#:   little exploration (epsilon 0.1 -> 0 over 100,000 env steps).
#: * ``cnn``: the convolutional network (32 channels, a 128-unit dense layer) learning afterstate values,
#:   with symmetry augmentation: Double DQN, Adam 5e-4, Huber loss, log rewards, buffer 100,000,
#:   minibatch 128, replay ratio 2; small, since an update evaluates 5 boards per transition.
#: * ``ntuple``: the 4x6-tuple network learning afterstate values by TD(0) (Szubert and Jaskowski 2014's
#:   algorithm in DQN's machinery): plain SGD, MSE, gamma 1, no exploration, the target synced every update.
#:   The replay holds the last step of the 64 boards and a minibatch is those 64 (TD(0) online, batched),
#:   so an update reads the weight rows its step's act just read. The step on V per sample,
#:   ``lr * 2 * 32 / batch_size``, is 0.2. Learning starts after 50,000 env steps, once the games started
#:   together have drifted apart: a minibatch of near-identical boards would take one summed step per
#:   sample on their shared rows.
#: * ``ntuple-small``: the same learner with the 17 4-tuples (4.5 MB instead of 268 MB), for schemes that
#:   ship weights between processes (``independent``, ``actors``, ``sharded``, ``averaged``): 256 boards,
#:   buffer 20,000, minibatches of 256 (fewer updates to communicate), learning rate 0.05 for its 136
#:   placements.
#: * ``default``: ``ntuple`` with temporal coherence (``optimizer="tc"``, Jaskowski 2018; ``lr=1.0``, a
#:   step of 1 on V per sample with 32 placements and minibatches of 64) and two-step returns
#:   (``n_step=2``: n-step TD, Sutton and Barto 2018, chapter 7).
PRESETS: dict[str, dict[str, Any]] = {
    "seed": dict(
        n_envs=1, max_moves=1_000, invalid_move_reward=-25.0, mask_illegal=False,
        encoding="raw", hidden=(256, 256), lr=1e-3, gamma=0.99, buffer_size=2_000,
        batch_size=64, learning_starts=64, replay_ratio=64.0, target_update=0,
        double_dqn=False, loss="mse", max_grad_norm=None, reward_transform="none",
        epsilon_start=0.9, epsilon_end=0.01, epsilon_decay_rate=0.995,
    ),
    "mlp": dict(
        n_envs=32, max_moves=None, invalid_move_reward=0.0, mask_illegal=True,
        encoding="onehot", hidden=(256, 256), lr=5e-4, gamma=0.99, buffer_size=200_000,
        batch_size=256, learning_starts=10_000, replay_ratio=8.0, target_update=2_000,
        double_dqn=True, loss="huber", max_grad_norm=10.0, reward_transform="log",
        epsilon_start=1.0, epsilon_end=0.01, epsilon_decay_steps=200_000, epsilon_decay_rate=None,
    ),
    "cnn": dict(
        network="cnn", channels=32, hidden=(128,), afterstate=True, augment_symmetry=True,
        n_envs=32, lr=5e-4, gamma=0.99, buffer_size=100_000, batch_size=128, learning_starts=5_000,
        replay_ratio=2.0, target_update=1_000, double_dqn=True, loss="huber", max_grad_norm=10.0,
        reward_transform="log", epsilon_start=0.1, epsilon_end=0.0, epsilon_decay_steps=100_000,
    ),
    "ntuple": dict(
        network="ntuple", ntuples="4x6", afterstate=True, optimizer="sgd", lr=0.2, loss="mse",
        max_grad_norm=None, gamma=1.0, reward_transform="none", target_update=1, double_dqn=False,
        n_envs=64, buffer_size=64, batch_size=64, learning_starts=50_000, replay_ratio=1.0,
        epsilon_start=0.0, epsilon_end=0.0,
    ),
}
PRESETS["mlp-afterstate"] = {**PRESETS["mlp"], "afterstate": True, "augment_symmetry": True, "epsilon_start": 0.1,
                             "epsilon_end": 0.0, "epsilon_decay_steps": 100_000, "learning_starts": 5_000}
PRESETS["ntuple-small"] = {**PRESETS["ntuple"], "ntuples": "17x4", "lr": 0.05, "n_envs": 256, "buffer_size": 20_000,
                           "batch_size": 256, "learning_starts": 20_000}
PRESETS["default"] = {**PRESETS["ntuple"], "optimizer": "tc", "lr": 1.0, "n_step": 2}


def family_preset(network: str, afterstate: bool | None = None) -> str:
    """The preset of a network family: ``ntuple``, ``cnn``, and for ``mlp`` the preset ``mlp``
    or, with ``afterstate`` true, ``mlp-afterstate``.

    Raises
    ------
    ValueError
        For an unknown network.
    """
    if network not in _NETWORKS:
        raise ValueError(f"network must be one of {_NETWORKS}, got {network!r}")
    return "mlp-afterstate" if network == "mlp" and afterstate else network
