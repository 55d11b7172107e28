"""Worker supervision, once for every kind of worker: who started where, who is still heard from, who is lost and why.

A long-lived task (:class:`~dqnlab.parallel.tasks.TaskGroup`) says :class:`~dqnlab.parallel.messages.Hello`
(its pid and host) when it starts, beats (:class:`~dqnlab.parallel.messages.Heartbeat`) every
:data:`~dqnlab.parallel.messages.HEARTBEAT_S` whatever it is doing, and ends with a last report (``done``) or
:class:`~dqnlab.parallel.messages.Failed`. A :class:`Supervisor` takes that news from every message
(:meth:`Supervisor.take`) and tells when a worker is lost (:meth:`Supervisor.lost_worker`):

* its process died (a :class:`~dqnlab.parallel.procwatch.DeathWatch` sees it at once for a process of
  this machine; a pool's call that ends before every worker said goodbye says so for the others);
* its task started a second time (a backend, Dask, ran it again after its process died);
* it sent nothing, not even a heartbeat, for :data:`~dqnlab.parallel.messages.SILENCE_S` (its process
  stopped, or its host cannot be reached).

Each loss is *named* here and nowhere else, as a :class:`Lost` (the worker, one line of what happened
with its pid and host, the details): :meth:`Supervisor.died`, :meth:`Supervisor.silent`,
:meth:`Supervisor.hello`, :meth:`Supervisor.overdue` and :meth:`Supervisor.raised`. The parent's event loop
(:func:`~dqnlab.parallel.tasks.drive_tasks`), rank 0 of an all-reduce group
(:class:`~dqnlab.parallel.allreduce.AllReduceGroup`) and the joblib rounds
(:func:`~dqnlab.parallel.joblib_round.parallel_update`) all end a run through it.
"""

from __future__ import annotations

import socket
import time
from typing import Any, NamedTuple

from ..runtime.errors import TaskFailed
from .faults import describe
from .messages import SILENCE_S, Failed, Heartbeat, Hello
from .procwatch import DeathWatch, exit_from_pool_error

__all__ = ["Lost", "Supervisor", "DEATH_GRACE_S"]

#: Seconds a pool may take to end its call after one of its worker processes died, before the run ends
#: without it (a backend that runs the lost task again never ends the call).
DEATH_GRACE_S = 3.0


class Lost(NamedTuple):
    """A lost worker, as the run's error names it (``TaskFailed(*lost)``).

    Attributes
    ----------
    worker : int or None
        The worker's name: its index, or its rank (:attr:`Supervisor.names_from`); None when it cannot be told.
    message : str
        One line: what happened, with the worker's pid and host where known.
    details : str
        A traceback, or the pool's report (may be empty).
    """

    worker: int | None
    message: str
    details: str


class Supervisor:
    """What the parent knows of its K workers' lives, and the naming of a lost one.

    Parameters
    ----------
    workers : int
        K: the tasks are 0..K-1 (the ``worker`` of their messages).
    names_from : int
        The name the errors give task 0: 0, or 1 for the worker ranks of an all-reduce group (rank 0 is
        the parent).

    Attributes
    ----------
    pids, hosts : dict of int
        Each started task's pid and host (from its :class:`Hello`).
    heard : dict of int to float
        When anything from each started task last came (``time.monotonic()``).
    exited : set of int
        The tasks that have ended: their last report (``done``) or :class:`Failed` came.
    lost : bool
        A task was found lost (silent, or started again): it will not answer, so nobody waits long for it.
    watch : DeathWatch
        Notices which process of this machine dies first.
    failure, failure_tb : BaseException or None, str
        The error the workers' pool ended with and its traceback (set by whoever runs the pool).
    """

    def __init__(self, workers: int, names_from: int = 0):
        self.workers, self.names_from = workers, names_from
        self.pids: dict[int, int] = {}
        self.hosts: dict[int, str] = {}
        self.heard: dict[int, float] = {}
        self.exited: set[int] = set()
        self.lost = False
        self.watch = DeathWatch()
        self.failure: BaseException | None = None
        self.failure_tb = ""
        self._dead_seen: float | None = None  # when a watched process was seen to end before its goodbye

    # ------------------------------------------------------------------ the news
    def take(self, msg: Any) -> Any:
        """Take the news of a worker's message: it marks its worker heard from; a :class:`Heartbeat` or a
        :class:`Hello` ends here (None is returned); a :class:`Failed` or a last report (``done``) marks its
        worker exited. Returns the message otherwise.

        Raises
        ------
        TaskFailed
            For a second :class:`Hello` of a task (:meth:`hello`).
        """
        worker = getattr(msg, "worker", None)
        if worker in self.heard:
            self.heard[worker] = time.monotonic()
        if isinstance(msg, Heartbeat):
            return None
        if isinstance(msg, Hello):
            rerun = self.hello(msg)
            if rerun is not None:
                raise TaskFailed(*rerun)
            return None
        if isinstance(msg, Failed) or getattr(msg, "done", False):
            self.exited.add(msg.worker)
        return msg

    def hello(self, msg: Hello) -> Lost | None:
        """Take a task's :class:`Hello`: its pid and host (the pid watched when the task runs on this machine).

        Returns the loss when the task said hello before: a backend (Dask) ran it again after its process
        died, and its fresh start is not the worker's progress.
        """
        k = msg.worker
        if k in self.pids:
            self.lost = True
            return Lost(self.name(k), f"its process ({self.where(k)}) ended and the backend started the task again "
                                      f"(pid {msg.pid} on {msg.host}), from scratch", "")
        self.pids[k], self.hosts[k], self.heard[k] = msg.pid, msg.host, time.monotonic()
        if msg.host == socket.gethostname():  # a process of this machine
            self.watch.add(k, msg.pid)
        return None

    # ------------------------------------------------------------------ who
    def name(self, worker: int | None) -> int | None:
        """The name of task ``worker`` in errors (None stays None)."""
        return None if worker is None else worker + self.names_from

    def where(self, worker: int) -> str:
        """``"pid N on HOST"``: what is known of where ``worker`` runs."""
        return f"pid {self.pids.get(worker, '?')} on {self.hosts.get(worker, '?')}"

    def missing(self) -> list[int]:
        """The tasks that have not ended, in order."""
        return sorted(set(range(self.workers)) - self.exited)

    # ------------------------------------------------------------------ losses: detected
    def lost_worker(self, alive: bool, grace_s: float = DEATH_GRACE_S, silence_s: float = SILENCE_S) -> Lost | None:
        """The worker to end the run for, if one is lost; else None. Call it with the queue just drained (after
        a read returned nothing), so that a parent busy elsewhere does not take its own delay for a worker's
        silence.

        In order: a watched process that ended before its worker said goodbye, ``grace_s`` seconds after that
        was first seen (a pool, loky, then ends its call, naming the cause: the last case; a backend that
        runs the task again, Dask, does not); a worker silent for over ``silence_s`` seconds (:meth:`silent`);
        the pool's call over (``alive`` False, read *before* the queue was drained: a worker may post its last
        message, then end) with a worker that did not say goodbye.
        """
        now = time.monotonic()
        first = self.watch.first
        if first is not None and first[0] not in self.exited and self._dead_seen is None:
            self._dead_seen = now
        if self._dead_seen is not None and now - self._dead_seen >= grace_s:
            return self.died("its exit status could not be read here", self.failure_tb)
        lost = self.silent(silence_s)
        if lost is not None:
            return lost
        if not alive and self.missing():
            cause = describe(self.failure) if self.failure is not None else "the task ended silently"
            return self.died(cause, self.failure_tb)
        return None

    def silent(self, limit_s: float = SILENCE_S) -> Lost | None:
        """The loss of the running worker heard from longest ago, if that was over ``limit_s`` seconds ago (its
        process stopped, or its host cannot be reached); else None. Sets :attr:`lost`."""
        quiet = [(time.monotonic() - t, k) for k, t in self.heard.items() if k not in self.exited]
        if not quiet or max(quiet)[0] <= limit_s:
            return None
        seconds, k = max(quiet)
        self.lost = True
        return Lost(self.name(k), f"it has sent nothing for {seconds:.0f} s, not even a heartbeat: its process "
                                  f"({self.where(k)}) stopped, or its host cannot be reached", "")

    # ------------------------------------------------------------------ losses: named
    def died(self, cause: str, details: str) -> Lost:
        """The loss of a worker process that died: the first watched process seen to exit (named with its
        pid and host) if its worker had not ended, else the only worker that had not, else nobody; how it
        ended: its exit status as read here, else as ``cause`` (a pool's error text, ``TerminatedWorkerError``)
        reports it, else ``cause``'s first line. ``details``: the pool's traceback (default ``cause``)."""
        missing = self.missing()
        first = self.watch.first
        how = (first[2] if first is not None else None) or exit_from_pool_error(cause)
        if first is not None and first[0] in missing:
            who, what = first[0], f"its process ({self.where(first[0])}) died"
        elif len(missing) == 1:
            who, what = missing[0], "its process died"
        else:
            who, what = None, "a worker process died"
        if how is None:
            how = cause.splitlines()[0] if cause else "cause unknown"
        return Lost(self.name(who), f"{what} ({how}); workers that did not finish: {[self.name(k) for k in missing]}",
                    details or cause)

    def overdue(self, grace_s: float) -> Lost:
        """The loss of the workers that did not end within ``grace_s`` seconds of being told to stop."""
        missing = self.missing()
        return Lost(self.name(missing[0]) if len(missing) == 1 else None,
                    f"workers {[self.name(k) for k in missing]} did not stop within {grace_s:.0f} s of being told to",
                    "")

    def raised(self, msg: Failed) -> Lost:
        """The loss of a worker whose task raised (its :class:`Failed`: the exception and its traceback)."""
        return Lost(self.name(msg.worker), msg.message, msg.traceback)

    def close(self) -> None:
        """Stop watching the processes (idempotent)."""
        self.watch.close()
