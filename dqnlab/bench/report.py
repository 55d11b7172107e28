"""Reporting the benchmarks: the machine they ran on, and markdown tables."""

from __future__ import annotations

import datetime
import math
import os
import platform
from typing import Any

import numpy as np

__all__ = ["machine_info", "md_table", "md_machine"]


def machine_info() -> dict[str, Any]:
    """CPU model, logical cores, load average, library versions and the date (UTC)."""
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
        cpu = names[0] if names else cpu
    except OSError:
        pass
    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        load = None
    return {
        "cpu": cpu, "logical_cores": os.cpu_count(), "load_average_1_5_15min": load,
        "python": platform.python_version(), "torch": torch.__version__, "numpy": np.__version__,
        "date_utc": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
    }


def md_table(rows: list[dict[str, Any]], columns: dict[str, str], formats: dict[str, str] | None = None) -> str:
    """A markdown table of ``rows``.

    Parameters
    ----------
    rows : list of dict
        One dict per table row; a missing key reads as None.
    columns : dict
        Row key -> column title, in the order of the columns.
    formats : dict, optional
        Row key -> ``str.format`` pattern for its cells (default ``str``, with ``|`` escaped).
        None and NaN print as "—", booleans as "yes" / "**no**".
    """
    formats = formats or {}

    def cell(key: str, value: Any) -> str:
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return "—"
        if isinstance(value, bool):
            return "yes" if value else "**no**"
        if key in formats:
            return formats[key].format(value)
        return str(value).replace("|", "\\|")

    lines = ["| " + " | ".join(columns.values()) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(k, r.get(k)) for k in columns) + " |" for r in rows]
    return "\n".join(lines)


def md_machine(m: dict[str, Any], threads: int | None, command: str) -> str:
    """The sentence that says where and how a section was measured: the machine ``m``
    (:func:`machine_info`), PyTorch's ``threads`` (None: its default) and the ``command``."""
    load = ", ".join(map(str, m["load_average_1_5_15min"] or [])) or "unknown"
    return (f"Measured {m['date_utc']} on {m['cpu']}, {m['logical_cores']} logical cores "
            f"(load average {load} at the start: other work was running), PyTorch {m['torch']} with "
            f"{'its default' if threads is None else threads} thread{'' if threads == 1 else 's'}, "
            f"NumPy {m['numpy']}, Python {m['python']}. Command: `{command}`.")
