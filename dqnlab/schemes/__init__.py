"""Training schemes: each module exposes ``run(config, *, workers, progress, callback, **options)``.

Use :func:`dqnlab.train` rather than calling a module directly.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from ..config import TrainConfig
from ..results import RunResult
from . import actors, averaged, independent, serial, shared, sharded
from .cluster import BACKENDS, CLUSTER_SCHEMES, backend_context
from .parallel import WorkerError

__all__ = ["SCHEMES", "train", "WorkerError", "BACKENDS", "CLUSTER_SCHEMES"]

#: Scheme name -> run function.
SCHEMES: dict[str, Callable[..., RunResult]] = {
    "serial": serial.run,
    "independent": independent.run,
    "shared": shared.run,
    "sharded": sharded.run,
    "averaged": averaged.run,
    "actors": actors.run,
}


def train(scheme: str, config: TrainConfig | None = None, *, workers: int = 1, progress: bool = True,
          callback: Callable[[RunResult], Any] | None = None, backend: str | None = None,
          dask_scheduler: str | None = None, **options: Any) -> RunResult:
    """Train a DQN agent on 2048 with the named scheme.

    Parameters
    ----------
    scheme : str
        One of :data:`SCHEMES`.
    config : TrainConfig, optional
        Hyperparameters and budget; ``TrainConfig.preset("default")`` if omitted.
    workers : int
        Worker processes (>= 1).
    progress : bool
        Show a tqdm progress bar with env steps/s and the recent mean score.
    callback : callable, optional
        Called about once a second as ``callback(snapshot)`` with a
        :class:`~dqnlab.RunResult` of what is gathered so far; return True to stop
        the run cleanly (this is how the notebooks' Stop button works).
    backend : {"loky", "dask"}, optional
        Where the workers run. None (default): joblib's active backend (loky, local
        processes, unless the caller chose another with ``joblib.parallel_config``;
        a Dask one is used as is). ``"loky"``: local processes. ``"dask"``: a
        ``dask.distributed`` cluster (needs the ``cluster`` extra), for the schemes in
        :data:`CLUSTER_SCHEMES` (``shared`` needs this machine's shared memory).
    dask_scheduler : str, optional
        With ``backend="dask"``: address of an existing scheduler, e.g.
        ``"tcp://10.0.0.5:8786"``. Without it, a ``LocalCluster`` of ``workers``
        one-thread processes on 127.0.0.1 is started for the run and closed after it.
    **options
        Scheme-specific keyword arguments, documented on each scheme's ``run``.

    Returns
    -------
    RunResult

    Raises
    ------
    ValueError
        For an unknown scheme, ``workers`` < 1, an option the scheme does not take, or a
        backend the scheme cannot run on (e.g. ``shared`` on Dask).
    """
    if scheme not in SCHEMES:
        raise ValueError(f"scheme must be one of {sorted(SCHEMES)}, got {scheme!r}")
    if not isinstance(workers, int) or isinstance(workers, bool) or workers < 1:
        raise ValueError(f"workers must be an integer >= 1, got {workers!r}")
    if config is None:
        config = TrainConfig.preset("default")
    if not isinstance(config, TrainConfig):
        raise ValueError(f"config must be a TrainConfig, got {type(config).__name__}")
    run = SCHEMES[scheme]
    accepted = set(inspect.signature(run).parameters) - {"config", "workers", "progress", "callback"}
    unknown = sorted(set(options) - accepted)
    accepted = {name for name in accepted if not name.startswith("_")}  # private hooks (tests) go unadvertised
    if unknown:
        raise ValueError(f"scheme {scheme!r} does not take option(s) {unknown}; "
                         f"it takes {sorted(accepted) or 'none'}")
    with backend_context(scheme, backend, dask_scheduler, workers):
        return run(config, workers=workers, progress=progress, callback=callback, **options)
