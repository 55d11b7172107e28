"""Run directories and checkpoints: what lets a run be interrupted and resumed.

A **run directory** (``dqnlab.train(..., run_dir=DIR)``, or ``python -m dqnlab train
--out DIR``) holds:

* ``checkpoint.pt`` -- everything needed to continue the run: the scheme's learner
  state (online and target weights, optimiser state, replay buffer, the games in
  progress, every random stream, counters), the episodes table so far, the progress
  history, the config, the scheme, its worker count and options, and
  :data:`CHECKPOINT_VERSION`;
* ``summary.json``, ``episodes.csv``, ``history.csv``, ``model.pt`` -- the
  :class:`~dqnlab.RunResult` files (:meth:`~dqnlab.RunResult.save`; ``model.pt`` holds the
  weights, as a PyTorch ``state_dict``).

Both are written every ``checkpoint_every`` seconds of wall time, and at the end of
the run (budget spent, Stop button, Ctrl-C). Every file is written to a temporary
name in the same directory and renamed over the old one (``os.replace``), so a crash
in the middle of a write leaves the previous checkpoint intact. After a worker fault
or a divergence the result files describe everything gathered, while
``checkpoint.pt`` stays the last good checkpoint.

``dqnlab.train(..., resume=DIR)`` continues from ``checkpoint.pt`` (see
:func:`prepare_resume` for what may change); episode numbers, env-step counts, wall
time and the history continue, and the run directory keeps being written.

What each scheme saves, and how exactly it resumes:

* ``serial``, ``sharded``, ``averaged`` -- the parent's learner is the whole state
  (the workers of ``sharded`` / ``averaged`` keep nothing between updates): a
  resumed run is the run that did not stop (same games, updates and weights).
* ``independent`` -- every learner's state, gathered as one consistent cut (each
  learner answers between two steps, or while it waits at a sync barrier, and waits
  for the others), plus the parent's open sync rounds: exact as well.
* ``shared`` -- every worker's private state plus a copy of the shared block (model,
  target, Adam, replay, counters), taken while all workers wait: the state is
  restored exactly; with more than one worker the continuation is as
  timing-dependent as any ``shared`` run.
* ``actors`` -- the learner (buffer, agent, counters) and every actor's state (boards,
  random streams, weights version), gathered as one consistent cut while the learner
  pauses: restored exactly; the continuation is exact with ``lockstep=True`` and as
  timing-dependent as any overlapped run otherwise.

The checkpoint is a :func:`torch.save` file holding only tensors, numbers, strings,
lists and dicts (NumPy arrays are stored as tensors; a large array or tensor that is mostly
zeros, such as a young n-tuple table, as the flat indices and values of its non-zero entries),
so it loads with ``torch.load(weights_only=True)``: opening a checkpoint runs no code from it.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .._version import __version__
from ..config import TrainConfig
from .compact import Entries
from .files import atomic_write, read_file

__all__ = ["CHECKPOINT_FILE", "CHECKPOINT_VERSION", "BUDGET_FIELDS", "Checkpointer", "save_checkpoint",
           "load_checkpoint", "prepare_resume", "check_checkpoint_every"]

#: Name of the checkpoint file in a run directory.
CHECKPOINT_FILE = "checkpoint.pt"
#: Version of the checkpoint format, the one written and read: large, mostly-zero arrays are stored by their
#: non-zero entries.
CHECKPOINT_VERSION = 2
#: Config fields a resumed run may change: the budget (both count the whole run).
BUDGET_FIELDS = ("total_env_steps", "max_seconds")
_FORMAT = "dqnlab-checkpoint"
_NDARRAY = "__ndarray__"
_SPARSE = "__sparse__"


# ----------------------------------------------------------------------------- encoding
def _sparse(a: np.ndarray, tensor: bool) -> dict[str, Any] | None:
    """``a`` as its non-zero entries (:class:`~dqnlab.runtime.compact.Entries`), tagged in tensors that
    ``torch.load(weights_only=True)`` reads (``tensor``: it decodes to a tensor), or None where dense is as small."""
    entries = Entries.of(a)
    return None if entries is None else _tagged(dataclasses.replace(entries, tensor=tensor))


def _tagged(entries: Entries) -> dict[str, Any]:
    """``entries`` tagged as :func:`_sparse` tags them."""
    return {_SPARSE: {"shape": list(entries.shape), "tensor": entries.tensor, "index": torch.from_numpy(entries.index),
                      "values": torch.from_numpy(entries.values)}}


def _dense(tag: dict[str, Any]) -> Any:
    """The array (or tensor) of a :func:`_sparse` tag."""
    values = tag["values"].numpy()
    out = Entries(tuple(tag["shape"]), values.dtype, tag["index"].numpy(), values).dense()
    return torch.from_numpy(out) if tag["tensor"] else out


def _encode(obj: Any) -> Any:
    """``obj`` with NumPy arrays as tagged tensors (large, mostly-zero ones as their non-zero entries) and
    NumPy scalars as Python numbers."""
    if isinstance(obj, Entries):  # (a worker's state as it came: written as it is)
        return _tagged(obj)
    if isinstance(obj, np.ndarray):
        return _sparse(obj, tensor=False) or {_NDARRAY: torch.from_numpy(np.array(obj, copy=True, order="C"))}
    if isinstance(obj, torch.Tensor):
        t = obj.detach()
        return (_sparse(t.numpy(), tensor=True) if t.device.type == "cpu" and not t.is_sparse else None) \
            or (t if _owns_its_storage(t) else t.clone())
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, Mapping):
        return {k: _encode(v) for k, v in obj.items()}
    if isinstance(obj, tuple):
        return tuple(_encode(v) for v in obj)
    if isinstance(obj, list):
        return [_encode(v) for v in obj]
    return obj


def _owns_its_storage(t: torch.Tensor) -> bool:
    """Whether ``t`` is the whole of its storage (torch.save writes a view's whole storage: a view is cloned
    first; a whole tensor, a copy already -- the learners' states are copies -- is saved as it is)."""
    return (not t.is_sparse and t.is_contiguous() and t.storage_offset() == 0
            and t.untyped_storage().nbytes() == t.numel() * t.element_size())


def _decode(obj: Any) -> Any:
    if isinstance(obj, dict):
        if len(obj) == 1 and _NDARRAY in obj:
            return obj[_NDARRAY].numpy()
        if len(obj) == 1 and _SPARSE in obj:
            return _dense(obj[_SPARSE])
        return {k: _decode(v) for k, v in obj.items()}
    if isinstance(obj, tuple):
        return tuple(_decode(v) for v in obj)
    if isinstance(obj, list):
        return [_decode(v) for v in obj]
    return obj


# ----------------------------------------------------------------------------- files
def save_checkpoint(directory: str | os.PathLike, payload: dict[str, Any]) -> Path:
    """Write ``payload`` to ``DIR/checkpoint.pt`` atomically (temporary file, then rename).

    Returns the path. On any error (a full disk, Ctrl-C) the temporary file is
    removed and the previous checkpoint is left as it was.
    """
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    path = d / CHECKPOINT_FILE
    atomic_write(path, lambda f: torch.save(_encode(payload), f), fsync=True)
    return path


def load_checkpoint(directory: str | os.PathLike) -> dict[str, Any]:
    """Read ``DIR/checkpoint.pt`` written by a training run.

    Raises
    ------
    ValueError
        If ``directory`` is not a directory, holds no checkpoint (or only the result
        files of a run that did not checkpoint), the file is not a readable dqnlab
        checkpoint, or it is of another :data:`CHECKPOINT_VERSION`.
    """
    d = Path(directory)
    if not d.is_dir():
        raise ValueError(f"resume: {str(d)!r} is not a directory (give the run directory of a dqnlab run)")
    path = d / CHECKPOINT_FILE
    if not path.is_file():
        if (d / "summary.json").is_file():
            raise ValueError(f"resume: {str(d)!r} holds a run without {CHECKPOINT_FILE} (trained without a run "
                             f"directory, or by a scheme that does not checkpoint); it cannot be resumed")
        raise ValueError(f"resume: {str(d)!r} is not a dqnlab run directory (no {CHECKPOINT_FILE})")
    raw = read_file(path, "dqnlab checkpoint")
    if not isinstance(raw, dict) or raw.get("format") != _FORMAT:
        raise ValueError(f"resume: {str(path)!r} is not a dqnlab checkpoint")
    if raw.get("version") != CHECKPOINT_VERSION:
        raise ValueError(f"resume: {str(path)!r} has checkpoint format version {raw.get('version')!r}; "
                         f"this dqnlab reads version {CHECKPOINT_VERSION}")
    return _decode(raw)


def check_checkpoint_every(value: Any) -> None:
    """Raise ValueError unless ``value`` is None or a finite number of seconds >= 0."""
    ok = value is None or (isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)
                           and math.isfinite(value) and value >= 0)
    if not ok:
        raise ValueError(f"checkpoint_every must be None or a number of seconds >= 0 "
                         f"(0 = at every progress report), got {value!r}")


# ----------------------------------------------------------------------------- resume
def prepare_resume(directory: str | os.PathLike, scheme: str | None, config: TrainConfig | None,
                   workers: int | None, options: dict[str, Any]) -> tuple[dict[str, Any], str, TrainConfig, int,
                                                                           dict[str, Any]]:
    """Load the checkpoint in ``directory`` and reconcile it with what the caller gave.

    * ``scheme``, ``workers``: None takes the checkpoint's; another value is an error.
    * ``config``: None takes the checkpoint's; a given one must equal it except for
      :data:`BUDGET_FIELDS` (both count the whole run, earlier sessions included).
    * ``options``: missing ones take the checkpoint's; a different value is an error.

    Returns ``(checkpoint, scheme, config, workers, options)``.

    Raises
    ------
    ValueError
        For an unreadable checkpoint (see :func:`load_checkpoint`), any conflict, or a
        budget that the run has already spent.
    """
    ck = load_checkpoint(directory)
    where = str(directory)
    saved_scheme = ck["scheme"]
    if scheme is not None and scheme != saved_scheme:
        raise ValueError(f"resume: {where!r} is a {saved_scheme!r} run; it cannot be resumed as scheme {scheme!r}")
    saved_workers = int(ck["workers"])
    if workers is not None and workers != saved_workers:
        raise ValueError(f"resume: {where!r} was trained with workers={saved_workers}; it cannot be resumed "
                         f"with workers={workers}")
    saved_options = dict(ck.get("options") or {})
    saved_config = TrainConfig.from_dict(ck["config"])
    if config is None:
        config = saved_config
    elif not isinstance(config, TrainConfig):
        raise ValueError(f"config must be a TrainConfig, got {type(config).__name__}")
    else:
        changed = [f.name for f in dataclasses.fields(TrainConfig)
                   if f.name not in BUDGET_FIELDS and f.compare
                   and getattr(config, f.name) != getattr(saved_config, f.name)]
        if changed:
            raise ValueError(f"resume: the config differs from the checkpoint's in {changed}; only the budget "
                             f"({', '.join(BUDGET_FIELDS)}) may change when resuming")
    conflicts = sorted(k for k, v in options.items() if k in saved_options and saved_options[k] != v)
    if conflicts:
        raise ValueError("resume: option(s) differ from the checkpoint's: " + ", ".join(
            f"{k}={options[k]!r} (saved {saved_options[k]!r})" for k in conflicts))
    options = {**saved_options, **options}
    env_steps, elapsed = int(ck["env_steps"]), float(ck["loop"]["elapsed"])
    spent = ((config.total_env_steps is not None and env_steps >= config.total_env_steps)
             or (config.max_seconds is not None and elapsed >= config.max_seconds))
    if spent:
        raise ValueError(f"resume: the run in {where!r} has already used its budget ({env_steps:,} env steps, "
                         f"{elapsed:,.0f} s; budget total_env_steps={config.total_env_steps}, "
                         f"max_seconds={config.max_seconds}, both counting the whole run); give a larger one "
                         f"(command line: --env-steps N or --minutes M for N more env steps or M more minutes)")
    return ck, saved_scheme, config, saved_workers, options


# ----------------------------------------------------------------------------- the writer
class Checkpointer:
    """Writes one run's directory: periodic and final checkpoints plus the result files.

    Made by :func:`dqnlab.train` and handed to the scheme (as its private
    ``_checkpoint`` keyword), which passes it to its :class:`~dqnlab.runtime.loop.RunLoop`.

    Parameters
    ----------
    directory : path
        The run directory (created if needed).
    every_s : float or None
        Seconds of wall time between checkpoints; 0 = at every progress report
        (about once a second); None = only at the end.
    scheme : str
    workers : int
    resumed : dict, optional
        The checkpoint this run continues (:func:`load_checkpoint` output).
    tensorboard : bool
        Whether the run loop also writes TensorBoard event files in the directory's
        ``tb/`` (:class:`~dqnlab.runtime.tensorboard.TensorBoardLog`); default True.

    Attributes
    ----------
    written : int
        Checkpoints written by this session.
    last_s : float
        Run wall time (seconds) of the last checkpoint written or resumed from.
    """

    def __init__(self, directory: str | os.PathLike, every_s: float | None, scheme: str, workers: int,
                 resumed: dict[str, Any] | None = None, tensorboard: bool = True):
        check_checkpoint_every(every_s)
        self.directory = Path(directory)
        self.tensorboard = tensorboard
        self.every_s = None if every_s is None else float(every_s)
        self.scheme, self.workers = scheme, workers
        self.resumed = resumed
        self.written = 0
        self.last_s = float(resumed["loop"]["elapsed"]) if resumed else 0.0
        self.last_env_steps: int | None = None
        self.resumes = int(resumed.get("resumes", 0)) + 1 if resumed else 0

    def take_state(self) -> Any:
        """The scheme's state to restore (None for a fresh run), handed over once: the checkpointer keeps no
        reference to it, so the copies it holds (a learner's tables, 268 MB each for 4x6 tuples) are freed as
        soon as the scheme has loaded them, not kept for the whole run."""
        return None if self.resumed is None else self.resumed.pop("state", None)

    @property
    def loop_state(self) -> dict[str, Any] | None:
        """The run loop's state to restore (None for a fresh run)."""
        return None if self.resumed is None else self.resumed["loop"]

    def due(self, elapsed: float, min_interval_s: float = 1.0) -> bool:
        """Whether a periodic checkpoint is due at run wall time ``elapsed`` (seconds);
        never more often than every ``min_interval_s`` (the progress-report interval)."""
        return self.every_s is not None and elapsed - self.last_s >= max(self.every_s, min_interval_s)

    def write(self, state: Any, loop_state: dict[str, Any], result: Any) -> Path:
        """Write ``checkpoint.pt`` (the scheme's ``state``, the loop's, the episodes) and the result files."""
        payload = {
            "format": _FORMAT, "version": CHECKPOINT_VERSION, "dqnlab_version": __version__,
            "written_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "scheme": self.scheme, "workers": self.workers,
            "options": dict(result.options), "config": result.config.to_dict(), "status": result.status,
            "env_steps": int(result.env_steps), "updates": int(result.updates),
            "wall_time_s": float(loop_state["elapsed"]), "resumes": self.resumes, "checkpoint_every_s": self.every_s,
            "episodes": {c: result.episodes[c].tolist() for c in result.episodes.columns},
            "loop": loop_state, "state": state,
        }
        path = save_checkpoint(self.directory, payload)
        self.written += 1
        self.last_s = float(loop_state["elapsed"])
        self.last_env_steps = int(result.env_steps)
        self.save_results(result)
        return path

    def save_results(self, result: Any) -> None:
        """Write the result files (summary.json, episodes.csv, history.csv, model.pt)."""
        result.extra["checkpoint"] = self.info()
        result.save(self.directory)

    def info(self) -> dict[str, Any]:
        """What ``RunResult.extra["checkpoint"]`` says about this run directory."""
        return {"run_dir": str(self.directory), "checkpoint_every_s": self.every_s,
                "checkpoints_written": self.written, "last_checkpoint_env_steps": self.last_env_steps,
                "resumes": self.resumes,
                "resumed_from_env_steps": None if self.resumed is None else int(self.resumed["env_steps"])}

