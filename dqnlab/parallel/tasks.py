"""Long-lived worker tasks: the worker's :class:`Channel`, the parent's :class:`TaskGroup` and event loop.

``independent``, ``shared`` and ``actors`` run one joblib task per worker for a whole
run. The parent talks to them through queues (a ``multiprocessing.Manager``'s, or a
Dask cluster's: see :mod:`dqnlab.parallel.dask`) with the typed messages of
:mod:`dqnlab.parallel.messages`; :func:`drive_tasks` is the parent's event loop, which
hands the scheme's messages to its :class:`Coordinator`.

Checkpoints are one consistent cut of the run: the parent sends every running worker
:class:`~dqnlab.parallel.messages.Checkpoint`; each answers with its state
(:meth:`Channel.serve_checkpoint`) and waits until the parent has written the
checkpoint and says :class:`~dqnlab.parallel.messages.Checkpointed`.
"""

from __future__ import annotations

import gc
import math
import os
import queue
import signal
import socket
import threading
import time
import traceback
from collections.abc import Callable
from multiprocessing.managers import SyncManager
from typing import Any, Self

import joblib

from ..runtime.errors import TaskFailed
from ..runtime.loop import RunLoop
from ..runtime.progress import Progress
from .faults import describe
from .messages import (
    HEARTBEAT_S,
    ORDERS,
    SILENCE_S,
    Checkpoint,
    Checkpointed,
    Failed,
    Heartbeat,
    Hello,
    StateReply,
    Stop,
    UnexpectedMessage,
)
from .procwatch import DeathWatch, exit_from_pool_error
from .threads import parent_handles_sigint, pin_torch_threads

__all__ = ["Channel", "TaskGroup", "Coordinator", "drive_tasks", "split_budget"]


def split_budget(total: int | None, workers: int) -> list[int | None]:
    """Split an env-step budget (or a capacity) across ``workers``: the first ones get the remainder.

    Returns ``workers`` ints summing to ``total`` (``None`` each for no budget).
    """
    if total is None:
        return [None] * workers
    return [total // workers + (1 if k < total % workers else 0) for k in range(workers)]


# ----------------------------------------------------------------------------- the worker's end
class Channel:
    """A worker's end of the queues: :meth:`send` to the parent; :meth:`orders`, :meth:`wait`
    and :meth:`serve_checkpoint` for the parent's orders.

    Parameters
    ----------
    worker : int
        This worker's index.
    inbox, outbox : queue-like
        The parent's queue (shared by all workers) and this worker's own.
    """

    def __init__(self, worker: int, inbox: Any, outbox: Any):
        self.worker, self.inbox, self.outbox = worker, inbox, outbox
        self.stopped = False
        #: ``state() -> Any``: this worker's checkpoint state (set by a task that checkpoints).
        self.state: Callable[[], Any] | None = None

    def send(self, msg: Any) -> None:
        """Put ``msg`` (one of :data:`~dqnlab.parallel.messages.REPORTS`) on the parent's queue."""
        self.inbox.put(msg)

    def _take(self, msg: Any) -> Any:
        """Check an order's kind; a :class:`Stop` sets :attr:`stopped`."""
        if not isinstance(msg, ORDERS):
            raise UnexpectedMessage(f"worker {self.worker}", msg)
        if isinstance(msg, Stop):
            self.stopped = True
        return msg

    def orders(self) -> list[Any]:
        """Every order waiting, in order, without blocking.

        A :class:`Stop` sets :attr:`stopped` and is not returned; a late
        :class:`Checkpointed` (for a checkpoint answered in :meth:`wait`) is dropped.

        Raises
        ------
        UnexpectedMessage
            For a message that is not an order.
        """
        out = []
        while True:
            try:
                msg = self._take(self.outbox.get_nowait())
            except queue.Empty:
                return out
            if not isinstance(msg, (Stop, Checkpointed)):
                out.append(msg)

    def wait(self) -> Any:
        """Block until the parent sends an order other than a checkpoint's, and return it
        (a :class:`Stop` too, setting :attr:`stopped`).

        A :class:`Checkpoint` that arrives meanwhile is answered at once (the state then
        records what the worker is waiting for), without waiting for :class:`Checkpointed`.
        """
        while True:
            try:
                msg = self._take(self.outbox.get(timeout=1.0))
            except queue.Empty:
                continue
            if isinstance(msg, Checkpoint):
                self._send_state(msg.id)
            elif not isinstance(msg, Checkpointed):
                return msg

    def serve_checkpoint(self, n: int, other: Callable[[Any], Any] | None = None) -> float:
        """Answer checkpoint ``n`` (call between steps): send the state, then block until the
        parent says :class:`Checkpointed` ``n`` (or stop), so that the checkpoint is one
        consistent cut of the run. Returns the seconds spent.

        Other orders that arrive meanwhile go to ``other``.

        Raises
        ------
        UnexpectedMessage
            For another order when ``other`` is None.
        """
        t0 = time.perf_counter()
        self._send_state(n)
        while not self.stopped:
            try:
                msg = self._take(self.outbox.get(timeout=1.0))
            except queue.Empty:
                continue
            if isinstance(msg, Checkpointed) and msg.id == n:
                break
            if isinstance(msg, (Stop, Checkpointed)):  # (a late one, for a checkpoint answered in wait)
                continue
            if other is None:
                raise UnexpectedMessage(f"worker {self.worker} (serving checkpoint {n})", msg)
            other(msg)
        return time.perf_counter() - t0

    def _send_state(self, n: int) -> None:
        self.send(StateReply(self.worker, n, self.state() if self.state is not None else None))


def _task_main(fn: Callable[..., None], worker: int, workers: int, parent_pid: int, inbox: Any, outbox: Any,
               kwargs: dict[str, Any]) -> int:
    """Body of one long-lived joblib task: pin threads, say hello, beat, run ``fn``, report any exception."""
    ch = Channel(worker, inbox, outbox)
    done = threading.Event()
    try:
        with parent_handles_sigint(parent_pid):
            threads = pin_torch_threads(workers, parent_pid)
            ch.send(Hello(worker, os.getpid(), threads, socket.gethostname()))
            threading.Thread(target=_heartbeat, args=(inbox, worker, done), name="dqnlab-heartbeat",
                             daemon=True).start()
            fn(ch, **kwargs)
    except BaseException as e:  # noqa: BLE001 - reported to the parent, which raises
        try:
            inbox.put(Failed(worker, describe(e), traceback.format_exc()))
        except Exception:  # noqa: BLE001, S110 - the parent is gone; nothing more to do
            pass
    finally:
        done.set()
    return worker


def _heartbeat(inbox: Any, worker: int, done: threading.Event) -> None:
    """Put a :class:`Heartbeat` on ``inbox`` every :data:`HEARTBEAT_S` until ``done`` (or the parent is gone):
    the parent learns that the process is alive and its host reachable, whatever the task is doing (a
    compiled kernel releases the GIL; compiling one lets other threads run between its steps)."""
    while not done.wait(HEARTBEAT_S):
        try:
            inbox.put(Heartbeat(worker))
        except Exception:  # noqa: BLE001 - the parent is gone with its queue
            return


def _spare_task(parent_pid: int, outbox: Any) -> None:
    """Hold a pool process that no task needs until the group stops (a :class:`Stop` on ``outbox``).

    Ctrl-C reaches every process of the terminal's process group, and an idle loky
    process dies of it; loky then kills the whole pool, the group's own tasks with it.
    Held here, the process ignores SIGINT like the tasks do.
    """
    with parent_handles_sigint(parent_pid):
        while True:
            try:
                if isinstance(outbox.get(timeout=1.0), Stop):
                    return
            except queue.Empty:
                if not _alive(parent_pid):
                    return
            except Exception:  # noqa: BLE001 - the manager is gone with the parent's group
                return


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# ----------------------------------------------------------------------------- the parent's end
class TaskGroup:
    """K long-lived joblib tasks (one per worker) and the queues to talk to them.

    The blocking ``joblib.Parallel`` call runs in a background thread of the parent,
    so the parent stays free to gather results, draw progress and answer sync
    requests. Workers' messages (:data:`~dqnlab.parallel.messages.REPORTS`) come on one
    ``inbox`` queue; each worker has its own ``outbox`` for orders
    (:data:`~dqnlab.parallel.messages.ORDERS`).

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
    own_processes : bool
        Run even a single task in a worker process (joblib runs the one job of
        ``n_jobs=1`` in this process, which suits a learner but not a rank of a process group).
    """

    def __init__(self, fn: Callable[..., None], kwargs: list[dict[str, Any]], backend: str | None = None,
                 own_processes: bool = False):
        self.fn, self.kwargs, self.backend = fn, kwargs, backend
        self.n_jobs = max(2, len(kwargs)) if own_processes else len(kwargs)
        self.workers = len(kwargs)
        self.spares: list[Any] = []  # order queues of held spare pool processes (see _spare_task)
        self.manager: SyncManager | None = None
        self.thread: threading.Thread | None = None
        self.failure: BaseException | None = None
        self.failure_tb = ""
        self.pids: dict[int, int] = {}
        #: Each started worker's host (from its Hello), and when anything from it last came (time.monotonic()).
        self.hosts: dict[int, str] = {}
        self.heard: dict[int, float] = {}
        #: A worker was found lost (silent, or its task started again): :meth:`close` does not wait long for it.
        self.lost = False
        self.exited: set[int] = set()
        #: True while a checkpoint is being gathered (see :func:`drive_tasks`).
        self.checkpoint_pending = False
        #: True once the workers have been told to stop (:meth:`stop`).
        self.stopping = False
        #: Checkpoints asked for so far (the id of the last one).
        self.checkpoints = 0
        #: Notices which worker process dies first (to name it if the pool breaks).
        self.watch = DeathWatch()

    def __enter__(self) -> Self:
        from .dask import task_transport

        # On a Dask cluster (joblib's active backend), queues through its scheduler: see cluster.py.
        remote = task_transport(self.workers) if self.backend is None else None
        self._close_queues: Callable[[], None] | None = None
        if remote is not None:
            self.backend, self.inbox, self.outboxes, self._close_queues = remote
        else:
            self.manager = SyncManager()
            # The manager must outlive a Ctrl-C so that the workers can be told to stop. It is a fork
            # of this process: gc.freeze() keeps its garbage collector off what it inherits (a gloo
            # group or store of an earlier run, not yet collected here, would abort the fork when
            # destroyed there: their threads were not copied), as the gc docs advise before a fork.
            gc.freeze()
            try:
                self.manager.start(signal.signal, (signal.SIGINT, signal.SIG_IGN))
            finally:
                gc.unfreeze()
            self.inbox = self.manager.Queue()
            self.outboxes = [self.manager.Queue() for _ in range(self.workers)]
            # own_processes: the pool's processes beyond the tasks' are held (see _spare_task)
            self.spares = [self.manager.Queue() for _ in range(self.n_jobs - self.workers)]
        self.thread = threading.Thread(target=self._run, name="dqnlab-tasks", daemon=True)
        self.thread.start()
        return self

    def _run(self) -> None:
        parent = os.getpid()
        try:
            with joblib.Parallel(n_jobs=self.n_jobs, batch_size=1, pre_dispatch="all",
                                 backend=self.backend) as parallel:
                try:
                    slots = parallel._effective_n_jobs()
                except Exception:  # noqa: BLE001 - private joblib API: if it is gone, trust the backend
                    slots = self.workers
                if slots < self.workers:
                    raise RuntimeError(f"the joblib backend runs {slots} tasks at once; "
                                       f"this scheme needs all {self.workers} workers running together")
                parallel([joblib.delayed(_task_main)(self.fn, k, self.workers, parent, self.inbox,
                                                     self.outboxes[k], kw)
                          for k, kw in enumerate(self.kwargs)]
                         + [joblib.delayed(_spare_task)(parent, q) for q in self.spares])
        except BaseException as e:  # noqa: BLE001 - the parent reads it
            self.failure = e
            self.failure_tb = traceback.format_exc()

    @property
    def alive(self) -> bool:
        """Whether the background joblib call is still running."""
        return self.thread is not None and self.thread.is_alive()

    def get(self, timeout: float) -> Any:
        """Next message from any worker, or None after ``timeout`` seconds. Every message marks its worker as
        heard from (:meth:`silent`); heartbeats end there and are not returned."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                msg = self.inbox.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                return None
            worker = getattr(msg, "worker", None)
            if worker in self.heard:
                self.heard[worker] = time.monotonic()
            if not isinstance(msg, Heartbeat):
                return msg

    def hello(self, msg: Hello) -> tuple[int, str, str] | None:
        """Take a task's :class:`Hello`: its pid and host (the pid watched when the task runs on this machine).

        Returns the error ``(worker, message, details)`` when the task said hello before: a backend (Dask)
        ran it again after its process died, and its fresh start is not the worker's progress.
        """
        k = msg.worker
        if k in self.pids:
            self.lost = True
            return (k, f"its process ({self.where(k)}) ended and the backend started the task again "
                       f"(pid {msg.pid} on {msg.host}), from scratch", "")
        self.pids[k], self.hosts[k], self.heard[k] = msg.pid, msg.host, time.monotonic()
        if msg.host == socket.gethostname():  # a process of this machine
            self.watch.add(k, msg.pid)
        return None

    def where(self, worker: int) -> str:
        """``"pid N on HOST"``: what is known of where ``worker`` runs."""
        return f"pid {self.pids.get(worker, '?')} on {self.hosts.get(worker, '?')}"

    def silent(self, limit_s: float = SILENCE_S) -> tuple[int, str, str] | None:
        """The error ``(worker, message, details)`` for the running worker heard from longest ago, if that was
        over ``limit_s`` seconds ago (its process stopped, or its host cannot be reached); else None. Call
        it with the queue just drained (after :meth:`get` returned None), so that a parent busy elsewhere
        does not take its own delay for the worker's silence."""
        quiet = [(time.monotonic() - t, k) for k, t in self.heard.items() if k not in self.exited]
        if not quiet or max(quiet)[0] <= limit_s:
            return None
        seconds, k = max(quiet)
        self.lost = True
        return (k, f"it has sent nothing for {seconds:.0f} s, not even a heartbeat: its process "
                   f"({self.where(k)}) stopped, or its host cannot be reached", "")

    def send(self, worker: int, msg: Any) -> None:
        """Put order ``msg`` on ``worker``'s queue (nothing if the worker is gone with its queue)."""
        try:
            self.outboxes[worker].put(msg)
        except Exception:  # noqa: BLE001, S110 - the worker is gone with its queue; nothing to tell it
            pass

    def stop(self) -> None:
        """Tell every worker that has not exited to stop."""
        self.stopping = True
        for k in range(self.workers):
            if k not in self.exited:
                self.send(k, Stop())
        for q in self.spares:
            try:
                q.put(Stop())
            except Exception:  # noqa: BLE001, S110 - the manager is gone
                pass

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self, grace_s: float = 20.0) -> None:
        """Stop the workers, wait up to ``grace_s`` for them (:data:`LOST_GRACE_S` once a worker is
        :attr:`lost`), and shut the manager down.

        If local tasks are still running after that (a worker stuck in native code), the loky pool is
        killed, so that the call never hangs; on a cluster the joblib call is left to end when the run's
        Dask client closes.
        """
        if self.thread is not None:
            self.stop()
            self.thread.join(min(grace_s, LOST_GRACE_S) if self.lost else grace_s)
            if self.thread.is_alive() and self.manager is not None:
                _kill_loky_pool()
                self.thread.join(10.0)
        if getattr(self, "_close_queues", None) is not None:
            self._close_queues()
            self._close_queues = None
        if self.manager is not None:
            try:
                self.manager.shutdown()
            except Exception:  # noqa: BLE001, S110 - the manager is gone already
                pass
            self.manager = None
        self.watch.close()


def _kill_loky_pool() -> None:
    try:
        from joblib.externals.loky import get_reusable_executor

        get_reusable_executor().shutdown(wait=False, kill_workers=True)
    except Exception:  # noqa: BLE001, S110 - loky is gone already
        pass


class Coordinator:
    """The parent's side of a run of long-lived tasks: what :func:`drive_tasks` calls.

    A scheme subclasses it: :meth:`receive` takes its workers' messages, :meth:`progress`
    says how the run goes, :meth:`checkpoint_state` assembles a checkpoint, and
    :meth:`work` (with :attr:`has_work`) is the parent's own work between messages.

    Parameters
    ----------
    workers : int
        K, the number of tasks.

    Attributes
    ----------
    group : TaskGroup or None
        Set by :func:`drive_tasks` (to send orders).
    loop : RunLoop or None
        Set by :func:`drive_tasks` (the run's clock and status).
    final_states : dict of int to any
        The checkpoint states that workers sent with their last message (runs that checkpoint).
    """

    #: Whether :meth:`work` has something to do (the ``actors`` learner's updates).
    has_work = False

    def __init__(self, workers: int):
        self.workers = workers
        self.group: TaskGroup | None = None
        self.loop: RunLoop | None = None
        self.final_states: dict[int, Any] = {}

    def receive(self, msg: Any) -> None:
        """Take a worker's message (its reports; not :class:`Hello`, :class:`Failed` or
        :class:`StateReply`, which :func:`drive_tasks` handles).

        Raises
        ------
        UnexpectedMessage
            For a kind the scheme does not handle (this default handles none).
        """
        raise UnexpectedMessage(type(self).__name__, msg)

    def exited(self, worker: int) -> None:
        """``worker`` has ended (its last report came, or it failed)."""

    def checkpoint_ended(self) -> None:
        """A checkpoint barrier has ended (written, or abandoned because the run stops)."""

    def progress(self) -> Progress:
        """The run's :class:`~dqnlab.runtime.progress.Progress` now."""
        raise NotImplementedError

    def work(self) -> bool:
        """The parent's own work between messages; True if it has more to do at once."""
        return False

    def checkpoint_state(self, states: dict[int, Any]) -> Any:
        """The scheme's checkpoint from the running workers' ``states`` (see :meth:`gather_states`)."""
        raise NotImplementedError

    @property
    def checkpoint_pending(self) -> bool:
        """True while a checkpoint is gathered (workers wait; the scheme holds back its orders)."""
        return self.group is not None and self.group.checkpoint_pending

    def gather_states(self, states: dict[int, Any]) -> list[Any]:
        """Every worker's checkpoint state, in worker order: those of ``states``, and for
        workers that have exited, the final state they sent.

        Raises
        ------
        RuntimeError
            If a worker's state is missing (a checkpoint is never a partial cut).
        """
        states = {**self.final_states, **states}
        missing = sorted(set(range(self.workers)) - set(states))
        if missing:  # cannot happen while drive_tasks gathers the states
            raise RuntimeError(f"checkpoint without the state of workers {missing}")
        return [states[k] for k in range(self.workers)]

    def final_checkpoint(self) -> Any:
        """The final checkpoint once every worker has sent its final state (None otherwise)."""
        return self.checkpoint_state({}) if len(self.final_states) == self.workers else None


def drive_tasks(group: TaskGroup, loop: RunLoop, coordinator: Coordinator, checkpoints: bool = False) -> None:
    """The parent's event loop for long-lived tasks, until every worker has exited.

    Hands each worker's report to ``coordinator.receive`` (the scheme records progress,
    answers sync requests, stores data, ...), reports ``coordinator.progress()`` to ``loop``
    about once a second (which records the history, draws progress, writes the
    TensorBoard log and calls the run's callback) and records it once more when every
    worker has exited (the final totals, with each worker's last games and
    diagnostics), tells the workers to stop when the budget is spent or the callback
    asks, and turns KeyboardInterrupt into a clean stop.

    With ``coordinator.has_work``, ``coordinator.work()`` runs whenever no message is
    waiting and the run is not stopping; it returns True if it has more to do at once
    (then the next wait for a message does not block).

    With ``checkpoints``: when ``loop.checkpoint_due()``, every running worker is sent
    :class:`~dqnlab.parallel.messages.Checkpoint`; each answers with its state and waits
    (:meth:`Channel.serve_checkpoint`); once every running worker has answered,
    ``loop.write_checkpoint(coordinator.checkpoint_state(states))`` (a worker that exited
    meanwhile sent its final state with its last report, which the coordinator keeps),
    and the workers go on. While that is pending, ``group.checkpoint_pending`` is True;
    when it ends ``coordinator.checkpoint_ended()`` is called.

    A worker is lost when its process dies, when its task starts a second time (a backend ran it again
    after its process died), or when it sends nothing, not even a heartbeat, for
    :data:`~dqnlab.parallel.messages.SILENCE_S` (its process stopped, or its host cannot be reached); the
    run then ends naming it, its pid and host.

    Raises
    ------
    TaskFailed
        If a worker raised (after the others have stopped and sent what they had), or
        a worker was lost.
    """
    coordinator.group, coordinator.loop = group, loop
    error: tuple[int | None, str, str] | None = None
    stopping = False
    last_report = time.perf_counter()
    stop_deadline = math.inf
    busy = False
    barrier: dict[str, Any] | None = None  # the checkpoint being gathered
    dead_since: float | None = None  # when a watched worker process was seen to end before saying goodbye
    while len(group.exited) < group.workers:
        try:
            alive = group.alive  # before reading: a worker may post its last message, then end
            msg = group.get(0.0 if busy else 0.1)
            busy = coordinator.has_work and msg is not None  # drain waiting messages before working
            if isinstance(msg, Hello):
                rerun = group.hello(msg)
                if rerun is not None:
                    error = error or rerun
                    break  # as when a pool's call ends with a process gone: the others may wait for it
            elif isinstance(msg, StateReply):
                if barrier is not None and msg.id == barrier["id"]:
                    barrier["states"][msg.worker] = msg.state
            elif isinstance(msg, Failed):
                group.exited.add(msg.worker)
                if error is None:
                    error = (msg.worker, msg.message, msg.traceback)
                coordinator.exited(msg.worker)
            elif msg is not None:
                done = getattr(msg, "done", False)
                if done:
                    group.exited.add(msg.worker)
                    if msg.state is not None:
                        coordinator.final_states[msg.worker] = msg.state
                coordinator.receive(msg)
                if done:
                    coordinator.exited(msg.worker)
            now = time.perf_counter()
            if now - last_report >= loop.report_every_s and loop.status == "running":
                last_report = now
                loop.report(coordinator.progress())
            if not stopping and (error is not None or loop.done):
                stopping = True
                stop_deadline = now + 30.0
                group.stop()
            if checkpoints:
                barrier = _checkpoint_barrier(group, loop, coordinator, barrier, stopping)
            if coordinator.has_work and msg is None and not stopping:
                busy = coordinator.work()
            # A watched process ended before its worker said goodbye. A pool (loky) then ends its call, which
            # names the cause (above); a backend that runs the task again (Dask) does not: end the run here.
            dead = group.watch.first
            if dead is not None and dead[0] not in group.exited and dead_since is None:
                dead_since = now
            if dead_since is not None and now - dead_since > DEATH_GRACE_S and msg is None:
                if error is None:
                    missing = sorted(set(range(group.workers)) - group.exited)
                    error = _death_error(group, missing, "its exit status could not be read here")
                break  # as when a pool's call ends with a process gone: the others may wait for it
            lost = group.silent() if msg is None else None
            if lost is not None:
                error = error or lost
                break  # it cannot be told to stop: the others may wait for it
            if not alive and msg is None and len(group.exited) < group.workers:
                # The pool's call ended without every worker saying goodbye: a process died.
                missing = sorted(set(range(group.workers)) - group.exited)
                cause = describe(group.failure) if group.failure is not None else "the task ended silently"
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
    loop.record(coordinator.progress())
    if error is not None:
        raise TaskFailed(*error)


#: Seconds :meth:`TaskGroup.close` waits for the others once a worker is lost (it will not answer).
LOST_GRACE_S = 1.0
#: Seconds a pool may take to end its call after one of its worker processes died, before the run ends
#: without it (a backend that runs the lost task again never ends the call).
DEATH_GRACE_S = 3.0


def _death_error(group: TaskGroup, missing: list[int], cause: str) -> tuple[int | None, str, str]:
    """``(worker, one-line message, details)`` for a worker process that died."""
    first = group.watch.first
    how = (first[2] if first is not None else None) or exit_from_pool_error(cause)
    if first is not None and first[0] in missing:
        who, what = first[0], f"its process ({group.where(first[0])}) died"
    elif len(missing) == 1:
        who, what = missing[0], "its process died"
    else:
        who, what = None, "a worker process died"
    if how is None:
        how = cause.splitlines()[0] if cause else "cause unknown"
    return who, f"{what} ({how}); workers that did not finish: {missing}", group.failure_tb or cause


def _checkpoint_barrier(group: TaskGroup, loop: RunLoop, coordinator: Coordinator,
                        barrier: dict[str, Any] | None, stopping: bool) -> dict[str, Any] | None:
    """One look at the checkpoint barrier of :func:`drive_tasks`; returns the barrier still pending."""
    if barrier is None:
        if stopping or not loop.checkpoint_due():
            return None
        group.checkpoints += 1
        barrier = {"id": group.checkpoints, "states": {}}
        group.checkpoint_pending = True
        for k in range(group.workers):
            if k not in group.exited:
                group.send(k, Checkpoint(barrier["id"]))
        return barrier
    running = set(range(group.workers)) - group.exited
    if not stopping and not running <= set(barrier["states"]):
        return barrier
    if not stopping:
        loop.write_checkpoint(coordinator.checkpoint_state(dict(barrier["states"])))
    group.checkpoint_pending = False
    for k in running & set(barrier["states"]):
        group.send(k, Checkpointed(barrier["id"]))
    coordinator.checkpoint_ended()
    return None
