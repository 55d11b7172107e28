"""Whether a scheme's workers are threads or processes, torch threads per learner process, Ctrl-C in worker
processes (the parent handles it), and a task run at a lower priority than its process's other threads."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any, Self, TypeVar

import joblib
import torch

from ..options import option
from ..runtime.native import native_reason
from .dask import active_dask_client

__all__ = ["threads_option", "as_threads", "torch_threads", "torch_threads_set", "pin_torch_threads",
           "parent_handles_sigint", "run_niced", "thread_niceness"]

T = TypeVar("T")


def threads_option() -> Any:
    """The ``threads`` option of ``shared``, ``independent`` and ``actors`` (declared here once for all: one
    flag); :func:`as_threads` reads it."""
    return option(None, "Run the workers as threads of this process (true) or as processes (false); none: threads "
                  "where the learner runs on the compiled core (the n-tuple presets on the CPU with uniform replay) "
                  "and no Dask cluster runs the workers, else processes. Threads share tables, weights and "
                  "transitions in memory and run in parallel where the work releases the GIL, as the compiled "
                  "core does.",
                  tip="Workers as threads of this process, sharing memory (on), or as processes (off); empty: "
                      "threads for the n-tuple networks, processes for the others.")


def as_threads(threads: bool | None, config: Any) -> bool:
    """Whether a scheme's workers run as threads: ``threads`` (the scheme's option), or for None, whether the
    learner of ``config`` (a :class:`~dqnlab.TrainConfig`) runs on the compiled core and no Dask cluster is
    joblib's active backend.

    Raises
    ------
    ValueError
        For ``threads=True`` with a Dask cluster as joblib's active backend (its workers are its own processes).
    """
    remote = active_dask_client() is not None
    if threads and remote:
        raise ValueError("threads=True runs the workers in this process, and a Dask cluster runs them as its "
                         "tasks: leave threads unset (or False) on a cluster")
    if threads is None:
        return not remote and native_reason(config, config.device) is None
    return threads


def torch_threads(workers: int) -> int:
    """Torch intra-op threads of each learner process when ``workers`` of them share this machine.

    1 under passive OpenMP waiting (``OMP_WAIT_POLICY=PASSIVE``, dqnlab's default: see
    ``dqnlab/__init__``), else ``max(1, cores // workers)``. A passive thread sleeps
    between operations and is woken for each one, which on DQN-sized matrices costs
    more than a second thread gains; spinning threads gain on an idle machine and
    collapse when anything else runs (they wait for cores that are busy); ``bench scaling``,
    run under each setting, measures the difference. So set ``OMP_WAIT_POLICY=ACTIVE`` before
    importing dqnlab (or torch) on a machine of your own to give each learner
    ``cores // workers`` threads.

    ``cores`` is :func:`joblib.cpu_count`, which respects CPU affinity and cgroup
    quotas (``os.cpu_count()`` would count cores this process may not use).
    """
    if os.environ.get("OMP_WAIT_POLICY", "").strip().upper() == "PASSIVE":
        return 1
    return max(1, joblib.cpu_count() // max(1, workers))


@contextlib.contextmanager
def torch_threads_set(n: int | None) -> Iterator[None]:
    """Run the body with ``torch.set_num_threads(n)`` (``None``: leave as is), then restore."""
    before = torch.get_num_threads()
    if n is not None:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def pin_torch_threads(workers: int, parent_pid: int | None = None) -> int:
    """Limit torch to :func:`torch_threads` threads in this worker process.

    Does nothing when called in the parent itself (``os.getpid() == parent_pid``: a
    one-worker joblib call runs in-process), so the parent's setting is left alone.
    Returns the thread count in effect.
    """
    if parent_pid is not None and os.getpid() == parent_pid:
        return torch.get_num_threads()
    n = torch_threads(workers)
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)
    return n


class parent_handles_sigint:
    """Context manager: ignore SIGINT in a worker process while it runs a task.

    Ctrl-C in a terminal reaches the whole process group, workers included. The
    parent is in charge of interruption (it tells the workers to stop and keeps what
    they send), so workers must not die of it mid-task. The previous handler is
    restored afterwards (pool processes are reused by other joblib calls). Does
    nothing in the parent itself (a one-worker joblib call runs in-process) or off
    the main thread.
    """

    def __init__(self, parent_pid: int | None):
        self.active = (parent_pid is not None and os.getpid() != parent_pid
                       and threading.current_thread() is threading.main_thread())
        self.previous: Any = None

    def __enter__(self) -> Self:
        if self.active:
            self.previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.active and self.previous is not None:
            signal.signal(signal.SIGINT, self.previous)


def thread_niceness() -> int | None:
    """The scheduling niceness of the calling thread (Linux: its own; elsewhere its process's; None where the OS
    has none)."""
    if not hasattr(os, "getpriority"):
        return None
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id() if sys.platform.startswith("linux") else 0)


def run_niced(fn: Callable[[], T], nice: int) -> T:
    """``fn()`` in a thread of its own whose niceness is ``nice`` above this thread's (at most 19), and its result.

    On Linux a thread's niceness is its own (``setpriority`` on its thread id), so nothing else in the process
    changes and the raise ends with the thread: a worker process of joblib's pool, which later runs other tasks,
    keeps its priority (an unprivileged process can raise its niceness but never lower it again). Elsewhere, or
    with ``nice`` 0, ``fn()`` runs here at this thread's priority. What ``fn`` raises is raised here.

    Raises
    ------
    ValueError
        If ``nice`` is not an integer in [0, 19].
    """
    if isinstance(nice, bool) or not isinstance(nice, int) or not 0 <= nice <= 19:
        raise ValueError(f"nice must be an integer in [0, 19], got {nice!r}")
    if nice == 0 or not sys.platform.startswith("linux"):
        return fn()
    out: dict[str, Any] = {}

    def body() -> None:
        try:
            with contextlib.suppress(OSError):  # (raising one's own niceness is always allowed; be safe)
                os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), min(19, thread_niceness() + nice))
            out["value"] = fn()
        except BaseException as err:  # noqa: BLE001 - handed to the caller's thread as it is
            out["error"] = err

    thread = threading.Thread(target=body, name=f"dqnlab-niced-{threading.current_thread().name}")
    thread.start()
    thread.join()
    if "error" in out:
        raise out["error"]
    return out["value"]
