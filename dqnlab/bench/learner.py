"""``bench learner``: the update's achieved GFLOP/s beside a large matrix product, before and after tuning.

:class:`PlainUpdate` is the update coded with the stock PyTorch calls; each part that dqnlab's update
does otherwise is timed before and after in interleaved pairs; :func:`update_flops` counts one update's work.
"""

from __future__ import annotations

import itertools
import math
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..agent.dqn import N_EXPONENTS, DQNAgent
from ..config import TrainConfig
from ..parallel.threads import torch_threads_set
from ..replay import Minibatch, ReplayBuffer
from .report import machine_info, md_machine, md_table
from .timing import interleaved_times, median_time, work_clock
from .update import agent_and_buffer, mlp_preset

__all__ = ["update_flops", "matmul_gflops", "PlainUpdate", "bench_learner", "learner_markdown", "device_updates"]


def update_flops(config: TrainConfig, batch_size: int | None = None) -> dict[str, int]:
    """Floating-point operations of one update (:meth:`DQNAgent.update`), by part.

    For a dense layer of ``a`` inputs and ``b`` outputs on ``B`` rows: forward ``B (2ab + b)``
    (multiply-adds and the bias); backward ``B (2ab + b)`` for the weight and bias gradients
    plus ``2Bab`` for the input gradient, which the first layer does not need. The one-hot
    first layer is counted as the dense product it is mathematically (288 inputs), even
    though dqnlab computes it as an embedding sum with far fewer operations. Adam counts
    12 operations per parameter, gradient clipping 3 (square, add, scale). ReLU, the loss,
    the targets' arithmetic and the argmax are O(B) and left out.

    Parameters
    ----------
    config : TrainConfig
        ``encoding``, ``hidden``, ``batch_size``, ``double_dqn``, ``max_grad_norm`` are read.
    batch_size : int, optional
        Overrides ``config.batch_size``.

    Returns
    -------
    dict
        ``forward_online_s``, ``forward_target_next``, ``forward_online_next`` (0 without
        Double DQN), ``backward``, ``adam``, ``clip``, ``total``, and ``parameters``.
    """
    rows = config.batch_size if batch_size is None else batch_size
    sizes = [16 * N_EXPONENTS if config.encoding == "onehot" else 16, *config.hidden, 4]
    layers = list(itertools.pairwise(sizes))
    forward = rows * sum(2 * a * b + b for a, b in layers)
    backward = forward + rows * sum(2 * a * b for a, b in layers[1:])
    params = sum(a * b + b for a, b in layers)
    parts = {
        "forward_online_s": forward, "forward_target_next": forward,
        "forward_online_next": forward if config.double_dqn else 0, "backward": backward,
        "adam": 12 * params, "clip": 3 * params if config.max_grad_norm is not None else 0,
    }
    return {**parts, "total": sum(parts.values()), "parameters": params}


def matmul_gflops(n: int = 2048, repeats: int = 5, min_time: float = 0.3) -> float:
    """GFLOP/s of an ``n x n`` by ``n x n`` float32 product in PyTorch (``2 n^3`` operations)."""
    import torch

    a, b = torch.randn(n, n), torch.randn(n, n)
    out = torch.empty(n, n)
    return 2 * n ** 3 / median_time(lambda: torch.mm(a, b, out=out), repeats, min_time) / 1e9


class PlainUpdate:
    """:meth:`DQNAgent.update` coded with the stock PyTorch calls, the "before" of the before/after figures.

    The same algorithm and starting weights as ``agent``: ``nn.Sequential`` forward passes, ``F.one_hot``
    (or ``exp2``) encoding, ``foreach`` Adam, ``optimizer.zero_grad`` and
    ``nn.utils.clip_grad_norm_``. Keeps its own copy of the networks.
    """

    def __init__(self, agent: DQNAgent):
        import copy

        import torch
        from torch.nn import functional as F

        self.config = c = agent.config
        self.online = copy.deepcopy(agent.online.mlp)
        self.target = copy.deepcopy(agent.target.mlp)
        self.optimizer = torch.optim.Adam(self.online.parameters(), lr=c.lr, foreach=True)
        if c.encoding == "onehot":
            self.encode = lambda b: F.one_hot(b.reshape(len(b), 16).long(), N_EXPONENTS).reshape(len(b), -1).float()
        else:
            def raw(b: Any) -> Any:
                x = b.reshape(len(b), 16).float()
                return torch.where(x > 0, torch.exp2(x), torch.zeros_like(x))
            self.encode = raw

    def update(self, batch: Minibatch) -> float:
        import torch
        from torch import nn
        from torch.nn import functional as F

        c = self.config
        boards, actions, rewards, next_boards, dones, next_masks = (
            torch.from_numpy(np.ascontiguousarray(x)) for x in batch[:6])
        if not c.mask_illegal:
            next_masks = torch.ones_like(next_masks)
        with torch.no_grad():
            q_next = self.target(self.encode(next_boards))
            chooser = self.online(self.encode(next_boards)) if c.double_dqn else q_next
            best = chooser.masked_fill(~next_masks, -torch.inf).argmax(dim=1, keepdim=True)
            v_next = q_next.gather(1, best).squeeze(1)
            v_next = torch.where(next_masks.any(dim=1) & ~dones, v_next, torch.zeros_like(v_next))
            y = rewards + c.gamma * v_next
        q = self.online(self.encode(boards)).gather(1, actions.long()[:, None]).squeeze(1)
        loss = F.smooth_l1_loss(q, y) if c.loss == "huber" else F.mse_loss(q, y)
        value = float(loss.detach())
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if c.max_grad_norm is not None:
            nn.utils.clip_grad_norm_(self.online.parameters(), c.max_grad_norm)
        self.optimizer.step()
        return value


Pair = tuple[str, Callable[[], Any], Callable[[], Any]]  # a part's name, its code before and after


def _optimizer_pairs(agent: DQNAgent) -> list[Pair]:
    """The optimiser's parts, before and after: the Adam step, gradient clipping, clearing gradients."""
    import torch

    from ..agent.optim import adam, clear_grads, clip_grad_norm, optimizer_step

    scratch = [torch.nn.Parameter(p.detach().clone()) for p in agent.online.parameters()]
    for p in scratch:
        p.grad = torch.randn_like(p)
    foreach = torch.optim.Adam(scratch, lr=agent.config.lr, foreach=True)
    fused = adam(scratch, agent.config.lr)
    grads = [p.grad for p in scratch]

    def zero_grad_stock() -> None:
        foreach.zero_grad(set_to_none=True)
        for p, g in zip(scratch, grads):
            p.grad = g

    def zero_grad_loop() -> None:
        clear_grads(scratch)
        for p, g in zip(scratch, grads):
            p.grad = g

    return [
        ("Adam step: foreach -> fused (optimizer.step)", foreach.step, fused.step),
        ("Adam step: fused optimizer.step -> the fused kernel called directly", fused.step,
         lambda: optimizer_step(fused)),
        ("clip gradient norm: nn.utils.clip_grad_norm_ -> own", lambda: torch.nn.utils.clip_grad_norm_(scratch, 1e9),
         lambda: clip_grad_norm(scratch, 1e9)),
        ("clear gradients: optimizer.zero_grad -> loop", zero_grad_stock, zero_grad_loop),
    ]


def _data_pairs(agent: DQNAgent, plain: PlainUpdate, batch: Minibatch, buffer: ReplayBuffer | None) -> list[Pair]:
    """The parts that turn data into gradients, before and after: encoding boards, the TD loss's
    gradients, and (with ``buffer``) drawing the minibatch."""
    import torch

    n = len(batch.actions)
    boards = torch.from_numpy(batch.boards)

    def autograd_gradients() -> None:
        for p in agent.online.parameters():
            p.grad = None
        agent.loss(batch).backward()

    pairs: list[Pair] = [
        (f"encode {n} boards: "
         + ("F.one_hot -> identity rows (index_select)" if agent.config.encoding == "onehot" else "exp2 -> table lookup"),
         lambda: plain.encode(boards), lambda: agent.online.encode(boards)),
        ("TD loss gradients: autograd (loss().backward()) -> backprop written out (compute_gradients)",
         autograd_gradients, lambda: agent.compute_gradients(batch)),
    ]
    if buffer is not None:
        def fancy_index() -> Minibatch:  # ReplayBuffer.sample by fancy indexing
            idx = buffer.rng.integers(0, buffer.size, size=n)
            a = buffer.arrays
            return Minibatch(a["boards"][idx], a["actions"][idx].astype(np.int64), a["rewards"][idx],
                             a["next_boards"][idx], a["dones"][idx], a["next_masks"][idx])
        pairs.append((f"replay sample of {n} from {buffer.size:,}: fancy indexing -> ndarray.take", fancy_index,
                      lambda: buffer.sample(n)))
    return pairs


def _network_pairs(agent: DQNAgent, plain: PlainUpdate, batch: Minibatch) -> list[Pair]:
    """The network's parts, before and after: its forward pass at several batch sizes, and with the
    one-hot encoding its first layer as a dense product against an embedding sum."""
    import torch
    from torch.nn import functional as F

    n = len(batch.actions)
    pairs: list[Pair] = []
    for rows in sorted({1, 32, n}):
        b = torch.from_numpy(np.ascontiguousarray(np.resize(batch.boards, (rows, 4, 4))))

        def before(b: Any = b) -> None:
            with torch.no_grad():
                plain.online(plain.encode(b))

        def after(b: Any = b) -> None:
            with torch.no_grad():
                agent.online(b)
        pairs.append((f"network forward, {rows} board(s), no grad", before, after))
    if agent.config.encoding == "onehot":
        first = agent.online.mlp[0]
        from ..agent.networks import _one_hot_columns, _OneHotLinear

        for rows in sorted({32, n}):
            b = torch.from_numpy(np.ascontiguousarray(np.resize(batch.boards, (rows, 4, 4))))
            g = torch.randn(rows, first.out_features)

            def dense(b: Any = b, g: Any = g) -> None:
                first.weight.grad = first.bias.grad = None
                F.linear(agent.online.encode(b), first.weight, first.bias).backward(g)

            def embed(b: Any = b, g: Any = g) -> None:
                first.weight.grad = first.bias.grad = None
                _OneHotLinear.apply(_one_hot_columns(b), first.weight, first.bias).backward(g)
            pairs.append((f"one-hot first layer, {rows} boards, forward + backward: dense -> embedding sum",
                          dense, embed))
    return pairs


def _learner_parts(agent: DQNAgent, plain: PlainUpdate, batch: Minibatch, rounds: int,
                   min_time: float, clock: Callable[[], float] = time.perf_counter,
                   buffer: ReplayBuffer | None = None) -> list[dict[str, Any]]:
    """Before/after seconds of each part of the update that was changed (interleaved pairs)."""
    pairs = _optimizer_pairs(agent) + _data_pairs(agent, plain, batch, buffer) + _network_pairs(agent, plain, batch)
    out = []
    for name, before, after in pairs:
        t = interleaved_times({"before": before, "after": after}, rounds, min_time, clock)
        out.append({"part": name, "before_us": 1e6 * t["before"], "after_us": 1e6 * t["after"],
                    "speedup": t["before"] / t["after"]})
    for p in agent.online.parameters():
        p.grad = None
    return out


def _denormal_part(config: TrainConfig, env_steps: int, rounds: int, min_time: float,
                   clock: Callable[[], float], seed: int) -> dict[str, Any]:
    """Before/after of flushing denormals during the update, on an agent trained for
    ``env_steps`` env steps (denormal Adam moments build up only in training)."""
    import copy

    from ..agent import optim
    from ..runtime.learner import Learner

    learner = Learner(config.replace(seed=seed, total_env_steps=10 ** 9))
    learner.run(env_steps)
    kept, flushed = learner.agent, copy.deepcopy(learner.agent)
    batch = learner.buffer.sample(config.batch_size)

    def update(agent: DQNAgent, flush: bool) -> None:
        old = optim._FLUSH_DENORMAL
        optim._FLUSH_DENORMAL = flush and old
        try:
            agent.update(batch)
        finally:
            optim._FLUSH_DENORMAL = old

    t = interleaved_times({"before": lambda: update(kept, False), "after": lambda: update(flushed, True)},
                          rounds, min_time, clock)
    return {"part": f"whole update after {env_steps:,} env steps of training: denormals kept -> flushed",
            "before_us": 1e6 * t["before"], "after_us": 1e6 * t["after"], "speedup": t["before"] / t["after"]}


def _compiled_update(config: TrainConfig, batch: Minibatch, seed: int) -> tuple[DQNAgent, float]:
    """An agent whose networks are ``torch.compile``-d, and the seconds its first two updates took."""
    import torch

    agent = DQNAgent(config, seed=seed)
    t0 = time.perf_counter()
    for net in (agent.online, agent.target):  # what an update runs: forward passes and the written-out backprop
        net._forward = torch.compile(net._forward)
        net.backprop = torch.compile(net.backprop)
    agent.update(batch)
    agent.update(batch)
    return agent, time.perf_counter() - t0


def device_updates(config: TrainConfig, buffer: ReplayBuffer, devices: Sequence[str], rounds: int, min_time: float,
                   seed: int = 0) -> list[dict[str, Any]]:
    """Updates per second of the learner on each of ``devices`` (``TrainConfig.device`` values).

    Each device's agent takes :meth:`DQNAgent.update` on a fresh :meth:`ReplayBuffer.sample`
    (sampled on the CPU, copied to the device), the devices in alternation
    (:func:`interleaved_times`, wall-clock time: a GPU's work is not the process's CPU time);
    a GPU update waits for the device (``torch.cuda.synchronize``) before the clock reads.

    Returns
    -------
    list of dict
        One row per device: ``device`` (resolved, e.g. ``cuda:0``), ``batch_size``,
        ``ms_per_update``, ``updates_per_s``.

    Raises
    ------
    ValueError
        For a device that is not ``cpu``, ``cuda`` or ``auto``, or ``cuda`` without a GPU.
    """
    import torch

    fns: dict[str, Callable[[], Any]] = {}
    for name in devices:
        agent = DQNAgent(config, seed=seed, device=name)
        wait = torch.cuda.synchronize if agent.device.type == "cuda" else (lambda: None)

        def update(agent: DQNAgent = agent, wait: Callable[[], Any] = wait) -> None:
            agent.update(buffer.sample(config.batch_size))
            wait()

        label = str(agent.device) if agent.device.index is not None or agent.device.type == "cpu" \
            else f"{agent.device.type}:{torch.cuda.current_device()}"
        fns.setdefault(label, update)
    times = interleaved_times(fns, rounds, min_time)
    return [{"device": name, "batch_size": config.batch_size, "ms_per_update": 1e3 * t, "updates_per_s": 1 / t}
            for name, t in times.items()]


def bench_learner(presets: Sequence[str] = ("mlp", "seed"), threads: int | None = 1, rounds: int = 7,
                  min_time: float = 0.15, matmul_n: int = 2048, compile: bool = False,
                  parts: bool = True, trained_updates: int = 2_000, seed: int = 0,
                  devices: Sequence[str] = ("cpu",)) -> dict[str, Any]:
    """Achieved GFLOP/s of one update beside a large matrix product, before and after tuning.

    For each preset, an agent and a replay buffer filled by random play; the same
    minibatch is trained on repeatedly. Rows, timed in alternation with each other and
    with an ``n x n`` matrix product (so that the fraction compares like with like on a
    busy machine), in :func:`work_clock` time: ``before`` (the
    update with the stock PyTorch calls, :class:`PlainUpdate`), ``after`` (:meth:`DQNAgent.update`),
    ``after + sample`` (with a fresh :meth:`ReplayBuffer.sample` each time, as in
    training) and, with ``compile``, ``torch.compile`` (its compile time reported).

    Parameters
    ----------
    presets : sequence of str
    threads : int or None
        ``torch.set_num_threads`` for the measurement (the matrix product too).
    rounds, min_time
        See :func:`interleaved_times`.
    matmul_n : int
        Size of the square matrix product (default 2048).
    compile : bool
        Also time ``torch.compile``-d networks (compiling takes tens of seconds).
    parts : bool
        Also time each changed part of the update before and after (:func:`_learner_parts`),
        and the whole update of an agent trained for ``learning_starts`` env steps plus
        ``trained_updates`` updates with denormals kept and flushed.
    trained_updates : int
        See ``parts``.
    seed : int
    devices : sequence of str
        Learner devices (``cpu``, ``cuda``, ``auto``) whose updates per second to time
        (:func:`device_updates`).

    Returns
    -------
    dict
        ``machine``, ``threads``, ``clock`` (see :func:`work_clock`), ``matmul_n``,
        ``matmul_gflops`` (median over presets), and ``presets``: one dict per preset with
        ``preset``, ``batch_size``, ``flops`` (:func:`update_flops`), ``matmul_gflops``
        (the square product's, timed in the same rounds as the updates), ``rows``
        (``method``, ``ms_per_update``, ``gflops``, ``fraction_of_matmul``, ``speedup``
        over ``before``), ``compile_s`` (or None), ``parts`` and ``devices`` (:func:`device_updates`).

    Raises
    ------
    ValueError
        For an unknown preset or device, or ``cuda`` on a machine without a GPU (before anything is timed).
    """
    import torch

    from ..agent.dqn import resolve_device

    for name in devices:
        resolve_device(name)
    clock, clock_name = work_clock(threads)
    out: dict[str, Any] = {"machine": machine_info(), "threads": threads, "clock": clock_name,
                           "matmul_n": matmul_n, "presets": []}
    mat_a, mat_b, mat_out = torch.randn(matmul_n, matmul_n), torch.randn(matmul_n, matmul_n), torch.empty(0)
    with torch_threads_set(threads):
        for preset in presets:
            config = mlp_preset(preset, "bench learner", seed=seed)
            agent, buffer = agent_and_buffer(config, seed)
            batch = buffer.sample(config.batch_size)
            plain = PlainUpdate(agent)
            fns: dict[str, Callable[[], Any]] = {
                "matmul": lambda: torch.mm(mat_a, mat_b, out=mat_out),
                "before: the update as first written": lambda: plain.update(batch),  # noqa: B023 - called in this iteration
                "after: DQNAgent.update": lambda: agent.update(batch),  # noqa: B023 - called in this iteration
                "after, with ReplayBuffer.sample": lambda: agent.update(buffer.sample(config.batch_size)),  # noqa: B023 - called in this iteration
            }
            compile_s = None
            if compile:
                compiled, compile_s = _compiled_update(config, batch, seed)
                fns["after, networks torch.compile-d"] = lambda: compiled.update(batch)  # noqa: B023 - called in this iteration
            times = interleaved_times(fns, rounds, min_time, clock)
            peak = 2 * matmul_n ** 3 / times.pop("matmul") / 1e9
            flops = update_flops(config)
            base = times["before: the update as first written"]
            rows = [{"method": name, "ms_per_update": 1e3 * t, "gflops": flops["total"] / t / 1e9,
                     "fraction_of_matmul": flops["total"] / t / 1e9 / peak, "speedup": base / t}
                    for name, t in times.items()]
            out["presets"].append({
                "preset": preset, "batch_size": config.batch_size, "flops": flops, "matmul_gflops": peak,
                "rows": rows, "compile_s": compile_s,
                "parts": _learner_parts(agent, plain, batch, rounds, min_time / 2, clock, buffer) if parts else [],
                "devices": device_updates(config, buffer, devices, rounds, min_time, seed),
            })
            if parts:
                steps = config.learning_starts + math.ceil(trained_updates / config.updates_per_env_step)
                out["presets"][-1]["parts"].append(_denormal_part(config, steps, rounds, min_time, clock, seed))
    out["matmul_gflops"] = statistics.median(p["matmul_gflops"] for p in out["presets"])
    return out


def learner_markdown(res: dict[str, Any], command: str = "python -m dqnlab bench learner") -> str:
    """The ``bench learner`` result as markdown from :func:`bench_learner` output."""
    out = ["## The learner beside the machine's limit (`bench learner`)", "",
           md_machine(res["machine"], res["threads"], command), "",
           f"Limit: a {res['matmul_n']}x{res['matmul_n']} float32 matrix product (`torch.mm`) on the same threads, "
           f"timed in the same rounds as the updates: **{res['matmul_gflops']:,.0f} GFLOP/s** (median over the "
           f"tables). Times are {res.get('clock', 'wall-clock time')}, medians of alternating turns. One "
           "update's work is counted by `dqnlab.bench.learner.update_flops`: forward on s, target forward on s', online "
           "forward on s' for Double DQN, backward, Adam at 12 and clipping at 3 operations per parameter; the "
           "one-hot first layer is counted as the dense product it equals, so GFLOP/s of rows that compute it as "
           "an embedding sum are effective figures.", ""]
    for p in res["presets"]:
        f = p["flops"]
        out += [f"### `{p['preset']}` preset: batch {p['batch_size']}, {f['parameters']:,} parameters, "
                f"{f['total'] / 1e6:,.1f} MFLOP per update (matrix product: {p['matmul_gflops']:,.0f} GFLOP/s)", "",
                md_table(p["rows"], {"method": "update", "ms_per_update": "ms per update", "gflops": "GFLOP/s",
                                      "fraction_of_matmul": "of matmul", "speedup": "speed-up"},
                          {"ms_per_update": "{:.3f}", "gflops": "{:.1f}", "fraction_of_matmul": "{:.0%}",
                           "speedup": "{:.2f}x"}), ""]
        if p["compile_s"] is not None:
            out += [f"`torch.compile` (inductor) took {p['compile_s']:.0f} s of wall-clock time to compile (the "
                    "first two updates; PyTorch's compile cache from earlier runs on the machine shortens it).", ""]
        if p.get("devices"):
            out += ["The learner on each device (`--devices`): `DQNAgent.update` with a fresh sample, wall-clock "
                    "time, devices in alternation:", "",
                    md_table(p["devices"], {"device": "device", "batch_size": "batch", "ms_per_update": "ms per update",
                                            "updates_per_s": "updates/s"},
                             {"ms_per_update": "{:.3f}", "updates_per_s": "{:,.0f}"}), ""]
        if p["parts"]:
            out += ["Each change, before -> after (interleaved pairs, µs per call):", "",
                    md_table(p["parts"], {"part": "part", "before_us": "before µs", "after_us": "after µs",
                                           "speedup": "speed-up"},
                              {"before_us": "{:,.1f}", "after_us": "{:,.1f}", "speedup": "{:.2f}x"}), ""]
    return "\n".join(out)
