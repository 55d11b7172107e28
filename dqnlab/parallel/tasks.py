"""Long-lived worker tasks: the worker's :class:`Channel`, the parent's :class:`TaskGroup` and event loop.

``independent``, ``shared`` and ``actors`` run one joblib task per worker for a whole
run (and ``sharded`` and ``averaged`` their worker ranks). The parent talks to them through
queues (a ``multiprocessing.Manager``'s, or a Dask cluster's: see :mod:`dqnlab.parallel.dask`)
with the typed messages of :mod:`dqnlab.parallel.messages`; :func:`drive_tasks` is the parent's
event loop, which hands the scheme's messages to its :class:`Coordinator`. Whether a worker
is alive, and the naming of a lost one, is :mod:`dqnlab.parallel.supervision`'s. On one machine a
message carrying more than :data:`SPILL_BYTES` of arrays goes by a file instead (:func:`pack`).

Checkpoints are one consistent cut of the run: the parent sends every running worker
:class:`~dqnlab.parallel.messages.Checkpoint`; each answers with its state
(:meth:`Channel.serve_checkpoint`) and waits until the parent has written the
checkpoint and says :class:`~dqnlab.parallel.messages.Checkpointed`.
"""

from __future__ import annotations

import contextlib
import gc
import math
import os
import pickle
import queue
import shutil
import signal
import socket
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, fields, replace
from multiprocessing import resource_tracker
from multiprocessing.managers import SyncManager
from typing import Any, Self

import joblib
import numpy as np
import torch

from ..runtime.compact import Entries
from ..runtime.errors import TaskFailed
from ..runtime.loop import RunLoop, ctrl_c_pressed
from ..runtime.progress import Progress
from .faults import describe, injected
from .messages import (
    HEARTBEAT_S,
    ORDERS,
    REPORTS,
    Checkpoint,
    Checkpointed,
    Failed,
    Heartbeat,
    Hello,
    StateReply,
    Stop,
    UnexpectedMessage,
)
from .supervision import Supervisor
from .threads import parent_handles_sigint, pin_torch_threads

__all__ = ["Channel", "TaskGroup", "Coordinator", "drive_tasks", "split_budget", "pack", "unpack", "Spilled",
           "SPILL_BYTES"]


def split_budget(total: int | None, workers: int) -> list[int | None]:
    """Split an env-step budget (or a capacity) across ``workers``: the first ones get the remainder.

    Returns ``workers`` ints summing to ``total`` (``None`` each for no budget).
    """
    if total is None:
        return [None] * workers
    return [total // workers + (1 if k < total % workers else 0) for k in range(workers)]


# ----------------------------------------------------------------------------- what crosses a process
_TENSOR = "__tensor__"
_MESSAGES = REPORTS + ORDERS


def as_arrays(obj: Any) -> Any:
    """``obj`` with every dense CPU torch tensor in it (in dicts, lists, tuples and the fields of a message)
    as a tagged NumPy array of the same memory, for a trip to another process; :func:`as_tensors` undoes it.

    A NumPy array pickles as one copy of its bytes, where a tensor's storage pickles through ``torch.save``
    into a growing buffer, and a ``multiprocessing`` queue's pickler first moves it into shared memory: for
    an n-tuple learner's 805 MB of checkpoint state, seconds of every resume and checkpoint.
    """
    def tag(x: Any) -> Any:
        if isinstance(x, torch.Tensor) and x.device.type == "cpu" and x.layout == torch.strided \
                and x.dtype != torch.bfloat16:
            return {_TENSOR: x.detach().numpy()}
        return x

    return _rebuilt(obj, tag)


def as_tensors(obj: Any) -> Any:
    """:func:`as_arrays` undone: each tagged array a tensor again (of its memory, or of a copy where the trip
    left it read-only, as joblib's memory-mapped arguments)."""
    def untag(x: Any) -> Any:
        if isinstance(x, dict) and len(x) == 1 and _TENSOR in x:
            a = x[_TENSOR]
            if isinstance(a, Entries):
                return replace(a, tensor=True)
            return torch.from_numpy(a if a.flags.writeable else np.array(a))
        return x

    return _rebuilt(obj, untag)


def _rebuilt(obj: Any, convert: Any) -> Any:
    """``obj`` with ``convert`` applied to it and, where that leaves it as it is, to everything inside its
    dicts, lists, tuples and message fields, rebuilt (other objects as they are)."""
    new = convert(obj)
    if new is not obj:
        return new
    if isinstance(obj, dict):
        return {k: _rebuilt(v, convert) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)) and type(obj) in (list, tuple):
        return type(obj)(_rebuilt(v, convert) for v in obj)
    if isinstance(obj, _MESSAGES):
        return replace(obj, **{f.name: _rebuilt(getattr(obj, f.name), convert) for f in fields(obj) if f.init})
    return obj


#: A message carrying more than this many bytes of arrays goes between two processes of one machine as a file.
SPILL_BYTES = 32 * 2**20


@dataclass(frozen=True)
class Spilled:
    """A message written to a file by :func:`pack`, which :func:`unpack` reads back (and deletes)."""

    path: str


def _arrays(obj: Any) -> Iterator[np.ndarray]:
    """Every NumPy array in ``obj`` (in dicts, lists, tuples and the fields of a message)."""
    if isinstance(obj, np.ndarray):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _arrays(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _arrays(v)
    elif isinstance(obj, _MESSAGES):
        for f in fields(obj):
            yield from _arrays(getattr(obj, f.name))


def pack(msg: Any, spill_dir: str | None) -> Any:
    """``msg`` ready for a queue: :func:`as_arrays`, and where ``spill_dir`` is given (a folder of the machine
    of both ends) and the message carries over :data:`SPILL_BYTES` of arrays, a :class:`Spilled` file of it.

    A queue pickles what it carries in the sender's main thread, holding its GIL for as long as the copy
    takes: for an n-tuple learner's checkpoint state (three tables of hundreds of MB) that can outlast
    :data:`~dqnlab.parallel.messages.SILENCE_S`, and the worker's heartbeats wait with it; a
    ``multiprocessing.Manager``'s queue then unpickles and pickles it again in the manager, which carries
    every worker's heartbeats. Pickle protocol 5 (PEP 574) writes each array's buffer straight to the file,
    and :func:`unpack` reads it straight into new arrays: no copy in memory, and the GIL free while the
    bytes move. A large, mostly-zero array (a young n-tuple table) goes as its non-zero entries
    (:class:`~dqnlab.runtime.compact.Entries`): a learner's state at Ctrl-C is written and read in a
    fraction of the time its dense bytes take.
    """
    msg = as_arrays(msg)
    if spill_dir is None:
        return msg
    total = 0
    for a in _arrays(msg):
        total += a.nbytes
        if total > SPILL_BYTES:
            break
    else:
        return msg
    fd, path = tempfile.mkstemp(dir=spill_dir, suffix=".pkl")
    with os.fdopen(fd, "wb") as f:
        pickle.dump(_rebuilt(msg, _sparse), f, protocol=5)
    return Spilled(path)


def unpack(msg: Any, compact: bool = False) -> Any:
    """:func:`pack` undone: a :class:`Spilled` message read back (its file deleted), then :func:`as_tensors`.

    ``compact``: a mostly-zero array that went as its non-zero entries stays an
    :class:`~dqnlab.runtime.compact.Entries` (``tensor`` set where it was a tensor): the parent writes a worker's
    state to the checkpoint as it came, and makes whole (:func:`~dqnlab.runtime.compact.dense`) only what it reads.
    """
    if isinstance(msg, Spilled):
        path = msg.path
        with open(path, "rb") as f:
            msg = pickle.load(f)  # (written by a process of this run, in its own folder)
        os.unlink(path)
        if not compact:
            msg = _rebuilt(msg, _dense)
    return as_tensors(msg)


def _sparse(x: Any) -> Any:
    return (Entries.of(x) or x) if isinstance(x, np.ndarray) else x


def _dense(x: Any) -> Any:
    return x.dense() if isinstance(x, Entries) else x


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
    spill_dir : str, optional
        A folder of the parent's machine, where large messages go (:func:`pack`); None: all by the queue.
    fault : dict, optional
        The fault a test injected when the task group was made (:func:`~dqnlab.parallel.faults.inject`),
        for the task's :func:`~dqnlab.parallel.faults.check_fault`.
    """

    def __init__(self, worker: int, inbox: Any, outbox: Any, spill_dir: str | None = None,
                 fault: dict[str, Any] | None = None):
        self.worker, self.inbox, self.outbox, self.spill_dir, self.fault = worker, inbox, outbox, spill_dir, fault
        self.stopped = False
        #: ``state() -> Any``: this worker's checkpoint state (set by a task that checkpoints).
        self.state: Callable[[], Any] | None = None

    def send(self, msg: Any) -> None:
        """Put ``msg`` (one of :data:`~dqnlab.parallel.messages.REPORTS`) on the parent's queue."""
        self.inbox.put(pack(msg, self.spill_dir))

    def _take(self, msg: Any) -> Any:
        """Check an order's kind; a :class:`Stop` sets :attr:`stopped`."""
        msg = unpack(msg)
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
               kwargs: dict[str, Any], spill_dir: str | None, fault: dict[str, Any] | None) -> int:
    """Body of one long-lived joblib task: pin threads, say hello, beat, run ``fn``, report any exception."""
    ch = Channel(worker, inbox, outbox, spill_dir, fault)
    done = threading.Event()
    try:
        with parent_handles_sigint(parent_pid):
            threads = pin_torch_threads(workers, parent_pid)
            ch.send(Hello(worker, os.getpid(), threads, socket.gethostname()))
            threading.Thread(target=_heartbeat, args=(inbox, worker, done), name="dqnlab-heartbeat",
                             daemon=True).start()
            fn(ch, **as_tensors(kwargs))
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
class TaskGroup(Supervisor):
    """K long-lived joblib tasks (one per worker), the queues to talk to them, and their supervision.

    The blocking ``joblib.Parallel`` call runs in a background thread of the parent,
    so the parent stays free to gather results, draw progress and answer sync
    requests. Workers' messages (:data:`~dqnlab.parallel.messages.REPORTS`) come on one
    ``inbox`` queue; each worker has its own ``outbox`` for orders
    (:data:`~dqnlab.parallel.messages.ORDERS`). What the messages say of the workers' lives
    (hellos, heartbeats, ends) goes to the group's :class:`~dqnlab.parallel.supervision.Supervisor`
    side, which names a lost worker (:meth:`lost_worker`).

    Parameters
    ----------
    fn : callable
        Module-level function ``fn(channel, **kwargs)`` run in each worker.
    kwargs : list of dict
        Keyword arguments of each worker's call (length K).
    backend : str, optional
        joblib backend; None uses the one chosen with ``joblib.parallel_config``
        (loky by default). It must run all K tasks at once: in processes of this
        machine (the queues live in a ``multiprocessing.Manager`` here), or with ``"threading"`` in threads
        of this process (the queues are :class:`queue.Queue`: a message is handed over by reference).
    own_processes : bool
        Run even a single task in a worker process (joblib runs the one job of
        ``n_jobs=1`` in this process, which suits a learner but not a rank of a process group).
    names_from : int
        The name the errors give task 0 (:class:`~dqnlab.parallel.supervision.Supervisor`).
    """

    def __init__(self, fn: Callable[..., None], kwargs: list[dict[str, Any]], backend: str | None = None,
                 own_processes: bool = False, names_from: int = 0):
        super().__init__(len(kwargs), names_from)
        self.fn, self.kwargs, self.backend = fn, kwargs, backend
        self.fault = injected()  # (a test's, for the tasks: faults.inject)
        self.n_jobs = max(2, len(kwargs)) if own_processes else len(kwargs)
        self.spares: list[Any] = []  # order queues of held spare pool processes (see _spare_task)
        self.manager: SyncManager | None = None
        #: Where large messages go between the processes of this machine (:func:`pack`); None on a cluster.
        self.spill_dir: str | None = None
        self.thread: threading.Thread | None = None
        #: True while a checkpoint is being gathered (see :func:`drive_tasks`).
        self.checkpoint_pending = False
        #: True once the workers have been told to stop (:meth:`stop`).
        self.stopping = False
        #: True when they were told to stop by Ctrl-C: :meth:`close` then ends the pool's processes, which someone
        #: would otherwise wait for as the program exits.
        self.interrupted = False
        #: Checkpoints asked for so far (the id of the last one).
        self.checkpoints = 0

    def __enter__(self) -> Self:
        from .dask import task_transport

        # On a Dask cluster (joblib's active backend), queues through its scheduler: see cluster.py.
        remote = task_transport(self.workers) if self.backend is None else None
        self._close_queues: Callable[[], None] | None = None
        if remote is not None:
            self.backend, self.inbox, self.outboxes, self._close_queues = remote
        elif self.backend == "threading":  # threads of this process: messages go by reference
            self.inbox = queue.Queue()
            self.outboxes = [queue.Queue() for _ in range(self.workers)]
        else:
            self.manager = SyncManager()
            # The manager must outlive a Ctrl-C so that the workers can be told to stop. It is a fork
            # of this process, whose garbage collector must stay off what it inherits (a gloo group or
            # store of an earlier run, not yet collected here, would abort the fork when destroyed there:
            # their threads were not copied): it forks with the collector off, and freezes what it
            # inherited before turning it back on (_manager_started). Not gc.freeze() here and
            # gc.unfreeze() after the fork, as the gc docs advise: the unfreeze would also undo what the
            # caller froze (a test process freezes its modules, whose every full collection then skips them).
            collecting = gc.isenabled()
            gc.disable()
            try:
                self.manager.start(_manager_started, (collecting,))
            finally:
                if collecting:
                    gc.enable()
            self.inbox = self.manager.Queue()
            self.outboxes = [self.manager.Queue() for _ in range(self.workers)]
            # own_processes: the pool's processes beyond the tasks' are held (see _spare_task)
            self.spares = [self.manager.Queue() for _ in range(self.n_jobs - self.workers)]
            self.spill_dir = tempfile.mkdtemp(prefix="dqnlab-spill-")
        self.thread = threading.Thread(target=self._run, name="dqnlab-tasks", daemon=True)
        self.thread.start()
        return self

    def _run(self) -> None:
        parent = os.getpid()
        # Ctrl-C reaches every process of the terminal's process group, and a pool process that gets it before its
        # task ignores it (while Python starts there, or while it unpickles the task, which imports this package
        # and PyTorch) dies of it: the pool breaks, and the run ends naming a worker instead of as interrupted. A
        # process is born with the signal mask of the thread that starts it (fork and exec keep it), and loky
        # starts its processes, and the thread that replaces them, from the thread that submits the tasks: this
        # one. With SIGINT blocked here (this thread only: the main thread still takes Ctrl-C and tells the
        # workers to stop), the pool's processes never see it. multiprocessing's resource tracker is started first:
        # loky starts it before its first process, and Python 3.11's unblocks SIGINT in the thread that starts it.
        if hasattr(signal, "pthread_sigmask"):
            resource_tracker.ensure_running()
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            with (joblib.parallel_config(backend=self.backend) if self.backend is not None
                  else contextlib.nullcontext()):
                slots = joblib.effective_n_jobs(self.n_jobs)
            with joblib.Parallel(n_jobs=self.n_jobs, batch_size=1, pre_dispatch="all",
                                 backend=self.backend) as parallel:
                if slots < self.workers:
                    raise RuntimeError(f"the joblib backend runs {slots} tasks at once; "
                                       f"this scheme needs all {self.workers} workers running together")
                parallel([joblib.delayed(_task_main)(self.fn, k, self.workers, parent, self.inbox,
                                                     self.outboxes[k], as_arrays(kw), self.spill_dir,
                                                     self.fault)
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
        """Next message from any worker, or None after ``timeout`` seconds. Each message's news goes to
        :meth:`take` first: heartbeats and hellos end there and are not returned.

        Raises
        ------
        TaskFailed
            For a task's second :class:`Hello` (a backend ran it again after its process died).
        """
        deadline = time.monotonic() + timeout
        while True:
            try:
                msg = self.inbox.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                return None
            msg = self.take(unpack(msg, compact=True))
            if msg is not None:
                return msg

    def send(self, worker: int, msg: Any) -> None:
        """Put order ``msg`` on ``worker``'s queue (nothing if the worker is gone with its queue)."""
        self.send_all([worker], msg)

    def send_all(self, workers: Sequence[int], msg: Any) -> None:
        """Put the same order ``msg`` on each of ``workers``' queues (as :meth:`send`), packed once: a message
        that goes by a file (:func:`pack`) is written once, and each worker reads, then deletes, a hard link
        of its own to it (a copy where the folder takes no links)."""
        if not workers:
            return
        packed = pack(msg, self.spill_dir)
        for i, worker in enumerate(workers):
            own = packed
            if isinstance(packed, Spilled) and i < len(workers) - 1:  # (the last one takes the file itself)
                stem, suffix = os.path.splitext(packed.path)
                own = Spilled(f"{stem}-{worker}{suffix}")
                try:
                    os.link(packed.path, own.path)
                except OSError:
                    shutil.copyfile(packed.path, own.path)
            try:
                self.outboxes[worker].put(own)
            except Exception:  # noqa: BLE001 - the worker is gone with its queue; nothing to tell it
                if own is not packed:
                    os.unlink(own.path)

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
        :attr:`lost`), shut the manager down and remove the spill folder; after Ctrl-C (:attr:`interrupted`),
        end the pool's idle processes.

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
            elif (self.interrupted or ctrl_c_pressed()) and self.manager is not None:  # (idle: their tasks ended)
                _kill_loky_pool()
        if getattr(self, "_close_queues", None) is not None:
            self._close_queues()
            self._close_queues = None
        if self.manager is not None:
            try:
                self.manager.shutdown()
            except Exception:  # noqa: BLE001, S110 - the manager is gone already
                pass
            self.manager = None
        if self.spill_dir is not None:  # (with any message left unread)
            shutil.rmtree(self.spill_dir, ignore_errors=True)
            self.spill_dir = None
        super().close()


def _manager_started(collecting: bool) -> None:
    """The manager process's first step (it is forked with the garbage collector off): ignore Ctrl-C, keep what
    it inherited out of its collections for good, and collect from now on if the parent did."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    gc.freeze()
    if collecting:
        gc.enable()


def _kill_loky_pool() -> None:
    """End the processes of loky's pool (the one joblib runs the tasks in) without waiting for them."""
    try:
        from joblib.externals.loky import get_reusable_executor

        get_reusable_executor(reuse=True).shutdown(wait=False, kill_workers=True)  # (as it is: not remade)
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
    run then ends naming it, its pid and host (detected and named by the group's
    :class:`~dqnlab.parallel.supervision.Supervisor` side: :meth:`TaskGroup.lost_worker`).

    Each event has its method in :class:`_TaskLoop`: a message (``on_message``), a report due, a checkpoint
    due or gathered, no message (``on_idle``: the coordinator's work, then a lost worker), the stop overdue,
    Ctrl-C.

    Raises
    ------
    TaskFailed
        If a worker raised (after the others have stopped and sent what they had), or
        a worker was lost.
    """
    _TaskLoop(group, loop, coordinator, checkpoints).run()


#: Seconds the workers have to end once told to stop (after Ctrl-C: a user waits).
STOP_GRACE_S, INTERRUPT_GRACE_S = 30.0, 15.0
#: Seconds :meth:`TaskGroup.close` waits for the others once a worker is lost (it will not answer).
LOST_GRACE_S = 1.0


class _TaskLoop:
    """:func:`drive_tasks`' event loop: each turn reads one message, then looks at the clock; one method per event.

    Attributes
    ----------
    error : TaskFailed or None
        The run's first failure, raised when the loop ends.
    ended : bool
        The loop ends without waiting for every worker (one was lost, or a second Ctrl-C).
    stop_by, stop_grace_s : float
        Once the workers are told to stop, the ``time.perf_counter()`` by which they must have ended, and the
        seconds they were given.
    busy : bool
        The coordinator has more work at once: the next read does not block.
    barrier : dict or None
        The checkpoint being gathered: its ``id`` and the ``states`` that came.
    """

    def __init__(self, group: TaskGroup, loop: RunLoop, coordinator: Coordinator, checkpoints: bool):
        self.group, self.loop, self.coordinator, self.checkpoints = group, loop, coordinator, checkpoints
        coordinator.group, coordinator.loop = group, loop
        self.error: TaskFailed | None = None
        self.ended = False
        self.stop_by, self.stop_grace_s = math.inf, STOP_GRACE_S
        self.busy = False
        self.last_report = time.perf_counter()
        self.barrier: dict[str, Any] | None = None

    def run(self) -> None:
        """Turn until every worker has exited (or the loop ends); record the final progress; raise the error."""
        while not self.ended and len(self.group.exited) < self.group.workers:
            try:
                self.turn()
            except KeyboardInterrupt:
                self.on_interrupt()
        self.loop.record(self.coordinator.progress())
        if self.error is not None:
            raise self.error

    def turn(self) -> None:
        """Read a message (or wait 0.1 s for one), hand it on, then the events of the clock."""
        group = self.group
        alive = group.alive  # before reading: a worker may post its last message, then end
        try:
            msg = group.get(0.0 if self.busy else 0.1)
        except TaskFailed as rerun:  # a task started again
            self.end(rerun)
            return
        self.busy = self.coordinator.has_work and msg is not None  # drain waiting messages before working
        if msg is not None:
            self.on_message(msg)
        now = time.perf_counter()
        if now - self.last_report >= self.loop.report_every_s and self.loop.status == "running":
            self.on_report_due(now)
        if not group.stopping and (self.error is not None or self.loop.done):
            self.stop(STOP_GRACE_S)
        if self.checkpoints:
            if self.barrier is None and not group.stopping and self.loop.checkpoint_due():
                self.on_checkpoint_due()
            elif self.barrier is not None and (group.stopping or self.running() <= set(self.barrier["states"])):
                self.on_checkpoint_gathered()
        if msg is None:
            self.on_idle(alive)
        if not self.ended and now > self.stop_by:
            self.on_stop_overdue()

    def running(self) -> set[int]:
        """The workers that have not exited."""
        return set(range(self.group.workers)) - self.group.exited

    def end(self, failure: TaskFailed) -> None:
        """End the loop now, with ``failure`` unless the run failed already: a lost worker cannot be told to
        stop, and the others may wait for it (as when a pool's call ends with a process gone)."""
        self.error = self.error or failure
        self.ended = True

    def stop(self, grace_s: float) -> None:
        """Tell the workers to stop; they have ``grace_s`` seconds to end."""
        self.stop_by, self.stop_grace_s = time.perf_counter() + grace_s, grace_s
        self.group.interrupted = self.loop.status == "interrupted"
        self.group.stop()

    # ------------------------------------------------------------------ the events
    def on_message(self, msg: Any) -> None:
        """A worker's message (its hellos and heartbeats went to the group's supervision)."""
        if isinstance(msg, StateReply):
            if self.barrier is not None and msg.id == self.barrier["id"]:
                self.barrier["states"][msg.worker] = msg.state
        elif isinstance(msg, Failed):  # the others stop and send what they have before the run ends
            self.error = self.error or TaskFailed(*self.group.raised(msg))
            self.coordinator.exited(msg.worker)
        else:
            done = getattr(msg, "done", False)
            if done and msg.state is not None:
                self.coordinator.final_states[msg.worker] = msg.state
            self.coordinator.receive(msg)
            if done:
                self.coordinator.exited(msg.worker)

    def on_report_due(self, now: float) -> None:
        """About once a second: the run's progress to the loop (history, display, callback)."""
        self.last_report = now
        self.loop.report(self.coordinator.progress())

    def on_checkpoint_due(self) -> None:
        """Ask every running worker for its state (they wait for :class:`Checkpointed`)."""
        group = self.group
        group.checkpoints += 1
        self.barrier = {"id": group.checkpoints, "states": {}}
        group.checkpoint_pending = True
        for k in sorted(self.running()):
            group.send(k, Checkpoint(self.barrier["id"]))

    def on_checkpoint_gathered(self) -> None:
        """Every running worker's state came (write the checkpoint), or the run stops (abandon it); the
        workers go on."""
        group, barrier = self.group, self.barrier
        if not group.stopping:
            self.loop.write_checkpoint(self.coordinator.checkpoint_state(dict(barrier["states"])))
        group.checkpoint_pending = False
        for k in self.running() & set(barrier["states"]):
            group.send(k, Checkpointed(barrier["id"]))
        self.barrier = None
        self.coordinator.checkpoint_ended()

    def on_idle(self, alive: bool) -> None:
        """No message waited: the coordinator's own work, then whether a worker is lost (``alive``: the
        pool's call was running before the read)."""
        if self.coordinator.has_work and not self.group.stopping:
            self.busy = self.coordinator.work()
        lost = self.group.lost_worker(alive)
        if lost is not None:
            self.end(TaskFailed(*lost))

    def on_stop_overdue(self) -> None:
        """Workers told to stop have not ended in time."""
        self.end(TaskFailed(*self.group.overdue(self.stop_grace_s)))

    def on_interrupt(self) -> None:
        """Ctrl-C: stop the workers cleanly; a second one (or one while stopping) stops waiting for them."""
        self.loop.interrupt()
        if self.group.stopping:
            self.ended = True
        else:
            self.stop(INTERRUPT_GRACE_S)
