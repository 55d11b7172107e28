"""What every run does the same way, whatever its scheme: the end of the run, the clock, the result.

* :func:`run_to_end` runs a scheme's body and ends the run: Ctrl-C, a divergence, a
  worker's fault, the final checkpoint, the result;
* :class:`RunClock` is the run's start and time budget as any worker process reads them;
* :func:`build_result` makes the :class:`~dqnlab.RunResult` from the loop and a
  :class:`~dqnlab.runtime.progress.Progress`, plus what the scheme adds.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd

from ..config import TrainConfig
from .errors import DivergedError, TaskFailed
from .loop import RunLoop
from .progress import Progress
from .results import RunResult, episodes_frame

__all__ = ["run_to_end", "RunClock", "build_result"]


def run_to_end(scheme: str, loop: RunLoop, body: Callable[[], Any], result: Callable[..., RunResult],
               final_state: Callable[[], Any] | None = None,
               failure_state: Callable[[], Any] | None = None) -> RunResult:
    """Run ``body()``, then end the run as every scheme does.

    * KeyboardInterrupt reaching the body: the run ends ``"interrupted"``, keeping its data
      (:meth:`RunLoop.interrupt`);
    * FloatingPointError (a non-finite TD loss in this process): :class:`DivergedError`;
    * :class:`TaskFailed` (a worker raised, or its process died):
      :class:`~dqnlab.runtime.errors.WorkerError`, or :class:`DivergedError` for a worker's
      non-finite loss;
    * the loop is closed on every way out;
    * with a run directory, the final checkpoint: ``final_state()``, or when it is None
      the loop's own ``state()`` unless an interrupt landed mid-step
      (:attr:`RunLoop.abrupt`); without a state only the result files (the last
      checkpoint stays); after an error its partial result's files. The run directory is
      written once at the end. After a worker's failure, ``failure_state()`` (where given and not None) is
      written as the checkpoint with the partial result, so that ``resume`` continues from the failure;
      otherwise the last good checkpoint stays.

    Parameters
    ----------
    scheme : str
        Named in the errors.
    loop : RunLoop
        The run's loop.
    body : callable
        The scheme's algorithm; returns when the run is over.
    result : callable
        ``result(status=None) -> RunResult``: what is gathered so far (``status`` given:
        ``"failed"`` for an error's partial result).
    final_state : callable, optional
        ``final_state() -> state or None``: the final checkpoint state of a scheme whose
        state lives in workers (None when they did not all send it).
    failure_state : callable, optional
        ``failure_state() -> state or None``: the checkpoint state after a worker failed (not after a
        divergence), for a scheme whose state this process holds.

    Returns
    -------
    RunResult
        ``result()`` at the end.

    Raises
    ------
    WorkerError, DivergedError
        With ``partial`` = ``result("failed")``.
    """
    try:
        body()
    except KeyboardInterrupt:
        loop.interrupt()
    except FloatingPointError as e:  # the update was not applied: the last good checkpoint stays
        raise _failed(loop, DivergedError(scheme, None, str(e), "", _partial(loop, result))) from None
    except TaskFailed as e:
        error = e.error(scheme, _partial(loop, result))
        state = failure_state() if failure_state is not None and not isinstance(error, DivergedError) else None
        raise _failed(loop, error, state) from None
    finally:
        loop.close()
    final = result()
    if loop.checkpointer is not None:  # the run directory, written once: checkpoint and result files
        t0 = time.perf_counter()
        waiting = loop.status == "interrupted"  # (someone waits for Ctrl-C to end the run: say what it does)
        if waiting:
            loop.say(f"saving {loop.checkpointer.directory}/ (checkpoint and result files) ...")
        if final_state is not None:
            state = final_state()
        else:
            state = None if loop.abrupt or loop.state is None else loop.state()
        if state is None:
            loop.checkpointer.save_results(final)
        else:
            loop.checkpointer.write(state, loop.state_dict(), final)
        if waiting:
            loop.say(f"saved in {time.perf_counter() - t0:.1f} s")
    return final


def _partial(loop: RunLoop, result: Callable[..., RunResult]) -> RunResult:
    """What a failed run gathered (the loop closed first, so that its log is complete)."""
    loop.close()
    return result("failed")


def _failed(loop: RunLoop, error: Exception, state: Any = None) -> Exception:
    """``error``, its partial result written to the run directory, with ``state`` as the checkpoint (None: the last
    good checkpoint stays)."""
    if loop.checkpointer is not None:
        if state is None:
            loop.checkpointer.save_results(error.partial)
        else:
            loop.checkpointer.write(state, loop.state_dict(), error.partial)
    return error


@dataclass(frozen=True)
class RunClock:
    """The run's start and time budget, readable in any process (picklable).

    ``time.perf_counter`` values mean nothing in another process, so the run's start
    travels as a wall-clock time and each process puts it back on its own clock.

    Attributes
    ----------
    t0_wall : float
        ``time.time()`` of the run's start (earlier sessions of a resumed run included).
    max_seconds : float or None
        The run's time budget (``config.max_seconds``).
    """

    t0_wall: float
    max_seconds: float | None

    @classmethod
    def of(cls, loop: RunLoop) -> RunClock:
        """The clock of ``loop``'s run."""
        return cls(time.time() - (time.perf_counter() - loop.t0), loop.config.max_seconds)

    def local(self) -> tuple[float, float | None]:
        """``(start, deadline)`` on this process's ``time.perf_counter`` clock (deadline None: no time budget)."""
        start = time.perf_counter() - (time.time() - self.t0_wall)
        return start, None if self.max_seconds is None else start + self.max_seconds


def build_result(scheme: str, config: TrainConfig, workers: int, loop: RunLoop, progress: Progress,
                 weights: dict, status: str | None = None, options: Mapping[str, Any] | None = None,
                 extra: Mapping[str, Any] | None = None, wall_time_s: float | None = None) -> RunResult:
    """The :class:`~dqnlab.RunResult` of a run so far.

    Parameters
    ----------
    scheme, config, workers
        The run's.
    loop : RunLoop
        Its wall time, history and status.
    progress : Progress
        Its totals, games (episode rows) and time split.
    weights : dict of str to ndarray
        The weights the run leaves.
    status : str, optional
        Overrides the loop's (``"failed"`` for a partial result).
    options, extra : mapping, optional
        The scheme's options and its own measurements.
    wall_time_s : float, optional
        Seconds of the run (default: the loop's elapsed time now), for a scheme whose
        time split was computed at that time.
    """
    return RunResult(
        scheme=scheme, config=config, workers=workers, episodes=episodes_frame(progress.games),
        env_steps=progress.env_steps, updates=progress.updates,
        wall_time_s=loop.elapsed if wall_time_s is None else wall_time_s, time_split=dict(progress.time_split),
        weights=weights, history=pd.DataFrame(loop.history), status=status or loop.status,
        options=dict(options or {}), extra=dict(extra or {}))
