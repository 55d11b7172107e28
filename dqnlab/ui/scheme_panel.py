"""The panel of notebook 07 (:class:`SchemePanel`): any scheme's :class:`~dqnlab.ui.run_panel.ControlPanel`,
chosen from a dropdown, and a comparison of the last run of each."""

from __future__ import annotations

import html
import io
from typing import Any

import ipywidgets as W

from ..config import TrainConfig
from ..runtime.results import RunResult
from .controls import dropdown, labelled
from .run_panel import SINGLE_PROCESS, ControlPanel, active_panel
from .status import ranking_text

__all__ = ["SchemePanel"]

#: Games of each run whose scores the comparison draws (the last ones).
RECENT = 20


class SchemePanel:
    """A scheme dropdown above that scheme's :class:`ControlPanel`, and a comparison of
    the last run of each scheme; build it with :func:`scheme_panel`.

    While a run goes on, its panel stays in view: choosing another scheme then is refused (the
    dropdown goes back to the running scheme, and the line beside Compare says to Stop it first),
    and a scheme panel built while a run of one of its schemes goes on (its cell run again) shows
    that running panel, with its Stop button.

    Attributes
    ----------
    scheme : ipywidgets.Dropdown
    panels : dict of str to ControlPanel
        The panels built so far (one per scheme chosen; each keeps its runs).
    compare_button : ipywidgets.Button
        Draws :attr:`comparison`: env steps/s, updates/s and the time split of the last
        run of every scheme.
    comparison : ipywidgets.Image
        Hidden until the first comparison is drawn.
    widget : ipywidgets.VBox
    """

    def __init__(self, schemes: list[str] | None = None, config: TrainConfig | None = None, **panel_kwargs: Any):
        from ..schemes import SCHEMES

        names = list(schemes) if schemes is not None else sorted(SCHEMES, key=lambda s: (s != "serial", s))
        unknown = sorted(set(names) - set(SCHEMES))
        if unknown or not names:
            raise ValueError(f"schemes must be a non-empty list from {sorted(SCHEMES)}, got {schemes!r}")
        self._config, self._kwargs = config, panel_kwargs
        self.panels: dict[str, ControlPanel] = {}
        self.scheme = dropdown(names, names[0], "140px")
        self.compare_button = W.Button(description="Compare last runs", icon="bar-chart",
                                       layout=W.Layout(width="auto"),
                                       tooltip="Speed and time split of the last run of each scheme.")
        self.message = W.HTML()
        self.comparison = W.Image(format="png", layout=W.Layout(width="100%", max_width="900px", display="none"))
        running = active_panel()
        first = names[0]
        if running is not None and running.scheme in names and not running._network_controls:
            self.panels[running.scheme] = running  # the cell ran again while its run goes on: show that panel
            running._on_end.append(self._run_ended)
            first = self.scheme.value = running.scheme
        self._holder = W.VBox([self._panel(first).widget])
        self.scheme.observe(self._on_scheme, names="value")
        self.compare_button.on_click(self._on_compare)
        self.widget = W.VBox([labelled(self.scheme, "scheme", "The parallel scheme; each keeps its own panel and "
                                                              "its runs."), self._holder,
                              W.HBox([self.compare_button, self.message], layout=W.Layout(align_items="center")),
                              self.comparison])

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.widget._repr_mimebundle_(**kwargs)

    def _panel(self, name: str) -> ControlPanel:
        if name not in self.panels:
            self.panels[name] = ControlPanel(name, self._config, **self._kwargs)
            self.panels[name]._on_end.append(self._run_ended)
        return self.panels[name]

    def _run_ended(self, _panel: ControlPanel) -> None:
        """A panel's run has ended: a line beside Compare that no longer holds gives way to what can be done."""
        n, said = len(self.last_runs()), self.message.value
        if "no run yet" in said or "Stop it before" in said:
            self.message.value = f"{n} scheme(s) with a run to compare: click Compare last runs" if n else ""

    @property
    def panel(self) -> ControlPanel:
        """The panel of the scheme chosen now."""
        return self._panel(self.scheme.value)

    def _on_scheme(self, change: Any = None) -> None:
        """Show the chosen scheme's panel, with the common settings of the panel left (budget, seed,
        batch size, and workers where both run several)."""
        try:
            before = self.panels.get(change["old"]) if change else None
            if before is not None and before.running:  # its run and Stop button stay in view
                self.scheme.value = before.scheme
                self.message.value = (f'<span style="color:#a60">{html.escape(before.scheme)} is running: Stop it '
                                      "before switching scheme</span>")
                return
            panel = self.panel
            if before is not None and not panel.running:
                common = {"budget_s": before.budget_s.value, "seed": before.seed.value,
                          "batch_size": before.batch_size.value}
                chosen = before.preset.value  # a learner chosen goes along
                if chosen in panel.preset.options:
                    common["preset"] = chosen
                if SINGLE_PROCESS.isdisjoint({before.scheme, panel.scheme}):
                    common["workers"] = before.workers.value
                panel.set(**common)
            self._holder.children = [panel.widget]
        except Exception as e:  # noqa: BLE001 - shown, not swallowed
            self.message.value = f'<span style="color:#a00">{html.escape(f"{type(e).__name__}: {e}")}</span>'

    def last_runs(self) -> list[RunResult]:
        """The last run of each scheme that has one, in the dropdown's order."""
        return [self.panels[n].result for n in self.scheme.options
                if n in self.panels and self.panels[n].result is not None]

    def _on_compare(self, _button: Any = None) -> None:
        """Compare button handler (never raises: problems are shown beside the button)."""
        self.compare()

    def compare(self) -> None:
        """Draw the speed and time split of the last run of each scheme into :attr:`comparison`."""
        try:
            runs = self.last_runs()
            if not runs:
                self.message.value = '<span style="color:#a60">no run yet: run a scheme first</span>'
                return
            from matplotlib.figure import Figure

            from ..experiments.reading import SCHEME_COLOURS
            from ..plots import plot_bars, plot_time_split
            from .baselines import reference_scores

            labels = [f"{r.scheme} x{r.workers}" for r in runs]
            colours = [SCHEME_COLOURS.get(r.scheme, "k") for r in runs]
            fig = Figure(figsize=(10, 6.5), dpi=90, layout="constrained")  # shown at 900 px
            axes = fig.subplots(2, 2).ravel()
            plot_bars([r.env_steps_per_s for r in runs], labels, axes[0], "env steps / s", "acting throughput",
                      colors=colours)
            plot_bars([r.updates_per_s for r in runs], labels, axes[1], "updates / s", "learning throughput",
                      fmt="{:,.1f}", colors=colours)
            recent = {label: r.episodes["score"].tail(RECENT).to_numpy(float) if len(r.episodes) else []
                      for label, r in zip(labels, runs)}
            plot_bars([float(v.mean()) if len(v) else float("nan") for v in recent.values()], labels, axes[2],
                      f"score (mean of last {RECENT} games)", "score", colors=colours)
            for ax in axes[:3]:
                ax.margins(y=0.15)  # each bar's number under the title
            for name, score in reference_scores().items():
                axes[2].axhline(score, color="0.45", ls=":", lw=1.2)
                axes[2].annotate(f"{name} {score:,.0f}", (1.0, score), xycoords=("axes fraction", "data"),
                                 ha="right", va="bottom", fontsize="x-small", color="0.35", zorder=5,
                                 bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8, "pad": 1})
            plot_time_split(runs, axes[3], labels)
            buf = io.BytesIO()
            fig.savefig(buf, format="png")
            self.comparison.value = buf.getvalue()
            self.comparison.layout.display = None
            self.message.value = f"compared {len(runs)} run(s); {ranking_text(recent, 'recent score')}"
        except Exception as e:  # noqa: BLE001
            self.message.value = f'<span style="color:#a00">{html.escape(f"{type(e).__name__}: {e}")}</span>'
