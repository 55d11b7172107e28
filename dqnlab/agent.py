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
from torch.optim import optimizer as _optim_module

from .config import TrainConfig
from .replay import Minibatch

__all__ = ["QNetwork", "DQNAgent", "epsilon_at", "transform_rewards", "N_EXPONENTS", "EMBEDDING_MIN_BATCH"]

N_EXPONENTS = 18  # board exponents 0..17
N_CELLS = 16

# Column of the one-hot input that cell c with exponent k switches on: c * 18 + k.
_ONEHOT_OFFSETS = torch.arange(N_CELLS, dtype=torch.int64) * N_EXPONENTS
# Row k is the one-hot code of exponent k.
_IDENTITY = torch.eye(N_EXPONENTS, dtype=torch.float32)
# Raw input value of exponent k: the tile value 2**k (0 for an empty cell); exact in float32.
_RAW_VALUES = torch.tensor([0.0] + [2.0 ** k for k in range(1, N_EXPONENTS)], dtype=torch.float32)
#: Batches of at least this many boards take the one-hot first layer as an embedding sum
#: (a gather of 16 weight columns per board) instead of a dense product with the one-hot
#: matrix; smaller batches (acting) take the dense product, which is faster there.
#: Measured with ``python -m dqnlab bench learner`` (see docs/benchmarks.md).
EMBEDDING_MIN_BATCH = 128


def _one_hot_columns(boards: torch.Tensor) -> torch.Tensor:
    """``(N, 4, 4)`` uint8 exponents -> ``(N, 16)`` int64 columns ``cell * 18 + exponent``."""
    return boards.reshape(len(boards), N_CELLS).long() + _ONEHOT_OFFSETS


def _one_hot(boards: torch.Tensor) -> torch.Tensor:
    """``(N, 4, 4)`` uint8 exponents -> ``(N, 288)`` float32 one-hot rows (16 ones each):
    each cell's row of the 18 x 18 identity, gathered in one ``index_select``."""
    return _IDENTITY.index_select(0, boards.reshape(-1).long()).reshape(len(boards), N_CELLS * N_EXPONENTS)


def _raw(boards: torch.Tensor) -> torch.Tensor:
    """``(N, 4, 4)`` uint8 exponents -> ``(N, 16)`` float32 tile values (0 for empty)."""
    return torch.take(_RAW_VALUES, boards.reshape(len(boards), N_CELLS).long())


class _OneHotLinear(torch.autograd.Function):
    """``one_hot(columns) @ weight.T + bias`` without building the one-hot matrix forward.

    Row ``i`` of the product is the sum of the 16 weight columns that board ``i``
    switches on, so the forward pass is an embedding sum (``embedding_bag``) over the
    transposed weight: 16 x H additions per board instead of 288 x H multiply-adds.
    The weight gradient ``grad.T @ one_hot`` is a dense product again (faster on CPU
    than scattering rows); the columns get no gradient. Same result as the dense
    layer up to float32 rounding (the sum is taken in a different order).
    """

    @staticmethod
    def forward(ctx: Any, columns: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(columns)
        ctx.n_inputs = weight.shape[1]
        # the rows of the embedding are the weight's columns; NumPy copies the transpose
        # about twice as fast as Tensor.contiguous() on CPU (python -m dqnlab bench learner)
        rows = torch.from_numpy(np.ascontiguousarray(weight.detach().numpy().T))
        return F.embedding_bag(columns, rows, mode="sum").add_(bias)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[None, torch.Tensor | None, torch.Tensor | None]:
        (columns,) = ctx.saved_tensors
        grad_weight = grad_bias = None
        if ctx.needs_input_grad[1]:
            one_hot = grad.new_zeros(len(columns), ctx.n_inputs).scatter_(1, columns, 1.0)
            grad_weight = grad.t().mm(one_hot)
        if ctx.needs_input_grad[2]:
            grad_bias = grad.sum(0)
        return None, grad_weight, grad_bias


_relu_backward = torch.ops.aten.threshold_backward  # grad where the ReLU's output > 0, else 0


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

    The parameters live in ``mlp`` (an ``nn.Sequential`` of ``Linear`` and ``ReLU``),
    but ``forward`` walks the ``Linear`` layers itself (one ``F.linear`` and an in-place
    ReLU per layer, no module-call overhead), and with the one-hot encoding and at
    least :data:`EMBEDDING_MIN_BATCH` boards it computes the first layer as an
    embedding sum. Both give the result of ``mlp(encode(boards))`` up to float32
    rounding; ``python -m dqnlab bench learner`` measures what each saves.
    """

    def __init__(self, encoding: str = "onehot", hidden: tuple[int, ...] = (256, 256)):
        super().__init__()
        if encoding not in ("onehot", "raw"):
            raise ValueError(f"encoding must be 'onehot' or 'raw', got {encoding!r}")
        self.encoding = encoding
        self._encode = _one_hot if encoding == "onehot" else _raw
        sizes = [N_CELLS * N_EXPONENTS if encoding == "onehot" else N_CELLS, *hidden]
        layers: list[nn.Module] = []
        for a, b in zip(sizes[:-1], sizes[1:]):
            layers += [nn.Linear(a, b), nn.ReLU()]
        layers.append(nn.Linear(sizes[-1], 4))
        self.mlp = nn.Sequential(*layers)
        self._linears = tuple(m for m in self.mlp if isinstance(m, nn.Linear))

    def encode(self, boards: torch.Tensor) -> torch.Tensor:
        """The network's input: ``(N, 4, 4)`` uint8 -> ``(N, 288)`` one-hot or ``(N, 16)`` raw float32."""
        return self._encode(boards)

    def forward(self, boards: torch.Tensor) -> torch.Tensor:
        return self._forward(boards)

    def _forward(self, boards: torch.Tensor, inputs: list[torch.Tensor | None] | None = None) -> torch.Tensor:
        """``forward``; if ``inputs`` is a list, append each ``Linear`` layer's input to it
        (None for a one-hot first layer taken as an embedding sum), for :meth:`backprop`."""
        first, *rest = self._linears
        if self.encoding == "onehot" and len(boards) >= EMBEDDING_MIN_BATCH:
            x = _OneHotLinear.apply(_one_hot_columns(boards), first.weight, first.bias)
            encoded = None
        else:
            encoded = self._encode(boards)
            x = F.linear(encoded, first.weight, first.bias)
        if inputs is not None:
            inputs.append(encoded)
        for layer in rest:
            x = torch.relu_(x)
            if inputs is not None:
                inputs.append(x)
            x = F.linear(x, layer.weight, layer.bias)
        return x

    def backprop(self, boards: torch.Tensor, inputs: list[torch.Tensor | None], grad: torch.Tensor) -> None:
        """Set each parameter's ``.grad`` (replacing it) to the gradient of a loss whose
        gradient with respect to this network's output is ``grad``.

        Backpropagation written out for this MLP (Rumelhart, Hinton and Williams, 1986):
        per layer from the last, ``dW = grad.T @ input``, ``db = grad.sum(0)``, then
        ``grad = (grad @ W) * (input > 0)`` through the ReLU. No autograd graph is built:
        for the small matrices of DQN on a CPU that saves much of autograd's
        per-operation overhead (gradients 1.1-1.3x faster in ``bench learner``), with
        the same gradient as ``loss.backward()`` up to float32 rounding.

        Parameters
        ----------
        boards : torch.Tensor
            ``(N, 4, 4)`` uint8, the boards of the forward pass.
        inputs : list
            Filled by ``_forward(boards, inputs)`` in that pass (under ``torch.no_grad``).
        grad : torch.Tensor
            ``(N, 4)`` float32 gradient of the loss with respect to the output.
        """
        with torch.no_grad():
            for layer, x in zip(reversed(self._linears), reversed(inputs)):
                if x is None:  # the one-hot input, not built in the forward pass
                    x = _one_hot(boards)
                layer.weight.grad = grad.t().mm(x)
                layer.bias.grad = grad.sum(0)
                if layer is not self._linears[0]:
                    grad = _relu_backward(grad.mm(layer.weight), x, 0.0)


def _adam(params: Any, lr: float) -> torch.optim.Adam:
    """Adam with the fused kernel (one pass over each parameter per step), or ``foreach``
    where this PyTorch has no fused CPU Adam (before 2.4). Same update either way."""
    params = list(params)
    try:
        return torch.optim.Adam(params, lr=lr, fused=True)
    except (RuntimeError, ValueError):  # pragma: no cover - old PyTorch
        return torch.optim.Adam(params, lr=lr, foreach=True)


def _clip_grad_norm(params: Any, max_norm: float) -> None:
    """``nn.utils.clip_grad_norm_(params, max_norm)`` (same arithmetic, L2 norm), without its
    per-call grouping of tensors by device and dtype: scale all gradients by
    ``min(1, max_norm / (norm + 1e-6))``."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return
    total = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads, 2.0)), 2.0)
    torch._foreach_mul_(grads, torch.clamp(max_norm / (total + 1e-6), max=1.0))


def _optimizer_step(optimizer: torch.optim.Optimizer) -> None:
    """``optimizer.step()``; for dqnlab's own fused Adam, the same kernel call without the
    per-call Python work around it (hooks, state checks, grouping by device and dtype).

    The direct call is taken only for a plain ``torch.optim.Adam`` with ``fused=True``, one
    parameter group of float hyperparameters, no hooks, and every parameter's gradient
    and state already present (so never on the first step); it increments each
    parameter's ``step`` and calls ``torch._fused_adam_`` with the group's settings, as
    ``Adam.step`` does. Anything else -- another optimiser (SGD, a user's), a PyTorch whose
    kernel signature differs -- goes through ``optimizer.step()``.
    """
    groups = optimizer.param_groups
    fast = (_FUSED_ADAM["ok"] and type(optimizer) is torch.optim.Adam and len(groups) == 1
            and not optimizer._optimizer_step_pre_hooks and not optimizer._optimizer_step_post_hooks
            and not _optim_module._global_optimizer_pre_hooks and not _optim_module._global_optimizer_post_hooks)
    if fast:
        g = groups[0]
        params = g["params"]
        state = optimizer.state
        fast = (g.get("fused") and not g["amsgrad"] and not g["maximize"] and not g.get("capturable")
                and not g.get("differentiable") and not g.get("decoupled_weight_decay")
                and isinstance(g["lr"], float) and all(p.grad is not None and p in state for p in params))
    if not fast:
        optimizer.step()
        return
    states = [state[p] for p in params]
    steps = [st["step"] for st in states]
    beta1, beta2 = g["betas"]
    with torch.no_grad():
        torch._foreach_add_(steps, 1)
        try:
            torch._fused_adam_(params, [p.grad for p in params], [st["exp_avg"] for st in states],
                               [st["exp_avg_sq"] for st in states], [], steps, amsgrad=False, lr=g["lr"],
                               beta1=beta1, beta2=beta2, weight_decay=g["weight_decay"], eps=g["eps"],
                               maximize=False, grad_scale=None, found_inf=None)
        except TypeError:  # pragma: no cover - a PyTorch whose private kernel takes other arguments
            torch._foreach_sub_(steps, 1)
            _FUSED_ADAM["ok"] = False
            optimizer.step()


_FUSED_ADAM = {"ok": hasattr(torch, "_fused_adam_")}

# The smallest float32 denormal (made from its bits, so that no rounding mode can flush
# it): multiplying it by one gives zero exactly when the calling thread flushes denormals.
_DENORMAL = torch.tensor([1], dtype=torch.int32).view(torch.float32)


def _flushing_denormals() -> bool:
    """Whether this thread currently flushes denormal floats to zero (PyTorch has no getter)."""
    return float(_DENORMAL * 1.0) == 0.0


def _can_flush_denormals() -> bool:
    """Whether this CPU supports flushing denormals (x86 with SSE3); leaves the mode as it was."""
    was = _flushing_denormals()
    ok = torch.set_flush_denormal(True)
    if not was:
        torch.set_flush_denormal(False)
    return ok


_FLUSH_DENORMAL = _can_flush_denormals()


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
        self.optimizer = _adam(self.online.parameters(), config.lr)
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

    def td_targets(self, batch: Minibatch, online_next: torch.Tensor | None = None) -> torch.Tensor:
        """``(B,)`` float32 bootstrapped targets ``r + gamma (1 - done) Q_target(s', a*)``.

        ``a*`` is the target net's argmax (DQN) or the online net's (Double DQN),
        over legal actions of ``s'`` when ``config.mask_illegal``. ``online_next``:
        ``(B, 4)`` online Q-values of ``s'`` if already computed (Double DQN).
        """
        c = self.config
        rewards, next_boards, dones = (torch.from_numpy(np.ascontiguousarray(x))
                                       for x in (batch.rewards, batch.next_boards, batch.dones))
        with torch.no_grad():
            q_next = self.target(next_boards)
            if c.double_dqn:
                chooser = self.online(next_boards) if online_next is None else online_next
            else:
                chooser = q_next
            dead = dones  # bootstrap from s' unless the game ended (or s' has no legal move)
            if c.mask_illegal:
                next_masks = torch.from_numpy(np.ascontiguousarray(batch.next_masks))
                chooser = chooser.masked_fill(~next_masks, -torch.inf)
                dead = dead | ~next_masks.any(dim=1)
            if c.double_dqn or c.mask_illegal:
                v_next = q_next.gather(1, chooser.argmax(dim=1, keepdim=True)).squeeze(1)
            else:
                v_next = q_next.amax(dim=1)  # the target net's value at its own argmax
            return torch.where(dead, 0.0, v_next).mul_(c.gamma).add_(rewards)

    def loss(self, batch: Minibatch, targets: torch.Tensor | None = None) -> torch.Tensor:
        """The TD loss of the online network on ``batch`` (scalar tensor with grad).

        ``targets``: ``(B,)`` float32 precomputed :meth:`td_targets` (e.g. by another
        process holding the same weights); computed here when None. Only ``boards``
        and ``actions`` of ``batch`` are read when they are given.
        """
        boards, actions = (torch.from_numpy(np.ascontiguousarray(x)) for x in batch[:2])
        q = self.online(boards).gather(1, actions.long()[:, None]).squeeze(1)
        y = self.td_targets(batch) if targets is None else targets
        return F.smooth_l1_loss(q, y) if self.config.loss == "huber" else F.mse_loss(q, y)

    def compute_gradients(self, batch: Minibatch, targets: torch.Tensor | None = None) -> float:
        """Set the online net's gradients to those of the TD loss on ``batch``; return the loss.

        The same loss and gradients as zeroing the gradients and calling
        ``self.loss(batch, targets).backward()`` (up to float32 rounding), computed by
        :meth:`QNetwork.backprop` instead of autograd, which is faster at these sizes
        (``python -m dqnlab bench learner``). Each ``.grad`` is replaced, not accumulated.

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
        boards, actions = (torch.from_numpy(np.ascontiguousarray(x)) for x in batch[:2])
        actions = actions.long()[:, None]
        n = len(boards)
        inputs: list[torch.Tensor | None] = []
        with torch.no_grad():
            if targets is None and self.config.double_dqn:
                # one online pass over [s; s']: Q(s) to train, Q(s') to choose a* (the activations
                # of the first B rows are those of s, contiguous views)
                both = torch.cat((boards, torch.from_numpy(np.ascontiguousarray(batch.next_boards))))
                q = self.online._forward(both, inputs)
                inputs = [None if x is None else x[:n] for x in inputs]
                q, targets = q[:n], self.td_targets(batch, online_next=q[n:])
            else:
                q = self.online._forward(boards, inputs)
            y = self.td_targets(batch) if targets is None else targets
            error = q.gather(1, actions).squeeze_(1).sub_(y)  # (B,) Q(s, a) - y
            if self.config.loss == "huber":  # smooth L1 with beta 1: d^2/2 inside [-1, 1], |d| - 1/2 outside
                value = F.smooth_l1_loss(error, torch.zeros_like(error))
                slope = error.clamp(-1.0, 1.0).div_(n)
            else:
                value = error.square().mean()
                slope = error.mul_(2.0 / n)
            grad = torch.zeros_like(q).scatter_(1, actions, slope[:, None])
        self.online.backprop(boards, inputs, grad)
        return float(value)

    def apply_gradients(self) -> None:
        """Clip the online net's gradients (if configured), take an Adam step, count the update."""
        if self.config.max_grad_norm is not None:
            _clip_grad_norm(self._trained_parameters(), self.config.max_grad_norm)
        _optimizer_step(self.optimizer)
        self.updates += 1
        if self.config.target_update and self.updates % self.config.target_update == 0:
            self.sync_target()

    def _trained_parameters(self) -> list[torch.Tensor]:
        """The optimiser's parameters (the online net's), without walking the module tree."""
        groups = self.optimizer.param_groups
        return groups[0]["params"] if len(groups) == 1 else [p for g in groups for p in g["params"]]

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

        Notes
        -----
        The step runs with denormal floats flushed to zero on this thread (restored
        afterwards): the Adam moments of weights that get no gradient (dead ReLU
        units, never-seen inputs) decay geometrically through the denormal range,
        where x86 arithmetic is many times slower. Such a moment moves its weight by
        far less than the weight's last bit, so the weights come out the same.
        """
        flush = _FLUSH_DENORMAL and not _flushing_denormals()
        if flush:
            torch.set_flush_denormal(True)
        try:
            value = self.compute_gradients(batch)
            if not np.isfinite(value):
                raise FloatingPointError(f"non-finite TD loss ({value}) at update {self.updates + 1}")
            self.apply_gradients()
        finally:
            if flush:
                torch.set_flush_denormal(False)
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
