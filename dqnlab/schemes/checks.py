"""Checks of scheme options: each raises ValueError naming the option."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["check_choice", "check_int", "check_number", "check_bool"]


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
