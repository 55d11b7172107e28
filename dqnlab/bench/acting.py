"""``bench acting``: env steps per second of one process's vectorised acting."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..config import TrainConfig
from ..parallel.threads import torch_threads_set
from .timing import median_time

__all__ = ["bench_acting"]


def bench_acting(n_envs: Sequence[int] = (1, 8, 64), repeats: int = 5, min_time: float = 0.3,
                 config: TrainConfig | None = None, threads: int | None = 1, seed: int = 0) -> list[dict[str, Any]]:
    """Env steps per second of one process's acting at each ``n_envs`` (vectorised acting).

    Times :meth:`dqnlab.runtime.learner.Learner.act_step` -- the acting every scheme
    (and every ``actors`` worker) does: one batched forward pass over ``n_envs``
    boards, one vectorised game step, the replay append and episode bookkeeping --
    with greedy play (epsilon 0, so every board goes through the network, as late in
    training) and no learning. Boards come from a few hundred warm-up steps.

    Parameters
    ----------
    n_envs : sequence of int
        Boards stepped at once (>= 1 each).
    repeats, min_time : int, float
        As in :func:`median_time` (seconds per repeat).
    config : TrainConfig, optional
        Network and game settings; default the ``mlp`` preset.
    threads : int or None
        PyTorch threads while measuring (default 1, as in an ``actors`` worker); None
        leaves the setting alone.
    seed : int

    Returns
    -------
    list of dict
        One row per ``n_envs``: ``n_envs``, ``env_steps_per_s``, ``us_per_env_step``
        (microseconds), ``ms_per_step`` (one vectorised step), ``speedup`` (env steps/s
        over the first row's), ``torch_threads``.

    Raises
    ------
    ValueError
        If ``n_envs`` is empty or holds a value < 1.
    """
    from ..runtime.learner import Learner

    n_envs = list(n_envs)
    if not n_envs or any(not isinstance(n, int) or isinstance(n, bool) or n < 1 for n in n_envs):
        raise ValueError(f"n_envs must be integers >= 1, got {n_envs!r}")
    base = config or TrainConfig.preset("mlp")
    rows: list[dict[str, Any]] = []
    with torch_threads_set(threads):
        import torch

        for n in n_envs:
            cfg = base.replace(n_envs=n, epsilon_start=0.0, epsilon_end=0.0, learning_starts=10**9,
                               buffer_size=max(base.batch_size, 20_000), total_env_steps=None, max_seconds=1.0,
                               seed=seed)
            learner = Learner(cfg)
            for _ in range(max(1, 300 // n)):
                learner.act_step()
            t = median_time(learner.act_step, repeats, min_time)
            rows.append({"n_envs": n, "env_steps_per_s": n / t, "us_per_env_step": 1e6 * t / n,
                         "ms_per_step": 1e3 * t, "torch_threads": torch.get_num_threads()})
    for r in rows:
        r["speedup"] = r["env_steps_per_s"] / rows[0]["env_steps_per_s"]
    return rows
