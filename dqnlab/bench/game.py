"""``bench game`` and the game rows of ``bench peers``: how fast the game runs, beside gymnasium-2048."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from ..core import bitboard
from ..game import Game2048, VecGame2048, move_batch
from ..game.rules import legal_actions_unchecked
from .timing import interleaved_times, median_time

__all__ = ["played_boards", "numpy_move_batch", "bench_rules", "bench_game", "check_g2048_scores"]


def played_boards(n: int, seed: int, moves: int = 60) -> np.ndarray:
    """``n`` mid-game boards: ``moves`` random legal moves from a fresh game (auto-reset)."""
    env = VecGame2048(n, seed=seed)
    rng = np.random.default_rng(seed)
    boards = env.boards
    for _ in range(moves):
        masks = legal_actions_unchecked(boards)
        boards = env.step(np.where(masks, rng.random(masks.shape), -1).argmax(1)).boards
    return boards


def _numpy_tables() -> tuple[np.ndarray, np.ndarray]:
    """The slide tables as the NumPy rules read them: ``(2 * 65536,)`` uint32
    slid lines (4 exponent bytes a word) and points, index ``d * 65536 + line key``."""
    lines = ((bitboard.LINE[..., None] >> np.arange(0, 16, 4, dtype=np.uint16)) & 0xF).astype(np.uint8)
    return np.ascontiguousarray(lines.reshape(-1, 4)).view(np.uint32).ravel(), bitboard.SCORE.ravel()


def numpy_move_batch(boards: np.ndarray, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``move_batch`` as vectorised NumPy over the same tables (the rules without the compiled core; boards
    with exponents up to 15): the baseline of :func:`bench_rules`. ``(N, 4, 4)`` uint8, ``(N,)`` int ->
    new boards, ``(N,)`` int64 points, ``(N,)`` bool changed."""
    line_t, score_t = _NUMPY_TABLES
    n = len(boards)
    b = boards.astype(np.uint16)
    row_keys = b[:, :, 0] | b[:, :, 1] << 4 | b[:, :, 2] << 8 | b[:, :, 3] << 12
    col_keys = b[:, 0] | b[:, 1] << 4 | b[:, 2] << 8 | b[:, 3] << 12
    vertical = (actions & 1) == 0
    idx = np.where(vertical[:, None], col_keys, row_keys).astype(np.intp)
    idx += (np.array([0, 1, 1, 0], np.intp) << 16)[actions][:, None]
    new = line_t[idx].view(np.uint8).reshape(n, 4, 4)
    new[vertical] = new[vertical].transpose(0, 2, 1)
    points = score_t[idx].sum(axis=1, dtype=np.int64)
    differs = new.reshape(n, 16).view(np.uint64) != boards.reshape(n, 16).view(np.uint64)
    return new, points, differs[:, 0] | differs[:, 1]


_NUMPY_TABLES = _numpy_tables()


def bench_rules(boards: int = 16_384, repeats: int = 5, min_time: float = 0.2, seed: int = 0,
                threads: tuple[int, ...] = (1, 2)) -> list[dict[str, Any]]:
    """Moves per second of the game's rules: the compiled bitboard core beside the NumPy rules it replaced.

    ``boards`` mid-game boards (:func:`played_boards`) are moved by one random action each: by
    :func:`numpy_move_batch` (one core), and by the core's ``move_batch`` and ``advance_batch`` (move, spawn,
    legal moves after) split across each of ``threads`` threads (the kernels release the GIL: 2 threads use
    2 cores). Medians of ``repeats`` timings of at least ``min_time`` seconds. ``Game2048.step`` (one board,
    the gymnasium API) is the last row.

    Returns
    -------
    list of dict
        Rows with ``what``, ``threads``, ``boards`` and ``moves_per_s`` (env steps per second).
    """
    rng = np.random.default_rng(seed)
    played = played_boards(boards, seed)
    actions = rng.integers(0, 4, boards)
    cells = played.reshape(boards, 16)
    rows = [{"what": "NumPy rules: move_batch (before the core)", "threads": 1, "boards": boards,
             "moves_per_s": boards / median_time(lambda: numpy_move_batch(played, actions), repeats, min_time)}]
    out = np.empty_like(cells)
    points, changed, legal = np.empty(boards, np.int64), np.empty(boards, bool), np.empty((boards, 4), bool)
    for k in threads:
        parts = np.array_split(np.arange(boards), k)
        spans = [slice(int(p[0]), int(p[-1]) + 1) for p in parts]
        rngs = [np.random.default_rng(seed + i) for i in range(k)]
        kernels = {
            "core: move_batch (bitboards)": lambda s, i: bitboard.move_batch(cells[s], actions[s], out[s], points[s],
                                                                            changed[s]),
            "core: advance_batch (move, spawn, legal moves)": lambda s, i: bitboard.advance_batch(
                cells[s].copy(), actions[s], rngs[i], out[s], points[s], changed[s], legal[s]),  # noqa: B023 - called in this iteration
        }
        with ThreadPoolExecutor(k) as pool:
            for what, kernel in kernels.items():
                kernel(spans[0], 0)  # (compiled, or loaded from the cache, before timing)

                def run(kernel: Callable[[slice, int], None] = kernel) -> None:
                    list(pool.map(kernel, spans, range(k)))  # noqa: B023 - called in this iteration

                rows.append({"what": what, "threads": k, "boards": boards,
                             "moves_per_s": boards / median_time(run, repeats, min_time)})
    env = Game2048()
    state = {"mask": env.reset(seed=seed)[1]["action_mask"]}

    def step() -> None:
        legal_moves = np.flatnonzero(state["mask"])
        _, _, term, trunc, info = env.step(int(rng.choice(legal_moves)))
        state["mask"] = env.reset()[1]["action_mask"] if term or trunc else info["action_mask"]

    rows.append({"what": "Game2048.step (one board, gymnasium API)", "threads": 1, "boards": 1,
                 "moves_per_s": 1 / median_time(step, repeats, min_time)})
    return rows


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
    played = played_boards(boards, seed)
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
        info["moves_checked"], info["scores_agree"] = check_g2048_scores(TwentyFortyEightEnv(), check_moves, seed)
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


def check_g2048_scores(env: Any, moves: int, seed: int) -> tuple[int, int]:
    """Play ``moves`` random moves in a gymnasium-2048 env; count rewards equal to :func:`dqnlab.move`'s."""
    from ..game import move

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
