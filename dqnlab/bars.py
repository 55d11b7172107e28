"""Progress bars of the long steps (training, compiling, evaluating, drawing a GIF): one look for all of them.

:func:`progress_bar` is a ``tqdm.auto`` bar: a widget in a notebook, a line on standard error in a
terminal. Where standard error is no terminal (a CI log, a file), the line is written at most every
:data:`LOG_INTERVAL_S` seconds, so that a long command leaves tens of lines there, not thousands.
"""

from __future__ import annotations

import math
import sys
from typing import Any, TextIO

from tqdm.auto import tqdm

__all__ = ["progress_bar", "LOG_INTERVAL_S", "TERMINAL_INTERVAL_S", "clock"]

#: Seconds between two lines of a bar whose stream is not a terminal.
LOG_INTERVAL_S = 30.0
#: Seconds between two redraws of a bar on a terminal (or in a notebook).
TERMINAL_INTERVAL_S = 0.5


def _redrawn_in_place(file: TextIO) -> bool:
    """Whether a bar on ``file`` redraws in place: a terminal, or a notebook's widget (``tqdm.auto``'s choice)."""
    notebook = any(cls.__module__ == "tqdm.notebook" for cls in tqdm.__mro__)
    isatty = getattr(file, "isatty", None)
    return notebook or bool(isatty and isatty())


def progress_bar(total: float | None = None, desc: str | None = None, unit: str = "it", *, disable: bool = False,
                 file: TextIO | None = None, **options: Any) -> tqdm:
    """A progress bar of ``total`` ``unit``\\ s (None: a counter, with no time left), on ``file``.

    Parameters
    ----------
    total : float, optional
        What the bar fills to; tqdm shows the time left from the rate so far.
    desc : str, optional
        Its label, before the bar.
    unit : str
        What one step of :meth:`~tqdm.std.tqdm.update` counts ("game", "frame").
    disable : bool
        Show nothing (the bar's methods still work).
    file : text stream, optional
        Where it is drawn (default ``sys.stderr``, read when called).
    **options
        More of tqdm's arguments (``bar_format``, ``leave``, ``initial``...).

    Returns
    -------
    tqdm.auto.tqdm
        Use it as a context manager, or :meth:`~tqdm.std.tqdm.close` it.
    """
    file = sys.stderr if file is None else file
    interval = TERMINAL_INTERVAL_S if _redrawn_in_place(file) else LOG_INTERVAL_S
    return tqdm(total=total, desc=desc, unit=unit, disable=disable, file=file, dynamic_ncols=True,
                mininterval=interval, maxinterval=max(interval, 10.0), **options)


def clock(seconds: float | None) -> str:
    """``seconds`` as a clock, ``"7:05"`` or ``"1:02:03"``; ``"?"`` for None or a value that is not finite."""
    if seconds is None or not math.isfinite(seconds):
        return "?"
    minutes, s = divmod(round(max(0.0, seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{s:02d}" if hours else f"{minutes}:{s:02d}"
