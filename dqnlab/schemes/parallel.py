"""Machinery the parallel schemes share: pools, thread pinning, worker errors, averaging.

Three groups of helpers live here, so that each scheme module reads as its algorithm:

* **weights maths** -- :func:`average_weights`, :func:`score_coefficients`,
  :func:`combine_weights`, :func:`divergence`, the optimiser-state helpers, and
  :class:`SyncSchedule` (when an ``independent`` learner shares its weights);
* **long-lived worker tasks** -- :class:`TaskGroup` runs one joblib task per worker
  for a whole run (``independent``, ``shared``) and talks to them through
  ``multiprocessing.Manager`` queues; :func:`drive_tasks` is the parent's event loop;
* **synchronous rounds** -- :func:`run_rounds`, the loop of ``sharded`` and ``averaged``:
  the parent acts and owns the replay buffer, and every update is one joblib round in
  which each worker takes one optimiser step from a copy of the current state.

Workers report failures as :class:`WorkerError` in the parent: the worker's index, its
traceback text, and a partial :class:`~dqnlab.RunResult` holding what was gathered.

References
----------
* Parameter averaging / local SGD: Zinkevich, Weimer, Smola and Li, "Parallelized
  Stochastic Gradient Descent", NeurIPS 2010; McMahan et al., "Communication-Efficient
  Learning of Deep Networks from Decentralized Data" (FedAvg), AISTATS 2017.
* Many learners sharing parameters: Nair et al., "Massively Parallel Methods for Deep
  Reinforcement Learning" (Gorila), arXiv:1507.04296, 2015.
"""

from __future__ import annotations

import contextlib
import math
import os
import queue
import re
import signal
import socket
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from multiprocessing.managers import SyncManager
from typing import Any

import joblib
import numpy as np
import torch

from ..agent.dqn import DQNAgent
from ..config import TrainConfig
from ..replay import Minibatch
from ..runtime.results import RunResult
from .base import Learner, Progress, RunLoop
from .procwatch import DeathWatch, exit_from_pool_error

__all__ = [
    "SYNC_SCHEDULES", "WorkerError", "SyncSchedule",
    "torch_threads", "torch_threads_set", "pin_torch_threads",
    "average_weights", "score_coefficients", "combine_weights", "divergence", "flatten_weights",
    "optimizer_state", "load_optimizer_state", "average_optimizer_states",
    "TaskGroup", "drive_tasks", "train_step_task", "parallel_update", "run_rounds",
    "split_budget", "best_index", "check_fault", "DivergedError", "worker_error",
]

#: Sync schedules of the ``independent`` scheme.
SYNC_SCHEDULES = ("none", "periodic", "final", "weighted", "best")
#: Finished games whose mean score ranks a learner (``weighted`` and ``best`` schedules).
SCORE_WINDOW = 20


# ----------------------------------------------------------------------------- validation
def check_choice(name: str, value: Any, allowed: Sequence[str]) -> None:
    """Raise ValueError naming option ``name`` unless ``value`` is one of ``allowed``."""
    if not isinstance(value, str) or value not in allowed:
        raise ValueError(f"{name} must be one of {list(allowed)}, got {value!r}")


def check_int(name: str, value: Any, minimum: int = 1) -> None:
    """Raise ValueError naming option ``name`` unless ``value`` is an integer >= ``minimum``."""
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")


def check_number(name: str, value: Any, low: float, high: float = math.inf,
                 low_open: bool = True, text: str | None = None) -> None:
    """Raise ValueError naming option ``name`` unless ``value`` is a finite number in range."""
    ok = (isinstance(value, (int, float, np.floating, np.integer)) and not isinstance(value, bool)
          and math.isfinite(value) and (value > low if low_open else value >= low) and value <= high)
    if not ok:
        raise ValueError(f"{name} must be {text or f'a number > {low}'}, got {value!r}")


def check_bool(name: str, value: Any) -> None:
    """Raise ValueError naming option ``name`` unless ``value`` is True or False."""
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be True or False, got {value!r}")


def split_budget(total: int | None, workers: int) -> list[int | None]:
    """Split an env-step budget across ``workers`` (the first ones get the remainder)."""
    if total is None:
        return [None] * workers
    return [total // workers + (1 if k < total % workers else 0) for k in range(workers)]


# ----------------------------------------------------------------------------- threads
def torch_threads(workers: int) -> int:
    """Torch intra-op threads of each learner process when ``workers`` of them share this machine.

    1 under passive OpenMP waiting (``OMP_WAIT_POLICY=PASSIVE``, dqnlab's default: see
    ``dqnlab/__init__``), else ``max(1, cores // workers)``. A passive thread sleeps
    between operations and is woken for each one, which on DQN-sized matrices costs
    more than a second thread gains; spinning threads gain on an idle machine and
    collapse when anything else runs. Measured on 2 cores (``bench scaling``, ``serial``,
    ``mlp`` preset, env steps/s): 9,900 with 1 thread; 6,900 with 2 passive threads;
    12,500 with 2 spinning threads on an idle machine, 3,900 beside one busy process.
    So set ``OMP_WAIT_POLICY=ACTIVE`` before importing dqnlab (or torch) on a machine of
    your own to give each learner ``cores // workers`` threads.

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

    def __enter__(self) -> "parent_handles_sigint":
        if self.active:
            self.previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.active and self.previous is not None:
            signal.signal(signal.SIGINT, self.previous)


# ----------------------------------------------------------------------------- weights maths
Weights = dict[str, np.ndarray]


def average_weights(weights: Sequence[Weights], coefficients: Sequence[float] | np.ndarray | None = None) -> Weights:
    """Weighted average of parameter dicts: ``sum_k c_k w_k`` with ``sum_k c_k = 1``.

    Parameters
    ----------
    weights : sequence of dict of str to ndarray
        K dicts with the same names and shapes (e.g. :meth:`DQNAgent.get_weights`).
    coefficients : sequence of float, optional
        K non-negative numbers; normalised to sum to 1. ``None`` = plain mean ``1/K``.

    Returns
    -------
    dict of str to ndarray
        float32 arrays (the average is accumulated in float64).

    Raises
    ------
    ValueError
        If ``weights`` is empty, names or shapes differ, or the coefficients are not
        K finite non-negative numbers with a positive sum.
    """
    if len(weights) == 0:
        raise ValueError("average_weights needs at least one weight dict")
    c = _coefficients(len(weights), coefficients)
    names = list(weights[0])
    for w in weights[1:]:
        if list(w) != names or any(np.shape(w[n]) != np.shape(weights[0][n]) for n in names):
            raise ValueError("weight dicts to average must have the same names and shapes")
    return {n: sum(ck * np.asarray(w[n], np.float64) for ck, w in zip(c, weights)).astype(np.float32)
            for n in names}


def _coefficients(k: int, coefficients: Sequence[float] | np.ndarray | None) -> np.ndarray:
    if coefficients is None:
        return np.full(k, 1.0 / k)
    c = np.asarray(coefficients, dtype=np.float64)
    if c.shape != (k,) or not np.all(np.isfinite(c)) or np.any(c < 0) or c.sum() <= 0:
        raise ValueError(f"coefficients must be {k} finite non-negative numbers with a positive sum, "
                         f"got {coefficients!r}")
    return c / c.sum()


def score_coefficients(scores: Sequence[float], temperature: float) -> np.ndarray:
    """Softmax of mean scores: ``c_k = exp(s_k / T) / sum_j exp(s_j / T)``.

    Parameters
    ----------
    scores : sequence of float
        Each learner's recent mean game score (points); NaN (no finished game yet)
        counts as the lowest finite score, and all-NaN gives equal coefficients.
    temperature : float
        T in points, > 0. Small T favours the best learner strongly (T -> 0 is
        ``best``); large T approaches the plain mean.

    Returns
    -------
    (K,) float64 coefficients summing to 1.
    """
    s = np.asarray(scores, dtype=np.float64)
    if not np.isfinite(s).any():
        return np.full(len(s), 1.0 / len(s))
    s = np.where(np.isfinite(s), s, np.nanmin(np.where(np.isfinite(s), s, np.nan)))
    z = (s - s.max()) / temperature  # shift for numerical stability; softmax is shift-invariant
    e = np.exp(z)
    return e / e.sum()


def best_index(scores: Sequence[float]) -> int:
    """Index of the highest finite score (ties: the lowest index; all NaN: 0)."""
    s = np.asarray(scores, dtype=np.float64)
    return int(np.argmax(np.where(np.isfinite(s), s, -np.inf))) if np.isfinite(s).any() else 0


def combine_weights(schedule: str, weights: Sequence[Weights], scores: Sequence[float],
                    temperature: float = 500.0) -> tuple[Weights, np.ndarray]:
    """The weights every learner gets at a sync, per schedule.

    ``periodic`` and ``final``: plain mean; ``weighted``: mean with
    :func:`score_coefficients`; ``best``: a copy of the best learner's weights;
    ``none``: also the best learner's (used only for the run's final weights:
    averaging learners that never synchronised is not meaningful).

    Returns
    -------
    (weights, coefficients)
        The combined dict and the (K,) coefficients used (one-hot for ``best``).
    """
    check_choice("sync", schedule, SYNC_SCHEDULES)
    k = len(weights)
    if schedule in ("best", "none"):
        c = np.zeros(k)
        c[best_index(scores)] = 1.0
        return {n: np.array(v, dtype=np.float32, copy=True) for n, v in weights[int(c.argmax())].items()}, c
    c = score_coefficients(scores, temperature) if schedule == "weighted" else np.full(k, 1.0 / k)
    return average_weights(weights, c), c


def flatten_weights(weights: Weights) -> np.ndarray:
    """All parameters in one ``(P,)`` float64 vector (dict order)."""
    return np.concatenate([np.asarray(v, np.float64).ravel() for v in weights.values()])


def divergence(weights: Sequence[Weights]) -> tuple[float, float]:
    """How far K learners have drifted apart.

    Returns
    -------
    (mean_l2, relative)
        ``mean_l2``: mean over learners of ``||theta_k - theta_bar||_2``, the L2
        distance of each flattened parameter vector to their mean; ``relative``:
        ``mean_l2 / ||theta_bar||_2``. Both 0 when the learners are identical.
    """
    flat = np.stack([flatten_weights(w) for w in weights])
    mean = flat.mean(axis=0)
    d = float(np.linalg.norm(flat - mean, axis=1).mean())
    norm = float(np.linalg.norm(mean))
    return d, (d / norm if norm > 0 else 0.0)


def optimizer_state(agent: DQNAgent) -> dict[str, dict[str, Any]]:
    """The optimiser's per-parameter state as NumPy, keyed by parameter name.

    For Adam: ``{"mlp.0.weight": {"step": float, "exp_avg": ndarray, "exp_avg_sq": ndarray}, ...}``;
    plain SGD has no state (``{}``). Arrays are float32 copies shaped like the parameter.
    """
    out: dict[str, dict[str, Any]] = {}
    for name, p in agent.online.named_parameters():
        st = agent.optimizer.state.get(p)
        if st:
            out[name] = {k: (v.detach().numpy().copy() if v.dim() else float(v)) if torch.is_tensor(v) else v
                         for k, v in st.items()}
    return out


def load_optimizer_state(agent: DQNAgent, state: dict[str, dict[str, Any]]) -> None:
    """Replace the optimiser's per-parameter state with :func:`optimizer_state` output."""
    agent.optimizer.state.clear()
    for name, p in agent.online.named_parameters():
        if name in state:
            agent.optimizer.state[p] = {
                k: (torch.from_numpy(np.array(v, dtype=np.float32)) if isinstance(v, np.ndarray)
                    else torch.tensor(float(v), dtype=torch.float32))
                for k, v in state[name].items()}


def average_optimizer_states(states: Sequence[dict[str, dict[str, Any]]],
                             coefficients: Sequence[float] | np.ndarray | None = None) -> dict[str, dict[str, Any]]:
    """Weighted average of :func:`optimizer_state` dicts (Adam moments; equal step counts stay)."""
    c = _coefficients(len(states), coefficients)
    out: dict[str, dict[str, Any]] = {}
    for name, first in states[0].items():
        out[name] = {}
        for key, v in first.items():
            if isinstance(v, np.ndarray):
                total = sum(ck * np.asarray(s[name][key], np.float64) for ck, s in zip(c, states))
                out[name][key] = total.astype(np.float32)
            else:
                out[name][key] = float(sum(ck * float(s[name][key]) for ck, s in zip(c, states)))
    return out


# ----------------------------------------------------------------------------- sync schedule
@dataclass
class SyncSchedule:
    """When an ``independent`` learner checks in, and whether that check-in syncs.

    A learner checks in each time its update count crosses a multiple of
    ``sync_every`` (round ``r = updates // sync_every``). At every check-in it posts
    its weights (for the divergence measurement); the check-in is **active** -- the
    learner waits for the combined weights -- when the schedule says so:

    * ``none``: never;
    * ``periodic``, ``weighted``, ``best``: always;
    * ``final``: when ``progress >= 1 - final_fraction`` (progress = fraction of the
      budget spent, env steps or seconds, whichever is further along), so with the
      default 0.25 never before 75% of the budget.

    Parameters
    ----------
    schedule : str
        One of :data:`SYNC_SCHEDULES`.
    sync_every : int
        Updates (of this learner) between check-ins.
    final_fraction : float
        In (0, 1]: the last fraction of the budget in which ``final`` syncs.
    """

    schedule: str
    sync_every: int
    final_fraction: float = 0.25
    last_round: int = 0

    def active(self, progress: float) -> bool:
        """Whether a check-in at budget fraction ``progress`` (in [0, 1]) syncs."""
        if self.schedule == "none":
            return False
        if self.schedule == "final":
            return progress >= 1.0 - self.final_fraction - 1e-12
        return True

    def check(self, updates: int, progress: float) -> tuple[int, bool] | None:
        """Call after every learning step: ``(round, active)`` at a check-in, else None."""
        r = updates // self.sync_every
        if r <= self.last_round:
            return None
        self.last_round = r
        return r, self.active(progress)


# ----------------------------------------------------------------------------- errors
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


def worker_error(scheme: str, worker: int | None, message: str, tb: str,
                 partial: RunResult | None) -> WorkerError:
    """The exception for a worker's failure: :class:`DivergedError` for a non-finite loss."""
    cls = DivergedError if message.startswith("FloatingPointError") else WorkerError
    return cls(scheme, worker, message, tb, partial)


class _TaskFailed(Exception):
    """Internal: a worker task failed (index, one-line message, traceback text)."""

    def __init__(self, worker: int | None, message: str, tb: str):
        super().__init__(message)
        self.worker, self.message, self.tb = worker, message, tb


def _describe(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"


def check_fault(fault: dict[str, Any] | None, worker: int, **counters: int) -> None:
    """Test hook: fail on purpose in worker ``fault["worker"]`` once a counter is reached.

    ``fault`` is a picklable dict such as ``{"worker": 1, "after_env_steps": 500}`` or
    ``{"worker": 0, "after_updates": 3, "kind": "exit"}``; ``kind`` ``"raise"``
    (default) raises RuntimeError, ``"exit"`` ends the process with ``os._exit(3)``
    (a crash). Schemes take it as the private ``_fault`` keyword; it is data, so it
    crosses process boundaries (a monkeypatch would not).
    """
    if not fault or fault.get("worker") != worker:
        return
    for key, value in counters.items():
        limit = fault.get(f"after_{key}")
        if limit is not None and value >= limit:
            if fault.get("kind", "raise") == "exit":
                os._exit(3)
            raise RuntimeError(f"injected fault in worker {worker} after {value} {key.replace('_', ' ')}")


# ----------------------------------------------------------------------------- long-lived tasks
class Channel:
    """A worker's end of the queues: ``send`` to the parent, ``poll``/``wait`` for orders.

    Orders from the parent are tuples: ``("stop",)``, ``("weights", dict or None)``,
    and for checkpoints ``("checkpoint", n)`` / ``("checkpointed", n)`` (see
    :meth:`serve_checkpoint`).
    """

    def __init__(self, worker: int, inbox: Any, outbox: Any):
        self.worker, self.inbox, self.outbox = worker, inbox, outbox
        self.stopped = False
        #: Checkpoint the parent asked for and this worker has not answered yet.
        self.checkpoint_id: int | None = None
        #: ``state() -> Any``: this worker's checkpoint state (set by a task that checkpoints).
        self.state: Callable[[], Any] | None = None

    def send(self, kind: str, payload: Any = None) -> None:
        """Put ``(kind, worker, payload)`` on the parent's queue."""
        self.inbox.put((kind, self.worker, payload))

    def poll(self) -> None:
        """Read pending orders without blocking (sets :attr:`stopped` on a stop,
        :attr:`checkpoint_id` on a checkpoint request)."""
        try:
            while True:
                msg = self.outbox.get_nowait()
                if msg[0] == "stop":
                    self.stopped = True
                elif msg[0] == "checkpoint":
                    self.checkpoint_id = msg[1]
        except queue.Empty:
            pass

    def wait(self) -> tuple:
        """Block until the parent replies; a stop order is returned as ``("stop",)``.

        A checkpoint request that arrives meanwhile is answered at once (the state then
        records what the worker is waiting for), without waiting for ``checkpointed``.
        """
        while True:
            try:
                msg = self.outbox.get(timeout=1.0)
            except queue.Empty:
                continue
            if msg[0] == "checkpoint":
                self._send_state(msg[1])
                continue
            if msg[0] == "checkpointed":
                continue
            if msg[0] == "stop":
                self.stopped = True
            return msg

    def serve_checkpoint(self, n: int | None = None, other: Callable[[tuple], Any] | None = None) -> float:
        """Answer checkpoint request ``n`` (default: the pending one, seen by :meth:`poll`;
        call between steps).

        Sends ``("state", {"id": n, "state": state()})`` and blocks until the parent has
        the states of all workers and says ``("checkpointed", n)`` (or stop), so that
        the checkpoint is one consistent cut of the run. Other orders that arrive
        meanwhile go to ``other`` (dropped without it). Returns the seconds spent.
        """
        if n is None:
            if self.checkpoint_id is None:
                return 0.0
            n, self.checkpoint_id = self.checkpoint_id, None
        t0 = time.perf_counter()
        self._send_state(n)
        while not self.stopped:
            try:
                msg = self.outbox.get(timeout=1.0)
            except queue.Empty:
                continue
            if msg[0] == "stop":
                self.stopped = True
            elif msg[0] == "checkpointed" and msg[1] == n:
                break
            elif other is not None:
                other(msg)
        return time.perf_counter() - t0

    def _send_state(self, n: int) -> None:
        self.send("state", {"id": n, "state": self.state() if self.state is not None else None})


def _task_main(fn: Callable[..., None], worker: int, workers: int, parent_pid: int, inbox: Any, outbox: Any,
               kwargs: dict[str, Any]) -> int:
    """Body of one long-lived joblib task: pin threads, run ``fn``, report any exception."""
    ch = Channel(worker, inbox, outbox)
    try:
        with parent_handles_sigint(parent_pid):
            threads = pin_torch_threads(workers, parent_pid)
            ch.send("hello", {"pid": os.getpid(), "torch_threads": threads, "host": socket.gethostname()})
            fn(ch, **kwargs)
    except BaseException as e:  # noqa: BLE001 - reported to the parent, which raises
        try:
            inbox.put(("error", worker, {"message": _describe(e), "traceback": traceback.format_exc()}))
        except Exception:  # the parent is gone; nothing more to do
            pass
    return worker


class TaskGroup:
    """K long-lived joblib tasks (one per worker) and the queues to talk to them.

    The blocking ``joblib.Parallel`` call runs in a background thread of the parent,
    so the parent stays free to gather results, draw progress and answer sync
    requests. Messages from workers are ``(kind, worker, payload)`` tuples on one
    ``inbox`` queue; each worker has its own ``outbox`` for orders.

    Parameters
    ----------
    fn : callable
        Module-level function ``fn(channel, **kwargs)`` run in each worker.
    kwargs : list of dict
        Keyword arguments of each worker's call (length K).
    backend : str, optional
        joblib backend; None uses the one chosen with ``joblib.parallel_config``
        (loky by default). It must run all K tasks at once, in processes of this
        machine (the queues live in a ``multiprocessing.Manager`` here).
    """

    def __init__(self, fn: Callable[..., None], kwargs: list[dict[str, Any]], backend: str | None = None):
        self.fn, self.kwargs, self.backend = fn, kwargs, backend
        self.workers = len(kwargs)
        self.manager: SyncManager | None = None
        self.thread: threading.Thread | None = None
        self.failure: BaseException | None = None
        self.failure_tb = ""
        self.pids: dict[int, int] = {}
        self.exited: set[int] = set()
        #: True while a checkpoint is being gathered (see :func:`drive_tasks`).
        self.checkpoint_pending = False
        #: Notices which worker process dies first (to name it if the pool breaks).
        self.watch = DeathWatch()

    def __enter__(self) -> "TaskGroup":
        from .cluster import task_transport

        # On a Dask cluster (joblib's active backend), queues through its scheduler: see cluster.py.
        remote = task_transport(self.workers) if self.backend is None else None
        self._close_queues: Callable[[], None] | None = None
        if remote is not None:
            self.backend, self.inbox, self.outboxes, self._close_queues = remote
        else:
            self.manager = SyncManager()
            # The manager must outlive a Ctrl-C so that the workers can be told to stop.
            self.manager.start(signal.signal, (signal.SIGINT, signal.SIG_IGN))
            self.inbox = self.manager.Queue()
            self.outboxes = [self.manager.Queue() for _ in range(self.workers)]
        self.thread = threading.Thread(target=self._run, name="dqnlab-tasks", daemon=True)
        self.thread.start()
        return self

    def _run(self) -> None:
        parent = os.getpid()
        try:
            with joblib.Parallel(n_jobs=self.workers, batch_size=1, pre_dispatch="all",
                                 backend=self.backend) as parallel:
                try:
                    slots = parallel._effective_n_jobs()
                except Exception:  # private joblib API: if it is gone, trust the backend
                    slots = self.workers
                if slots < self.workers:
                    raise RuntimeError(f"the joblib backend runs {slots} tasks at once; "
                                       f"this scheme needs all {self.workers} workers running together")
                parallel(joblib.delayed(_task_main)(self.fn, k, self.workers, parent, self.inbox,
                                                    self.outboxes[k], kw)
                         for k, kw in enumerate(self.kwargs))
        except BaseException as e:  # noqa: BLE001 - the parent reads it
            self.failure = e
            self.failure_tb = traceback.format_exc()

    @property
    def alive(self) -> bool:
        """Whether the background joblib call is still running."""
        return self.thread is not None and self.thread.is_alive()

    def get(self, timeout: float) -> tuple | None:
        """Next message from any worker, or None after ``timeout`` seconds."""
        try:
            return self.inbox.get(timeout=timeout)
        except queue.Empty:
            return None

    def send(self, worker: int, msg: tuple) -> None:
        try:
            self.outboxes[worker].put(msg)
        except Exception:  # the worker is gone with its queue; nothing to tell it
            pass

    def stop(self) -> None:
        """Tell every worker that has not exited to stop."""
        for k in range(self.workers):
            if k not in self.exited:
                self.send(k, ("stop",))

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self, grace_s: float = 20.0) -> None:
        """Stop the workers, wait up to ``grace_s`` for them, and shut the manager down.

        If tasks are still running after the grace period (a worker stuck in native
        code), the loky pool is killed, so that the call never hangs.
        """
        if self.thread is not None:
            self.stop()
            self.thread.join(grace_s)
            if self.thread.is_alive():
                _kill_loky_pool()
                self.thread.join(10.0)
        if getattr(self, "_close_queues", None) is not None:
            self._close_queues()
            self._close_queues = None
        if self.manager is not None:
            try:
                self.manager.shutdown()
            except Exception:
                pass
            self.manager = None
        self.watch.close()


def _kill_loky_pool() -> None:
    try:
        from joblib.externals.loky import get_reusable_executor

        get_reusable_executor().shutdown(wait=False, kill_workers=True)
    except Exception:
        pass


def drive_tasks(group: TaskGroup, loop: RunLoop, handle: Callable[[str, int, Any], None],
                progress: Callable[[], Progress], scheme: str,
                partial: Callable[[], RunResult], work: Callable[[], bool] | None = None,
                checkpoint: Callable[[dict[int, Any]], None] | None = None) -> None:
    """The parent's event loop for long-lived tasks, until every worker has exited.

    Routes each message to ``handle(kind, worker, payload)`` (the scheme records
    progress, answers sync requests, ...), reports ``progress()`` (a
    :class:`~dqnlab.schemes.base.Progress`) to ``loop`` about once a second (which
    records the history, draws progress, writes the TensorBoard log and calls the
    user's callback) and records it once more when every worker has exited (the final
    totals, with each worker's last games and diagnostics), tells the workers to stop
    when the budget is spent or the callback asks, and turns KeyboardInterrupt into a
    clean stop.

    ``work``, if given, is the parent's own work between messages (the ``actors``
    learner's updates): called whenever no message is waiting and the run is not
    stopping; it returns True if it has more to do at once (then the next wait for
    a message does not block).

    ``checkpoint``, if given, writes a checkpoint from the workers' states: when
    ``loop.checkpoint_due()``, every running worker is sent ``("checkpoint", n)``;
    each answers with its state and waits (:meth:`Channel.serve_checkpoint`); once
    every running worker has answered, ``checkpoint({worker: state})`` is called (a
    worker that exited meanwhile sent its final state with its ``done``, which the
    scheme keeps), and the workers go on. While that is pending,
    ``group.checkpoint_pending`` is True; when it ends (written, or abandoned because
    the run is stopping) ``handle("checkpoint_end", -1, None)`` is called.

    Raises
    ------
    WorkerError
        If a worker raised (after the others have stopped and sent what they had), or
        a worker process died. ``partial()`` builds the error's partial result.
    """
    error: tuple[int | None, str, str] | None = None
    stopping = False
    last_report = time.perf_counter()
    stop_deadline = math.inf
    busy = False
    barrier: dict[str, Any] | None = None  # the checkpoint being gathered
    while len(group.exited) < group.workers:
        try:
            alive = group.alive  # before reading: a worker may post its last message, then end
            msg = group.get(0.0 if busy else 0.1)
            busy = work is not None and msg is not None  # drain waiting messages before working
            if msg is not None:
                kind, k, payload = msg
                if kind == "hello":
                    group.pids[k] = payload["pid"]
                    if payload.get("host") == socket.gethostname():  # a process of this machine
                        group.watch.add(k, payload["pid"])
                elif kind == "state":
                    if barrier is not None and payload["id"] == barrier["id"]:
                        barrier["states"][k] = payload["state"]
                elif kind == "error":
                    group.exited.add(k)
                    if error is None:
                        error = (k, payload["message"], payload["traceback"])
                    handle("exit", k, None)
                else:
                    if kind == "done":
                        group.exited.add(k)
                    handle(kind, k, payload)
                    if kind == "done":
                        handle("exit", k, None)
            now = time.perf_counter()
            if now - last_report >= loop.report_every_s and loop.status == "running":
                last_report = now
                loop.report(progress())
            if not stopping and (error is not None or loop.done):
                stopping = True
                stop_deadline = now + 30.0
                group.stop()
            if checkpoint is not None:
                barrier = _checkpoint_barrier(group, loop, handle, checkpoint, barrier, stopping)
            if work is not None and msg is None and not stopping:
                busy = work()
            if not alive and msg is None and len(group.exited) < group.workers:
                # The pool's call ended without every worker saying goodbye: a process died.
                missing = sorted(set(range(group.workers)) - group.exited)
                cause = _describe(group.failure) if group.failure is not None else "the task ended silently"
                if error is None:
                    error = _death_error(group, missing, cause)
                break
            if now > stop_deadline:
                missing = sorted(set(range(group.workers)) - group.exited)
                if error is None:
                    error = (missing[0] if len(missing) == 1 else None,
                             f"workers {missing} did not stop within 30 s of being told to", "")
                break
        except KeyboardInterrupt:
            loop.interrupt()
            if stopping:  # second Ctrl-C: stop waiting
                break
            stopping = True
            stop_deadline = time.perf_counter() + 15.0
            group.stop()
    loop.record(progress())
    if error is not None:
        k, message, tb = error
        raise worker_error(scheme, k, message, tb, partial())


def _death_error(group: TaskGroup, missing: list[int], cause: str) -> tuple[int | None, str, str]:
    """``(worker, one-line message, details)`` for a worker process that died."""
    first = group.watch.first
    how = (first[2] if first is not None else None) or exit_from_pool_error(cause)
    if first is not None and first[0] in missing:
        who, what = first[0], f"its process (pid {first[1]}) died"
    elif len(missing) == 1:
        who, what = missing[0], "its process died"
    else:
        who, what = None, "a worker process died"
    if how is None:
        how = cause.splitlines()[0] if cause else "cause unknown"
    return who, f"{what} ({how}); workers that did not finish: {missing}", group.failure_tb or cause


def _checkpoint_barrier(group: TaskGroup, loop: RunLoop, handle: Callable[[str, int, Any], None],
                        checkpoint: Callable[[dict[int, Any]], None], barrier: dict[str, Any] | None,
                        stopping: bool) -> dict[str, Any] | None:
    """One look at the checkpoint barrier of :func:`drive_tasks`; returns the barrier still pending."""
    if barrier is None:
        if stopping or not loop.checkpoint_due():
            return None
        barrier = {"id": getattr(group, "_checkpoints", 0) + 1, "states": {}}
        group._checkpoints = barrier["id"]
        group.checkpoint_pending = True
        for k in range(group.workers):
            if k not in group.exited:
                group.send(k, ("checkpoint", barrier["id"]))
        return barrier
    running = set(range(group.workers)) - group.exited
    if not stopping and not running <= set(barrier["states"]):
        return barrier
    if not stopping:
        checkpoint(dict(barrier["states"]))
    group.checkpoint_pending = False
    for k in running & set(barrier["states"]):
        group.send(k, ("checkpointed", barrier["id"]))
    handle("checkpoint_end", -1, None)
    return None


# ----------------------------------------------------------------------------- synchronous rounds
# One scratch agent per thread: a Dask worker runs concurrent tasks as threads of one process.
_STEP_AGENT = threading.local()


def _step_agent(config: TrainConfig) -> DQNAgent:
    """This thread's scratch agent for :func:`train_step_task` (built once per config)."""
    cache = vars(_STEP_AGENT)  # this thread's
    if cache.get("key") != config:
        cache.update(key=config, agent=DQNAgent(config, seed=0))
    return cache["agent"]


def train_step_task(worker: int, workers: int, parent_pid: int, config: TrainConfig,
                    state: dict[str, Any], boards: np.ndarray, actions: np.ndarray, targets: np.ndarray,
                    update: int, fault: dict[str, Any] | None = None, grad_norm: bool = False) -> dict[str, Any]:
    """One optimiser step from a copy of the learner's state, in a worker (errors are returned, not raised).

    Loads ``state`` (``online`` weights and optimiser state ``opt``) into a scratch
    agent, computes the TD loss and its gradient (:meth:`DQNAgent.compute_gradients`,
    the mean over the ``n`` transitions) of ``boards`` ``(n, 4, 4)`` uint8 and ``actions`` ``(n,)`` int64
    against the precomputed ``targets`` ``(n,)`` float32 (:meth:`DQNAgent.td_targets`,
    computed by the parent, which holds the same weights: no need to ship the target
    network), backpropagates, clips the gradient norm (``config.max_grad_norm``) and
    takes one step of the config's optimiser.

    Returns
    -------
    dict
        ``ok`` True with ``weights``, ``opt`` (new optimiser state), ``diagnostics``
        (:meth:`DQNAgent.diagnostics` of the step: the loss before it and mean max-Q; with
        ``grad_norm``, the gradient norm too, which an n-tuple table's sparse gradient
        makes cost about a step) and ``compute_s`` (seconds of the step); or ``ok`` False
        with ``message`` and ``traceback`` text of the exception.
    """
    try:
        with parent_handles_sigint(parent_pid):
            return _train_step(worker, workers, parent_pid, config, state, boards, actions, targets,
                               update, fault, grad_norm)
    except Exception as e:  # reported to the parent, which raises WorkerError
        return {"ok": False, "message": _describe(e), "traceback": traceback.format_exc()}


def _train_step(worker: int, workers: int, parent_pid: int, config: TrainConfig,
                state: dict[str, Any], boards: np.ndarray, actions: np.ndarray, targets: np.ndarray,
                update: int, fault: dict[str, Any] | None, grad_norm: bool) -> dict[str, Any]:
    pin_torch_threads(workers, parent_pid)
    check_fault(fault, worker, updates=update)
    t0 = time.perf_counter()
    agent = _step_agent(config)
    agent.set_weights(state["online"])
    load_optimizer_state(agent, state["opt"])
    value = agent.compute_gradients(Minibatch(boards, actions, None, None, None, None), torch.from_numpy(targets))
    if not np.isfinite(value):
        raise FloatingPointError(f"non-finite TD loss ({value}) at update {update + 1}")
    agent.step_optimizer()
    out = {"ok": True, "weights": agent.get_weights(), "opt": optimizer_state(agent),
           "diagnostics": agent.diagnostics(grad_norm)}
    out["compute_s"] = time.perf_counter() - t0
    return out


class RoundStats:
    """Time accounting of :func:`parallel_update` rounds, per worker (seconds)."""

    def __init__(self, workers: int):
        self.compute = np.zeros(workers)
        self.comm = np.zeros(workers)
        self.parent = 0.0
        self.rounds = 0
        self.round_s = 0.0

    def state_dict(self) -> dict[str, Any]:
        return {"compute": self.compute.copy(), "comm": self.comm.copy(), "parent": self.parent,
                "rounds": self.rounds, "round_s": self.round_s}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if len(state["compute"]) != len(self.compute):
            raise ValueError(f"round stats of {len(state['compute'])} workers, not {len(self.compute)}")
        self.compute, self.comm = np.array(state["compute"], float), np.array(state["comm"], float)
        self.parent, self.rounds, self.round_s = float(state["parent"]), int(state["rounds"]), float(state["round_s"])


def parallel_update(parallel: joblib.Parallel, agent: DQNAgent, batches: Sequence[Minibatch],
                    coefficients: Sequence[float] | np.ndarray | None,
                    stats: RoundStats | None = None, fault: dict[str, Any] | None = None,
                    grad_norm: bool = False) -> float:
    """One update of ``agent`` by K workers, each stepping on one of ``batches``; the
    returned weights (and optimiser states) are averaged into ``agent``.

    This is the update of the ``sharded`` scheme (``batches`` = shards of one
    minibatch, ``coefficients`` = shard sizes) and of ``averaged`` (K independent
    minibatches, equal coefficients). With plain SGD, one step and coefficients
    proportional to shard sizes, the result equals one SGD step on the concatenated
    minibatch: ``sum_k (n_k/B) (w - lr g_k) = w - lr sum_k (n_k/B) g_k``.

    Parameters
    ----------
    parallel : joblib.Parallel
        An open pool (``with joblib.Parallel(n_jobs=K) as parallel``).
    agent : DQNAgent
        The learner; its weights, optimiser state and update count are updated, its
        target network is synced when ``config.target_update`` says so, and its
        :meth:`~DQNAgent.diagnostics` become the coefficient-weighted means of the workers'.
    batches : sequence of Minibatch
        One per worker.
    coefficients : sequence of float, optional
        Averaging weights (normalised); None = equal.
    stats : RoundStats, optional
        Accumulates per-worker compute and communication seconds.
    grad_norm : bool
        Also measure the workers' gradient norms (the agent's ``grad_norm`` keeps the
        last one measured otherwise); default False.

    Returns
    -------
    float
        The coefficient-weighted mean of the workers' TD losses before the step.

    Raises
    ------
    _TaskFailed
        If a worker raised or its process died (the caller turns it into WorkerError).
    """
    t0 = time.perf_counter()
    k = len(batches)
    batches = [agent.augment(b) for b in batches]  # (config.augment_symmetry) before the targets are computed
    targets = [agent.td_targets(b).numpy() for b in batches]
    state = {"online": agent.get_weights(), "opt": optimizer_state(agent)}
    t1 = time.perf_counter()
    try:
        results = parallel(joblib.delayed(train_step_task)(i, k, os.getpid(), agent.config, state,
                                                           batches[i].boards, batches[i].actions, targets[i],
                                                           agent.updates, fault, grad_norm)
                           for i in range(k))
    except Exception as e:  # a dead process (TerminatedWorkerError) or a broken pool
        how = exit_from_pool_error(str(e)) or _describe(e).splitlines()[0]
        raise _TaskFailed(None, f"a worker process died ({how})", traceback.format_exc()) from e
    t2 = time.perf_counter()
    for i, r in enumerate(results):
        if not r["ok"]:
            raise _TaskFailed(i, r["message"], r["traceback"])
    c = _coefficients(k, coefficients)
    agent.set_weights(average_weights([r["weights"] for r in results], c))
    load_optimizer_state(agent, average_optimizer_states([r["opt"] for r in results], c))
    agent.record_diagnostics({name: np.dot(c, [r["diagnostics"][name] for r in results])
                              for name in results[0]["diagnostics"]})
    agent.updates += 1
    if agent.config.target_update and agent.updates % agent.config.target_update == 0:
        agent.sync_target()
    t3 = time.perf_counter()
    if stats is not None:
        compute = np.array([r["compute_s"] for r in results])
        stats.compute += compute
        stats.comm += np.maximum(0.0, (t2 - t1) - compute)
        stats.parent += (t1 - t0) + (t3 - t2)
        stats.rounds += 1
        stats.round_s += t2 - t1
    return agent.diagnostics()["loss"]


def run_rounds(scheme: str, config: TrainConfig, workers: int, progress: bool,
               callback: Callable[[RunResult], Any] | None, options: dict[str, Any],
               make_batches: Callable[[Learner], tuple[list[Minibatch], np.ndarray | None]],
               extra: dict[str, Any], fault: dict[str, Any] | None = None,
               checkpoint: Any = None) -> RunResult:
    """The loop of the synchronous schemes (``sharded``, ``averaged``).

    The parent is the single learner (:class:`Learner`: ``n_envs`` boards, the replay
    buffer, epsilon, the replay ratio); every owed update is one
    :func:`parallel_update` round over ``make_batches(learner)``. Budget, progress,
    callback and Ctrl-C as in :class:`RunLoop`.

    Time split: ``acting`` is the parent's acting; ``learning`` is the workers'
    step time (summed) plus the parent's own update work (sampling, TD targets,
    packing the state, averaging); ``communication`` is, per worker, the round's wall time minus
    its step time (pickling, transfer, dispatch, waiting for the slowest), summed.

    Diagnostics: the workers' coefficient-weighted loss and mean max-Q of every update;
    their gradient norm is measured on the first update after each report only (an
    n-tuple table's sparse gradient makes it cost about as much as the step).

    ``checkpoint`` (a :class:`~dqnlab.runtime.checkpoint.Checkpointer`): the parent's learner
    and the round statistics are the whole state (workers keep none between rounds),
    so a resumed run continues exactly, with the same number of workers.
    """
    learner = Learner(config, worker=0)
    learner.samples_per_update = extra["effective_batch"]  # sharded: B, in shards; averaged: K minibatches of B
    stats = RoundStats(workers)
    if checkpoint is not None and checkpoint.state is not None:
        learner.load_state_dict(checkpoint.state["learner"])
        stats.load_state_dict(checkpoint.state["rounds"])
    loop: RunLoop

    def time_split() -> dict[str, float]:
        return {"acting": learner.timing["acting"],
                "learning": float(stats.compute.sum() + stats.parent + learner.timing["learning"]),
                "communication": float(stats.comm.sum())}

    def result(status: str | None = None) -> RunResult:
        import pandas as pd

        from .base import episodes_frame

        per_worker = [{"worker": i, "learning_s": float(stats.compute[i]), "communication_s": float(stats.comm[i])}
                      for i in range(workers)]
        return RunResult(
            scheme=scheme, config=config, workers=workers, episodes=episodes_frame(learner.episodes),
            env_steps=learner.env_steps, updates=learner.updates, wall_time_s=loop.elapsed,
            time_split=time_split(), weights=learner.agent.get_weights(), history=pd.DataFrame(loop.history),
            status=status or loop.status, options=dict(options),
            extra={**extra, "per_worker": per_worker, "torch_threads_per_worker": torch_threads(workers),
                   "rounds": stats.rounds,
                   "round_ms_mean": 1000 * stats.round_s / stats.rounds if stats.rounds else None},
        )

    loop = RunLoop(config, progress=progress, callback=callback, snapshot=result, checkpointer=checkpoint,
                   state=lambda: {"learner": learner.state_dict(), "rounds": stats.state_dict()})
    learner.clock0 = loop.t0
    try:
        with joblib.Parallel(n_jobs=workers, batch_size=1) as parallel:
            while not loop.done:
                target = learner.env_steps + loop.chunk_steps(config.n_envs)
                norm_measured = False  # the gradient norm reported is the chunk's first (a sparse one costs a step)
                while learner.env_steps < target and (loop.deadline is None or time.perf_counter() < loop.deadline):
                    learner.act_step()
                    for _ in range(learner.owed_updates()):
                        t0 = time.perf_counter()
                        batches, coefs = make_batches(learner)
                        learner.timing["learning"] += time.perf_counter() - t0
                        learner.last_loss = parallel_update(parallel, learner.agent, batches, coefs,
                                                            stats, fault, grad_norm=not norm_measured)
                        norm_measured = True
                        learner.spend_updates(1)
                loop.report(learner.progress(time_split()))
    except KeyboardInterrupt:
        loop.interrupt()
    except _TaskFailed as e:
        loop.close()
        raise worker_error(scheme, e.worker, e.message, e.tb, result("failed")) from None
    finally:
        loop.close()
    loop.finish()
    return result()
