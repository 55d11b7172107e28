"""Benchmarks: figures measured in one run, as medians of repeats.

Each function returns plain data (a list of row dicts or a dict) that the command
line prints as a table or JSON. Timings are wall-clock seconds from
``time.perf_counter``; quote ratios measured in one run, not absolute times from
different runs (the machines are small and noisy).
"""

from __future__ import annotations

import datetime
import functools
import math
import os
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium
import numpy as np

from ..agent.dqn import N_EXPONENTS, DQNAgent, transform_rewards
from ..config import TrainConfig
from ..game.env import Game2048, VecGame2048, _legal_actions_unchecked, move_batch
from ..replay import Minibatch, ReplayBuffer
from ..parallel.threads import torch_threads_set

__all__ = ["bench_env", "bench_update", "bench_scaling", "bench_acting", "median_time",
           "bench_game", "bench_peers", "compare_sb3", "scheme_rate", "sb3_dqn_settings", "sb3_env",
           "bench_learner", "update_flops", "matmul_gflops", "PlainUpdate", "interleaved_times",
           "machine_info", "peers_markdown", "learner_markdown", "write_section"]


def _mlp_preset(name: str, what: str, **overrides: Any) -> TrainConfig:
    """``TrainConfig.preset(name, **overrides)`` for a benchmark of the MLP's update (SB3 and the
    FLOP count model a plain MLP Q-network); ValueError naming the preset otherwise."""
    config = TrainConfig.preset(name, **overrides)
    if config.network != "mlp" or config.afterstate:
        raise ValueError(f"{what} measures the MLP Q-network's update: preset {name!r} is a {config.network} "
                         f"network{' with afterstates' if config.afterstate else ''}; use 'mlp' or 'seed'")
    return config


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


def _steady_rate(history: Any, column: str) -> float:
    """Rate of ``column`` per second over the second half of a run's history."""
    h = history
    if len(h) < 3:
        return float("nan")
    half = h["wall_time_s"].iloc[-1] / 2
    a, b = h[h["wall_time_s"] >= half].iloc[0], h.iloc[-1]
    dt = b["wall_time_s"] - a["wall_time_s"]
    return float((b[column] - a[column]) / dt) if dt > 0 else float("nan")


def bench_scaling(schemes: Sequence[str] = ("serial", "independent", "shared", "sharded", "averaged"),
                  workers: Sequence[int] = (1, 2), seconds: float = 20.0, config: TrainConfig | None = None,
                  seed: int = 0, eval_games: int = 0) -> list[dict[str, Any]]:
    """Speed and time split of each scheme at each worker count, one timed run each.

    Every run trains for ``seconds`` of wall time (no step budget) with the same
    config. Before each run the joblib pool of that size is started (its start-up is
    not what is measured); everything else -- the manager, shared memory, sending
    weights -- is. ``serial`` runs only with 1 worker. Runs are sequential, so one
    run never competes with another, but the machine's other load does: compare
    rows of one call, and repeat.

    Parameters
    ----------
    schemes : sequence of str
        Names in :data:`dqnlab.SCHEMES`.
    workers : sequence of int
        Worker counts (>= 1).
    seconds : float
        Wall-clock budget of each run (> 0).
    config : TrainConfig, optional
        Default: the ``mlp`` preset with ``learning_starts=2_000`` (per learner)
        and ``buffer_size=50_000``, so that learning starts early in a short run.
    seed : int
    eval_games : int
        If > 0, each run's final weights play this many greedy games (seed ``seed + 1``,
        the same games for every run) and the row gets ``greedy_score_mean``: the
        score after the same wall-clock budget.

    Returns
    -------
    list of dict
        One row per run: ``scheme``, ``workers``, ``wall_time_s``, ``env_steps``,
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
    from ..experiments.figures import warm_up
    from ..schemes import SCHEMES, train

    schemes, workers = list(schemes), list(workers)
    for name in schemes:
        if name not in SCHEMES:
            raise ValueError(f"schemes must be among {sorted(SCHEMES)}, got {name!r}")
    if not workers or any(not isinstance(k, int) or isinstance(k, bool) or k < 1 for k in workers):
        raise ValueError(f"workers must be integers >= 1, got {workers!r}")
    if not isinstance(seconds, (int, float)) or not 0 < seconds < float("inf"):
        raise ValueError(f"seconds must be a number > 0, got {seconds!r}")
    base = config or TrainConfig.preset("mlp", learning_starts=2_000, buffer_size=50_000)
    cfg = base.replace(total_env_steps=None, max_seconds=float(seconds), seed=seed)
    rows: list[dict[str, Any]] = []
    for name in schemes:
        for k in workers:
            if name == "serial" and k != 1:
                continue
            warm_up(k)  # start the pool: its start-up is not what a row measures
            run = train(name, cfg, workers=k, progress=False)
            split = run.time_split
            total = sum(split.values())
            extra = {key: v for key, v in run.extra.items()
                     if key in ("lock_wait_s", "effective_batch", "syncs", "round_ms_mean", "lost_increments",
                                "achieved_replay_ratio_learning", "param_lag", "throttle_pauses")}
            rows.append({
                "scheme": name, "workers": k, "wall_time_s": run.wall_time_s, "env_steps": run.env_steps,
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


# =====================================================================================
# bench peers / bench learner (issue 7): dqnlab beside Stable-Baselines3 and the
# gymnasium-2048 package, and the learner beside the machine's matrix-product speed.
# =====================================================================================

def interleaved_times(fns: dict[str, Callable[[], Any]], rounds: int = 7, min_time: float = 0.1,
                      clock: Callable[[], float] = time.perf_counter) -> dict[str, float]:
    """Median seconds per call of each function, measured in alternation.

    Each of ``rounds`` rounds calls every function in turn until ``min_time`` seconds
    (of ``clock``) have passed, so background load falls on all of them alike (one
    warm-up call each). ``clock`` is wall-clock time by default; see :func:`work_clock`.
    """
    per_call: dict[str, list[float]] = {name: [] for name in fns}
    for fn in fns.values():
        fn()
    for _ in range(rounds):
        for name, fn in fns.items():
            n, t0 = 0, clock()
            while True:
                fn()
                n += 1
                dt = clock() - t0
                if dt >= min_time:
                    break
            per_call[name].append(dt / n)
    return {name: statistics.median(v) for name, v in per_call.items()}


def work_clock(threads: int | None) -> tuple[Callable[[], float], str]:
    """The clock to time single-threaded work with, and its name.

    With one PyTorch thread all the work runs on the calling thread, so the process's
    CPU time (``time.process_time``) measures it without the time other programs hold
    the core -- on a shared machine, a far steadier figure than wall-clock time, and
    the same on an idle one. With more threads, wall-clock time (``time.perf_counter``).
    """
    if threads == 1:
        return time.process_time, "CPU time of the measuring process"
    return time.perf_counter, "wall-clock time"


def machine_info() -> dict[str, Any]:
    """CPU model, logical cores, load average, library versions and the date (UTC)."""
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
        cpu = names[0] if names else cpu
    except OSError:
        pass
    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        load = None
    return {
        "cpu": cpu, "logical_cores": os.cpu_count(), "load_average_1_5_15min": load,
        "python": platform.python_version(), "torch": torch.__version__, "numpy": np.__version__,
        "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }


# ------------------------------------------------------------------------------ the game
def bench_game(seconds: float = 0.5, repeats: int = 5, boards: int = 1024, seed: int = 0,
               check_moves: int = 3_000) -> dict[str, Any]:
    """Env steps/s of dqnlab's game beside the ``gymnasium-2048`` package's env.

    Timed in alternation, in CPU time of this process (all of it single-threaded NumPy
    and Python; see :func:`work_clock`). Single-board envs play uniformly random actions
    (illegal ones included, as a learner's do) and reset at game over; ``boards`` boards are stepped at once
    through :class:`VecGame2048` and :func:`move_batch`. If ``gymnasium-2048`` is
    installed, its per-move rewards are also checked against :func:`dqnlab.move` on
    ``check_moves`` random moves (its releases up to 0.0.2 scored merges into 256 and
    above as 0 under NumPy 2, see ``note``).

    Returns
    -------
    dict
        ``rows``: ``package``, ``what``, ``boards``, ``env_steps_per_s``; ``gymnasium_2048``:
        ``version`` (None if not installed), ``moves_checked``, ``scores_agree``
        (moves whose reward equals dqnlab's), ``note``; ``ratio_step`` (Game2048.step over
        gymnasium-2048's step, None without it).
    """
    rng = np.random.default_rng(seed)
    min_time = seconds / repeats

    def single(env: Any) -> Callable[[], None]:
        env.reset(seed=seed)
        actions = rng.integers(0, 4, 1 << 16)
        state = {"i": 0}

        def step() -> None:
            state["i"] = (state["i"] + 1) & 0xFFFF
            if env.step(int(actions[state["i"]]))[2]:
                env.reset()
        return step

    fns = {("dqnlab", "Game2048.step (gymnasium API)", 1): single(Game2048())}
    vec = VecGame2048(boards, seed=seed)
    vec_actions = rng.integers(0, 4, (64, boards))
    played = _played_boards(boards, seed)
    counter = {"i": 0}

    def vec_step() -> None:
        counter["i"] = (counter["i"] + 1) % 64
        vec.step(vec_actions[counter["i"]])

    fns[("dqnlab", "VecGame2048.step (move, spawn, auto-reset)", boards)] = vec_step
    fns[("dqnlab", "move_batch (move only)", boards)] = lambda: move_batch(played, vec_actions[0])
    info: dict[str, Any] = {"version": None, "moves_checked": 0, "scores_agree": None, "note": _G2048_NOTE}
    try:
        from importlib.metadata import version

        from gymnasium_2048.envs import TwentyFortyEightEnv

        info["version"] = version("gymnasium-2048")
        fns[(f"gymnasium-2048 {info['version']}", "TwentyFortyEightEnv.step (gymnasium API)", 1)] = \
            single(TwentyFortyEightEnv())
        info["moves_checked"], info["scores_agree"] = _check_g2048_scores(TwentyFortyEightEnv(), check_moves, seed)
    except ImportError:
        pass
    times = interleaved_times(fns, rounds=repeats, min_time=min_time, clock=time.process_time)
    rows = [{"package": pkg, "what": what, "boards": n, "env_steps_per_s": n / times[(pkg, what, n)]}
            for (pkg, what, n) in fns]
    theirs = [r for r in rows if r["package"].startswith("gymnasium-2048")]
    return {"rows": rows, "gymnasium_2048": info,
            "ratio_step": rows[0]["env_steps_per_s"] / theirs[0]["env_steps_per_s"] if theirs else None}


_G2048_NOTE = (
    "gymnasium-2048 0.0.1 and 0.0.2 compute a merge's points as 2 ** (board[r, c] + 1) on the uint8 "
    "board: under NumPy 2 (NEP 50) that stays uint8 and wraps, so a merge into 256 or more scores 0 "
    "(2 ** 8 == 0 in uint8) and the uint8 running total overflows. 0.1.0 and later convert with .item() "
    "first; the check above plays random moves with the installed release and compares each reward with "
    "dqnlab.move. Only its speed is compared here; its observation is a (4, 4, 16) one-hot and it has no "
    "action mask, so its envs are not drop-in replacements for Game2048.")


def _check_g2048_scores(env: Any, moves: int, seed: int) -> tuple[int, int]:
    """Play ``moves`` random moves in a gymnasium-2048 env; count rewards equal to :func:`dqnlab.move`'s."""
    from ..game.env import move

    rng = np.random.default_rng(seed)
    env.reset(seed=seed)
    agree = 0
    for _ in range(moves):
        board, action = env.unwrapped.board.copy(), int(rng.integers(0, 4))
        _, reward, terminated, _, _ = env.step(action)
        agree += int(reward) == move(board, action)[1]
        if terminated:
            env.reset()
    return moves, agree


# -------------------------------------------------------------------- Stable-Baselines3
class OneHotObservation(gymnasium.ObservationWrapper):
    """A :class:`Game2048` observation as dqnlab's one-hot network input.

    ``(4, 4)`` uint8 exponents -> ``(288,)`` uint8 with a 1 at ``cell * 18 + exponent``
    for each of the 16 cells: exactly the input of dqnlab's ``"onehot"`` Q-network
    (SB3 turns a non-image Box into float32 before its first layer).
    """

    def __init__(self, env: gymnasium.Env):
        super().__init__(env)
        self.observation_space = gymnasium.spaces.Box(0, 1, (16 * N_EXPONENTS,), np.uint8)
        self._offsets = np.arange(16) * N_EXPONENTS

    def observation(self, board: np.ndarray) -> np.ndarray:
        out = np.zeros(16 * N_EXPONENTS, np.uint8)
        out[self._offsets + board.reshape(16)] = 1
        return out


class RawObservation(gymnasium.ObservationWrapper):
    """A :class:`Game2048` observation as dqnlab's ``"raw"`` input: ``(16,)`` float32 tile values."""

    def __init__(self, env: gymnasium.Env):
        super().__init__(env)
        self.observation_space = gymnasium.spaces.Box(0.0, float(2 ** 17), (16,), np.float32)

    def observation(self, board: np.ndarray) -> np.ndarray:
        b = board.reshape(16)
        return np.where(b > 0, np.exp2(b, dtype=np.float32), np.float32(0))


def _learner_reward(config: TrainConfig, reward: float) -> float:
    return float(transform_rewards(config, np.array([reward], np.float32))[0])


def sb3_env(config: TrainConfig) -> Any:
    """``config.n_envs`` :class:`Game2048` envs for SB3: a ``DummyVecEnv`` of
    Monitor -> reward transform (as dqnlab's learner sees rewards) -> observation as
    dqnlab's network input.

    Raises
    ------
    ImportError
        If Stable-Baselines3 is not installed (``pip install dqnlab[bench]``).
    """
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.vec_env import DummyVecEnv

    def make() -> gymnasium.Env:
        env: gymnasium.Env = Monitor(Game2048(max_moves=config.max_moves,
                                              invalid_move_reward=config.invalid_move_reward))
        if config.reward_transform != "none":
            env = gymnasium.wrappers.TransformReward(env, functools.partial(_learner_reward, config))
        return OneHotObservation(env) if config.encoding == "onehot" else RawObservation(env)

    return DummyVecEnv([make] * config.n_envs)


def sb3_dqn_settings(config: TrainConfig, total_env_steps: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Keyword arguments of SB3's ``DQN`` that match ``config``, and the field-by-field mapping.

    Parameters
    ----------
    config : TrainConfig
    total_env_steps : int
        Env steps of the first ``learn`` call (SB3's epsilon schedule is a fraction of it).

    Returns
    -------
    kwargs : dict
        For ``stable_baselines3.DQN("MlpPolicy", env, **kwargs)``.
    mapping : list of dict
        ``field``, ``dqnlab``, ``sb3``, ``same`` (bool), ``note``: one row per field.

    Raises
    ------
    ValueError
        If the replay ratio gives no whole number of updates per vectorised step (or
        of vectorised steps per update), which SB3's ``train_freq`` / ``gradient_steps``
        cannot express.
    """
    import torch

    c = config
    per_update = c.batch_size / c.replay_ratio if c.replay_ratio else math.inf  # env steps per update
    per_vec_step = c.n_envs / per_update  # updates per vectorised step
    if per_vec_step >= 1 and float(per_vec_step).is_integer():
        train_freq, gradient_steps = 1, int(per_vec_step)
    elif 0 < per_vec_step < 1 and float(1 / per_vec_step).is_integer():
        train_freq, gradient_steps = int(1 / per_vec_step), 1
    else:
        raise ValueError(f"replay_ratio {c.replay_ratio} with n_envs {c.n_envs} and batch_size {c.batch_size} "
                         "is not a whole number of updates per vectorised step (or steps per update)")
    if c.target_update:
        target_interval, target_same = int(round(c.target_update * per_update)), True
    else:
        target_interval, target_same = int(c.max_moves or 1_000), False
    if c.epsilon_decay_rate is None:
        decay_steps, eps_same = c.epsilon_decay_steps, True
    else:
        updates = math.ceil(math.log(c.epsilon_end / c.epsilon_start) / math.log(c.epsilon_decay_rate))
        decay_steps, eps_same = int(c.learning_starts + updates * per_update), False
    kwargs = dict(
        learning_rate=c.lr, buffer_size=c.buffer_size, learning_starts=c.learning_starts,
        batch_size=c.batch_size, tau=1.0, gamma=c.gamma, train_freq=train_freq, gradient_steps=gradient_steps,
        target_update_interval=target_interval, exploration_fraction=min(1.0, decay_steps / total_env_steps),
        exploration_initial_eps=c.epsilon_start, exploration_final_eps=c.epsilon_end,
        max_grad_norm=c.max_grad_norm if c.max_grad_norm is not None else 1e10,
        policy_kwargs=dict(net_arch=list(c.hidden), activation_fn=torch.nn.ReLU),
        seed=c.seed, device="cpu", verbose=0,
    )
    enc = "one-hot (288 inputs)" if c.encoding == "onehot" else "raw tile values (16 inputs)"

    def row(name: str, ours: Any, theirs: Any, same: bool, note: str = "") -> dict[str, Any]:
        return {"field": name, "dqnlab": str(ours), "sb3": str(theirs), "same": same, "note": note}

    mapping = [
        row("network", f"{enc} -> {' -> '.join(map(str, c.hidden))} -> 4, ReLU",
            f"{'OneHotObservation' if c.encoding == 'onehot' else 'RawObservation'} wrapper, "
            f"net_arch={list(c.hidden)}, ReLU", True),
        row("n_envs", c.n_envs, f"DummyVecEnv of {c.n_envs}", True),
        row("lr (Adam)", c.lr, f"learning_rate={c.lr} (Adam)", True),
        row("gamma", c.gamma, c.gamma, True),
        row("buffer_size", c.buffer_size, c.buffer_size, True),
        row("batch_size", c.batch_size, c.batch_size, True),
        row("learning_starts", c.learning_starts, c.learning_starts, True),
        row("replay_ratio", f"{c.replay_ratio:g} samples per env step",
            f"train_freq={train_freq}, gradient_steps={gradient_steps}", True,
            f"{gradient_steps}/{train_freq} update(s) of {c.batch_size} per step of {c.n_envs} env(s)"),
        row("target_update", c.target_update or "end of each episode", f"target_update_interval={target_interval}, "
            "tau=1", target_same, "" if target_same else "SB3 syncs every N env steps, not at episode ends"),
        row("epsilon", f"{c.epsilon_start} -> {c.epsilon_end}, " + (
            f"linear over {c.epsilon_decay_steps:,} env steps" if eps_same
            else f"x{c.epsilon_decay_rate} per update"), f"linear over {decay_steps:,} env steps", eps_same,
            "" if eps_same else "SB3 has only a linear schedule: same end, reached at the same env step"),
        row("loss", c.loss, "huber (fixed)", c.loss == "huber", "" if c.loss == "huber" else "SB3's DQN has no MSE "
            "option; same cost"),
        row("max_grad_norm", c.max_grad_norm, c.max_grad_norm if c.max_grad_norm is not None else "1e10 (never clips)",
            c.max_grad_norm is not None, "" if c.max_grad_norm is not None else "SB3 always clips; 1e10 never binds, "
            "but SB3 still computes the norm"),
        row("double_dqn", c.double_dqn, "no (plain DQN target)", not c.double_dqn,
            "SB3 has no Double DQN: one forward pass less per update than dqnlab" if c.double_dqn else ""),
        row("mask_illegal", c.mask_illegal, "no (all four actions)", not c.mask_illegal,
            "SB3's DQN cannot mask actions" if c.mask_illegal else ""),
        row("reward_transform", c.reward_transform, "TransformReward wrapper" if c.reward_transform != "none"
            else "none", True),
        row("invalid_move_reward, max_moves", f"{c.invalid_move_reward:g}, {c.max_moves}",
            "the same Game2048 arguments", True),
    ]
    return kwargs, mapping


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
    config = _mlp_preset(preset, "bench peers", seed=seed, total_env_steps=10 ** 9, **setting["overrides"])
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
    from ..experiments.figures import warm_up
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
    """Everything of ``python -m dqnlab bench peers``: the game, the user's loop, SB3 side by side.

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
        Include the user's loop in Keras in the update rows (slow: seconds per move).
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


# ------------------------------------------------------------------------------ learner
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
    layers = list(zip(sizes[:-1], sizes[1:]))
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
    """:meth:`DQNAgent.update` as first written, for before/after figures.

    The same algorithm and starting weights as ``agent``, coded as the first version
    of dqnlab was (commit 525ee4b): ``nn.Sequential`` forward passes, ``F.one_hot``
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
            torch.from_numpy(np.ascontiguousarray(x)) for x in batch)
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


def _learner_parts(agent: DQNAgent, plain: PlainUpdate, batch: Minibatch, rounds: int,
                   min_time: float, clock: Callable[[], float] = time.perf_counter,
                   buffer: ReplayBuffer | None = None) -> list[dict[str, Any]]:
    """Before/after seconds of each part of the update that was changed (interleaved pairs)."""
    import torch
    from torch.nn import functional as F

    from ..agent.dqn import _adam, _clip_grad_norm, _optimizer_step

    c = agent.config
    n = len(batch.actions)
    boards = torch.from_numpy(batch.boards)
    params = list(agent.online.parameters())
    scratch = [torch.nn.Parameter(p.detach().clone()) for p in params]
    for p in scratch:
        p.grad = torch.randn_like(p)
    foreach = torch.optim.Adam(scratch, lr=c.lr, foreach=True)
    fused = _adam(scratch, c.lr)
    grads = [p.grad for p in scratch]

    def zero_grad_stock() -> None:
        foreach.zero_grad(set_to_none=True)
        for p, g in zip(scratch, grads):
            p.grad = g

    def zero_grad_loop() -> None:
        for p in scratch:
            p.grad = None
        for p, g in zip(scratch, grads):
            p.grad = g

    pairs: list[tuple[str, Callable[[], Any], Callable[[], Any]]] = [
        ("Adam step: foreach -> fused (optimizer.step)", foreach.step, fused.step),
        ("Adam step: fused optimizer.step -> the fused kernel called directly", fused.step,
         lambda: _optimizer_step(fused)),
        ("clip gradient norm: nn.utils.clip_grad_norm_ -> own", lambda: torch.nn.utils.clip_grad_norm_(scratch, 1e9),
         lambda: _clip_grad_norm(scratch, 1e9)),
        ("clear gradients: optimizer.zero_grad -> loop", zero_grad_stock, zero_grad_loop),
        (f"encode {n} boards: "
         + ("F.one_hot -> identity rows (index_select)" if c.encoding == "onehot" else "exp2 -> table lookup"),
         lambda: plain.encode(boards), lambda: agent.online.encode(boards)),
    ]
    def autograd_gradients() -> None:
        for p in params:
            p.grad = None
        agent.loss(batch).backward()

    pairs.append(("TD loss gradients: autograd (loss().backward()) -> backprop written out (compute_gradients)",
                  autograd_gradients, lambda: agent.compute_gradients(batch)))
    if buffer is not None:
        def fancy_index() -> Minibatch:  # ReplayBuffer.sample as first written
            idx = buffer.rng.integers(0, buffer.size, size=n)
            a = buffer.arrays
            return Minibatch(a["boards"][idx], a["actions"][idx].astype(np.int64), a["rewards"][idx],
                             a["next_boards"][idx], a["dones"][idx], a["next_masks"][idx])
        pairs.append((f"replay sample of {n} from {buffer.size:,}: fancy indexing -> ndarray.take", fancy_index,
                      lambda: buffer.sample(n)))
    for rows in sorted({1, 32, n}):
        b = torch.from_numpy(np.ascontiguousarray(np.resize(batch.boards, (rows, 4, 4))))

        def before(b: Any = b) -> None:
            with torch.no_grad():
                plain.online(plain.encode(b))

        def after(b: Any = b) -> None:
            with torch.no_grad():
                agent.online(b)
        pairs.append((f"network forward, {rows} board(s), no grad", before, after))
    if c.encoding == "onehot":
        first = agent.online.mlp[0]
        from ..agent.networks import _OneHotLinear, _one_hot_columns

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
    out = []
    for name, before, after in pairs:
        t = interleaved_times({"before": before, "after": after}, rounds, min_time, clock)
        out.append({"part": name, "before_us": 1e6 * t["before"], "after_us": 1e6 * t["after"],
                    "speedup": t["before"] / t["after"]})
    for p in params:
        p.grad = None
    return out


def _denormal_part(config: TrainConfig, env_steps: int, rounds: int, min_time: float,
                   clock: Callable[[], float], seed: int) -> dict[str, Any]:
    """Before/after of flushing denormals during the update, on an agent trained for
    ``env_steps`` env steps (denormal Adam moments build up only in training)."""
    import copy

    from ..agent import dqn as agent_module
    from ..runtime.learner import Learner

    learner = Learner(config.replace(seed=seed, total_env_steps=10 ** 9))
    learner.run(env_steps)
    kept, flushed = learner.agent, copy.deepcopy(learner.agent)
    batch = learner.buffer.sample(config.batch_size)

    def update(agent: DQNAgent, flush: bool) -> None:
        old = agent_module._FLUSH_DENORMAL
        agent_module._FLUSH_DENORMAL = flush and old
        try:
            agent.update(batch)
        finally:
            agent_module._FLUSH_DENORMAL = old

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


def bench_learner(presets: Sequence[str] = ("mlp", "seed"), threads: int | None = 1, rounds: int = 7,
                  min_time: float = 0.15, matmul_n: int = 2048, compile: bool = False,
                  parts: bool = True, trained_updates: int = 2_000, seed: int = 0) -> dict[str, Any]:
    """Achieved GFLOP/s of one update beside a large matrix product, before and after tuning.

    For each preset, an agent and a replay buffer filled by random play; the same
    minibatch is trained on repeatedly. Rows, timed in alternation with each other and
    with an ``n x n`` matrix product (so that the fraction compares like with like on a
    busy machine), in :func:`work_clock` time: ``before`` (the
    update as first written, :class:`PlainUpdate`), ``after`` (:meth:`DQNAgent.update`),
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

    Returns
    -------
    dict
        ``machine``, ``threads``, ``clock`` (see :func:`work_clock`), ``matmul_n``,
        ``matmul_gflops`` (median over presets), and ``presets``: one dict per preset with
        ``preset``, ``batch_size``, ``flops`` (:func:`update_flops`), ``matmul_gflops``
        (the square product's, timed in the same rounds as the updates), ``rows``
        (``method``, ``ms_per_update``, ``gflops``, ``fraction_of_matmul``, ``speedup``
        over ``before``), ``compile_s`` (or None) and ``parts``.
    """
    import torch

    clock, clock_name = work_clock(threads)
    out: dict[str, Any] = {"machine": machine_info(), "threads": threads, "clock": clock_name,
                           "matmul_n": matmul_n, "presets": []}
    mat_a, mat_b, mat_out = torch.randn(matmul_n, matmul_n), torch.randn(matmul_n, matmul_n), torch.empty(0)
    with torch_threads_set(threads):
        for preset in presets:
            config = _mlp_preset(preset, "bench learner", seed=seed)
            agent, buffer = _seed_minibatch(config, seed)
            batch = buffer.sample(config.batch_size)
            plain = PlainUpdate(agent)
            fns: dict[str, Callable[[], Any]] = {
                "matmul": lambda: torch.mm(mat_a, mat_b, out=mat_out),
                "before: the update as first written": lambda: plain.update(batch),
                "after: DQNAgent.update": lambda: agent.update(batch),
                "after, with ReplayBuffer.sample": lambda: agent.update(buffer.sample(config.batch_size)),
            }
            compile_s = None
            if compile:
                compiled, compile_s = _compiled_update(config, batch, seed)
                fns["after, networks torch.compile-d"] = lambda: compiled.update(batch)
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
            })
            if parts:
                steps = config.learning_starts + math.ceil(trained_updates / config.updates_per_env_step)
                out["presets"][-1]["parts"].append(_denormal_part(config, steps, rounds, min_time, clock, seed))
    out["matmul_gflops"] = statistics.median(p["matmul_gflops"] for p in out["presets"])
    return out


# ------------------------------------------------------------------------------ markdown
def _md_table(rows: list[dict[str, Any]], columns: dict[str, str], formats: dict[str, str] | None = None) -> str:
    formats = formats or {}

    def cell(key: str, value: Any) -> str:
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return "—"
        if isinstance(value, bool):
            return "yes" if value else "**no**"
        if key in formats:
            return formats[key].format(value)
        return str(value).replace("|", "\\|")

    lines = ["| " + " | ".join(columns.values()) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(k, r.get(k)) for k in columns) + " |" for r in rows]
    return "\n".join(lines)


def _md_machine(m: dict[str, Any], threads: int | None, command: str) -> str:
    load = ", ".join(map(str, m["load_average_1_5_15min"] or [])) or "unknown"
    return (f"Measured {m['date_utc']} on {m['cpu']}, {m['logical_cores']} logical cores "
            f"(load average {load} at the start: other work was running), PyTorch {m['torch']} with "
            f"{'its default' if threads is None else threads} thread{'' if threads == 1 else 's'}, "
            f"NumPy {m['numpy']}, Python {m['python']}. Command: `{command}`.")


def _same_replay_ratio(row: dict[str, Any], serial: dict[str, Any], tolerance: float = 0.05) -> bool | None:
    """Whether ``row`` did as many updates per env step as ``serial`` (within ``tolerance``);
    None when unknown (no steps, or a window that includes the steps before learning starts)."""
    ours, ref = row.get("updates_per_1000_steps", math.nan), serial["updates_per_1000_steps"]
    if ours is None or math.isnan(ours) or not ref or row.get("window") == "whole run":
        return None
    return abs(ours / ref - 1) <= tolerance


def peers_markdown(res: dict[str, Any], command: str = "python -m dqnlab bench peers") -> str:
    """The ``bench peers`` section of ``docs/benchmarks.md`` from :func:`bench_peers` output."""
    out = ["## Peers, side by side (`bench peers`)", "", _md_machine(res["machine"], res["threads"], command), ""]
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
                 "same_ratio": _same_replay_ratio(r, s["rows"][0])}
                for r in [*s["rows"], *s.get("schemes", [])]]
        out += [_md_table(rows, {"name": "run", "env_steps_per_s": "env steps/s", "vs_sb3": "× SB3",
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
                _md_table(s["mapping"], {"field": "field", "dqnlab": "dqnlab", "sb3": "SB3", "same": "same",
                                         "note": "note"}), "", "</details>", ""]
    if res["sb3"] is None:
        out += [f"SB3 rows skipped: {res.get('sb3_missing')}.", ""]
    g = res["game"]
    out += ["### The game", "", "Uniformly random actions (illegal ones included), reset at game over; timed in "
            "alternation, per second of CPU time.", "",
            _md_table(g["rows"], {"package": "package", "what": "what", "boards": "boards",
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
    out += ["### The user's loop", "", "One replay step of the `seed` preset (64 transitions, 16-256-256-4, "
            f"PyTorch on {u['torch_threads']} thread) per move, from `bench update` (wall clock).", "",
            _md_table([{**r, "per_s": 1 / r["seconds_per_env_step"]} for r in u["rows"]],
                      {"method": "method", "seconds_per_env_step": "seconds per env step",
                       "per_s": "env steps/s (learning only)"},
                      {"seconds_per_env_step": "{:.4g}", "per_s": "{:,.1f}"}), "",
            f"Batched: {u['ratio']:,.0f}x faster than the same loop in PyTorch"
            + (f", {u['ratio_keras']:,.0f}x faster than in Keras." if u.get("ratio_keras") else "."), ""]
    return "\n".join(out)


def learner_markdown(res: dict[str, Any], command: str = "python -m dqnlab bench learner") -> str:
    """The ``bench learner`` section of ``docs/benchmarks.md`` from :func:`bench_learner` output."""
    out = ["## The learner beside the machine's limit (`bench learner`)", "",
           _md_machine(res["machine"], res["threads"], command), "",
           f"Limit: a {res['matmul_n']}x{res['matmul_n']} float32 matrix product (`torch.mm`) on the same threads, "
           f"timed in the same rounds as the updates: **{res['matmul_gflops']:,.0f} GFLOP/s** (median over the "
           f"tables). Times are {res.get('clock', 'wall-clock time')}, medians of alternating turns. One "
           "update's work is counted by `dqnlab.bench.core.update_flops`: forward on s, target forward on s', online "
           "forward on s' for Double DQN, backward, Adam at 12 and clipping at 3 operations per parameter; the "
           "one-hot first layer is counted as the dense product it equals, so GFLOP/s of rows that compute it as "
           "an embedding sum are effective figures.", ""]
    for p in res["presets"]:
        f = p["flops"]
        out += [f"### `{p['preset']}` preset: batch {p['batch_size']}, {f['parameters']:,} parameters, "
                f"{f['total'] / 1e6:,.1f} MFLOP per update (matrix product: {p['matmul_gflops']:,.0f} GFLOP/s)", "",
                _md_table(p["rows"], {"method": "update", "ms_per_update": "ms per update", "gflops": "GFLOP/s",
                                      "fraction_of_matmul": "of matmul", "speedup": "speed-up"},
                          {"ms_per_update": "{:.3f}", "gflops": "{:.1f}", "fraction_of_matmul": "{:.0%}",
                           "speedup": "{:.2f}x"}), ""]
        if p["compile_s"] is not None:
            out += [f"`torch.compile` (inductor) took {p['compile_s']:.0f} s of wall-clock time to compile (the "
                    "first two updates; PyTorch's compile cache from earlier runs on the machine shortens it).", ""]
        if p["parts"]:
            out += ["Each change, before -> after (interleaved pairs, µs per call):", "",
                    _md_table(p["parts"], {"part": "part", "before_us": "before µs", "after_us": "after µs",
                                           "speedup": "speed-up"},
                              {"before_us": "{:,.1f}", "after_us": "{:,.1f}", "speedup": "{:.2f}x"}), ""]
    return "\n".join(out)


def write_section(path: str | os.PathLike, name: str, text: str) -> None:
    """Put ``text`` into the markdown file ``path`` between ``<!-- bench NAME -->`` markers.

    The section replaces one written before under the same name; other sections are
    kept. The file is created with a title and regeneration note if it does not exist.
    """
    import pathlib

    path = pathlib.Path(path)
    start, end = f"<!-- bench {name} -->", f"<!-- /bench {name} -->"
    block = f"{start}\n{text.rstrip()}\n{end}\n"
    old = path.read_text() if path.exists() else _DOC_HEADER
    if start in old and end in old:
        new = old[: old.index(start)] + block + old[old.index(end) + len(end):].lstrip("\n")
    else:
        new = old.rstrip("\n") + "\n\n" + block
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(new)


_DOC_HEADER = """# Benchmarks

Generated by the benchmark commands; do not edit by hand. Regenerate with

```bash
pip install -e '.[bench]'
python -m dqnlab bench peers --write docs/benchmarks.md
python -m dqnlab bench learner --compile --write docs/benchmarks.md
```

Each command replaces its own section. Timings come from one run on the machine named in
each section: compare rows of one table (they were measured side by side, in alternation
where it says so), not absolute figures across machines or runs.
"""
