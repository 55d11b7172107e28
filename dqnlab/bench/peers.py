"""``bench peers``: dqnlab beside Stable-Baselines3 and the gymnasium-2048 package.

The game (:func:`~dqnlab.bench.game.bench_game`), the legacy per-transition loop
(:func:`~dqnlab.bench.update.bench_update`), dqnlab's ``serial`` learner and SB3's DQN
timed in alternation on the same config, and each parallel scheme's rate; and the
markdown they make (the ``peers`` record of the results store, :mod:`dqnlab.bench.store`).
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Sequence
from typing import Any

from ..config import TrainConfig
from ..parallel.threads import torch_threads_set
from .game import bench_game
from .report import machine_info, md_machine, md_table
from .sb3 import sb3_dqn_settings, sb3_env
from .timing import warm_up
from .update import bench_update, mlp_preset

__all__ = ["PEER_SETTINGS", "compare_sb3", "scheme_rate", "bench_peers", "same_replay_ratio", "peers_markdown"]


#: Measurement settings of :func:`bench_peers`: ``warmup`` env steps before timing (learning
#: has started and epsilon reached its end on both sides by then), and config overrides
#: applied to both sides alike. ``mlp`` decays epsilon over 10,000 env steps instead
#: of 200,000 so that the timed window starts at the final epsilon within a short run.
PEER_SETTINGS: dict[str, dict[str, Any]] = {
    "seed": {"warmup": 1_000, "overrides": {}},
    "mlp": {"warmup": 12_000, "overrides": {"epsilon_decay_steps": 10_000}},
}


def compare_sb3(preset: str = "seed", seconds: float = 20.0, threads: int | None = 1, seed: int = 0,
                chunk_s: float = 0.5, warmup: int | None = None) -> dict[str, Any]:
    """dqnlab's ``serial`` learner and SB3's DQN on the same config, timed in alternation.

    Both sides first play ``warmup`` env steps (untimed; see :data:`PEER_SETTINGS`), then
    take turns of about ``chunk_s`` seconds each until ``seconds`` have passed in all, so
    that background load falls on both alike. dqnlab runs :class:`~dqnlab.runtime.learner.Learner`
    (the loop of the ``serial`` scheme); SB3 runs ``DQN.learn`` on :func:`sb3_env` with
    :func:`sb3_dqn_settings`, continuing across turns, its epsilon held at its final value
    after the warm-up (as dqnlab's is by then).

    Returns
    -------
    dict
        ``preset``, ``threads``, ``warmup``, ``seconds``, ``mapping`` (see
        :func:`sb3_dqn_settings`), ``rows`` (one per side: ``name``, ``env_steps``,
        ``updates``, ``seconds`` and ``cpu_seconds`` of its turns, ``env_steps_per_s``
        (wall clock), ``env_steps_per_cpu_s`` (per second of this process's CPU time:
        with one thread, the rate on a core of its own; see :func:`work_clock`),
        ``updates_per_1000_steps``, ``epsilon``), ``ratio`` (dqnlab env steps/s over
        SB3's, wall clock), ``ratio_cpu`` (the same in CPU time), ``ratio_turns``
        (median over turns of the wall-clock ratio) and ``sb3_version``.

    Raises
    ------
    ImportError
        If Stable-Baselines3 is not installed.
    """
    import stable_baselines3
    from stable_baselines3 import DQN

    from ..runtime.learner import Learner

    setting = PEER_SETTINGS.get(preset, {"warmup": 1_000, "overrides": {}})
    warmup = setting["warmup"] if warmup is None else warmup
    config = mlp_preset(preset, "bench peers", seed=seed, total_env_steps=10 ** 9, **setting["overrides"])
    n = config.n_envs
    warmup = max(n, -(-warmup // n) * n)
    with torch_threads_set(threads):
        learner = Learner(config)
        learner.run(warmup)
        kwargs, mapping = sb3_dqn_settings(config, warmup)
        model = DQN("MlpPolicy", sb3_env(config), **kwargs)
        model.learn(warmup)
        final_eps = config.epsilon_end
        model.exploration_schedule = lambda _progress: final_eps  # its final value, as dqnlab's is now

        def ours(steps: int) -> tuple[int, int]:
            e0, u0 = learner.env_steps, learner.updates
            learner.run(steps)
            return learner.env_steps - e0, learner.updates - u0

        def theirs(steps: int) -> tuple[int, int]:
            e0, u0 = model.num_timesteps, model._n_updates
            model.learn(steps, reset_num_timesteps=False)
            return model.num_timesteps - e0, model._n_updates - u0

        sides = {"dqnlab serial": ours, f"SB3 {stable_baselines3.__version__} DQN": theirs}
        totals = {name: [0, 0, 0.0, 0.0] for name in sides}  # env steps, updates, wall s, CPU s
        turn_rates: dict[str, list[float]] = {name: [] for name in sides}
        chunk = {name: 8 * n for name in sides}
        t_end = time.perf_counter() + seconds
        while time.perf_counter() < t_end or not all(turn_rates.values()):
            for name, advance in sides.items():
                t0, c0 = time.perf_counter(), time.process_time()
                steps, updates = advance(chunk[name])
                dt, dc = time.perf_counter() - t0, time.process_time() - c0
                for i, v in enumerate((steps, updates, dt, dc)):
                    totals[name][i] += v
                turn_rates[name].append(steps / dt)
                chunk[name] = max(n, int(steps / dt * chunk_s) // n * n)
        epsilons = dict(zip(sides, (learner.epsilon, model.exploration_rate)))
    rows = [{"name": name, "env_steps": e, "updates": u, "seconds": t, "cpu_seconds": c, "env_steps_per_s": e / t,
             "env_steps_per_cpu_s": e / c if c > 0 else math.nan, "updates_per_1000_steps": 1000 * u / e,
             "epsilon": epsilons[name], "window": "alternating turns"}
            for name, (e, u, t, c) in totals.items()]
    ours_rates, their_rates = turn_rates.values()
    return {
        "preset": preset, "threads": threads, "warmup": warmup, "seconds": seconds, "mapping": mapping,
        "overrides": setting["overrides"], "rows": rows,
        "ratio": rows[0]["env_steps_per_s"] / rows[1]["env_steps_per_s"],
        "ratio_cpu": rows[0]["env_steps_per_cpu_s"] / rows[1]["env_steps_per_cpu_s"],
        "ratio_turns": statistics.median(a / b for a, b in zip(ours_rates, their_rates)),
        "sb3_version": stable_baselines3.__version__,
    }


def scheme_rate(scheme: str, preset: str = "seed", workers: int = 2, seconds: float = 20.0,
                seed: int = 0, warmup: int | None = None) -> dict[str, Any]:
    """Env steps/s of one :func:`dqnlab.train` run after ``warmup`` env steps (all workers).

    The run has a wall-clock budget of ``seconds`` (the warm-up included) and the
    config of :data:`PEER_SETTINGS`; the rate is taken from the run's progress history
    (about one row a second) from the first row past the warm-up to the end.

    Returns
    -------
    dict
        ``name``, ``scheme``, ``workers``, ``env_steps``, ``updates``, ``seconds`` (of
        the window), ``env_steps_per_s`` (NaN if no env step was taken),
        ``updates_per_1000_steps``, ``window`` (``"after warm-up"``, or ``"whole run"``
        when fewer than two progress rows came after the warm-up), ``status``.
    """
    from ..schemes import train

    setting = PEER_SETTINGS.get(preset, {"warmup": 1_000, "overrides": {}})
    warmup = setting["warmup"] if warmup is None else warmup
    config = TrainConfig.preset(preset, seed=seed, total_env_steps=None, max_seconds=float(seconds),
                                **setting["overrides"])
    warm_up(workers)  # its start-up is not what the row measures
    run = train(scheme, config, workers=workers, progress=False)
    h = run.history
    window, kind = h[h["env_steps"] >= warmup], "after warm-up"
    if len(window) < 2:  # the scheme reported too rarely: fall back to the whole run
        window, kind = h, "whole run"
    first, last = window.iloc[0], window.iloc[-1]
    e, u = int(last["env_steps"] - first["env_steps"]), int(last["updates"] - first["updates"])
    t = float(last["wall_time_s"] - first["wall_time_s"])
    rate = e / t if t > 0 and e > 0 else math.nan
    return {"name": f"dqnlab {scheme} x{workers}", "scheme": scheme, "workers": workers, "env_steps": e,
            "updates": u, "seconds": t, "env_steps_per_s": rate,
            "updates_per_1000_steps": 1000 * u / e if e else math.nan, "window": kind, "status": run.status}


def bench_peers(presets: Sequence[str] = ("seed", "mlp"), seconds: float = 20.0, threads: int | None = 1,
                workers: int = 2, scheme_seconds: float = 20.0, schemes: Sequence[str] | None = None,
                keras: bool = True, game_seconds: float = 0.5, update_min_time: float = 0.5,
                warmup: int | None = None, seed: int = 0) -> dict[str, Any]:
    """Everything of ``python -m dqnlab bench peers``: the game, the legacy loop, SB3 side by side.

    Parameters
    ----------
    presets : sequence of str
        Presets compared with SB3 (each with :func:`compare_sb3`, ``seconds`` of alternation).
    seconds : float
        Seconds of alternating dqnlab / SB3 turns per preset (both sides together).
    threads : int or None
        ``torch.set_num_threads`` for this process during the comparisons (None: as is).
    workers : int
        Worker count of the parallel-scheme rows.
    scheme_seconds : float
        Wall-clock budget of each parallel-scheme run (:func:`scheme_rate`).
    schemes : sequence of str, optional
        Parallel schemes to run with ``workers`` workers; default every scheme in
        :data:`dqnlab.SCHEMES` except ``serial``; ``()`` for none.
    keras : bool
        Include the legacy per-transition loop in Keras in the update rows (slow: a ``fit`` per transition).
    game_seconds, update_min_time : float
        Measuring time of the game rows and of each :func:`bench_update` repeat.
    warmup : int, optional
        Untimed env steps before each comparison; default per preset (:data:`PEER_SETTINGS`).
    seed : int

    Returns
    -------
    dict
        ``machine`` (:func:`machine_info`), ``threads``, ``game`` (:func:`bench_game`),
        ``update`` (:func:`bench_update`), ``sb3`` (one :func:`compare_sb3` result per
        preset, each with ``schemes``: the :func:`scheme_rate` rows, each with ``ratio``
        over SB3; a scheme that raises gets a row with ``status`` "failed" and the
        message in ``window``), or ``sb3`` = None with ``sb3_missing`` if Stable-Baselines3
        is not installed.
    """
    from ..schemes import SCHEMES

    out: dict[str, Any] = {"machine": machine_info(), "threads": threads}
    with torch_threads_set(threads):
        out["game"] = bench_game(seconds=game_seconds, seed=seed)
    out["update"] = bench_update(repeats=3, min_time=update_min_time, seed=seed, keras=keras)
    if schemes is None:
        schemes = [s for s in SCHEMES if s != "serial"]
    try:
        import stable_baselines3  # noqa: F401
    except ImportError:
        out["sb3"], out["sb3_missing"] = None, "stable-baselines3 is not installed: pip install 'dqnlab[bench]'"
        return out
    out["sb3"] = []
    for preset in presets:
        res = compare_sb3(preset, seconds=seconds, threads=threads, seed=seed, warmup=warmup)
        sb3_rate = res["rows"][1]["env_steps_per_s"]
        res["schemes"] = []
        for scheme in schemes:
            try:
                with torch_threads_set(threads):
                    row = scheme_rate(scheme, preset, workers=workers, seconds=scheme_seconds, seed=seed,
                                      warmup=warmup)
            except Exception as e:  # noqa: BLE001 - one failing scheme must not lose the other rows
                message = str(e).splitlines()[0] if str(e) else type(e).__name__
                row = {"name": f"dqnlab {scheme} x{workers}", "scheme": scheme, "workers": workers, "env_steps": 0,
                       "updates": 0, "seconds": math.nan, "env_steps_per_s": math.nan,
                       "updates_per_1000_steps": math.nan, "window": f"failed: {message}", "status": "failed"}
            row["ratio"] = row["env_steps_per_s"] / sb3_rate
            res["schemes"].append(row)
        out["sb3"].append(res)
    return out


def same_replay_ratio(row: dict[str, Any], serial: dict[str, Any], tolerance: float = 0.05) -> bool | None:
    """Whether ``row`` did as many updates per env step as ``serial`` (within ``tolerance``);
    None when unknown (no steps, or a window that includes the steps before learning starts)."""
    ours, ref = row.get("updates_per_1000_steps", math.nan), serial["updates_per_1000_steps"]
    if ours is None or math.isnan(ours) or not ref or row.get("window") == "whole run":
        return None
    return abs(ours / ref - 1) <= tolerance


def peers_markdown(res: dict[str, Any], command: str = "python -m dqnlab bench peers") -> str:
    """The ``bench peers`` result as markdown from :func:`bench_peers` output."""
    out = ["## Peers, side by side (`bench peers`)", "", md_machine(res["machine"], res["threads"], command), ""]
    for s in res["sb3"] or []:
        out += [f"### Stable-Baselines3 DQN vs dqnlab, `{s['preset']}` preset", ""]
        over = ", ".join(f"{k}={v:,}" for k, v in s["overrides"].items())
        out += [f"Both sides play {s['warmup']:,} env steps untimed (learning has started and epsilon has "
                f"reached its end by then{'; bench override applied to both: ' + over if over else ''}), then "
                f"take turns of about half a second each for {s['seconds']:g} s in all, in this one process. SB3 "
                f"{s['sb3_version']} runs on dqnlab's own `Game2048` through gymnasium, with the same network and "
                "hyperparameters (mapping below). Rates per second of wall-clock time, and per second of this "
                "process's CPU time (with one PyTorch thread: the rate each would have on a core of its own, "
                "which a busy shared machine does not give either).", ""]
        sb3, sb3_cpu = s["rows"][1]["env_steps_per_s"], s["rows"][1]["env_steps_per_cpu_s"]
        rows = [{**r, "vs_sb3": r["env_steps_per_s"] / sb3,
                 "vs_sb3_cpu": r["env_steps_per_cpu_s"] / sb3_cpu if "env_steps_per_cpu_s" in r else None,
                 "same_ratio": same_replay_ratio(r, s["rows"][0])}
                for r in [*s["rows"], *s.get("schemes", [])]]
        out += [md_table(rows, {"name": "run", "env_steps_per_s": "env steps/s", "vs_sb3": "× SB3",
                                 "env_steps_per_cpu_s": "env steps per CPU s", "vs_sb3_cpu": "× SB3 (CPU)",
                                 "updates_per_1000_steps": "updates per 1,000 env steps",
                                 "same_ratio": "replay ratio kept", "env_steps": "env steps timed",
                                 "window": "window"},
                          {"env_steps_per_s": "{:,.0f}", "vs_sb3": "{:.2f}", "env_steps_per_cpu_s": "{:,.0f}",
                           "vs_sb3_cpu": "{:.2f}", "updates_per_1000_steps": "{:,.1f}", "env_steps": "{:,}"}), ""]
        out += [f"dqnlab serial / SB3: **{s['ratio']:.2f}x** wall-clock (median over turns {s['ratio_turns']:.2f}x), "
                f"**{s['ratio_cpu']:.2f}x** in CPU time. "
                + ("The parallel rows are separate `dqnlab.train` runs with "
                   f"{s['schemes'][0]['workers']} workers made right after (not interleaved; several processes, so "
                   "wall clock only), timed from the run's progress history past the same warm-up. A row whose "
                   "updates per env step differ from serial's by more than 5% does not train at the same "
                   "hyperparameters (replay ratio not kept), so its speed is not a like-for-like comparison."
                   if s.get("schemes") else ""), ""]
        kept = [r for r in rows[2:] if r["same_ratio"] and not math.isnan(r["env_steps_per_s"])]
        if kept:
            best = max(kept, key=lambda r: r["env_steps_per_s"])
            out += [f"Fastest parallel scheme at the same replay ratio: **{best['name']}, {best['vs_sb3']:.2f}x "
                    "SB3** (wall clock).", ""]
        out += ["<details><summary>Hyperparameter mapping</summary>", "",
                md_table(s["mapping"], {"field": "field", "dqnlab": "dqnlab", "sb3": "SB3", "same": "same",
                                         "note": "note"}), "", "</details>", ""]
    if res["sb3"] is None:
        out += [f"SB3 rows skipped: {res.get('sb3_missing')}.", ""]
    g = res["game"]
    out += ["### The game", "", "Uniformly random actions (illegal ones included), reset at game over; timed in "
            "alternation, per second of CPU time.", "",
            md_table(g["rows"], {"package": "package", "what": "what", "boards": "boards",
                                  "env_steps_per_s": "env steps/s"}, {"env_steps_per_s": "{:,.0f}"}), ""]
    info = g["gymnasium_2048"]
    if info["version"]:
        out += [f"`Game2048.step` / gymnasium-2048's step: **{g['ratio_step']:.2f}x**; "
                f"`VecGame2048.step` of {g['rows'][1]['boards']:,} boards / gymnasium-2048's step: "
                f"**{g['rows'][1]['env_steps_per_s'] / g['rows'][3]['env_steps_per_s']:,.0f}x**. "
                f"Scores: gymnasium-2048 {info['version']} gave dqnlab's reward on {info['scores_agree']:,} of "
                f"{info['moves_checked']:,} random moves. {info['note']}", ""]
    else:
        out += ["gymnasium-2048 is not installed (`pip install gymnasium-2048`): its row is missing.", ""]
    u = res["update"]
    out += ["### The legacy per-transition loop", "",
            "One replay step of the `seed` preset (64 transitions, 16-256-256-4, "
            f"PyTorch on {u['torch_threads']} thread) per move, from `bench update` (wall clock).", "",
            md_table([{**r, "per_s": 1 / r["seconds_per_env_step"]} for r in u["rows"]],
                      {"method": "method", "seconds_per_env_step": "seconds per env step",
                       "per_s": "env steps/s (learning only)"},
                      {"seconds_per_env_step": "{:.4g}", "per_s": "{:,.1f}"}), "",
            f"Batched: {u['ratio']:,.0f}x faster than the same loop in PyTorch"
            + (f", {u['ratio_keras']:,.0f}x faster than in Keras." if u.get("ratio_keras") else "."), ""]
    return "\n".join(out)
