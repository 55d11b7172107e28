"""``bench scaling``: speed and time split of each scheme at each worker count."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..config import TrainConfig
from ..schemes import parse_scheme_spec
from .timing import warm_up

__all__ = ["SCALING_SCHEMES", "scaling_config", "bench_scaling"]


def _steady_rate(history: Any, column: str) -> float:
    """Rate of ``column`` per second over the second half of a run's history."""
    h = history
    if len(h) < 3:
        return float("nan")
    half = h["wall_time_s"].iloc[-1] / 2
    a, b = h[h["wall_time_s"] >= half].iloc[0], h.iloc[-1]
    dt = b["wall_time_s"] - a["wall_time_s"]
    return float((b[column] - a[column]) / dt) if dt > 0 else float("nan")


#: Every scheme, and the variants whose speed differs most (on the n-tuple presets the long-lived workers are
#: threads; ``threads=false``: the same scheme on processes): what ``bench scaling`` measures by default.
SCALING_SCHEMES = ("serial", "independent", "independent:threads=false", "shared", "shared:lock=false",
                   "shared:threads=false", "sharded", "averaged", "averaged:average_every=16", "actors",
                   "actors:threads=false")


def bench_scaling(schemes: Sequence[str] = SCALING_SCHEMES, workers: Sequence[int] = (1, 2), seconds: float = 20.0,
                  config: TrainConfig | None = None, seed: int = 0, eval_games: int = 0) -> list[dict[str, Any]]:
    """Speed and time split of each scheme at each worker count, one timed run each.

    Every run trains for ``seconds`` of wall time (no step budget) with the same
    config. Before each run the joblib pool of that size is started (its start-up is
    not what is measured); everything else -- the manager, shared memory, sending
    weights -- is. ``serial`` runs only with 1 worker. Runs are sequential, so one
    run never competes with another, but the machine's other load does: compare
    rows of one call, and repeat. A first ``serial`` run of ``seconds``, not a row, goes
    before them: the first run in a process pays for the memory it is the first to touch
    (page faults, dear on a virtual machine), which would slow whichever row came first.

    Parameters
    ----------
    schemes : sequence of str
        Names in :data:`dqnlab.SCHEMES`, each optionally followed by scheme options as
        ``:OPTION=VALUE`` (``averaged:average_every=4``); a bare ``:VALUE`` is the ``comm``
        option of ``sharded`` and ``averaged`` (``sharded:joblib``; default ``allreduce``).
    workers : sequence of int
        Worker counts (>= 1).
    seconds : float
        Wall-clock budget of each run (> 0).
    config : TrainConfig, optional
        Default: the ``default`` preset (:func:`scaling_config`).
    seed : int
    eval_games : int
        If > 0, each run's final weights play this many greedy games (seed ``seed + 1``,
        the same games for every run) and the row gets ``greedy_score_mean``: the
        score after the same wall-clock budget.

    Returns
    -------
    list of dict
        One row per run: ``scheme``, ``spec`` (as given), ``workers``, ``wall_time_s``, ``env_steps``,
        ``updates``, ``env_steps_per_s`` and ``updates_per_s`` (whole run),
        ``steady_env_steps_per_s`` and ``steady_updates_per_s`` (second half of the
        run, after learning has started), ``acting`` / ``learning`` /
        ``communication`` (fractions of the time split summed over workers) and the
        same in seconds (``*_s``), ``speedup_vs_serial`` (env steps/s over serial's,
        when serial is in ``schemes``), ``learning_starts``, ``batch_size``,
        ``parent_torch_threads`` and ``worker_torch_threads`` (torch intra-op threads
        of this process and of each worker), ``options``, ``extra`` (e.g.
        ``lock_wait_s``, ``effective_batch``).

    Notes
    -----
    On a machine busy with other work, torch's default intra-op threads (one per core)
    can make an update in the main thread many times slower than with one thread
    (the OpenMP threads wait for cores); schemes that compute in the parent
    (``serial``, ``sharded``, ``averaged``) suffer most. Measure on a quiet machine.

    Raises
    ------
    ValueError
        For an unknown scheme, a worker count < 1, or ``seconds`` <= 0.
    """
    import torch

    from ..evaluation import evaluate
    from ..schemes import train

    schemes, workers = list(schemes), list(workers)
    runs = [(spec, *parse_scheme_spec(spec)) for spec in schemes]
    if not workers or any(not isinstance(k, int) or isinstance(k, bool) or k < 1 for k in workers):
        raise ValueError(f"workers must be integers >= 1, got {workers!r}")
    if not isinstance(seconds, (int, float)) or not 0 < seconds < float("inf"):
        raise ValueError(f"seconds must be a number > 0, got {seconds!r}")
    base = config or scaling_config("default")
    cfg = base.replace(total_env_steps=None, max_seconds=float(seconds), seed=seed)
    rows: list[dict[str, Any]] = []
    train("serial", cfg, progress=False)  # (the process's first touches of its memory: not a row)
    for spec, name, options in runs:
        for k in workers:
            if name == "serial" and k != 1:
                continue
            warm_up(k)  # start the pool: its start-up is not what a row measures
            run = train(name, cfg, workers=k, progress=False, **options)
            split = run.time_split
            total = sum(split.values())
            extra = {key: v for key, v in run.extra.items()
                     if key in ("lock_wait_s", "effective_batch", "syncs", "round_ms_mean", "comm_bytes_per_update",
                                "lost_increments", "averages",
                                "achieved_replay_ratio_learning", "param_lag", "throttle_pauses")}
            rows.append({
                "scheme": name, "spec": spec, "workers": k, "wall_time_s": run.wall_time_s, "env_steps": run.env_steps,
                "updates": run.updates, "env_steps_per_s": run.env_steps_per_s, "updates_per_s": run.updates_per_s,
                "steady_env_steps_per_s": _steady_rate(run.history, "env_steps"),
                "steady_updates_per_s": _steady_rate(run.history, "updates"),
                **{key: (split.get(key, 0.0) / total if total > 0 else float("nan"))
                   for key in ("acting", "learning", "communication")},
                **{f"{key}_s": split.get(key, 0.0) for key in ("acting", "learning", "communication")},
                "learning_starts": cfg.learning_starts, "batch_size": cfg.batch_size,
                "parent_torch_threads": torch.get_num_threads(),
                "worker_torch_threads": run.extra.get("torch_threads_per_worker"),
                "options": run.options, "extra": extra,
                "greedy_score_mean": (evaluate(run, games=eval_games, seed=seed + 1).summary()["score_mean"]
                                      if eval_games > 0 else None),
            })
    serial = next((r["env_steps_per_s"] for r in rows if r["scheme"] == "serial"), None)
    for r in rows:
        r["speedup_vs_serial"] = r["env_steps_per_s"] / serial if serial else None
    return rows


def scaling_config(preset: str) -> TrainConfig:
    """The config ``bench scaling`` runs for ``preset``: the preset's, and for a neural network's
    (``mlp``, ``cnn``), ``learning_starts=2_000`` and ``buffer_size=50_000``, so that learning starts early
    in a short run (the n-tuple presets' learning starts within a second)."""
    config = TrainConfig.preset(preset)
    return config if config.network == "ntuple" else config.replace(learning_starts=2_000, buffer_size=50_000)
