"""The TD loss of a minibatch and its gradient: the loss written once, and two ways to its gradient.

:func:`td_loss` is the loss (Huber or squared TD errors, weighted by importance-sampling
weights when given) and :func:`td_loss_slope` its derivative with respect to each TD error.
:func:`autograd_td_loss` computes the loss on an autograd graph (any network; ``backward()``
gives the gradient); :func:`backprop_td_loss` sets the gradients by the network's written-out
``backprop`` (:class:`~dqnlab.agent.networks.MLPNetwork`,
:class:`~dqnlab.agent.networks.NTupleNetwork`) from that slope, without building a graph:
faster at DQN's sizes (``python -m dqnlab bench learner``) and equal to autograd up to float32
rounding (an n-tuple network's gradient is sparse).

Both take what the update trains: ``boards`` ``(B, 4, 4)`` uint8 and ``columns`` ``(B, 1)``
int64 -- ``s`` and ``a`` for Q-values, ``afterstate(s, a)`` and column 0 for V
(:meth:`DQNAgent._trained <dqnlab.agent.dqn.DQNAgent._trained>`) -- and the ``(B,)`` float32
targets ``y`` (:meth:`~dqnlab.agent.dqn.DQNAgent.td_targets`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torch.nn import functional as F

__all__ = ["td_loss", "td_loss_slope", "autograd_td_loss", "backprop_td_loss"]


def td_loss(error: torch.Tensor, kind: str, weights: torch.Tensor | None = None) -> torch.Tensor:
    """The TD loss: ``(B,)`` float32 TD errors ``d = Q(s, a) - y`` -> 0-d float32 ``mean_i w_i l(d_i)``.

    ``kind``: ``"huber"``, ``l(d) = d^2 / 2`` inside ``[-1, 1]`` and ``|d| - 1/2`` outside (smooth
    L1 with beta 1, as in Mnih et al. 2015's error clipping), or ``"mse"``, ``l(d) = d^2``.
    ``weights``: ``(B,)`` float32 ``w`` (importance sampling of prioritized replay, Schaul et al.
    2016); 1 when None.
    """
    each = F.smooth_l1_loss(error, torch.zeros_like(error), reduction="none") if kind == "huber" else error.square()
    return (each if weights is None else each * weights).mean()


def td_loss_slope(error: torch.Tensor, kind: str, weights: torch.Tensor | None = None) -> torch.Tensor:
    """``(B,)`` float32 derivative of :func:`td_loss` with respect to each TD error:
    ``w_i clamp(d_i, -1, 1) / B`` (Huber) or ``w_i 2 d_i / B`` (MSE)."""
    n = len(error)
    slope = error.clamp(-1.0, 1.0).div_(n) if kind == "huber" else error.mul(2.0 / n)
    return slope if weights is None else slope.mul_(weights)


def autograd_td_loss(net: nn.Module, boards: torch.Tensor, columns: torch.Tensor, targets: torch.Tensor,
                     kind: str, weights: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor,
                                                                              torch.Tensor]:
    """:func:`td_loss` of ``net`` on an autograd graph.

    Returns
    -------
    loss : torch.Tensor
        0-d float32, with grad.
    values : torch.Tensor
        ``(B, outputs)`` float32 values of ``boards`` by ``net`` (with grad).
    error : torch.Tensor
        ``(B,)`` float32 TD errors ``Q(s, a) - y``, detached.
    """
    values = net(boards)
    error = values.gather(1, columns).squeeze(1) - targets
    return td_loss(error, kind, weights), values, error.detach()


def backprop_td_loss(net: nn.Module, boards: torch.Tensor, columns: torch.Tensor,
                     targets: torch.Tensor | Callable[[torch.Tensor], torch.Tensor], kind: str,
                     weights: torch.Tensor | None = None,
                     next_boards: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Set ``net``'s gradients (each ``.grad`` replaced) to those of :func:`td_loss`, by its written-out ``backprop``.

    One forward pass under ``torch.no_grad`` keeps each layer's input (``net._forward(boards,
    inputs)``); the gradient with respect to the outputs is :func:`td_loss_slope` in each
    board's trained column and zero elsewhere; ``net.backprop`` takes it back to the parameters.

    Parameters
    ----------
    net : torch.nn.Module
        A network with ``_forward(boards, inputs)`` and ``backprop(boards, inputs, grad)``.
    boards, columns : torch.Tensor
        ``(B, 4, 4)`` uint8 boards trained and ``(B, 1)`` int64 output column of each.
    targets : torch.Tensor or callable
        ``(B,)`` float32 targets ``y``; with ``next_boards``, a function giving them from the
        ``(B', outputs)`` values of ``next_boards`` by ``net`` (Double DQN's choice at ``s'``).
    kind : str
        ``"huber"`` or ``"mse"`` (:func:`td_loss`).
    weights : torch.Tensor, optional
        ``(B,)`` float32 importance-sampling weights.
    next_boards : torch.Tensor, optional
        ``(B', 4, 4)`` uint8 boards whose values by ``net`` the targets need: one forward pass
        over ``boards`` and these together instead of two.

    Returns
    -------
    loss : torch.Tensor
        0-d float32.
    values : torch.Tensor
        ``(B, outputs)`` float32 values of ``boards`` by ``net`` before the step.
    error : torch.Tensor
        ``(B,)`` float32 TD errors ``Q(s, a) - y``.
    """
    n = len(boards)
    inputs: list[torch.Tensor | None] = []
    with torch.no_grad():
        if next_boards is None:
            values = net._forward(boards, inputs)
        else:  # the activations of the first B rows are those of `boards` (contiguous views)
            values = net._forward(torch.cat((boards, next_boards)), inputs)
            inputs = [None if x is None else x[:n] for x in inputs]
            values, targets = values[:n], targets(values[n:])
        error = values.gather(1, columns).squeeze_(1).sub_(targets)
        loss = td_loss(error, kind, weights)
        grad = torch.zeros_like(values).scatter_(1, columns, td_loss_slope(error, kind, weights)[:, None])
    net.backprop(boards, inputs, grad)
    return loss, values, error
