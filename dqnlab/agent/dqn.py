"""The DQN agent: a Q-function over 2048 boards, epsilon-greedy acting, batched updates.

This module is the DQN maths: acting, the TD target (:meth:`DQNAgent.td_targets`) and the
update's order (:meth:`DQNAgent.gradient_step`). The TD loss and its gradient, by autograd or by the
networks' written-out backprop, are in :mod:`dqnlab.agent.gradients`; the optimiser's step,
gradient clipping and denormal flushing in :mod:`dqnlab.agent.optim`.

References
----------
* DQN: Mnih et al., "Human-level control through deep reinforcement learning",
  *Nature* 518 (2015) 529-533.
* Double DQN: van Hasselt, Guez and Silver, "Deep Reinforcement Learning with Double
  Q-learning", AAAI 2016.
* Afterstates: Sutton and Barto, *Reinforcement Learning: An Introduction* (2nd ed.
  2018), section 6.8; for 2048, Szubert and Jaskowski, "Temporal difference learning
  of N-tuple networks for the game 2048", IEEE CIG 2014 (TD(0) on afterstates, gamma 1).
* Layout after CleanRL's ``dqn.py`` (the update reads top to bottom).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from ..config import TrainConfig
from ..game.rules import move_batch_unchecked
from ..game.symmetry import ACTION_PERMUTATIONS, transform_actions, transform_boards
from ..replay import Minibatch
from . import optim
from .gradients import autograd_td_loss, backprop_td_loss
from .networks import EMBEDDING_MIN_BATCH, N_EXPONENTS, MLPNetwork, make_network

__all__ = ["MLPNetwork", "DQNAgent", "epsilon_at", "priority_beta_at", "resolve_device", "transform_rewards",
           "afterstates", "N_EXPONENTS", "EMBEDDING_MIN_BATCH", "UPDATE_DIAGNOSTICS"]

#: What :meth:`DQNAgent.diagnostics` reports about the last update.
UPDATE_DIAGNOSTICS = ("loss", "q_max_mean", "grad_norm")

_ALL_ACTIONS = np.arange(4)


def resolve_device(name: str) -> torch.device:
    """The torch device of a ``TrainConfig.device`` value: ``"cpu"``; ``"cuda"`` (the current GPU);
    ``"auto"``: ``"cuda"`` when PyTorch sees a GPU, else ``"cpu"``.

    Raises
    ------
    ValueError
        For ``"cuda"`` on a machine where ``torch.cuda.is_available()`` is False, or another name.
    """
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("device 'cuda' was asked for, but PyTorch sees no CUDA GPU here (torch.cuda.is_available() "
                         f"is False; this PyTorch {torch.__version__} was built "
                         f"{'with CUDA ' + torch.version.cuda if torch.version.cuda else 'for the CPU only'}): "
                         "use device='cpu', or 'auto' to take a GPU when there is one")
    if name not in ("cpu", "cuda"):
        raise ValueError(f"device must be one of ['cpu', 'cuda', 'auto'], got {name!r}")
    return torch.device(name)


def epsilon_at(config: TrainConfig, env_steps: int, updates: int) -> float:
    """Exploration rate after ``env_steps`` env steps and ``updates`` updates.

    Linear from ``epsilon_start`` to ``epsilon_end`` over ``epsilon_decay_steps`` env
    steps, or, when ``epsilon_decay_rate`` is set, ``epsilon_start * rate**updates``
    floored at ``epsilon_end`` (the original trainer's schedule: the ``seed`` preset).
    """
    c = config
    if c.epsilon_decay_rate is not None:
        return max(c.epsilon_end, c.epsilon_start * c.epsilon_decay_rate ** updates)
    frac = min(1.0, env_steps / c.epsilon_decay_steps)
    return c.epsilon_start + frac * (c.epsilon_end - c.epsilon_start)


def priority_beta_at(config: TrainConfig, env_steps: int, seconds: float) -> float:
    """Importance-sampling exponent of prioritized replay after ``env_steps`` env steps and
    ``seconds`` of wall time: linear from ``priority_beta`` to 1 over the budget (Schaul et al.
    2016, section 3.4), the budget's fraction spent being the larger of ``env_steps /
    total_env_steps`` and ``seconds / max_seconds`` (whichever budgets are set: the run ends at
    the first one hit)."""
    c = config
    spent = max(env_steps / c.total_env_steps if c.total_env_steps else 0.0,
                seconds / c.max_seconds if c.max_seconds else 0.0)
    return c.priority_beta + min(1.0, spent) * (1.0 - c.priority_beta)


def transform_rewards(config: TrainConfig, rewards: np.ndarray) -> np.ndarray:
    """Rewards as the learner sees them: ``(N,)`` float32 points -> ``(N,)`` float32.

    ``"none"`` keeps merge points; ``"log"`` maps r to sign(r) log2(1 + |r|), so a
    2048 merge is worth 11 and a -25 penalty about -4.7.
    """
    r = np.asarray(rewards, dtype=np.float32)
    if config.reward_transform == "log":
        return np.sign(r) * np.log2(1.0 + np.abs(r))
    return r


def afterstates(config: TrainConfig, boards: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every move's afterstate and reward for a batch of boards.

    Parameters
    ----------
    config : TrainConfig
        ``reward_transform`` is applied to the points.
    boards : (N, 4, 4) uint8

    Returns
    -------
    after : (N, 4, 4, 4) uint8
        ``after[i, a]``: board ``i`` after move ``a``, before the spawn (the board
        itself where the move changes nothing).
    rewards : (N, 4) float32
        Points of each move, transformed as the learner sees them.
    legal : (N, 4) bool
        Whether each move changes the board.
    """
    n = len(boards)
    after, points, legal = move_batch_unchecked(np.repeat(boards, 4, axis=0), np.tile(_ALL_ACTIONS, n))
    return after.reshape(n, 4, 4, 4), transform_rewards(config, points).reshape(n, 4), legal.reshape(n, 4)


class DQNAgent:
    """Online and target networks, an optimiser, and the DQN update.

    Parameters
    ----------
    config : TrainConfig
        Network, optimiser, loss, discount, afterstate and target-sync settings are read from it.
    seed : int
        Seeds the network initialisation and the exploration randomness.
    device : str or torch.device
        Where the online and target networks, the optimiser and the update run (``"cpu"``,
        ``"cuda"``, ``"auto"``: see :func:`resolve_device`); the networks are initialised on
        the CPU, so a seed gives the same weights on every device. The schemes pass
        ``config.device`` to their learner's agent; actors and acting copies stay on the CPU.

    Raises
    ------
    ValueError
        For ``device="cuda"`` on a machine without a CUDA GPU.

    Attributes
    ----------
    updates : int
        Updates done so far.
    acting : torch.nn.Module
        The network :meth:`act` and :meth:`q_values` use: the online network itself on the
        CPU; on another device, a CPU copy refreshed by :meth:`refresh_acting` (acting is a
        small batch per step, cheaper on the CPU than a round trip to a GPU).
    device : torch.device
        The learner's.
    online, target : torch.nn.Module
        Networks from :func:`dqnlab.agent.networks.make_network`: 4 outputs (Q-values), or 1
        (an afterstate value) with ``config.afterstate``. With ``target_update == 1`` the
        target is synced after every update, which is the online network itself, so
        ``target is online`` (no copy: an n-tuple table is hundreds of MB).
    optimizer : torch.optim.Optimizer
        Adam (fused), plain SGD or temporal coherence (:class:`~dqnlab.agent.optim.TemporalCoherence`),
        per ``config.optimizer``.

    Notes
    -----
    With ``config.afterstate`` the network learns the value V of afterstates and
    ``Q(s, a) = r(s, a) + V(afterstate(s, a))``: the game's move is deterministic and
    only the spawn is random, so the move's points need not be learned (Sutton and Barto
    2018, section 6.8; Szubert and Jaskowski 2014). See :meth:`td_targets`.
    """

    def __init__(self, config: TrainConfig, seed: int = 0, device: str | torch.device = "cpu"):
        self.config = config
        self.device = resolve_device(device) if isinstance(device, str) else torch.device(device)
        self.rng = np.random.default_rng(seed)
        outputs = 1 if config.afterstate else 4
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            self.online = make_network(config, outputs)  # initialised on the CPU: the same weights on any device
        self.acting = self.online
        if self.device.type != "cpu":
            self.acting = make_network(config, outputs).requires_grad_(False)
            self.acting.load_state_dict(self.online.state_dict())
            self.online.to(self.device)
        if config.target_update == 1:
            self.target = self.online
        else:
            self.target = make_network(config, outputs).to(self.device)
            self.target.load_state_dict(self.online.state_dict())
            self.target.requires_grad_(False)
        with optim.compiler_left_unloaded():
            if config.optimizer == "sgd":
                self.optimizer: torch.optim.Optimizer = torch.optim.SGD(self.online.parameters(), lr=config.lr)
            elif config.optimizer == "tc":  # (raises for a learner on a GPU: TC is the compiled core's)
                self.optimizer = optim.TemporalCoherence(self.online.parameters(), config.lr, config.tc_start,
                                                         config.tc_td_lr)
            else:
                self.optimizer = optim.adam(self.online.parameters(), config.lr)
        self.updates = 0
        # What the last update left for diagnostics(): its loss, the (B, outputs) online values of its
        # minibatch and its gradient norm before clipping (None: not clipped, read from the gradients);
        # or, for an update computed elsewhere, the numbers record_diagnostics() was given.
        self._last_loss = math.nan
        self._last_values: torch.Tensor | None = None
        self._last_norm: torch.Tensor | None = None
        self._recorded = dict.fromkeys(UPDATE_DIAGNOSTICS, math.nan)
        self._last_error: torch.Tensor | None = None  # (B,) Q(s, a) - y of the last gradient computed

    # ------------------------------------------------------------------ acting
    def q_values(self, boards: np.ndarray) -> np.ndarray:
        """Q-values of the online network: ``(N, 4, 4)`` uint8 -> ``(N, 4)`` float32.

        With ``config.afterstate``: ``r(s, a) + V(afterstate(s, a))`` for each legal move
        and ``-inf`` for a move that changes nothing (it has no afterstate of its own).
        """
        with torch.no_grad():
            if not self.config.afterstate:
                return self.acting(torch.from_numpy(np.ascontiguousarray(boards))).numpy()
            return self._afterstate_q(boards, self.acting)[0].numpy()

    def refresh_acting(self) -> None:
        """Copy the online weights into the CPU network that acts (:attr:`acting`), when the learner
        is on another device; the schemes call it on their schedule (``serial``: after each act
        step's updates). Nothing to do on the CPU, where the online network acts itself."""
        if self.acting is not self.online:
            self.acting.load_state_dict(self.online.state_dict())

    def _tensor(self, x: np.ndarray) -> torch.Tensor:
        """``x`` as a tensor on the learner's device (the same memory on the CPU)."""
        t = torch.from_numpy(np.ascontiguousarray(x))
        return t if self.device.type == "cpu" else t.to(self.device, non_blocking=True)

    def _afterstate_q(self, boards: np.ndarray, *nets: torch.nn.Module) -> list[torch.Tensor]:
        """For each of ``nets``: ``(N, 4)`` float32 ``r + V_net(afterstate)`` over the legal
        moves of ``boards``, ``-inf`` elsewhere; only legal afterstates are evaluated. The
        last item is the ``(N, 4)`` bool legal moves."""
        after, rewards, legal_np = afterstates(self.config, boards)
        device = next(nets[0].parameters()).device  # (the CPU's acting network, or the learner's device)
        legal = torch.from_numpy(legal_np).to(device)
        after_t = torch.from_numpy(after.reshape(-1, 4, 4)[legal_np.reshape(-1)]).to(device)
        r = torch.from_numpy(rewards).to(device)[legal]
        out = []
        for net in nets:
            q = torch.full(legal.shape, -torch.inf, device=device)
            if len(after_t):
                q[legal] = net(after_t)[:, 0] + r
            out.append(q)
        return out + [legal]

    def act(self, boards: np.ndarray, masks: np.ndarray, epsilon: float,
            values: np.ndarray | None = None) -> np.ndarray:
        """Epsilon-greedy actions for a batch of boards.

        Parameters
        ----------
        boards : (N, 4, 4) uint8
        masks : (N, 4) bool
            Legal actions. Used only if ``config.mask_illegal``; a board with no
            legal action (game over) gets action 0.
        epsilon : float
            Probability of a uniformly random (legal) action, per board.
        values : (N, 4) float32, optional
            The boards' :meth:`q_values` as evaluated earlier (a learner evaluates each board once, as it
            becomes current: :meth:`dqnlab.runtime.learner.Learner.act_step`); default: evaluated now, for
            the greedy boards alone. The random draws are the same either way.

        Returns
        -------
        (N,) int64 action ids.
        """
        n = len(boards)
        if not self.config.mask_illegal:
            masks = np.ones((n, 4), dtype=bool)
        explore = self.rng.random(n) < epsilon
        scores = self.rng.random((n, 4))  # random legal choice for exploring boards
        if not explore.all():
            greedy = ~explore
            scores[greedy] = self.q_values(boards[greedy]) if values is None else values[greedy]
        return np.where(masks, scores, -np.inf).argmax(axis=1)

    # ---------------------------------------------------------------- learning
    def augment(self, batch: Minibatch) -> Minibatch:
        """The minibatch with each transition under a random one of the 8 board symmetries
        (``config.augment_symmetry``; else the batch itself).

        Boards and next boards are transformed alike, the action and the legal-move
        mask of the next board are permuted to match (:mod:`dqnlab.game.symmetry`), rewards
        and game-over flags are unchanged: the transformed transition is one the game
        could have produced, with the same probability.
        """
        if not self.config.augment_symmetry:
            return batch
        g = self.rng.integers(0, 8, size=len(batch.actions))
        masks = np.empty_like(batch.next_masks)
        np.put_along_axis(masks, ACTION_PERMUTATIONS[g], batch.next_masks, axis=1)
        return batch._replace(boards=transform_boards(batch.boards, g), actions=transform_actions(batch.actions, g),
                              next_boards=transform_boards(batch.next_boards, g), next_masks=masks)

    def td_targets(self, batch: Minibatch, online_next: torch.Tensor | None = None) -> torch.Tensor:
        """``(B,)`` float32 bootstrapped targets ``y = r + gamma^k (1 - done) max_a' Q(s', a')``.

        The DQN target (Mnih et al. 2015): ``r`` is the transition's reward and ``max_a' Q(s',
        a')`` the target network's value of its next board ``s'`` (:meth:`_next_values`: over the
        legal moves of ``s'`` when ``config.mask_illegal``; the move chosen by the online network
        with Double DQN, van Hasselt et al. 2016; 0 once the game ended, ``done`` or no legal move,
        while a game truncated by ``max_moves`` has not ended and bootstraps). ``k`` is 1, or for an
        n-step transition (``config.n_step > 1``, :class:`~dqnlab.replay.NStepReturns`) the
        ``steps`` it spans, with ``r`` the discounted sum of their rewards and ``s'`` the board
        ``steps`` moves later.

        Afterstates (``config.afterstate``): the network is V and ``Q(s, a) = r(s, a) +
        V(afterstate(s, a))`` (the move is deterministic, only the spawn is random), so the target
        of ``V(afterstate(s, a))`` is ``y`` less the move's own reward ``r(s, a)``; for one step,
        ``gamma (1 - done) max_a' [r(s', a') + V_target(afterstate(s', a'))]``, and with ``gamma = 1``
        the TD(0) afterstate update of Szubert and Jaskowski (2014).

        ``online_next``: ``(B, 4)`` online Q-values of ``s'`` if already computed (Double DQN).
        """
        c = self.config
        n_step = c.n_step > 1 and batch.steps is not None
        next_value = self._next_values(batch, online_next)  # max_a' Q(s', a'), 0 once the game ended
        if not c.afterstate:
            r = self._tensor(batch.rewards)
        elif n_step:  # the n-step return R less the move's own reward r(s, a), which is in Q(s, a) already
            _, points, _ = move_batch_unchecked(np.ascontiguousarray(batch.boards), np.asarray(batch.actions))
            r = self._tensor(batch.rewards - transform_rewards(c, points))
        else:  # the one-step reward is the move's own, in Q(s, a) already
            r = torch.zeros_like(next_value)
        discount = self._tensor(np.power(c.gamma, batch.steps, dtype=np.float32)) if n_step else c.gamma
        return r + discount * next_value

    def _next_values(self, batch: Minibatch, online_next: torch.Tensor | None = None) -> torch.Tensor:
        """``(B,)`` float32 ``Q_target(s', a*)`` of each next board ``s'``, 0 where the game ended.

        ``a*`` is the argmax of the target network's values, or with Double DQN of the online
        network's (``online_next`` if given; the target's own when the target is the online
        network); over the legal moves of ``s'`` when ``config.mask_illegal``, an ``s'`` without
        one having ended. With afterstates ``Q(s', a) = r(s', a) + V(afterstate(s', a))`` over the
        legal moves of ``s'`` itself, -inf for the others (not the stored masks: a shared replay
        read during a write, scheme ``shared``, may pair a board with another's mask); a NaN value
        of a legal move stays in the value, so that the loss reports it.
        """
        c = self.config
        separate = self.target is not self.online
        with torch.no_grad():
            if c.afterstate:
                nets = (self.target, self.online) if c.double_dqn and separate else (self.target,)
                q_next, *online, legal = self._afterstate_q(batch.next_boards, *nets)
                chooser = online[0] if online else q_next
            else:
                next_boards = self._tensor(batch.next_boards)
                q_next, legal = self.target(next_boards), self._tensor(batch.next_masks)
                if c.double_dqn and online_next is None:
                    online_next = self.online(next_boards) if separate else q_next
                chooser = online_next if c.double_dqn else q_next
            ended = self._tensor(batch.dones)
            if c.mask_illegal:
                chooser = chooser.masked_fill(~legal, -torch.inf)
                ended = ended | ~legal.any(dim=1)
            if c.double_dqn or c.mask_illegal:
                value = q_next.gather(1, chooser.argmax(dim=1, keepdim=True)).squeeze(1)
            else:
                value = q_next.amax(dim=1)  # the target net's value at its own argmax
            return torch.where(ended, 0.0, value)

    def _trained(self, batch: Minibatch) -> tuple[torch.Tensor, torch.Tensor]:
        """What the update trains: ``(B, 4, 4)`` uint8 boards and ``(B, 1)`` int64 output
        columns -- ``s`` and ``a`` for Q-values, ``afterstate(s, a)`` and column 0 for V."""
        if self.config.afterstate:
            after, _, _ = move_batch_unchecked(np.ascontiguousarray(batch.boards), np.asarray(batch.actions))
            return self._tensor(after), torch.zeros((len(after), 1), dtype=torch.int64, device=self.device)
        boards, actions = (self._tensor(x) for x in batch[:2])
        return boards, actions.long()[:, None]

    def _weights(self, batch: Minibatch) -> torch.Tensor | None:
        """``(B,)`` float32 importance-sampling weights of a prioritized sample on the learner's device, or None."""
        return None if batch.weights is None else self._tensor(batch.weights)

    def loss(self, batch: Minibatch, targets: torch.Tensor | None = None) -> torch.Tensor:
        """The TD loss of the online network on ``batch`` (scalar tensor with grad): the mean over
        its transitions, each weighted by ``batch.weights`` when given (prioritized replay);
        :func:`~dqnlab.agent.gradients.td_loss`.

        ``targets``: ``(B,)`` float32 precomputed :meth:`td_targets` (e.g. by another
        process holding the same weights); computed here when None. Only ``boards``
        and ``actions`` of ``batch`` are read when they are given.
        """
        boards, columns = self._trained(batch)
        y = self.td_targets(batch) if targets is None else targets
        return autograd_td_loss(self.online, boards, columns, y, self.config.loss, self._weights(batch))[0]

    def compute_gradients(self, batch: Minibatch, targets: torch.Tensor | None = None) -> float:
        """Set the online net's gradients to those of the TD loss on ``batch``; return the loss.

        The loss is :meth:`loss` (Huber or MSE between the trained output and
        :meth:`td_targets`). For :class:`~dqnlab.agent.networks.MLPNetwork` and
        :class:`~dqnlab.agent.networks.NTupleNetwork` the gradients are computed by their
        written-out ``backprop`` instead of autograd (:mod:`dqnlab.agent.gradients`), which is
        faster at these sizes (``python -m dqnlab bench learner``) and equal to ``loss.backward()``
        up to float32 rounding (an n-tuple network's gradient is sparse); the CNN uses autograd.
        Each ``.grad`` is replaced, not accumulated.
        With ``config.augment_symmetry`` and no ``targets``, the batch is first
        :meth:`augment`-ed (a caller that passes ``targets`` augments before computing them).

        Parameters
        ----------
        batch : Minibatch
            ``B`` transitions; only ``boards`` and ``actions`` are read when ``targets`` is given.
        targets : torch.Tensor, optional
            ``(B,)`` float32 :meth:`td_targets`; computed here when None.

        Returns
        -------
        float
            The TD loss (mean over ``B``). It may be NaN or infinite; the caller decides
            (nothing has been stepped yet).
        """
        c = self.config
        if targets is None:
            batch = self.augment(batch)
        self._last_norm = None
        boards, columns = self._trained(batch)
        kind, weights = c.loss, self._weights(batch)
        if not hasattr(self.online, "backprop"):  # CNNetwork: autograd
            optim.clear_grads(self.online.parameters())
            y = self.td_targets(batch) if targets is None else targets
            loss, values, error = autograd_td_loss(self.online, boards, columns, y, kind, weights)
            loss.backward()
        elif targets is None and c.double_dqn and not c.afterstate and self.target is not self.online:
            # Double DQN: one online pass over [s; s'], Q(s) to train and Q(s') to choose a* at s'
            loss, values, error = backprop_td_loss(
                self.online, boards, columns, lambda online_next: self.td_targets(batch, online_next), kind,
                weights, next_boards=self._tensor(batch.next_boards))
        else:
            y = self.td_targets(batch) if targets is None else targets
            loss, values, error = backprop_td_loss(self.online, boards, columns, y, kind, weights)
        self._last_loss, self._last_values, self._last_error = loss.item(), values.detach(), error
        return self._last_loss

    def step_optimizer(self) -> None:
        """Clip the online net's gradients (if configured) and take one optimiser step (Adam,
        or plain SGD with the sparse fast path of n-tuple tables: :mod:`dqnlab.agent.optim`); counts nothing."""
        if self.config.max_grad_norm is not None:
            self._last_norm = optim.clip_grad_norm(self._trained_parameters(), self.config.max_grad_norm)
        optim.optimizer_step(self.optimizer)

    def diagnostics(self, grad_norm: bool = True) -> dict[str, float]:
        """What the last gradient computed by :meth:`compute_gradients` says about learning.

        Parameters
        ----------
        grad_norm : bool
            Include ``grad_norm`` (default). Without clipping it is computed here, which for
            an n-tuple table's sparse gradient means merging its repeated rows (a sort: about
            as long as the update itself for ``ntuple-small``); False leaves it out.

        Returns
        -------
        dict
            ``loss``: its TD loss (mean over the minibatch); ``q_max_mean``: the mean over
            its minibatch of ``max_a Q(s, a)`` (the four outputs) by the online network
            before the step (with ``config.afterstate``, of the trained value
            ``V(afterstate(s, a))``); ``grad_norm``: the L2 norm of its gradient before
            clipping. All NaN before the first update; what :meth:`record_diagnostics` was
            given, if it was called since.

        Notes
        -----
        The numbers are reduced from tensors the update computed anyway, when this is
        called (the schemes call it about once a second): an update pays nothing for
        them. Without clipping the gradient norm is read from the gradients, which stay
        those of the last update until the next one.
        """
        if self._last_values is None:
            return {name: value for name, value in self._recorded.items() if grad_norm or name != "grad_norm"}
        out = {"loss": self._last_loss, "q_max_mean": float(self._last_values.amax(dim=1).mean())}
        if grad_norm:
            norm = self._last_norm
            if norm is None:
                norm = optim.grad_norm([p.grad for p in self._trained_parameters() if p.grad is not None])
            out["grad_norm"] = float(norm)
        return out

    def td_errors(self, batch: Minibatch | None = None) -> np.ndarray:
        """``(B,)`` float32 TD errors ``|Q(s, a) - y|`` (:meth:`td_targets`; with afterstates, of the
        trained value ``V(afterstate(s, a))``).

        Without ``batch``: those of the last gradient computed by :meth:`compute_gradients` (before
        its step), the new priorities of a prioritized sample. With ``batch``: computed now by the
        current networks, without a gradient -- the initial priorities an Ape-X actor computes
        with its copy of the weights (Horgan et al. 2018).

        Raises
        ------
        RuntimeError
            Without ``batch``, before any gradient was computed.
        """
        if batch is not None:
            with torch.no_grad():
                boards, columns = self._trained(batch)
                q = self.online(boards).gather(1, columns).squeeze(1)
                return (q - self.td_targets(batch)).abs_().cpu().numpy()
        if self._last_error is None:
            raise RuntimeError("td_errors: no gradient has been computed yet")
        return self._last_error.abs().cpu().numpy()

    def record_diagnostics(self, values: Mapping[str, float]) -> None:
        """Make :meth:`diagnostics` report ``values`` (some of :data:`UPDATE_DIAGNOSTICS`; one left
        out keeps its last recorded value), for an update of this agent computed elsewhere
        (the workers of ``sharded`` and ``averaged``)."""
        self._last_values = None
        self._recorded.update({name: float(value) for name, value in values.items()})

    def _trained_parameters(self) -> list[torch.Tensor]:
        """The optimiser's parameters (the online net's), without walking the module tree."""
        groups = self.optimizer.param_groups
        return groups[0]["params"] if len(groups) == 1 else [p for g in groups for p in g["params"]]

    def gradient_step(self, batch: Minibatch, targets: torch.Tensor | None = None, update: int | None = None) -> float:
        """The DQN update's gradient step on a minibatch, without its bookkeeping: every scheme's update.

        :meth:`update` adds the update count and the target sync; ``sharded`` and
        ``averaged`` workers run it on a copy of the learner's state, ``shared`` workers on
        the model in shared memory (and count in shared counters).

        Parameters
        ----------
        batch : Minibatch
            ``B`` transitions (only ``boards`` and ``actions`` are read when ``targets`` is given).
        targets : torch.Tensor, optional
            ``(B,)`` float32 :meth:`td_targets`, precomputed by a process that holds the same
            weights; computed here when None.
        update : int, optional
            The update's number (from 1) in the error message; default ``updates + 1``.

        Returns
        -------
        float
            The TD loss before the step.

        Raises
        ------
        FloatingPointError
            If the loss is NaN or infinite; the weights are left unchanged.

        Notes
        -----
        The step runs with denormal floats flushed to zero on this thread (restored
        afterwards; :func:`~dqnlab.agent.optim.denormals_flushed` says why the weights come
        out the same).
        """
        with optim.denormals_flushed():
            # 1-3: TD targets y, TD loss (Huber or MSE) of Q(s, a) against y, and its gradient
            #      (autograd, or the network's written-out backprop: equal, see compute_gradients)
            loss = self.compute_gradients(batch, targets)
            # a non-finite loss stops training before it reaches the weights
            if not math.isfinite(loss):
                raise FloatingPointError(f"non-finite TD loss ({loss}) at update {update or self.updates + 1}")
            # 4-5: clip the gradient norm (config.max_grad_norm), one optimiser step
            self.step_optimizer()
        return loss

    def update(self, batch: Minibatch) -> float:
        """One DQN update on a minibatch: :meth:`step`, count it, sync the target network when due.

        Returns
        -------
        float
            The TD loss before the step.

        Raises
        ------
        FloatingPointError
            If the loss is NaN or infinite; the weights are left unchanged.
        """
        loss = self.gradient_step(batch)
        self.updates += 1
        if self.config.target_update and self.updates % self.config.target_update == 0:
            self.sync_target()
        return loss

    def sync_target(self) -> None:
        """Copy the online weights into the target network (nothing to do when ``target is online``)."""
        if self.target is not self.online:
            self.target.load_state_dict(self.online.state_dict())

    # ----------------------------------------------------------------- weights
    def get_weights(self) -> dict[str, np.ndarray]:
        """The online network's parameters as float32 NumPy arrays (copies), by name."""
        if self.device.type != "cpu":
            return {k: v.detach().cpu().numpy() for k, v in self.online.state_dict().items()}
        return {k: v.detach().numpy().copy() for k, v in self.online.state_dict().items()}

    def weight_views(self) -> dict[str, np.ndarray]:
        """The online network's parameters as float32 NumPy arrays by name: on the CPU the parameters'
        own memory (what is written there is the network's; call :meth:`refresh_acting` after), on a GPU
        copies (give them back with :meth:`set_weights`)."""
        if self.device.type != "cpu":
            return self.get_weights()
        return {k: v.detach().numpy() for k, v in self.online.state_dict().items()}

    def set_weights(self, weights: dict[str, np.ndarray], target: bool = False) -> None:
        """Load :meth:`get_weights` output into the online network (and the target if asked).

        Raises
        ------
        ValueError
            If names or shapes do not match the network.
        """
        own = self.online.state_dict()
        if set(weights) != set(own) or any(np.shape(weights[k]) != tuple(own[k].shape) for k in own):
            raise ValueError("weights do not match this network's parameter names and shapes")
        self.online.load_state_dict({k: torch.from_numpy(np.require(v, np.float32, 'W')) for k, v in weights.items()})
        self.refresh_acting()
        if target:
            self.sync_target()

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue training: both networks (``target`` None when it is the
        online network), optimiser, counters, RNG."""
        with optim.compiler_left_unloaded():
            moments = self.optimizer.state_dict()
        return {"online": self.online.state_dict(),
                "target": None if self.target is self.online else self.target.state_dict(),
                "optimizer": moments, "updates": self.updates, "rng": self.rng.bit_generator.state}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output."""
        self.online.load_state_dict(state["online"])
        if self.target is not self.online:
            self.target.load_state_dict(state["online"] if state["target"] is None else state["target"])
        with optim.compiler_left_unloaded():
            self.optimizer.load_state_dict(state["optimizer"])  # (moves the saved moments to the parameters' device)
        self.updates = int(state["updates"])
        self.rng.bit_generator.state = state["rng"]
        self.refresh_acting()
