"""The DQN agent: a Q-network over 2048 boards, epsilon-greedy acting, batched updates.

References
----------
* DQN: Mnih et al., "Human-level control through deep reinforcement learning",
  *Nature* 518 (2015) 529-533.
* Double DQN: van Hasselt, Guez and Silver, "Deep Reinforcement Learning with Double
  Q-learning", AAAI 2016.
* Layout after CleanRL's ``dqn.py`` (the update reads top to bottom).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from .config import TrainConfig
from .replay import Minibatch

__all__ = ["QNetwork", "DQNAgent", "epsilon_at", "transform_rewards", "N_EXPONENTS"]

N_EXPONENTS = 18  # board exponents 0..17


def _one_hot(boards: torch.Tensor) -> torch.Tensor:
    return F.one_hot(boards.reshape(len(boards), 16).long(), N_EXPONENTS).reshape(len(boards), -1).float()


def _raw(boards: torch.Tensor) -> torch.Tensor:
    b = boards.reshape(len(boards), 16).float()
    return torch.where(b > 0, torch.exp2(b), torch.zeros_like(b))


class QNetwork(nn.Module):
    """Multi-layer perceptron mapping boards to four action values.

    Parameters
    ----------
    encoding : {"onehot", "raw"}
        ``"onehot"``: each of the 16 cells one-hot over exponents 0-17 (288 inputs);
        ``"raw"``: the 16 tile values as floats (the user's original input).
    hidden : tuple of int
        Units of each hidden ReLU layer.

    Notes
    -----
    ``forward`` takes a ``(N, 4, 4)`` uint8 tensor of exponents and returns ``(N, 4)``
    float32 Q-values, one per action (0 up, 1 right, 2 down, 3 left).
    """

    def __init__(self, encoding: str = "onehot", hidden: tuple[int, ...] = (256, 256)):
        super().__init__()
        if encoding not in ("onehot", "raw"):
            raise ValueError(f"encoding must be 'onehot' or 'raw', got {encoding!r}")
        self.encoding = encoding
        self._encode = _one_hot if encoding == "onehot" else _raw
        sizes = [16 * N_EXPONENTS if encoding == "onehot" else 16, *hidden]
        layers: list[nn.Module] = []
        for a, b in zip(sizes[:-1], sizes[1:]):
            layers += [nn.Linear(a, b), nn.ReLU()]
        layers.append(nn.Linear(sizes[-1], 4))
        self.mlp = nn.Sequential(*layers)

    def forward(self, boards: torch.Tensor) -> torch.Tensor:
        return self.mlp(self._encode(boards))


def epsilon_at(config: TrainConfig, env_steps: int, updates: int) -> float:
    """Exploration rate after ``env_steps`` env steps and ``updates`` updates.

    Linear from ``epsilon_start`` to ``epsilon_end`` over ``epsilon_decay_steps`` env
    steps, or, when ``epsilon_decay_rate`` is set, ``epsilon_start * rate**updates``
    floored at ``epsilon_end`` (the user's schedule).
    """
    c = config
    if c.epsilon_decay_rate is not None:
        return max(c.epsilon_end, c.epsilon_start * c.epsilon_decay_rate ** updates)
    frac = min(1.0, env_steps / c.epsilon_decay_steps)
    return c.epsilon_start + frac * (c.epsilon_end - c.epsilon_start)


def transform_rewards(config: TrainConfig, rewards: np.ndarray) -> np.ndarray:
    """Rewards as the learner sees them: ``(N,)`` float32 points -> ``(N,)`` float32.

    ``"none"`` keeps merge points; ``"log"`` maps r to sign(r) log2(1 + |r|), so a
    2048 merge is worth 11 and a -25 penalty about -4.7.
    """
    r = np.asarray(rewards, dtype=np.float32)
    if config.reward_transform == "log":
        return np.sign(r) * np.log2(1.0 + np.abs(r))
    return r


class DQNAgent:
    """Online and target Q-networks, an Adam optimiser, and the DQN update.

    Parameters
    ----------
    config : TrainConfig
        Network, loss, discount and target-sync settings are read from it.
    seed : int
        Seeds the network initialisation and the exploration randomness.

    Attributes
    ----------
    updates : int
        Updates done so far.
    online, target : QNetwork
    """

    def __init__(self, config: TrainConfig, seed: int = 0):
        self.config = config
        self.rng = np.random.default_rng(seed)
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            self.online = QNetwork(config.encoding, config.hidden)
        self.target = QNetwork(config.encoding, config.hidden)
        self.target.load_state_dict(self.online.state_dict())
        self.target.requires_grad_(False)
        self.optimizer = torch.optim.Adam(self.online.parameters(), lr=config.lr, foreach=True)
        self.updates = 0

    # ------------------------------------------------------------------ acting
    def q_values(self, boards: np.ndarray) -> np.ndarray:
        """Q-values of the online network: ``(N, 4, 4)`` uint8 -> ``(N, 4)`` float32."""
        with torch.no_grad():
            return self.online(torch.from_numpy(np.ascontiguousarray(boards))).numpy()

    def act(self, boards: np.ndarray, masks: np.ndarray, epsilon: float) -> np.ndarray:
        """Epsilon-greedy actions for a batch of boards.

        Parameters
        ----------
        boards : (N, 4, 4) uint8
        masks : (N, 4) bool
            Legal actions. Used only if ``config.mask_illegal``; a board with no
            legal action (game over) gets action 0.
        epsilon : float
            Probability of a uniformly random (legal) action, per board.

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
            scores[greedy] = self.q_values(boards[greedy])
        return np.where(masks, scores, -np.inf).argmax(axis=1)

    # ---------------------------------------------------------------- learning
    def _tensors(self, batch: Minibatch) -> tuple[torch.Tensor, ...]:
        return tuple(torch.from_numpy(np.ascontiguousarray(x)) for x in batch)

    def td_targets(self, batch: Minibatch) -> torch.Tensor:
        """``(B,)`` float32 bootstrapped targets ``r + gamma (1 - done) Q_target(s', a*)``.

        ``a*`` is the target net's argmax (DQN) or the online net's (Double DQN),
        over legal actions of ``s'`` when ``config.mask_illegal``.
        """
        _, _, rewards, next_boards, dones, next_masks = self._tensors(batch)
        if not self.config.mask_illegal:
            next_masks = torch.ones_like(next_masks)
        with torch.no_grad():
            q_next = self.target(next_boards)
            chooser = self.online(next_boards) if self.config.double_dqn else q_next
            best = chooser.masked_fill(~next_masks, -torch.inf).argmax(dim=1, keepdim=True)
            v_next = q_next.gather(1, best).squeeze(1)
            v_next = torch.where(next_masks.any(dim=1) & ~dones, v_next, torch.zeros_like(v_next))
            return rewards + self.config.gamma * v_next

    def loss(self, batch: Minibatch) -> torch.Tensor:
        """The TD loss of the online network on ``batch`` (scalar tensor with grad)."""
        boards, actions = (torch.from_numpy(np.ascontiguousarray(x)) for x in batch[:2])
        q = self.online(boards).gather(1, actions.long()[:, None]).squeeze(1)
        y = self.td_targets(batch)
        return F.smooth_l1_loss(q, y) if self.config.loss == "huber" else F.mse_loss(q, y)

    def apply_gradients(self) -> None:
        """Clip the online net's gradients (if configured), take an Adam step, count the update."""
        if self.config.max_grad_norm is not None:
            nn.utils.clip_grad_norm_(self.online.parameters(), self.config.max_grad_norm)
        self.optimizer.step()
        self.updates += 1
        if self.config.target_update and self.updates % self.config.target_update == 0:
            self.sync_target()

    def update(self, batch: Minibatch) -> float:
        """One gradient step on a minibatch (batched: one forward/backward for all ``B``).

        Returns
        -------
        float
            The TD loss before the step.

        Raises
        ------
        FloatingPointError
            If the loss is NaN or infinite; the weights are left unchanged.
        """
        loss = self.loss(batch)
        value = float(loss.detach())
        if not np.isfinite(value):
            raise FloatingPointError(f"non-finite TD loss ({value}) at update {self.updates + 1}")
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.apply_gradients()
        return value

    def legacy_update(self, batch: Minibatch) -> float:
        """The user's original replay step: one transition at a time.

        For each of the ``B`` transitions: predict the target network on ``s'``,
        predict the online network on ``s``, overwrite the taken action's value with
        ``r + gamma max Q_target(s')`` (just ``r`` if terminal), and fit on that single
        sample with MSE over all four outputs (one optimiser step each), as in the
        Keras ``predict``/``predict``/``fit`` loop of the user's trainer. Kept to
        measure how much batching gains (``python -m dqnlab bench update``); counts
        as one update.

        Returns
        -------
        float
            Mean of the ``B`` single-sample losses.
        """
        losses = []
        gamma = self.config.gamma
        for i in range(len(batch.actions)):
            s = torch.from_numpy(batch.boards[i : i + 1])
            s2 = torch.from_numpy(batch.next_boards[i : i + 1])
            with torch.no_grad():
                target = float(batch.rewards[i])
                if not batch.dones[i]:
                    target += gamma * float(self.target(s2).max())
                target_f = self.online(s).clone()
            target_f[0, int(batch.actions[i])] = target
            loss = F.mse_loss(self.online(s), target_f)
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self.optimizer.step()
            losses.append(float(loss.detach()))
        self.updates += 1
        if self.config.target_update and self.updates % self.config.target_update == 0:
            self.sync_target()
        return float(np.mean(losses))

    def sync_target(self) -> None:
        """Copy the online weights into the target network."""
        self.target.load_state_dict(self.online.state_dict())

    # ----------------------------------------------------------------- weights
    def get_weights(self) -> dict[str, np.ndarray]:
        """The online network's parameters as float32 NumPy arrays (copies), by name."""
        return {k: v.detach().numpy().copy() for k, v in self.online.state_dict().items()}

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
        self.online.load_state_dict({k: torch.as_tensor(np.asarray(v, np.float32)) for k, v in weights.items()})
        if target:
            self.sync_target()

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue training: both networks, optimiser, counters, RNG."""
        return {"online": self.online.state_dict(), "target": self.target.state_dict(),
                "optimizer": self.optimizer.state_dict(), "updates": self.updates,
                "rng": self.rng.bit_generator.state}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output."""
        self.online.load_state_dict(state["online"])
        self.target.load_state_dict(state["target"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.updates = int(state["updates"])
        self.rng.bit_generator.state = state["rng"]
