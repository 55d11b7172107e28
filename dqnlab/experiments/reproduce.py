"""``python -m dqnlab reproduce``: every notebook's final figure, from the same functions the notebook calls.

Each notebook in ``notebooks/`` gathers its data with a ``*_data`` function and ends
with the figure drawn by the matching ``*_figure`` function; :func:`reproduce` calls the
same two (see :data:`NOTEBOOKS`), so a figure in a notebook and the PNG written by the
command line come from the same code.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .actors import actors_data, actors_figure
from .averaged import averaged_data, averaged_figure
from .budgets import Budget, chosen, setup, use
from .compare import compare_data, compare_figure
from .game import game_data, game_figure
from .independent import independent_data, independent_figure
from .learning import learning_data, learning_figure
from .serial import serial_data, serial_figure
from .sharded import sharded_data, sharded_figure
from .shared import shared_data, shared_figure

__all__ = ["Notebook", "NOTEBOOKS", "reproduce"]


@dataclass(frozen=True)
class Notebook:
    """A notebook's final figure: how to gather its data and draw it."""

    name: str
    data: Callable[..., Any]
    figure: Callable[[Any], Any]
    schemes: tuple[str, ...] = ()
    """Schemes it needs (it is skipped while one is missing from :data:`dqnlab.SCHEMES`)."""


#: Notebook name -> its final figure, in the order of the series.
NOTEBOOKS: dict[str, Notebook] = {nb.name: nb for nb in (
    Notebook("00_the_game", game_data, game_figure),
    Notebook("01_serial_why_so_slow", serial_data, serial_figure, ("serial",)),
    Notebook("02_independent", independent_data, independent_figure, ("independent",)),
    Notebook("03_shared", shared_data, shared_figure, ("shared",)),
    Notebook("04_sharded", sharded_data, sharded_figure, ("sharded",)),
    Notebook("05_averaged", averaged_data, averaged_figure, ("serial", "averaged")),
    Notebook("06_actors", actors_data, actors_figure, ("serial", "actors")),
    Notebook("07_compare_schemes", compare_data, compare_figure, ("serial",)),
    Notebook("08_learning", learning_data, learning_figure, ("serial", "shared")),
)}


def reproduce(out: str | os.PathLike = "figures", budget: Budget | None = None, names: Sequence[str] | None = None,
              log: Callable[[str], Any] = print, dpi: int = 100) -> dict[str, Path | None]:
    """Regenerate the final figure of each notebook into ``out/<notebook>.png``.

    Parameters
    ----------
    out : path
        Directory to write to (created if missing).
    budget : Budget, optional
        The budgets of every notebook's runs: :data:`~dqnlab.experiments.budgets.SMOKE` for tiny ones
        (default: the :func:`~dqnlab.experiments.budgets.chosen` one).
    names : list of str, optional
        Notebooks to do (default: all of :data:`NOTEBOOKS`).
    log : callable
        Receives one line per figure.

    Returns
    -------
    dict
        Notebook name -> PNG path, or None where it was skipped (a scheme it needs is
        not available).

    Raises
    ------
    ValueError
        For an unknown notebook name.
    """
    names = list(NOTEBOOKS) if names is None else list(names)
    unknown = sorted(set(names) - set(NOTEBOOKS))
    if unknown:
        raise ValueError(f"unknown notebook(s) {unknown}; choose from {list(NOTEBOOKS)}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    with use(budget or chosen()):
        setup()
        return {name: _draw(NOTEBOOKS[name], out, log, dpi) for name in names}


def _draw(nb: Notebook, out: Path, log: Callable[[str], Any], dpi: int) -> Path | None:
    """Gather ``nb``'s data and write its figure into ``out``: the PNG's path, or None if ``nb`` is skipped."""
    import matplotlib.pyplot as plt

    from ..schemes import SCHEMES

    missing = [s for s in nb.schemes if s not in SCHEMES]
    if missing:
        log(f"{nb.name}: skipped, needs scheme(s) {missing} not in this dqnlab")
        return None
    t0 = time.perf_counter()
    fig = nb.figure(nb.data())
    path = out / f"{nb.name}.png"
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    log(f"{nb.name}: {path} ({time.perf_counter() - t0:.1f} s)")
    return path
