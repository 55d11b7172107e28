"""Control panels for the notebooks: one call builds a panel that trains a scheme live.

>>> panel = dqnlab.ui.panels.control_panel("independent")   # doctest: +SKIP
>>> panel                                                  # doctest: +SKIP

The calls a notebook makes: :func:`control_panel` (a scheme's panel: its controls generated from
the scheme's options, Run and Stop, a status line and a live figure; see
:mod:`dqnlab.ui.run_panel` for how it runs), :func:`learning_panel` (notebook 08's, with a row
for the Q-function) and :func:`scheme_panel` (notebook 07's: any scheme, and a comparison of
the last runs); :func:`scheme_options` (what a panel shows of a scheme's options) and, from
:mod:`dqnlab.experiments.budgets`, :func:`setup`, :func:`budget`, :func:`smoke_mode` and
:data:`SMOKE_ENV` (the budget chosen for the notebook).

For scripts and headless runs, ``panel.run(blocking=True)`` starts the same run and
waits for it (Ctrl-C / interrupting the kernel stops it cleanly).
"""

from __future__ import annotations

from typing import Any

from ..config import TrainConfig
from ..experiments.budgets import SMOKE_ENV, budget, setup, smoke_mode
from .controls import scheme_options
from .run_panel import ControlPanel
from .scheme_panel import SchemePanel

__all__ = ["control_panel", "learning_panel", "ControlPanel", "scheme_panel", "SchemePanel", "scheme_options",
           "smoke_mode", "budget", "setup", "SMOKE_ENV"]


def control_panel(scheme: str, config: TrainConfig | None = None, *, workers: int | None = None,
                  batch_size: int | None = None, budget_s: float | None = None, seed: int = 0,
                  **options: Any) -> ControlPanel:
    """A control panel that trains ``scheme`` live; display it by leaving it last in a cell.

    Parameters
    ----------
    scheme : str
        One of :data:`dqnlab.SCHEMES`.
    config : TrainConfig, optional
        Base configuration (its preset dropdown then starts on "as given"); default: the preset chosen in
        the panel's dropdown, at first ``default``, the strong n-tuple learner
        (:func:`dqnlab.ui.presets.panel_config`, tiny in smoke mode).
    workers, batch_size, budget_s, seed
        Initial values of the controls (budget in seconds of wall time; default the
        config's ``max_seconds``).
    **options
        Initial values of the scheme's options (e.g. ``sync="final"``).

    Returns
    -------
    ControlPanel

    While a panel of ``scheme`` runs (in the background), this returns that panel rather than a new one: its
    cell run again shows the running panel, its Stop button and its figure.

    Raises
    ------
    ValueError
        For an unknown scheme or an option the scheme does not take.
    """
    running = _running(scheme, network_controls=False)
    if running is not None:
        return running
    return ControlPanel(scheme, config, workers=workers, batch_size=batch_size, budget_s=budget_s, seed=seed,
                        **options)


def _running(scheme: str, network_controls: bool) -> ControlPanel | None:
    """The panel of ``scheme`` (with the network row or not) whose run goes on; None if none."""
    from .run_panel import active_panel

    panel = active_panel()
    if panel is None or panel.scheme != scheme or panel._network_controls != network_controls:
        return None
    return panel


def learning_panel(scheme: str = "shared", network: str = "ntuple", *, workers: int | None = None,
                   budget_s: float | None = None, seed: int = 0, **options: Any) -> ControlPanel:
    """The panel of notebook 08: a :func:`control_panel` with a row for the Q-function
    (``network``: mlp, cnn or ntuple; afterstates; symmetry augmentation). Each run
    trains :func:`dqnlab.experiments.learning.learning_config` of those choices (the family's preset,
    tiny in smoke mode) with the panel's batch size, seed and budget.

    While a learning panel of ``scheme`` runs, this returns that panel (as :func:`control_panel` does).

    ``scheme`` defaults to ``shared``, with ``lock=False`` (Hogwild: how Jaskowski 2018
    trains n-tuple networks on several cores) unless ``options`` say otherwise.

    Raises
    ------
    ValueError
        For an unknown scheme or network, or an option the scheme does not take.
    """
    from ..experiments.learning import learning_config

    running = _running(scheme, network_controls=True)
    if running is not None:  # the cell ran again while its run goes on: the running panel
        return running
    if scheme == "shared":
        options.setdefault("lock", False)
    config = learning_config(network)
    return ControlPanel(scheme, config, workers=workers, budget_s=budget_s, seed=seed, network_controls=True,
                        **options)


def scheme_panel(schemes: list[str] | None = None, config: TrainConfig | None = None, **panel_kwargs: Any
                 ) -> SchemePanel:
    """A panel to run any scheme (chosen from a dropdown) and compare the last runs.

    Parameters
    ----------
    schemes : list of str, optional
        Default: every scheme in :data:`dqnlab.SCHEMES`, serial first.
    config : TrainConfig, optional
        Base configuration of every scheme's panel.
    **panel_kwargs
        Passed to each :class:`ControlPanel` (``workers``, ``batch_size``, ``budget_s``, ``seed``).
    """
    return SchemePanel(schemes, config, **panel_kwargs)
