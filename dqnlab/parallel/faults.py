"""The fault the tests inject into workers, and the one-line description of an exception."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

__all__ = ["inject", "injected", "check_fault", "describe"]

_injected: dict[str, Any] | None = None


@contextlib.contextmanager
def inject(fault: dict[str, Any]) -> Iterator[None]:
    """Test hook: the worker tasks started inside the block (:class:`~dqnlab.parallel.tasks.TaskGroup`, and
    ``comm="joblib"``'s rounds) carry ``fault`` (:func:`check_fault`) to their workers, in processes too."""
    global _injected
    before, _injected = _injected, dict(fault)
    try:
        yield
    finally:
        _injected = before


def injected() -> dict[str, Any] | None:
    """The fault of the innermost :func:`inject` block around the caller, or None."""
    return _injected


def describe(e: BaseException) -> str:
    """``"TypeName: message"``: how a worker's exception is named in a :class:`~dqnlab.runtime.errors.WorkerError`."""
    return f"{type(e).__name__}: {e}"


def check_fault(fault: dict[str, Any] | None, worker: int, **counters: int) -> None:
    """Test hook: fail on purpose in worker ``fault["worker"]`` once a counter is reached.

    ``fault`` is a picklable dict such as ``{"worker": 1, "after_env_steps": 500}`` or
    ``{"worker": 0, "after_updates": 3, "kind": "exit"}``; ``kind`` ``"raise"``
    (default) raises RuntimeError, ``"exit"`` ends the process with ``os._exit(3)``
    (a crash). A test sets it with :func:`inject`; it is data, so it crosses process
    boundaries with the task that carries it (a monkeypatch would not).
    """
    if not fault or fault.get("worker") != worker:
        return
    for key, value in counters.items():
        limit = fault.get(f"after_{key}")
        if limit is not None and value >= limit:
            if fault.get("kind", "raise") == "exit":
                os._exit(3)
            raise RuntimeError(f"injected fault in worker {worker} after {value} {key.replace('_', ' ')}")
