"""The run loop every scheme reports to: budget, progress, history, log, callback, Ctrl-C.

:class:`RunLoop` enforces the budget, draws the progress bar, records the history (with
the DQN diagnostics of :data:`~dqnlab.runtime.progress.DIAGNOSTICS`), writes the TensorBoard log, calls the
run's callback, writes periodic checkpoints and turns Ctrl-C or a Stop into a clean
end. Every scheme reports to it as a :class:`~dqnlab.runtime.progress.Progress`;
:func:`deferred_interrupt` makes the first Ctrl-C a request to end the run at the loop's
next check.
"""

from __future__ import annotations

import contextlib
import math
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from ..bars import clock, progress_bar
from ..config import TrainConfig
from .progress import DIAGNOSTICS, Progress
from .results import RunResult
from .tensorboard import TensorBoardLog

__all__ = ["RunLoop", "DIAGNOSTICS", "RECENT_GAMES", "deferred_interrupt", "ctrl_c_pressed", "mean_diagnostics",
           "replay_ratio", "workers_progress", "recent_score"]

#: Games whose mean score and largest tile the progress bar and the TensorBoard log show.
RECENT_GAMES = 100


def replay_ratio(samples: float, env_steps: int) -> float:
    """Achieved replay ratio: minibatch ``samples`` trained per env step (NaN before the first step)."""
    return samples / env_steps if env_steps else math.nan


def mean_diagnostics(workers: Sequence[Mapping[str, float]], samples: float, env_steps: int) -> dict[str, float]:
    """The run's :data:`DIAGNOSTICS` from its learners': each one's mean over the learners
    where it is finite (NaN where none is), and the :func:`replay_ratio` of all ``samples``
    trained over all ``env_steps``."""
    out = {}
    for name in DIAGNOSTICS:
        values = [d[name] for d in workers if math.isfinite(d.get(name, math.nan))]
        out[name] = sum(values) / len(values) if values else math.nan
    out["replay_ratio"] = replay_ratio(samples, env_steps)
    return out


def workers_progress(latest: Sequence[Mapping[str, Any]], games: Sequence[Mapping[str, Any]],
                     batch_size: int) -> Progress:
    """The :class:`~dqnlab.runtime.progress.Progress` of a run made of worker learners, from each one's last report.

    Each of ``latest`` holds ``env_steps``, ``updates``, ``timing`` (seconds ``acting`` and
    ``learning``), ``comm_s`` (seconds communicating; a ``lock_wait_s`` is added to it) and
    ``diagnostics`` (its :data:`DIAGNOSTICS`); ``games`` are the episode rows of all workers.
    The time split and the totals sum over workers; the diagnostics are their
    :func:`mean_diagnostics`, with each worker's kept beside them.
    """
    env_steps, updates = sum(w["env_steps"] for w in latest), sum(w["updates"] for w in latest)
    time_split = {"acting": sum(w["timing"]["acting"] for w in latest),
                  "learning": sum(w["timing"]["learning"] for w in latest),
                  "communication": sum(w["comm_s"] + w.get("lock_wait_s", 0.0) for w in latest)}
    learners = [w["diagnostics"] for w in latest]
    return Progress(env_steps, updates, games, time_split,
                    mean_diagnostics(learners, updates * batch_size, env_steps), learners)


class RunLoop:
    """Budget, progress bar, history, TensorBoard log, callback, checkpoints and interruption for one run.

    A scheme calls :meth:`chunk_steps` to know how many env steps to do next, does
    them, then :meth:`report` with its :class:`~dqnlab.runtime.progress.Progress`; it stops when :attr:`done`
    is true, and calls :meth:`close` on every way out.

    Parameters
    ----------
    config : TrainConfig
        ``total_env_steps`` and ``max_seconds`` are the budget (of the whole run:
        a resumed run counts the env steps and wall time of earlier sessions).
    progress : bool
        Show a progress bar (:func:`dqnlab.bars.progress_bar`) filled to the end of the budget, with the
        time so far and left, env steps, env steps/s (over the last ten seconds) and the recent mean score.
    callback : callable, optional
        Called as ``callback(snapshot)`` after each report with a :class:`RunResult`
        of what is gathered so far; returning True stops the run cleanly (raising
        KeyboardInterrupt ends it as ``"interrupted"``, also cleanly). A callback with a
        ``due(elapsed_s) -> bool`` method is called (and a snapshot made) only at the reports
        where it returns True.
    report_every_s : float
        Seconds between reports (and callback calls).
    snapshot : callable, optional
        ``snapshot() -> RunResult`` of what is gathered so far.
    checkpointer : dqnlab.runtime.checkpoint.Checkpointer, optional
        The run directory. When it resumes a checkpoint, the loop continues its wall
        time, history and totals. With ``checkpointer.tensorboard``, the loop writes a
        :class:`~dqnlab.runtime.tensorboard.TensorBoardLog` in its ``tb/`` at every report (a
        resumed run continues its steps).
    state : callable, optional
        ``state() -> dict``: the scheme's checkpoint state, for schemes whose state
        can be read at any report (then :meth:`report` writes the periodic
        checkpoints, and :func:`~dqnlab.runtime.driver.run_to_end` the final one). Schemes whose
        state lives in worker processes leave it out: their periodic checkpoints are gathered
        from the workers, and they give :func:`~dqnlab.runtime.driver.run_to_end` their final state.
    """

    def __init__(self, config: TrainConfig, progress: bool = True,
                 callback: Callable[[RunResult], Any] | None = None, report_every_s: float = 1.0,
                 snapshot: Callable[[], RunResult] | None = None, checkpointer: Any = None,
                 state: Callable[[], Any] | None = None):
        self.config = config
        self.callback = callback
        self.snapshot = snapshot
        self.checkpointer = checkpointer
        self.state = state
        self.report_every_s = report_every_s
        resumed = checkpointer.loop_state if checkpointer is not None else None
        self.t0 = time.perf_counter() - (float(resumed["elapsed"]) if resumed else 0.0)
        self.deadline = None if config.max_seconds is None else self.t0 + config.max_seconds
        self.env_steps = int(resumed["env_steps"]) if resumed else 0
        self.updates = int(resumed["updates"]) if resumed else 0
        self.history: list[dict[str, float]] = ([dict(h) for h in resumed["history"]] if resumed else
                                                [{"wall_time_s": 0.0, "env_steps": 0, "updates": 0}])
        self.status = "running"
        self.ended: float | None = None  # time.perf_counter() when the loop first saw the run end
        self.abrupt = False  # a KeyboardInterrupt reached the scheme (maybe mid-step)
        self.closed = False  # :meth:`close` called: nothing trains any more (a result may hold the live weights)
        self._steps_per_s = max(1.0, self.env_steps / self.elapsed) if resumed and self.elapsed > 0 else 1000.0
        self.tensorboard = None
        if checkpointer is not None and checkpointer.tensorboard:
            self.tensorboard = TensorBoardLog(checkpointer.directory / "tb",
                                              resume_step=self.env_steps if resumed else None)
        self.progress = progress
        # filled to the budget's end (1.0): its time or its env steps, whichever ends first
        self.bar = progress_bar(total=1.0, desc=self._progress_text(math.nan, math.nan), disable=not progress,
                                leave=True, bar_format="{percentage:3.0f}%|{bar}| {desc}")

    def say(self, text: str) -> None:
        """Print a line about the run above its progress bar (standard error; nothing without the bar)."""
        if self.progress:
            self.bar.write(f"dqnlab: {text}", file=sys.stderr)

    @property
    def elapsed(self) -> float:
        """Wall time of the run in seconds (earlier sessions of a resumed run included), up to the moment
        :attr:`done` first turned true: the result and the final checkpoint, written after, give the same time."""
        return (time.perf_counter() if self.ended is None else self.ended) - self.t0

    @property
    def done(self) -> bool:
        if self.status == "running" and _SIGINT.requested:
            self.status = "interrupted"
            self.say("Ctrl-C: ending the run, keeping what it gathered (Ctrl-C again to stop waiting for the "
                     "workers' last reports)")
        if self.status != "running":
            if self.ended is None:
                self.ended = time.perf_counter()
            return True
        if self.config.total_env_steps is not None and self.env_steps >= self.config.total_env_steps:
            self.status = "completed"
        if self.deadline is not None and time.perf_counter() >= self.deadline:
            self.status = "completed"
        if self.status != "running":
            self.ended = time.perf_counter()
            return True
        return False

    def chunk_steps(self, granularity: int = 1) -> int:
        """Env steps to do before the next report: about ``report_every_s`` of work,
        never past the step budget, a multiple of ``granularity`` (at least one)."""
        n = int(self._steps_per_s * self.report_every_s)
        if self.config.total_env_steps is not None:
            n = min(n, self.config.total_env_steps - self.env_steps)
        return max(granularity, (n // granularity) * granularity)

    def report_deadline(self) -> float:
        """``time.perf_counter()`` value by which the next report is due (never past the time budget),
        so a chunk ends on time even when the speed changes (say, when learning starts)."""
        due = time.perf_counter() + self.report_every_s
        return due if self.deadline is None else min(due, self.deadline)

    def report(self, progress: Progress) -> None:
        """:meth:`record` the scheme's ``progress``, then call the callback (which may stop
        the run) and write a checkpoint when one is due (with a ``state`` function)."""
        self.record(progress)
        due = getattr(self.callback, "due", None)
        if self.callback is not None and self.snapshot is not None and (due is None or due(self.elapsed)):
            try:
                stop = self.callback(self.snapshot())
            except KeyboardInterrupt:  # raised at a report: a clean point to end at
                self.status, stop = "interrupted", False
            if stop and self.status == "running":
                self.status = "stopped"
        if self.state is not None and self.checkpoint_due():
            self.write_checkpoint(self.state())

    def record(self, progress: Progress) -> None:
        """Record the scheme's ``progress``: a history row (totals and :data:`DIAGNOSTICS`,
        each worker's as ``worker{k}_{name}``), the progress bar and the TensorBoard log.
        Without :meth:`report`'s callback and checkpoint, so that a scheme can record the
        final totals of a run that has ended."""
        elapsed = self.elapsed
        env_steps, updates = progress.env_steps, progress.updates
        if len(progress.workers) == 1:
            progress = progress._replace(workers=())
        self.env_steps, self.updates = env_steps, updates
        self._steps_per_s = max(1.0, env_steps / max(elapsed, 1e-9))
        row = {"wall_time_s": elapsed, "env_steps": env_steps, "updates": updates,
               **{name: float(progress.diagnostics.get(name, math.nan)) for name in DIAGNOSTICS}}
        for k, worker in enumerate(progress.workers):
            row.update({f"worker{k}_{name}": float(value) for name, value in worker.items()})
        before = self.history[-1]
        self.history.append(row)
        score_mean = recent_score(progress.games)
        self.bar.set_description_str(self._progress_text(self._recent_speed(), score_mean), refresh=False)
        self.bar.update(self.budget_used() - self.bar.n)
        if self.tensorboard is not None:
            dt = elapsed - before["wall_time_s"]
            self.tensorboard.write(
                progress, score_mean=score_mean,
                max_tile=max((g["max_tile"] for g in progress.games[-RECENT_GAMES:]), default=math.nan),
                env_steps_per_s=(env_steps - before["env_steps"]) / dt if dt > 0 else math.nan,
                updates_per_s=(updates - before["updates"]) / dt if dt > 0 else math.nan)

    def budget_used(self) -> float:
        """The share of the budget spent (0..1): of its time or of its env steps, whichever is further along."""
        shares = [self.elapsed / self.config.max_seconds if self.config.max_seconds else 0.0,
                  self.env_steps / self.config.total_env_steps if self.config.total_env_steps else 0.0]
        return min(1.0, max(shares))

    def _recent_speed(self, window_s: float = 10.0) -> float:
        """Env steps/s over the last ``window_s`` seconds of the history (fewer at the start; NaN before the
        second row): the speed now, which the start-up and the start of learning leave behind."""
        h = self.history
        if len(h) < 2:
            return math.nan
        now = h[-1]
        then = next((row for row in reversed(h[:-1]) if row["wall_time_s"] <= now["wall_time_s"] - window_s), h[0])
        dt = now["wall_time_s"] - then["wall_time_s"]
        return (now["env_steps"] - then["env_steps"]) / dt if dt > 0 else math.nan

    def _progress_text(self, speed: float, score_mean: float) -> str:
        """What the bar says after its percentage: time so far against the budget, the time left (the
        time budget's, or the env steps left at ``speed`` env steps/s, whichever ends first), env steps,
        ``speed`` and the mean score of the last :data:`RECENT_GAMES` games (NaN: none yet)."""
        config, elapsed = self.config, self.elapsed
        left = [config.max_seconds - elapsed] if config.max_seconds else []
        steps = f"{self.env_steps:,}"
        if config.total_env_steps:
            steps += f" of {config.total_env_steps:,}"
            left.append((config.total_env_steps - self.env_steps) / speed if speed > 0 else math.nan)
        budget = f" of {clock(config.max_seconds)}" if config.max_seconds else ""
        text = (f"{clock(elapsed)}{budget}, {clock(min(left)) if not any(map(math.isnan, left)) else '?'} left; "
                f"{steps} env steps, {'?' if math.isnan(speed) else format(speed, ',.0f')} env steps/s")
        return text + ("" if math.isnan(score_mean) else f"; score {score_mean:,.0f} (last {RECENT_GAMES} games)")

    def interrupt(self) -> None:
        """Mark the run as interrupted: a KeyboardInterrupt reached the scheme's code.

        The scheme keeps its data. Since the interrupt may have landed in the middle of
        a step, :attr:`abrupt` is set and in-process learners keep their last
        checkpoint rather than writing one from a state that may be half-updated.
        """
        self.status = "interrupted"
        self.abrupt = True

    # ------------------------------------------------------------------ checkpoints
    def checkpoint_due(self) -> bool:
        """Whether a periodic checkpoint is due (the run has a run directory with
        ``checkpoint_every`` set, is still running, and the period has passed)."""
        return (self.checkpointer is not None and self.status == "running"
                and self.checkpointer.due(self.elapsed, self.report_every_s))

    def state_dict(self) -> dict[str, Any]:
        """The loop's part of a checkpoint: wall time so far, totals and history."""
        return {"elapsed": self.elapsed, "env_steps": self.env_steps, "updates": self.updates,
                "history": [dict(h) for h in self.history]}

    def write_checkpoint(self, state: Any) -> None:
        """Write the run directory now: ``checkpoint.pt`` with the scheme's ``state`` and the
        result files of :attr:`snapshot`."""
        if self.checkpointer is not None and self.snapshot is not None:
            self.checkpointer.write(state, self.state_dict(), self.snapshot())

    def close(self) -> None:
        """End the run's display and log: close the bar and flush and close the TensorBoard
        log (again: nothing). Schemes call it on every way out, failures included."""
        self.closed = True
        if self.status == "completed":  # its budget is spent: a bar left on the page says so
            self.bar.update(self.bar.total - self.bar.n)
        self.bar.close()
        if self.tensorboard is not None:
            self.tensorboard.close()
        if self.status == "running":
            self.status = "completed"


class _Sigint:
    """Ctrl-C while :func:`deferred_interrupt` is active: the first press asks the run to
    end cleanly (:attr:`RunLoop.done` turns true with status ``"interrupted"``), the
    second raises KeyboardInterrupt at once."""

    def __init__(self) -> None:
        self.requested = False
        self.presses = 0

    def __call__(self, signum: int, frame: Any) -> None:
        self.presses += 1
        self.requested = True
        if self.presses > 1:
            raise KeyboardInterrupt


_SIGINT = _Sigint()


def ctrl_c_pressed() -> bool:
    """Whether Ctrl-C was pressed inside the running :func:`deferred_interrupt` block (the run ends because of
    it)."""
    return _SIGINT.requested


@contextlib.contextmanager
def deferred_interrupt() -> Iterator[None]:
    """Within this block, Ctrl-C (SIGINT) ends the run cleanly instead of raising.

    The first Ctrl-C marks the running :class:`RunLoop` as ``"interrupted"``: the
    scheme stops at its next check (within about a second), tells its workers to
    stop, gathers what they send and writes the final checkpoint; a second Ctrl-C
    raises KeyboardInterrupt at once. Only installed in the main thread and over
    Python's default handler (a handler the program installed, or a run in a thread, keeps
    the ordinary KeyboardInterrupt); the previous handler is restored on exit.
    """
    install = (threading.current_thread() is threading.main_thread()
               and signal.getsignal(signal.SIGINT) is signal.default_int_handler)
    if not install:
        yield
        return
    _SIGINT.requested, _SIGINT.presses = False, 0
    signal.signal(signal.SIGINT, _SIGINT)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        _SIGINT.requested, _SIGINT.presses = False, 0


def recent_score(rows: Sequence[Mapping[str, Any]], n: int = RECENT_GAMES) -> float:
    """Mean score of the last ``n`` episodes in ``rows`` (NaN if none)."""
    return float(np.mean([r["score"] for r in rows[-n:]])) if rows else math.nan

