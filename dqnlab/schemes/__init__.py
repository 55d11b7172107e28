"""Training schemes: each module declares its ``Options`` (a frozen dataclass, see
:mod:`dqnlab.options`; empty for a scheme without options) and
``run(config, options, *, workers, progress, callback)``.

Use :func:`dqnlab.train` rather than calling a module directly.
"""

from __future__ import annotations

import gc
import os
import types
from collections.abc import Callable
from typing import Any

from ..agent.dqn import resolve_device
from ..config import TrainConfig
from ..options import check_names
from ..parallel.dask import BACKENDS, CLUSTER_SCHEMES, backend_context
from ..parallel.threads import torch_threads, torch_threads_set
from ..runtime.checkpoint import Checkpointer, check_checkpoint_every, prepare_resume
from ..runtime.errors import DivergedError, WorkerError
from ..runtime.learner import warm_up
from ..runtime.loop import deferred_interrupt
from ..runtime.native import native_reason
from ..runtime.results import RunResult
from . import actors, averaged, independent, serial, sharded, shared

__all__ = ["SCHEMES", "train", "parse_scheme_spec", "WorkerError", "DivergedError", "BACKENDS", "CLUSTER_SCHEMES", "DEVICE_SCHEMES"]

#: Scheme name -> its module (``Options``, ``run`` and, as module docstring, what the scheme is).
SCHEMES: dict[str, types.ModuleType] = {
    "serial": serial,
    "independent": independent,
    "shared": shared,
    "sharded": sharded,
    "averaged": averaged,
    "actors": actors,
}

#: Schemes whose learner runs on ``TrainConfig.device`` (the others keep their model where their
#: processes share it: in shared memory, or in the gloo all-reduce, and run ``"auto"`` on the CPU).
DEVICE_SCHEMES = ("serial", "independent", "actors")


def train(scheme: str | None = None, config: TrainConfig | None = None, *, workers: int | None = None,
          progress: bool = True, callback: Callable[[RunResult], Any] | None = None, backend: str | None = None,
          dask_scheduler: str | None = None, run_dir: str | os.PathLike | None = None,
          checkpoint_every: float | None = None, resume: str | os.PathLike | None = None,
          tensorboard: bool = True, **options: Any) -> RunResult:
    """Train a DQN agent on 2048 with the named scheme.

    Parameters
    ----------
    scheme : str
        One of :data:`SCHEMES` (may be left out with ``resume``: the checkpoint's).
    config : TrainConfig, optional
        Hyperparameters and budget; ``TrainConfig.preset("default")`` (the 4x6 n-tuple
        network, 268 MB of tables: ``shared`` keeps one in shared memory, ``independent`` and
        ``actors`` ship the entries that changed, ``sharded`` all-reduces a sparse gradient and
        ``averaged`` whole tables at every update -- those two are better served by the
        ``ntuple-small`` or ``mlp`` preset) if omitted
        (with ``resume``: the checkpoint's).
    workers : int, optional
        Worker processes (>= 1); default 1 (with ``resume``: the checkpoint's).
    progress : bool
        Show a progress bar on standard error, filled to the end of the budget, with the time left, env steps/s
        and the recent mean score (:class:`~dqnlab.runtime.loop.RunLoop`).
    callback : callable, optional
        Called about once a second as ``callback(snapshot)`` with a
        :class:`~dqnlab.RunResult` of what is gathered so far; return True to stop
        the run cleanly (this is how the notebooks' Stop button works). A snapshot
        copies the weights and the games (for an n-tuple network, 268 MB); a callback
        with a ``due(elapsed_s) -> bool`` method is called only at the reports where it
        returns True (``elapsed_s``: the run's wall time in seconds), and no snapshot is
        made at the others.
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
    run_dir : path, optional
        Run directory: ``checkpoint.pt``, ``summary.json``, ``episodes.csv``,
        ``history.csv`` and ``model.pt`` are written there at the end of the run
        (budget spent, Stop, Ctrl-C; after a worker fault or a divergence the result
        files, keeping the last good checkpoint) and every
        ``checkpoint_every`` seconds (see :mod:`dqnlab.runtime.checkpoint`); TensorBoard event files go to its
        ``tb/`` during the run (see ``tensorboard``).
    checkpoint_every : float, optional
        Seconds of wall time between checkpoints (needs ``run_dir`` or ``resume``);
        0 = at every progress report (about once a second); None (default) = only
        at the end (a resumed run: the period it was started with).
    resume : path, optional
        A run directory to continue from its ``checkpoint.pt``. ``scheme``,
        ``workers``, ``config`` and options default to the checkpoint's; given ones
        must agree with it, except the budget (``total_env_steps`` and
        ``max_seconds``, which count the whole run, earlier sessions included).
        Episode numbers, env-step counts, wall time and history continue. The run
        keeps writing to ``resume`` unless ``run_dir`` names another directory.
    tensorboard : bool
        With a run directory, write TensorBoard event files in ``RUN_DIR/tb/`` about
        once a second (default True; a resumed run continues them): score, max tile,
        TD loss, mean max-Q, epsilon, gradient norm, speed, replay ratio and time split,
        against env steps (see :mod:`dqnlab.runtime.tensorboard` for the tags). Nothing without
        a run directory.
    **options
        The scheme's options: the fields of its ``Options``, where each is documented
        (e.g. :class:`dqnlab.schemes.independent.Options`: ``sync="final"``); left out:
        their defaults (with ``resume``: the checkpoint's).

    Returns
    -------
    RunResult
        With a run directory, ``extra["checkpoint"]`` says what was written there.

    Raises
    ------
    ValueError
        For an unknown scheme, ``workers`` < 1, ``config.device="cuda"`` on a machine without a
        CUDA GPU or for a scheme not in :data:`DEVICE_SCHEMES`, an option the scheme does not take or
        a value it does not allow (the message names the option), a backend the scheme
        cannot run on (e.g. ``shared`` on Dask), a bad ``checkpoint_every``, a
        ``tensorboard`` that is not a bool, or a ``resume`` directory that is not a run,
        is of another checkpoint version, or disagrees with the arguments.
    ImportError
        With a run directory and ``tensorboard=True``, if the ``tensorboard`` package is
        not installed.
    WorkerError
        If a worker fails; ``err.partial`` holds what was gathered (also written to
        the run directory).
    DivergedError
        If a TD loss is NaN or infinite; ``err.partial`` as above.

    Notes
    -----
    While a run is going on in the main thread, the first Ctrl-C ends it cleanly
    (status ``"interrupted"``: workers stopped, data kept, final checkpoint written)
    and a second one interrupts at once.

    During the run this process uses :func:`~dqnlab.parallel.threads.torch_threads`
    ``(1)`` PyTorch threads (1 under dqnlab's default passive OpenMP waiting; see
    there why); the caller's setting is restored afterwards.
    """
    resumed = None
    if resume is not None:
        resumed, scheme, config, workers, options = prepare_resume(resume, scheme, config, workers, options)
        if run_dir is None:
            run_dir = resume
    if scheme not in SCHEMES:
        raise ValueError(f"scheme must be one of {sorted(SCHEMES)}, got {scheme!r}")
    if workers is None:
        workers = 1
    if not isinstance(workers, int) or isinstance(workers, bool) or workers < 1:
        raise ValueError(f"workers must be an integer >= 1, got {workers!r}")
    if config is None:
        config = TrainConfig.preset("default")
    if not isinstance(config, TrainConfig):
        raise ValueError(f"config must be a TrainConfig, got {type(config).__name__}")
    if config.device == "cuda" and scheme not in DEVICE_SCHEMES:
        raise ValueError(f"TrainConfig.device 'cuda' is for the schemes {list(DEVICE_SCHEMES)}; {scheme} keeps its "
                         "model on the CPU (shared memory or the gloo all-reduce): use device='cpu' or 'auto'")
    if scheme in DEVICE_SCHEMES:
        resolve_device(config.device)  # no GPU: a clear error now, not in a worker
    if callback is not None and not callable(callback):
        raise ValueError(f"callback must be callable or None, got {type(callback).__name__}")
    check_checkpoint_every(checkpoint_every)
    if checkpoint_every is not None and run_dir is None:
        raise ValueError("checkpoint_every needs a run directory (run_dir=...)")
    if run_dir is not None and not isinstance(run_dir, (str, os.PathLike)):
        raise ValueError(f"run_dir must be a path, got {type(run_dir).__name__}")
    if not isinstance(tensorboard, bool):
        raise ValueError(f"tensorboard must be True or False, got {tensorboard!r}")
    module = SCHEMES[scheme]
    check_names(module.Options, options, f"scheme {scheme!r}")
    chosen = module.Options(**options)
    hooks: dict[str, Any] = {}
    checkpointer = None
    if run_dir is not None:
        if checkpoint_every is None and resumed is not None:  # a resumed run keeps its period
            checkpoint_every = resumed.get("checkpoint_every_s")
        checkpointer = Checkpointer(run_dir, checkpoint_every, scheme, workers, resumed, tensorboard)
        hooks["_checkpoint"] = checkpointer  # every scheme's run takes it
    if native_reason(config, config.device) is None:
        # the compiled core: compiled (or loaded) here, once every argument is checked, before the run's clock
        # and its workers start
        warm_up()
    # this process learns too (serial, one-worker runs, the parent's share of a scheme):
    # as many torch threads as a learner process gets (restored afterwards)
    with deferred_interrupt(), backend_context(scheme, backend, dask_scheduler, workers), \
            torch_threads_set(torch_threads(1)):
        # the run writes its directory at its end (runtime.driver.run_to_end), a failed one too
        try:
            return module.run(config, chosen, workers=workers, progress=progress, callback=callback, **hooks)
        finally:
            # A run's learner, tables and loop refer to each other (the loop's snapshot is a closure over the
            # scheme's state), so they are freed by the cycle collector, not when the run returns; its full
            # collections are rare, and runs one after another (a benchmark's segments) kept their 268 MB
            # tables each until one came. Collect them now.
            gc.collect()


def parse_scheme_spec(spec: str) -> tuple[str, dict[str, Any]]:
    """A scheme and its options from ``NAME[:OPTION=VALUE]...`` (a bare ``:VALUE`` is the ``comm`` option),
    as the benchmarks take them: ``shared:lock=false``, ``independent:sync=final:sync_every=20000``, ``sharded:joblib``.

    Raises
    ------
    ValueError
        For an unknown scheme, an option the scheme does not take, or a bad value.
    """
    from ..options import specs

    name, *parts = spec.split(":")
    if name not in SCHEMES:
        raise ValueError(f"schemes must be scheme names among {sorted(SCHEMES)}, each optionally followed by "
                         f":OPTION=VALUE (sharded:joblib, averaged:average_every=4), got {spec!r}")
    declared = specs(SCHEMES[name].Options)
    options: dict[str, Any] = {}
    for part in parts:
        key, eq, text = part.partition("=")
        if not eq:
            key, text = "comm", part
        if key not in declared:
            raise ValueError(f"scheme spec {spec!r}: {name} takes options {sorted(declared) or 'none'}, not {key!r}")
        try:
            options[key] = declared[key].from_text(text)
        except ValueError as e:
            raise ValueError(f"scheme spec {spec!r}: {key}: {e}") from None
    return name, options
