"""``bench update``: the legacy per-transition loop (PyTorch, Keras) against the batched update.

The legacy loop is the original trainer's replay step (the ``seed`` preset): a Keras
``predict``, ``predict`` and ``fit`` per transition of the minibatch; :func:`legacy_update`
is that loop on a :class:`~dqnlab.DQNAgent`, :func:`keras_legacy_step` the loop in Keras.

Also the set-up the update benchmarks share: a preset checked to be an MLP, and an
agent with a replay buffer filled by random play.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np

from ..agent.dqn import DQNAgent
from ..config import TrainConfig
from ..game import VecGame2048
from ..game.rules import legal_actions_unchecked
from ..replay import Minibatch, ReplayBuffer
from .timing import median_time

__all__ = ["mlp_preset", "agent_and_buffer", "legacy_update", "keras_legacy_step", "bench_update"]


def mlp_preset(name: str, what: str, **overrides: Any) -> TrainConfig:
    """``TrainConfig.preset(name, **overrides)`` for a benchmark of the MLP's update (SB3 and the
    FLOP count model a plain MLP Q-network); ValueError naming the preset otherwise."""
    config = TrainConfig.preset(name, **overrides)
    if config.network != "mlp" or config.afterstate:
        raise ValueError(f"{what} measures the MLP Q-network's update: preset {name!r} is a {config.network} "
                         f"network{' with afterstates' if config.afterstate else ''}; use 'mlp' or 'seed'")
    return config


def agent_and_buffer(config: TrainConfig, seed: int) -> tuple[DQNAgent, ReplayBuffer]:
    """An agent with the given config and a replay buffer filled by random play."""
    agent = DQNAgent(config, seed=seed)
    buffer = ReplayBuffer(config.buffer_size, seed=seed)
    env = VecGame2048(64, seed=seed, max_moves=config.max_moves,
                      invalid_move_reward=config.invalid_move_reward)
    rng = np.random.default_rng(seed)
    boards = env.boards
    while len(buffer) < config.buffer_size:
        actions = rng.integers(0, 4, 64)
        out = env.step(actions)
        buffer.add_batch(boards, actions, out.rewards, out.next_boards, out.terminated,
                         legal_actions_unchecked(out.next_boards))
        boards = out.boards
    return agent, buffer


def legacy_update(agent: DQNAgent, batch: Minibatch) -> float:
    """The legacy per-transition replay step of the original trainer (the ``seed`` preset) on ``agent``.

    For each of the ``B`` transitions: predict the target network on ``s'``,
    predict the online network on ``s``, overwrite the taken action's value with
    ``r + gamma max Q_target(s')`` (just ``r`` if terminal), and fit on that single
    sample with MSE over all four outputs (one optimiser step each), as in the
    Keras ``predict``/``predict``/``fit`` loop of the original trainer. Kept to
    measure how much batching gains (``python -m dqnlab bench update``); counts
    as one update of ``agent`` (and syncs its target network when due). Plain DQN only
    (no afterstates).

    Returns
    -------
    float
        Mean of the ``B`` single-sample losses.

    Raises
    ------
    ValueError
        For an agent with ``config.afterstate``.
    """
    import torch
    from torch.nn import functional as F

    config = agent.config
    if config.afterstate:
        raise ValueError("legacy_update is the legacy per-transition Q-learning loop; it needs afterstate=False")

    def tensor(x: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(x)).to(agent.device)

    losses = []
    for i in range(len(batch.actions)):
        s, s2 = tensor(batch.boards[i : i + 1]), tensor(batch.next_boards[i : i + 1])
        with torch.no_grad():
            target = float(batch.rewards[i])
            if not batch.dones[i]:
                target += config.gamma * float(agent.target(s2).max())
            target_f = agent.online(s).clone()
        target_f[0, int(batch.actions[i])] = target
        loss = F.mse_loss(agent.online(s), target_f)
        agent.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        agent.optimizer.step()
        losses.append(float(loss.detach()))
    agent.updates += 1
    if config.target_update and agent.updates % config.target_update == 0:
        agent.sync_target()
    return float(np.mean(losses))


def keras_legacy_step(config: TrainConfig, seed: int) -> Callable[[Minibatch], None] | None:
    """The legacy per-transition loop verbatim in Keras (``predict``, ``predict``, ``fit`` per sample).

    Keras 3 on its PyTorch backend stands in for the original trainer's Keras; returns None if
    Keras is not installed (it is in the ``dev`` and ``bench`` extras).
    """
    os.environ.setdefault("KERAS_BACKEND", "torch")
    try:
        import keras
    except ImportError:
        return None
    keras.utils.set_random_seed(seed)

    def mlp():
        return keras.Sequential([keras.Input((16,))]
                                + [keras.layers.Dense(h, activation="relu") for h in config.hidden]
                                + [keras.layers.Dense(4)])

    model, target = mlp(), mlp()
    model.compile(optimizer=keras.optimizers.Adam(config.lr), loss="mse")
    target.set_weights(model.get_weights())

    def raw(boards: np.ndarray) -> np.ndarray:
        b = boards.reshape(len(boards), 16).astype(np.float32)
        return np.where(b > 0, 2.0 ** b, 0.0).astype(np.float32)

    def step(batch: Minibatch) -> None:
        states, next_states = raw(batch.boards), raw(batch.next_boards)
        for i in range(len(batch.actions)):
            target_value = float(batch.rewards[i])
            if not batch.dones[i]:
                target_value += config.gamma * float(np.amax(target.predict(next_states[i : i + 1], verbose=0)[0]))
            target_f = model.predict(states[i : i + 1], verbose=0)
            target_f[0][int(batch.actions[i])] = target_value
            model.fit(states[i : i + 1], target_f, epochs=1, verbose=0)

    return step


def bench_update(repeats: int = 5, min_time: float = 0.5, seed: int = 0, keras: bool = True) -> dict[str, Any]:
    """Seconds per env step of the legacy per-transition loop vs the batched update.

    Uses the ``seed`` preset (one replay step of 64 transitions after every move, on
    the original trainer's 16-256-256-4 network), so seconds per update = seconds per env step.
    PyTorch runs on one thread for all three, so the comparison is about the loop,
    not about how many cores happen to be free.

    Returns
    -------
    dict
        ``rows``: one per method (``legacy_keras`` if Keras is installed and ``keras``
        is true, ``legacy_torch``, ``batched``) with ``seconds_per_env_step``;
        ``ratio``: legacy_torch / batched; ``ratio_keras``: legacy_keras / batched
        (None without Keras); ``batch_size``.
    """
    import torch

    config = TrainConfig.preset("seed")
    agent, buffer = agent_and_buffer(config, seed)
    batch = buffer.sample(config.batch_size)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        times = _time_updates(agent, batch, config, repeats, min_time, seed, keras)
    finally:
        torch.set_num_threads(threads)
    rows = [{"method": k, "seconds_per_env_step": v} for k, v in times.items()]
    return {
        "batch_size": config.batch_size, "torch_threads": 1, "rows": rows,
        "ratio": times["legacy_torch"] / times["batched"],
        "ratio_keras": times["legacy_keras"] / times["batched"] if "legacy_keras" in times else None,
    }


def _time_updates(agent: DQNAgent, batch: Minibatch, config: TrainConfig, repeats: int, min_time: float,
                  seed: int, keras: bool) -> dict[str, float]:
    times = {
        "batched": median_time(lambda: agent.update(batch), repeats, min_time),
        "legacy_torch": median_time(lambda: legacy_update(agent, batch), repeats, min_time),
    }
    keras_step = keras_legacy_step(config, seed) if keras else None
    if keras_step is not None:
        times["legacy_keras"] = median_time(lambda: keras_step(batch), max(1, repeats // 2), min_time)
    return times
