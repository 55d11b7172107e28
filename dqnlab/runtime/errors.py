"""How a run fails: a worker's fault, or a divergence (a NaN or infinite TD loss).

Both carry the run up to the failure as a partial :class:`~dqnlab.RunResult`. They live
with the run loop (not with the worker machinery) because every scheme raises them,
``serial`` included; :class:`TaskFailed` is what the worker machinery raises for the
driver (:func:`dqnlab.runtime.driver.run_to_end`) to turn into one of them.
"""

from __future__ import annotations

import re

from .results import RunResult

__all__ = ["WorkerError", "DivergedError", "TaskFailed"]


class WorkerError(RuntimeError):
    """A worker failed; raised in the parent.

    Attributes
    ----------
    scheme : str
    worker : int or None
        Index of the worker that failed (None if the process died and the pool could
        not say which).
    worker_traceback : str
        The worker's traceback text (or the pool's report of the dead process).
    partial : RunResult or None
        Everything gathered before the fault (``status="failed"``): episodes,
        totals, time split, the current weights. Save it with ``err.partial.save(dir)``.
    """

    def __init__(self, scheme: str, worker: int | None, message: str, worker_traceback: str,
                 partial: RunResult | None = None):
        who = f"worker {worker}" if worker is not None else "a worker"
        super().__init__(f"{scheme}: {who} failed: {message}\n"
                         f"--- traceback of {who} ---\n{worker_traceback.rstrip()}")
        self.scheme, self.worker, self.message = scheme, worker, message
        self.worker_traceback = worker_traceback
        self.partial = partial


class DivergedError(WorkerError, FloatingPointError):
    """Training diverged: a TD loss was NaN or infinite, so the run stopped.

    Raised by every scheme (in ``serial`` there is no worker: :attr:`worker` is None).
    The update that produced the loss was not applied.

    Attributes
    ----------
    update : int or None
        Number (from 1) of the update whose loss was not finite.
    partial : RunResult or None
        The run up to the last good update (``status="failed"``); with a run
        directory, ``checkpoint.pt`` there is the last good checkpoint.
    """

    def __init__(self, scheme: str, worker: int | None, message: str, worker_traceback: str = "",
                 partial: RunResult | None = None):
        super().__init__(scheme, worker, message, worker_traceback, partial)
        where = f" (in worker {worker})" if worker is not None else ""
        self.args = (f"{scheme}: training diverged{where}: {message}",)
        found = re.search(r"update (\d+)", message)
        self.update = int(found.group(1)) if found else None

    def __str__(self) -> str:
        return self.args[0]


class TaskFailed(Exception):
    """A worker task raised, or its process died; the driver turns it into a :class:`WorkerError`.

    Parameters
    ----------
    worker : int or None
        The worker's index (None when the pool could not say which).
    message : str
        One line: ``"TypeName: message"`` of the worker's exception, or how the process died.
    tb : str
        The worker's traceback text (or the pool's report).
    """

    def __init__(self, worker: int | None, message: str, tb: str):
        super().__init__(message)
        self.worker, self.message, self.tb = worker, message, tb

    def error(self, scheme: str, partial: RunResult | None) -> WorkerError:
        """The exception for this failure: :class:`DivergedError` for a non-finite loss."""
        cls = DivergedError if self.message.startswith("FloatingPointError") else WorkerError
        return cls(scheme, self.worker, self.message, self.tb, partial)
