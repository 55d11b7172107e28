"""The fault hook the tests inject into workers, and the one-line description of an exception."""

from __future__ import annotations

import os
from typing import Any

__all__ = ["check_fault", "describe"]


def describe(e: BaseException) -> str:
    """``"TypeName: message"``: how a worker's exception is named in a :class:`~dqnlab.runtime.errors.WorkerError`."""
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
