"""The optimiser's side of the update: its step, gradient clipping and clearing, denormal flushing.

Each computes what the stock PyTorch call computes, without the per-call Python work around it
(hooks, state checks, grouping tensors by device and dtype), which weighs at DQN's small sizes:
``python -m dqnlab bench learner`` times each against the stock call, and the tests check each
against it (``tests/bench/test_bench_learner.py``, ``tests/test_learning.py``).

Three reach into PyTorch internals, each with the public call as fallback: :func:`optimizer_step`
reads the optimiser's hook dictionaries (:func:`_no_hooks`) and calls the private kernel
``torch._fused_adam_`` (PyTorch 2.4 and later; a PyTorch whose kernel takes other arguments
goes back to ``optimizer.step()`` for good); :func:`denormals_flushed` tells whether this
thread flushes denormals by an arithmetic probe (PyTorch has no getter); :func:`compiler_left_unloaded`
fills the cache of PyTorch's compile guards (a PyTorch without it imports its compiler as before).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterable, Iterator
from typing import Any

import torch
from torch.optim import optimizer as _optim_module

from ..core import memory as core_memory

__all__ = ["adam", "TemporalCoherence", "optimizer_step", "grad_norm", "clip_grad_norm", "clear_grads",
           "denormals_flushed", "compiler_left_unloaded"]


def adam(params: Any, lr: float) -> torch.optim.Adam:
    """Adam with the fused kernel (one pass over each parameter per step), or ``foreach``
    where this PyTorch has no fused CPU Adam (before 2.4). Same update either way."""
    params = list(params)
    try:
        return torch.optim.Adam(params, lr=lr, fused=True)
    except (RuntimeError, ValueError):  # pragma: no cover - old PyTorch
        return torch.optim.Adam(params, lr=lr, foreach=True)


class TemporalCoherence(torch.optim.Optimizer):
    """Temporal coherence learning (TC; Beal and Smith, "Temporal coherence and prediction decay in
    TD learning", IJCAI 1999; Jaskowski, "Mastering 2048 with delayed temporal coherence learning...",
    IEEE ToG 2018): SGD with a step size per weight, ``lr * |E| / A``, where ``E`` sums the gradients the
    weight got and ``A`` their magnitudes (:func:`dqnlab.core.ntuple.tc_rows`, whose kernel this runs).

    Parameters
    ----------
    params : iterable of tensors
        On the CPU (the n-tuple tables; ``TrainConfig.optimizer = "tc"``).
    lr : float
        The meta step size ``beta``: a weight never updated steps at ``lr``.
    td_updates : int
        Steps of plain SGD at ``td_lr`` before TC takes over (Guei, Chen and Wu 2022's OTD+TC
        schedule); ``E`` and ``A`` start at zero then.
    td_lr : float
        The SGD phase's learning rate.

    Notes
    -----
    ``state[p]`` holds ``step`` (a 0-d float32 tensor: steps so far) and ``sums``, float32 of ``p``'s
    shape and 2 more: ``sums[..., 0]`` is ``E``, ``sums[..., 1]`` is ``A``, side by side so that one
    cache line holds both of a weight's (the compiled update reads and writes them at random rows).
    They are made at construction so that the compiled learner and ``shared``'s block can hold them; like
    the tables, on huge pages where the OS offers them (:func:`dqnlab.core.memory.zeros`: a page is
    mapped only when a row on it is first written). A row-sparse gradient (an n-tuple minibatch's) is
    applied entry by entry in its order, a row used twice taking both steps, as the compiled learner
    does; a dense one in one vectorised step.
    """

    def __init__(self, params: Any, lr: float, td_updates: int = 0, td_lr: float = 0.2):
        super().__init__(params, dict(lr=lr, td_updates=td_updates, td_lr=td_lr))
        for g in self.param_groups:
            for p in g["params"]:
                if p.device.type != "cpu":
                    raise ValueError(f"optimizer 'tc' runs on the CPU (the compiled core), got a parameter on {p.device}")
                dtype = p.detach().numpy().dtype
                self.state[p] = {"step": torch.zeros((), dtype=torch.float32),
                                 "sums": torch.from_numpy(core_memory.zeros((*p.shape, 2), dtype))}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output, the sums copied into this optimiser's own tensors (which keep
        their pages, and whatever holds them: the compiled learner reads them at every call).

        Raises
        ------
        ValueError
            If the saved state does not fit these parameters (as ``torch.optim.Optimizer.load_state_dict``).
        """
        own = {p: st["sums"] for p, st in self.state.items()}
        super().load_state_dict(state_dict)
        with torch.no_grad():
            for p, sums in own.items():
                st = self.state[p]
                st["sums"] = sums.copy_(st["sums"])

    @torch.no_grad()
    def step(self, closure: Any = None) -> None:
        """One step on every parameter that has a gradient (see the class)."""
        from ..core.ntuple import tc_entries

        for g in self.param_groups:
            for p in g["params"]:
                if p.grad is None:
                    continue
                st = self.state[p]
                if float(st["step"]) < g["td_updates"]:
                    _sgd(p, p.grad, g["td_lr"])
                elif p.grad.is_sparse:
                    entries, values = _flat_entries(p.grad)
                    tc_entries(p.detach().view(-1).numpy(), st["sums"].view(-1, 2).numpy(), entries.numpy(),
                               values.numpy(), float(g["lr"]))
                else:
                    e, a = st["sums"].unbind(-1)
                    rate = torch.where(a > 0, e.abs() / a.clamp(min=torch.finfo(a.dtype).tiny), torch.ones_like(a))
                    p.sub_(rate.mul_(p.grad), alpha=g["lr"])
                    e.add_(p.grad)
                    a.add_(p.grad.abs())
                st["step"] += 1


def _flat_entries(grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A row-sparse COO gradient of a ``(R, width)`` table as ``(entries, values)`` of the flat table,
    ``(K,)`` int64 and float32, in the gradient's order."""
    rows, values = grad._indices()[0], grad._values()
    width = values[0].numel() if len(values) else 1
    if width > 1:  # a row of `width` outputs: its entries in the flat table
        rows = (rows[:, None] * width + torch.arange(width, device=rows.device)).reshape(-1)
    return rows, values.reshape(-1)


def _sgd(p: torch.Tensor, grad: torch.Tensor, lr: float) -> None:
    """``p -= lr * grad`` in place, a row-sparse gradient as one flat ``index_add_``."""
    if grad.is_sparse:
        entries, values = _flat_entries(grad)
        p.view(-1).index_add_(0, entries, values, alpha=-lr)
    else:
        p.add_(grad, alpha=-lr)


# --------------------------------------------------------------------------- the step
def optimizer_step(optimizer: torch.optim.Optimizer) -> None:
    """``optimizer.step()``; for dqnlab's own fused Adam, the same kernel call without the
    per-call Python work around it (:func:`_fused_adam_step`); for plain SGD with sparse
    gradients (n-tuple networks), :func:`_sparse_sgd_step`. Both only for an optimiser without
    hooks; anything else -- another optimiser (a user's), a PyTorch whose kernel signature
    differs -- goes through ``optimizer.step()``."""
    if _no_hooks(optimizer) and (_sparse_sgd_step(optimizer) or _fused_adam_step(optimizer)):
        return
    optimizer.step()


def _no_hooks(optimizer: torch.optim.Optimizer) -> bool:
    """Whether no step hook is registered, on ``optimizer`` or for all optimisers (private dictionaries)."""
    return not (optimizer._optimizer_step_pre_hooks or optimizer._optimizer_step_post_hooks
                or _optim_module._global_optimizer_pre_hooks or _optim_module._global_optimizer_post_hooks)


def _sparse_sgd_step(optimizer: torch.optim.Optimizer) -> bool:
    """Plain SGD (``p -= lr * grad``) with row-sparse gradients as one flat ``index_add_`` per
    parameter; returns False, doing nothing, unless ``optimizer`` is a ``torch.optim.SGD`` whose
    every group is plain SGD (float lr, no momentum, weight decay, maximize or differentiable)
    and some gradient is sparse.

    ``torch.optim.SGD`` adds a sparse COO gradient to its dense parameter as a sparse
    tensor, much slower than a flat ``index_add_`` for an n-tuple minibatch (thousands of
    rows of a table of millions). The result is the same up to
    the order in which repeated rows are summed.
    """
    if type(optimizer) is not torch.optim.SGD:
        return False
    groups = optimizer.param_groups
    plain = all(isinstance(g["lr"], float) and not g["momentum"] and not g["weight_decay"] and not g["maximize"]
                and not g.get("differentiable") for g in groups)
    if not plain or not any(p.grad is not None and p.grad.is_sparse for g in groups for p in g["params"]):
        return False
    with torch.no_grad():
        for g in groups:
            for p in g["params"]:
                if p.grad is not None:
                    _sgd(p, p.grad, g["lr"])
    return True


#: Whether ``torch._fused_adam_`` takes the arguments :func:`_fused_adam_step` passes (set False at the first
#: call that raises TypeError).
_FUSED_ADAM = {"ok": hasattr(torch, "_fused_adam_")}


def _fused_adam_step(optimizer: torch.optim.Optimizer) -> bool:
    """``Adam.step`` of a fused Adam as its kernel call alone; returns False, doing nothing, unless
    ``optimizer`` is a plain ``torch.optim.Adam`` with ``fused=True``, one parameter group of float
    hyperparameters (no amsgrad, maximize, capturable, differentiable or decoupled weight decay)
    and every parameter's gradient present.

    At the first step it makes each parameter's state as ``Adam.step`` does (a float32 ``step`` of 0 on the
    parameter's device, zero moments); then it increments each ``step`` and calls ``torch._fused_adam_``
    with the group's settings. (``Adam.step`` itself would also import PyTorch's compiler: see
    :func:`compiler_left_unloaded`.)
    """
    groups = optimizer.param_groups
    if not (_FUSED_ADAM["ok"] and type(optimizer) is torch.optim.Adam and len(groups) == 1):
        return False
    g = groups[0]
    params = g["params"]
    state = optimizer.state
    if not (g.get("fused") and not g["amsgrad"] and not g["maximize"] and not g.get("capturable")
            and not g.get("differentiable") and not g.get("decoupled_weight_decay")
            and isinstance(g["lr"], float) and all(p.grad is not None for p in params)):
        return False
    for p in params:
        if not state[p]:
            state[p] = {"step": torch.zeros((), dtype=torch.float32, device=p.device),
                        "exp_avg": torch.zeros_like(p, memory_format=torch.preserve_format),
                        "exp_avg_sq": torch.zeros_like(p, memory_format=torch.preserve_format)}
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
            return False
    return True


# --------------------------------------------------------------------------- gradients
def grad_norm(grads: list[torch.Tensor]) -> torch.Tensor:
    """L2 norm of all ``grads`` together (a 0-d tensor; NaN for none). A sparse gradient is
    coalesced first: an n-tuple table's rows used more than once add up before squaring."""
    dense = [g for g in grads if not g.is_sparse]
    norms = list(torch._foreach_norm(dense, 2.0)) if dense else []
    norms += [torch.linalg.vector_norm(g.coalesce().values(), 2.0) for g in grads if g.is_sparse]
    return torch.linalg.vector_norm(torch.stack(norms), 2.0) if norms else torch.tensor(float("nan"))


def clip_grad_norm(params: Iterable[torch.Tensor], max_norm: float) -> torch.Tensor | None:
    """``nn.utils.clip_grad_norm_(params, max_norm)`` (same arithmetic, L2 norm), without its
    per-call grouping of tensors by device and dtype: scale all gradients by
    ``min(1, max_norm / (norm + 1e-6))``. Returns the norm before clipping (None without gradients)."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return None
    total = grad_norm(grads)
    torch._foreach_mul_(grads, torch.clamp(max_norm / (total + 1e-6), max=1.0))
    return total


def clear_grads(params: Iterable[torch.Tensor]) -> None:
    """Drop every parameter's ``.grad`` (``optimizer.zero_grad(set_to_none=True)`` as a plain loop)."""
    for p in params:
        p.grad = None


# --------------------------------------------------------------------------- denormals
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


#: Whether :func:`denormals_flushed` flushes (the CPU can; read at each call, so a benchmark may turn it off).
_FLUSH_DENORMAL = _can_flush_denormals()


@contextlib.contextmanager
def denormals_flushed() -> Iterator[None]:
    """Inside, this thread flushes denormal floats to zero; afterwards the mode is as it was
    (a mode the caller set is kept).

    For the update: the Adam moments of weights that get no gradient (dead ReLU units,
    never-seen inputs) decay geometrically through the denormal range, where x86 arithmetic
    is many times slower. Such a moment moves its weight by far less than the weight's last
    bit, so the weights come out the same.
    """
    flush = _FLUSH_DENORMAL and not _flushing_denormals()
    if flush:
        torch.set_flush_denormal(True)
    try:
        yield
    finally:
        if flush:
            torch.set_flush_denormal(False)


# --------------------------------------------------------------------------- PyTorch's compiler, left unloaded
#: The methods of ``torch.optim.Optimizer`` that PyTorch guards against ``torch.compile`` with
#: ``torch._disable_dynamo`` (constructing an optimiser calls ``add_param_group``).
_GUARDED = ("add_param_group", "state_dict", "load_state_dict", "zero_grad")


@contextlib.contextmanager
def compiler_left_unloaded() -> Iterator[None]:
    """Inside, constructing an optimiser and its ``state_dict``, ``load_state_dict`` and ``zero_grad`` do not
    import PyTorch's compiler.

    PyTorch guards those methods so that ``torch.compile`` does not trace them. The guard imports the compiler,
    ``torch._dynamo`` (hundreds of modules, sympy among them: seconds of a new process's start), at the
    method's first call, and caches itself on the function (its ``__dynamo_disable`` attribute). In a process
    that has not imported the compiler, nothing has been compiled, so the guard has nothing to guard: inside,
    the cache holds each method's own function, which PyTorch's wrapper then calls directly. On the way out
    the cache is emptied again, so a call outside builds its guard as PyTorch would. Where the compiler is
    already imported, or PyTorch keeps no such cache, nothing changes. With this, a run of the n-tuple presets
    (updated by the compiled core, :mod:`dqnlab.core`) or of Adam (:func:`optimizer_step`) never imports the
    compiler; ``optimizer.step()`` of another optimiser still does.
    """
    if "torch._dynamo" in sys.modules:
        yield
        return
    marked = []
    for name in _GUARDED:
        fn = getattr(getattr(torch.optim.Optimizer, name, None), "__wrapped__", None)
        if fn is not None and getattr(fn, "__dynamo_disable", None) is None:
            setattr(fn, "__dynamo_disable", fn)  # (the name PyTorch reads, unmangled)
            marked.append(fn)
    try:
        yield
    finally:
        for fn in marked:
            if getattr(fn, "__dynamo_disable", None) is fn:
                delattr(fn, "__dynamo_disable")
