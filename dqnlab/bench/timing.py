"""Measuring tools of the benchmarks: medians of repeats, turns in alternation, the clock, the pool.

Timings are seconds of ``time.perf_counter`` (wall clock) unless a benchmark passes
another clock (see :func:`work_clock`). Quote ratios measured in one run, not absolute
times from different runs: the machines are small and noisy.
"""

from __future__ import annotations

import io
import statistics
import time
from collections.abc import Callable
from typing import Any

from ..config import TrainConfig

__all__ = ["median_time", "interleaved_times", "work_clock", "warm_up"]


def _seconds_per_call(fn: Callable[[], Any], min_time: float, clock: Callable[[], float]) -> float:
    """Mean seconds per call of ``fn``, called until at least ``min_time`` of ``clock`` has passed (once at least)."""
    n, t0 = 0, clock()
    while True:
        fn()
        n += 1
        dt = clock() - t0
        if dt >= min_time:
            return dt / n


def median_time(fn: Callable[[], Any], repeats: int = 5, min_time: float = 0.2) -> float:
    """Median over ``repeats`` of the mean seconds per call of ``fn``.

    Each repeat calls ``fn`` until at least ``min_time`` seconds have passed (at least once).
    """
    fn()  # warm-up
    return statistics.median(_seconds_per_call(fn, min_time, time.perf_counter) for _ in range(repeats))


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
            per_call[name].append(_seconds_per_call(fn, min_time, clock))
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


def warm_up(workers: int, native: bool = False, report: Callable[[str], None] | None = None) -> float:
    """Start joblib's worker processes once (and compile the native core), before the runs that need them.

    joblib keeps its process pool between calls, so only the first parallel run of a
    session pays for starting Python and importing PyTorch in ``workers`` new
    processes and importing dqnlab there (seconds on a small machine). Warming up first keeps that one-off cost
    out of every run's wall-clock budget, so that runs compare on their steady state.

    Parameters
    ----------
    workers : int
        Size of the pool to start (nothing is started for 1 or fewer).
    native : bool
        Also compile the native core's kernels in this process (or load them from numba's cache:
        :func:`dqnlab.runtime.learner.warm_up`); the workers then load them from the cache.
    report : callable, optional
        Called with a line of text as each step starts and as each worker is ready (``print`` in a
        notebook, a status line in a panel); default: silent.

    Returns
    -------
    float
        The seconds it took (wall clock).
    """
    import joblib

    say = report or (lambda _line: None)
    t0 = time.perf_counter()
    if native:
        from ..runtime import learner

        say("compiling the native core (numba: about half a minute the first time on a machine, then "
            "loaded from its cache in seconds) ...")
        learner.warm_up(stream=io.StringIO())  # its notice would say again, on stderr, what is said here
        say(f"native core ready ({time.perf_counter() - t0:.1f} s)")
    if workers > 1:
        say(f"starting {workers} worker processes (each imports PyTorch and dqnlab) ...")
        ready = joblib.Parallel(n_jobs=workers, batch_size=1, return_as="generator_unordered")(
            joblib.delayed(_import_dqnlab)() for _ in range(workers))
        for i, _threads in enumerate(ready, 1):
            say(f"worker {i} of {workers} ready ({time.perf_counter() - t0:.1f} s)")
    return time.perf_counter() - t0


def _import_dqnlab() -> int:
    import torch

    import dqnlab.schemes  # noqa: F401 - what a worker imports to run a task
    from dqnlab.runtime.learner import Learner

    # First use of the network and the game in this process (allocator, kernels, tables).
    learner = Learner(TrainConfig(total_env_steps=64, n_envs=8, hidden=(8,), buffer_size=64, batch_size=8,
                                  learning_starts=8, replay_ratio=8.0))
    learner.run(64)
    return torch.get_num_threads()
