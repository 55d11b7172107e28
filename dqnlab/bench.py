"""Benchmarks: figures measured in one run, as medians of repeats.

Each function returns plain data (a list of row dicts or a dict) that the command
line prints as a table or JSON. Timings are wall-clock seconds from
``time.perf_counter``; quote ratios measured in one run, not absolute times from
different runs (the machines are small and noisy).
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from .agent import DQNAgent
from .config import TrainConfig
from .env import Game2048, VecGame2048, _legal_actions_unchecked, move_batch
from .replay import Minibatch, ReplayBuffer

__all__ = ["bench_env", "bench_update", "median_time"]


def median_time(fn: Callable[[], Any], repeats: int = 5, min_time: float = 0.2) -> float:
    """Median over ``repeats`` of the mean seconds per call of ``fn``.

    Each repeat calls ``fn`` until at least ``min_time`` seconds have passed (at least once).
    """
    fn()  # warm-up
    per_call = []
    for _ in range(repeats):
        n, t0 = 0, time.perf_counter()
        while True:
            fn()
            n += 1
            dt = time.perf_counter() - t0
            if dt >= min_time:
                break
        per_call.append(dt / n)
    return statistics.median(per_call)


def _played_boards(n: int, seed: int, moves: int = 60) -> np.ndarray:
    """``n`` mid-game boards: ``moves`` random legal moves from a fresh game (auto-reset)."""
    env = VecGame2048(n, seed=seed)
    rng = np.random.default_rng(seed)
    boards = env.boards
    for _ in range(moves):
        masks = _legal_actions_unchecked(boards)
        boards = env.step(np.where(masks, rng.random(masks.shape), -1).argmax(1)).boards
    return boards


def bench_env(sizes: tuple[int, ...] = (1, 64, 1024, 16384), repeats: int = 5,
              min_time: float = 0.2, seed: int = 0) -> list[dict[str, Any]]:
    """Moves per second of :func:`move_batch` at each batch size, and of ``Game2048.step``.

    Returns
    -------
    list of dict
        Rows with ``what``, ``boards`` and ``moves_per_s`` (env steps per second).
    """
    rows = []
    rng = np.random.default_rng(seed)
    for n in sizes:
        boards = _played_boards(n, seed)
        actions = rng.integers(0, 4, n)
        t = median_time(lambda: move_batch(boards, actions), repeats, min_time)
        rows.append({"what": "move_batch", "boards": n, "moves_per_s": n / t})
    env = Game2048()
    env.reset(seed=seed)
    state = {"mask": env._info()["action_mask"]}

    def step() -> None:
        legal = np.flatnonzero(state["mask"])
        _, _, term, trunc, info = env.step(int(rng.choice(legal)))
        state["mask"] = env.reset()[1]["action_mask"] if term or trunc else info["action_mask"]

    t = median_time(step, repeats, min_time)
    rows.append({"what": "Game2048.step", "boards": 1, "moves_per_s": 1 / t})
    return rows


def _seed_minibatch(config: TrainConfig, seed: int) -> tuple[DQNAgent, ReplayBuffer]:
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
                         _legal_actions_unchecked(out.next_boards))
        boards = out.boards
    return agent, buffer


def _keras_legacy_step(config: TrainConfig, seed: int) -> Callable[[Minibatch], None] | None:
    """The user's loop verbatim in Keras (``predict``, ``predict``, ``fit`` per sample).

    Keras 3 on its PyTorch backend stands in for the user's Keras; returns None if
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
    """Seconds per env step of the user's per-transition loop vs the batched update.

    Uses the ``seed`` preset (one replay step of 64 transitions after every move, on
    the user's 16-256-256-4 network), so seconds per update = seconds per env step.
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
    agent, buffer = _seed_minibatch(config, seed)
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
        "legacy_torch": median_time(lambda: agent.legacy_update(batch), repeats, min_time),
    }
    keras_step = _keras_legacy_step(config, seed) if keras else None
    if keras_step is not None:
        times["legacy_keras"] = median_time(lambda: keras_step(batch), max(1, repeats // 2), min_time)
    return times
