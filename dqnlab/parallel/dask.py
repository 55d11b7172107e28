"""Running schemes on a Dask cluster, through joblib's Dask backend.

``dqnlab.train(..., backend="dask")`` runs the schemes whose workers need no shared
memory -- ``independent``, ``sharded``, ``averaged`` and ``actors`` -- on a
``dask.distributed`` cluster: with ``dask_scheduler="tcp://host:port"`` on an
existing one (started with ``dask scheduler`` and ``dask worker``, or by
dask-jobqueue on SLURM), otherwise on a ``LocalCluster`` of ``workers`` processes
(one thread each, on 127.0.0.1) that is started for the run and closed after it.

How the pieces map:

* joblib is still the engine: the run is wrapped in
  ``joblib.parallel_config(backend="dask", client=client)``, so the synchronous
  rounds of ``sharded`` and ``averaged`` go to the cluster unchanged;
* the long-lived worker tasks of ``independent`` and ``actors``
  (:class:`~dqnlab.parallel.tasks.TaskGroup`) talk to the parent through
  :class:`DaskQueue` -- ``distributed.Queue`` objects, i.e. through the scheduler --
  instead of a ``multiprocessing.Manager``, whose queues only processes of this
  machine (sharing its authentication key) can reach;
* ``shared`` keeps its replay buffer and model in this machine's shared memory, so a
  non-local backend is an error; ``serial`` has no workers.

A joblib backend may also be chosen outside dqnlab (``with joblib.parallel_config(
backend="dask"): dqnlab.train(...)``): with ``backend=None`` (the default) dqnlab uses
whatever joblib backend is active, and recognises Dask's.

Requires the ``cluster`` extra (``pip install "dqnlab[cluster]"``: ``dask[distributed]``).
Workers must be able to import dqnlab (same environment on every node), and each
should have one thread (``dask worker ADDR --nthreads 1``): tasks of one scheme that
share a worker process would share its interpreter.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import pickle
import queue
import time
from collections.abc import Iterator
from typing import Any

import joblib

__all__ = ["BACKENDS", "CLUSTER_SCHEMES", "check_backend", "backend_context", "active_dask_client",
           "DaskQueue", "task_transport"]

#: Values of ``train(backend=...)`` (None = joblib's active backend, loky by default).
BACKENDS = ("loky", "dask")
#: Schemes whose workers need no shared memory: they can run on a cluster.
CLUSTER_SCHEMES = ("independent", "sharded", "averaged", "actors")
#: joblib backends whose workers are processes (or threads) of this machine.
_LOCAL_BACKENDS = ("LokyBackend", "MultiprocessingBackend", "ThreadingBackend", "SequentialBackend")
#: Seconds to wait for a scheduler to answer.
CONNECT_TIMEOUT_S = 10.0
#: Longest pause between two looks at a Dask queue while waiting on it (seconds).
POLL_MAX_S = 0.02


def _active_backend() -> Any:
    """joblib's backend in effect in this thread (``joblib.parallel_config``), or None."""
    try:
        from joblib.parallel import get_active_backend
    except ImportError:  # pragma: no cover - an older or newer joblib without it
        return None
    return get_active_backend()[0]


def active_dask_client() -> Any:
    """The ``distributed.Client`` of joblib's active backend in this thread if it is Dask's, else None."""
    backend = _active_backend()
    if type(backend).__name__ == "DaskDistributedBackend":
        return getattr(backend, "client", None)
    return None


def check_backend(scheme: str, backend: str | None, dask_scheduler: str | None) -> None:
    """Raise ValueError unless ``scheme`` can run on ``backend`` (see the module docstring)."""
    if backend is not None and backend not in BACKENDS:
        raise ValueError(f"backend must be one of {list(BACKENDS)} (or None for joblib's active backend), "
                         f"got {backend!r}")
    if dask_scheduler is not None:
        if backend != "dask":
            raise ValueError("dask_scheduler applies only with backend='dask'")
        if not isinstance(dask_scheduler, str) or not dask_scheduler.strip():
            raise ValueError(f"dask_scheduler must be an address such as 'tcp://127.0.0.1:8786', "
                             f"got {dask_scheduler!r}")
    if backend == "loky":
        return
    if backend == "dask":
        where = "backend 'dask'"
    else:
        active = _active_backend()
        if active is None or type(active).__name__ in _LOCAL_BACKENDS:
            return
        where = f"joblib's active backend ({type(active).__name__}, from joblib.parallel_config)"
    if scheme == "shared":
        raise ValueError(f"scheme 'shared' cannot run on {where}: its workers share one replay buffer and "
                         f"one model in this machine's shared memory. Use backend='loky', or one of "
                         f"{list(CLUSTER_SCHEMES)} on a cluster")
    if scheme not in CLUSTER_SCHEMES:
        raise ValueError(f"scheme {scheme!r} has no worker processes to run on {where}; "
                         f"the schemes that run on a cluster are {list(CLUSTER_SCHEMES)}")


@contextlib.contextmanager
def backend_context(scheme: str, backend: str | None, dask_scheduler: str | None, workers: int) -> Iterator[None]:
    """Run the body on ``backend`` (after :func:`check_backend`).

    ``None``: joblib's active backend, untouched. ``"loky"``: local processes, even
    if the caller configured another joblib backend. ``"dask"``: a Dask client, to
    ``dask_scheduler`` or to a ``LocalCluster`` of ``workers`` one-thread processes
    on 127.0.0.1 started here; the client (and the local cluster) are closed on exit.

    Raises
    ------
    ValueError
        Bad combination (see :func:`check_backend`); Dask not installed; scheduler
        unreachable; fewer worker threads than a scheme with long-lived workers needs.
    """
    check_backend(scheme, backend, dask_scheduler)
    if backend is None:
        yield
        return
    if backend == "loky":
        with joblib.parallel_config(backend="loky"):
            yield
        return
    with contextlib.ExitStack() as stack:
        client = stack.enter_context(_dask_client(dask_scheduler, workers))
        if scheme in ("independent", "actors"):
            _check_slots(client, workers, dask_scheduler)
        stack.enter_context(joblib.parallel_config(backend="dask", client=client))
        yield


@contextlib.contextmanager
def _dask_client(address: str | None, workers: int) -> Iterator[Any]:
    try:
        from distributed import Client, LocalCluster
    except ImportError as e:
        raise ValueError("backend='dask' needs dask.distributed: pip install 'dqnlab[cluster]' "
                         "(or: pip install 'dask[distributed]')") from e
    if address is not None:
        try:
            client = Client(address, timeout=CONNECT_TIMEOUT_S, set_as_default=False)
        except (OSError, TimeoutError) as e:
            raise ValueError(f"cannot reach the Dask scheduler at {address!r} within {CONNECT_TIMEOUT_S:g} s "
                             f"({type(e).__name__}: {e})") from e
        try:
            yield client
        finally:
            client.close()
        return
    cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, host="127.0.0.1",
                           dashboard_address=None, silence_logs=logging.ERROR)
    try:
        client = Client(cluster, set_as_default=False)
        try:
            yield client
        finally:
            client.close()
    finally:
        cluster.close()


def _check_slots(client: Any, workers: int, address: str | None) -> None:
    """A scheme with long-lived workers needs all of them running at once: wait up to
    :data:`CONNECT_TIMEOUT_S` for that many worker threads (workers may still be arriving)."""
    deadline = time.monotonic() + CONNECT_TIMEOUT_S
    threads = 0
    while True:
        threads = sum(client.nthreads().values())
        if threads >= workers or time.monotonic() >= deadline:
            break
        time.sleep(0.2)
    if threads < workers:
        raise ValueError(f"the Dask cluster at {address or 'the local cluster'} has {threads} worker thread(s) "
                         f"after {CONNECT_TIMEOUT_S:g} s; this scheme runs all {workers} workers at once: start more "
                         f"(e.g. 'dask worker {address or 'ADDRESS'} --nworkers {workers} --nthreads 1'), or wait "
                         f"for them first (client.wait_for_workers({workers}))")


class DaskQueue:
    """A ``queue.Queue``-like face on a ``distributed.Queue`` (items go through the scheduler).

    Items are pickled to bytes (a ``distributed.Queue`` carries msgpack data).
    :meth:`get` and :meth:`get_nowait` raise :class:`queue.Empty` like the standard
    queue, so :class:`~dqnlab.parallel.tasks.Channel` and ``TaskGroup`` use either.
    Pickles by name: unpickled in a task on a worker, it reaches the same queue
    through that worker's client.
    """

    def __init__(self, name: str | None = None, client: Any = None):
        from distributed import Queue

        self._queue = Queue(name=name, client=client)
        self.name = self._queue.name
        self._pending: collections.deque = collections.deque()

    def __reduce__(self) -> tuple:
        return DaskQueue, (self.name,)

    def put(self, item: Any) -> None:
        self._queue.put(pickle.dumps(item, protocol=pickle.HIGHEST_PROTOCOL))

    def get_nowait(self) -> Any:
        if not self._pending:
            self._pending.extend(self._queue.get(batch=True))  # everything waiting, without blocking
        if not self._pending:
            raise queue.Empty
        return pickle.loads(self._pending.popleft())

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        """The next item; waits up to ``timeout`` seconds (None: for ever), then raises queue.Empty.

        Waits by polling (1 ms, doubling up to :data:`POLL_MAX_S`): a scheduler-side
        timeout would log an error on the scheduler every time it expires.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = 0.001
        while True:
            try:
                return self.get_nowait()
            except queue.Empty:
                if not block or (deadline is not None and time.monotonic() >= deadline):
                    raise
            time.sleep(delay if deadline is None else max(0.0, min(delay, deadline - time.monotonic())))
            delay = min(2 * delay, POLL_MAX_S)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._queue.close()


def task_transport(workers: int) -> tuple[Any, DaskQueue, list[DaskQueue], Any] | None:
    """For :class:`~dqnlab.parallel.tasks.TaskGroup`: when joblib's active backend in
    this thread is Dask, ``(backend, inbox, outboxes, close)`` -- the backend object to
    run the tasks with (joblib's configuration is per thread, and the tasks are
    started from a helper thread), the queues, and a function that releases them.
    None for a local backend (the task group uses a ``multiprocessing.Manager``)."""
    client = active_dask_client()
    if client is None:
        return None
    inbox = DaskQueue(client=client)
    outboxes = [DaskQueue(client=client) for _ in range(workers)]

    def close() -> None:
        for q in [inbox, *outboxes]:
            q.close()

    backend = type(_active_backend())(client=client)  # a backend object of its own for the helper thread
    return backend, inbox, outboxes, close
