"""Training schemes: each module exposes ``run(config, *, workers, progress, callback, **options)``.

Use :func:`dqnlab.train` rather than calling a module directly.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from ..config import TrainConfig
from ..results import RunResult
from . import serial

__all__ = ["SCHEMES", "train"]

#: Scheme name -> run function.
SCHEMES: dict[str, Callable[..., RunResult]] = {
    "serial": serial.run,
}


def train(scheme: str, config: TrainConfig | None = None, *, workers: int = 1, progress: bool = True,
          callback: Callable[[RunResult], Any] | None = None, **options: Any) -> RunResult:
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
    **options
        Scheme-specific keyword arguments, documented on each scheme's ``run``.

    Returns
    -------
    RunResult

    Raises
    ------
    ValueError
        For an unknown scheme, ``workers`` < 1, or an option the scheme does not take.
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
    if unknown:
        raise ValueError(f"scheme {scheme!r} does not take option(s) {unknown}; "
                         f"it takes {sorted(accepted) or 'none'}")
    return run(config, workers=workers, progress=progress, callback=callback, **options)
