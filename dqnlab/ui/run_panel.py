"""A scheme's control panel (:class:`ControlPanel`): its controls, the run it starts in the background, its
live figure and its status line.

The panel shows a dropdown of the learner (the preset each run trains, the strong ``default`` n-tuple
learner first: :mod:`dqnlab.ui.presets`), a slider for the worker count (with a warning under the
controls when the workers outnumber the cores), a dropdown for the batch size, text boxes for
the budget in seconds and the seed, and one control per option of the scheme (generated from
the scheme's ``Options`` declarations, see :mod:`dqnlab.ui.controls`: their docs are the tooltips,
a text box is read by its declaration and refuses what it cannot take with a line naming what
is allowed, and a control is hidden while its option does not apply, e.g. ``final_fraction``
unless ``sync="final"``), plus Run and Stop buttons, a status line and a live figure: speed
(env steps/s, updates/s), TD loss and score against wall time, the score beside the random and corner
players' (:class:`dqnlab.plots.LiveFigure`: the same lines with new data; the reference players are
measured once per process, :mod:`dqnlab.ui.baselines`). Draws happen at the run's progress reports, about a second
apart, when two seconds have passed since the last; a draw that costs more than 0.3 s makes
the panel wait five draws' time before the next, so drawing never takes more than a fifth of
the run. Nothing is shown under the buttons until
a run draws, and a Run click clears the figure of the run before, so a failed run never leaves
another run's figure looking current.

Before a run's budget starts, the panel compiles the native core (or loads it from numba's
cache) and starts joblib's worker processes if that was not done yet
(:func:`dqnlab.bench.timing.warm_up`); the status line says each step, and the seconds it has
taken, twice a second until the run's first report, and again while a Stop is under way; between
reports it counts the run's seconds on, twice a second, and says how long ago the last report came
once that is a few seconds (a slow report never freezes the line).

One run at a time: while a panel runs, :func:`~dqnlab.ui.panels.control_panel` of its scheme returns
that panel (its cell run again shows it, with its Stop button), and another panel's Run is refused
with a Stop button that ends the running one.

How it stays responsive: Run starts :func:`dqnlab.train` in a background thread, so
the kernel keeps processing widget events (a callback that blocked the kernel would
never see the Stop click). The run's ``callback(snapshot)``, called about once a
second from that thread, redraws the figure (matplotlib's object-oriented API, no
pyplot) into an ``Image`` widget when two seconds have passed (a report that comes a
little early counts, so reports about a second apart give a draw every second report)
and returns True once Stop was clicked: the scheme
then ends cleanly and the panel keeps what was gathered (:attr:`ControlPanel.result`,
``status="stopped"``). Errors (a bad combination of settings, a worker that fails) are
shown in the panel, in the words of its controls ("min replay ratio", not
``min_replay_ratio``), and kept as raised in :attr:`ControlPanel.error`, never raised into
the void of an ipywidgets callback.

For scripts and headless runs, ``panel.run(blocking=True)`` starts the same run and
waits for it (Ctrl-C / interrupting the kernel stops it cleanly).
"""

from __future__ import annotations

import dataclasses
import html
import io
import math
import os
import threading
import time
import traceback
from typing import Any

import ipywidgets as W

from ..config import TrainConfig
from ..options import Spec, check_names, specs
from ..plots import LiveFigure
from ..runtime.results import RunResult
from .controls import checkbox, dropdown, labelled, option_widget, parse_text, scheme_options, text_box
from .presets import PANEL_PRESETS, PRESET_WORDS, panel_config
from .status import IDLE_TEXT, first_line, in_labels, progress_text, summary_text

__all__ = ["ControlPanel", "BATCH_SIZES", "SINGLE_PROCESS", "ONE_PLAYER", "GIVEN", "active_panel"]

#: Batch sizes offered by the panel's dropdown.
BATCH_SIZES = (16, 32, 64, 128, 256, 512, 1024, 2048)
#: Schemes that always run one process (no worker slider).
SINGLE_PROCESS = frozenset({"serial"})
#: Schemes whose games are all one learner's (no "score per worker": there is one line to draw).
ONE_PLAYER = frozenset({"serial", "sharded", "averaged"})
#: Seconds a progress report may come early and still redraw the figure: runs report about
#: once a second, so a draw every ``redraw_every_s`` (2 s) needs every second report to count.
_REPORT_SLACK_S = 0.5
#: The clock of the redraw schedule (seconds; a name of its own so tests can drive it).
_clock = time.perf_counter

#: The preset dropdown's entry for the configuration given to the panel.
GIVEN = "as given"
#: Seconds without a report after which the status line says how long ago the last one came.
_QUIET_S = 3.0

_STOP_TIP = "End the run at its next report, keeping what was gathered."

_ACTIVE_LOCK = threading.Lock()
_ACTIVE: ControlPanel | None = None  # the panel whose run is going on (one run at a time)


def active_panel() -> ControlPanel | None:
    """The panel whose run is going on now (None if none is)."""
    active = _ACTIVE
    return active if active is not None and active.running else None


class ControlPanel:
    """A scheme's control panel; build it with :func:`control_panel`.

    Attributes
    ----------
    scheme : str
    config : TrainConfig
        Base configuration; each run replaces ``batch_size``, ``seed`` and the budget
        (``max_seconds`` = the budget slider, no env-step limit).
    preset : ipywidgets.Dropdown
        The learner each run trains (:data:`dqnlab.ui.presets.PANEL_PRESETS`, the strong ``default``
        n-tuple learner first; :data:`GIVEN` for the configuration given to the panel). Hidden in a
        panel with the network row (:func:`~dqnlab.ui.panels.learning_panel`).
    workers, batch_size, budget_s, seed : ipywidgets.Widget
        The common controls (``workers`` is hidden for single-process schemes); ``budget_s`` (seconds)
        and ``seed`` are text boxes.
    note : ipywidgets.HTML
        Under the controls: more workers than the machine has cores (they then share the cores); hidden
        otherwise.
    options : dict of str to ipywidgets.Widget
        One control per scheme option: a dropdown of its choices, a checkbox, or a text box. A text box
        is read by the option's declaration (:meth:`dqnlab.options.Spec.from_text`): what it cannot
        take is never bent to fit but said at once in :attr:`check` and refused by Run.
    check : ipywidgets.HTML
        Under the controls: what a text box cannot take (``seed must be an integer >= 0, got '-7'``);
        hidden while every box reads.
    per_worker : ipywidgets.Checkbox
        Draw one score line per worker (multi-process schemes).
    run_button, stop_button : ipywidgets.Button
    status : ipywidgets.HTML
        What the run is doing (each start-up step with a seconds count until the first report, then
        its progress), its summary when it ends, or the error (in the controls' words).
    figure : ipywidgets.Image
        The live figure (PNG, :class:`dqnlab.plots.LiveFigure`), redrawn about every
        ``redraw_every_s`` seconds (2) while a run goes on. Hidden until a run draws, and
        again from a Run click until that run draws (so a failed run shows no figure).
    result : RunResult or None
        The last run (complete, stopped, or the partial run of a failed one).
    results : list of RunResult
        Every run of this panel, oldest first.
    error : str or None
        The last run's error message as raised (``"ValueError: sync_every must be ..."``), None
        if it went well; the status line shows it with the controls' labels.
    widget : ipywidgets.VBox
        The whole panel (displaying the panel displays this).
    """

    def __init__(self, scheme: str, config: TrainConfig | None = None, *, workers: int | None = None,
                 batch_size: int | None = None, budget_s: float | None = None, seed: int = 0,
                 max_workers: int | None = None, redraw_every_s: float = 2.0, network_controls: bool = False,
                 **options: Any):
        declared = scheme_options(scheme)  # raises ValueError for an unknown scheme
        import matplotlib.pyplot  # noqa: F401 - import it here, not first in the training thread

        from ..schemes import SCHEMES

        check_names(SCHEMES[scheme].Options, options, f"scheme {scheme!r}")
        self.scheme = scheme
        self._given = config is not None
        self.config = config if config is not None else panel_config("default")
        if not isinstance(self.config, TrainConfig):
            raise ValueError(f"config must be a TrainConfig, got {type(self.config).__name__}")
        self.redraw_every_s = redraw_every_s
        self.result: RunResult | None = None
        self.results: list[RunResult] = []
        self.error: str | None = None
        self.traceback: str | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._done = threading.Event()
        self._done.set()
        self._draw_lock = threading.Lock()
        self._live = LiveFigure()
        self._shown: RunResult | None = None  # the run (or snapshot) the figure shows
        self._last_draw = -math.inf  # _clock() when the last draw started
        self._draw_cost = 0.0
        self._settings: dict[str, Any] = {}
        self._phase: tuple[str, float] | None = None  # (what the run is doing, since when), until it reports
        self._prep_s = 0.0  # seconds of the last run's start-up before its budget (compiling, starting workers)
        self._refused = False  # the status line shows a setting that Run refused
        self._blocker: ControlPanel | None = None  # the other panel whose run refused this one's
        self._report: tuple[RunResult, float] | None = None  # the last report of the run and _clock() then
        self._tick_lock = threading.Lock()  # the status line's ticks against the run's end
        self._on_end: list[Any] = []  # called with the panel when a run ends (the scheme panel's)
        self.baselines: dict[str, float] = {}  # mean score of each reference player, once measured

        self._network_controls = network_controls
        single = scheme in SINGLE_PROCESS
        self._build_common_controls(workers, batch_size, budget_s, seed, max_workers, single)
        self._build_option_controls(declared, options)
        self._build_widget(scheme in ONE_PLAYER)
        self._update_visibility()
        self._check_inputs()
        self._note_cores()

    def _build_common_controls(self, workers: int | None, batch_size: int | None, budget_s: float | None,
                               seed: int, max_workers: int | None, single: bool) -> None:
        """The controls every panel has (workers, batch size, budget, seed) and the network row's, each with
        its label and tooltip."""
        cores = os.cpu_count() or 1
        max_workers = max_workers or max(8, cores)
        default_workers = 1 if single else (workers or min(2, max_workers))
        fields = specs(TrainConfig)
        self.workers = W.IntSlider(value=default_workers, min=1, max=max(max_workers, default_workers),
                                   continuous_update=False, layout=W.Layout(width="260px"))
        bs = batch_size or self.config.batch_size
        self.batch_size = dropdown(sorted(set(BATCH_SIZES) | {bs}), bs, "90px")
        secs = float(budget_s if budget_s is not None else (self.config.max_seconds or 60.0))
        #: How the text boxes are read: the declarations of their fields (a budget must be given).
        self._text_specs: dict[str, Spec] = {
            "budget_s": dataclasses.replace(fields["max_seconds"], nullable=False),
            "seed": fields["seed"]}
        self.budget_s = text_box(self._text_specs["budget_s"], secs, "90px")
        self.seed = text_box(fields["seed"], seed, "90px")
        self.network = dropdown(["mlp", "cnn", "ntuple"], self.config.network, "100px")
        presets = ([GIVEN] if self._given else []) + list(PANEL_PRESETS)
        self.preset = dropdown(presets, GIVEN if self._given else "default", "130px")
        #: The label of each control (its name in words, with its unit) and what is shown of it (the
        #: control beside its label).
        self.labels: dict[str, str] = {"preset": "learner", "workers": "workers", "batch_size": "batch size", "budget_s": "budget (s)",
                                       "seed": "seed", "network": "network", "afterstate": "afterstates",
                                       "augment_symmetry": "symmetry augmentation"}
        docs = {"preset": "The learner each run trains: " + "; ".join(
                    f"{name}, {words}" for name, words in PRESET_WORDS.items())
                    + (f"; {GIVEN}, the settings given to the panel" if self._given else "") + ".",
                "workers": f"Worker processes (threads where the scheme runs threads); {cores} CPU cores here.",
                "batch_size": fields["batch_size"].tooltip, "seed": fields["seed"].tooltip,
                "budget_s": "Wall-clock seconds the run may take, from its start (after the panel has compiled "
                            "the core and started the workers).",
                "network": fields["network"].tooltip + " Each run starts from that family's preset."}
        self._shown_as: dict[str, W.Widget] = {
            name: labelled(getattr(self, name), self.labels[name], doc) for name, doc in docs.items()}
        self.afterstate, self._shown_as["afterstate"] = checkbox(
            self.labels["afterstate"], fields["afterstate"].tooltip, self.config.afterstate)
        self.augment_symmetry, self._shown_as["augment_symmetry"] = checkbox(
            self.labels["augment_symmetry"], fields["augment_symmetry"].tooltip, self.config.augment_symmetry)
        self.check = W.HTML(layout=W.Layout(display="none"))
        self.note = W.HTML(layout=W.Layout(display="none"))
        self.workers.observe(lambda _change: self._note_cores(), names="value")
        self._shown_as["preset"].layout.display = "none" if self._network_controls else None
        self.network.observe(lambda _change: self._update_visibility(), names="value")
        self._shown_as["workers"].layout.display = "none" if single else None

    def _build_option_controls(self, declared: dict[str, dict[str, Any]], options: dict[str, Any]) -> None:
        """One control per scheme option (``declared`` by :func:`~dqnlab.ui.controls.scheme_options`), set to
        ``options`` or its default; every text box is checked as it is typed into."""
        self._specs = declared
        self.options: dict[str, W.Widget] = {}
        for name, spec in declared.items():
            self.options[name], self._shown_as[name] = option_widget(spec, options.get(name, spec["default"]))
            self.labels[name] = spec["spec"].label
            if spec["kind"] not in ("choice", "bool"):
                self._text_specs[name] = spec["spec"]
        for w in self.options.values():
            w.observe(lambda _change: self._update_visibility(), names="value")
        for name in self._text_specs:
            self._controls()[name].observe(lambda _change: self._check_inputs(), names="value")

    def _build_widget(self, one_player: bool) -> None:
        """The buttons, the status line and the figure, and :attr:`widget`: every row of the panel (no "score per
        worker" where one learner plays every game)."""
        self.per_worker, self._shown_as["per_worker"] = checkbox("score per worker", "Draw one score line per worker.",
                                                                 False)
        self._shown_as["per_worker"].layout.display = "none" if one_player else None
        self.per_worker.observe(lambda _change: self._redraw(self._shown, force=True), names="value")
        self.run_button = W.Button(description="Run", button_style="success", icon="play",
                                   tooltip="Train with these settings (in the background).")
        self.stop_button = W.Button(description="Stop", button_style="danger", icon="stop", disabled=True,
                                    tooltip=_STOP_TIP)
        self.run_button.on_click(self._on_run)
        self.stop_button.on_click(self._on_stop)
        self.status = W.HTML(value=IDLE_TEXT)
        self.figure = W.Image(format="png", layout=W.Layout(width="100%", max_width="900px", display="none"))
        title = W.HTML(f"<b>{html.escape(self.scheme)}</b> &mdash; {html.escape(first_line(self.scheme))}")
        row = W.Layout(flex_flow="row wrap", align_items="center")
        common = W.HBox([self._shown_as[n] for n in ("preset", "workers", "batch_size", "budget_s", "seed")],
                        layout=row)
        network_row = W.HBox([self._shown_as[n] for n in ("network", "afterstate", "augment_symmetry")],
                             layout=W.Layout(flex_flow="row wrap", align_items="center",
                                             display=None if self._network_controls else "none"))
        scheme_row = W.HBox([self._shown_as[name] for name in [*self.options, "per_worker"]], layout=row)
        buttons = W.HBox([self.run_button, self.stop_button])
        self.widget = W.VBox([title, network_row, common, scheme_row, self.check, self.note, buttons, self.status,
                              self.figure])

    # ------------------------------------------------------------------ display
    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.widget._repr_mimebundle_(**kwargs)

    def __repr__(self) -> str:
        try:
            settings = self.settings()
        except ValueError as e:
            settings = str(e)
        return f"<ControlPanel {self.scheme!r} {settings}>"

    def _update_visibility(self) -> None:
        self._shown_as["augment_symmetry"].layout.display = "none" if self.network.value == "ntuple" else None
        values = {name: getattr(w, "value", None) for name, w in self.options.items()}
        for name in self.options:
            applies = self._specs[name]["spec"].applies
            self._shown_as[name].layout.display = None if applies is None or applies.holds(values) else "none"
        self._check_inputs()

    def _note_cores(self) -> None:
        """Say under the controls when the workers outnumber the machine's cores."""
        cores = os.cpu_count() or 1
        workers = int(self.workers.value)
        many = workers > cores and self.scheme not in SINGLE_PROCESS
        self.note.value = (f'<span style="color:#a60">&#9888; {workers} workers on {cores} CPU cores: they take turns '
                           f'on the cores, so each runs slower and the speeds measured are those of a crowded '
                           f'machine, not of {workers} workers</span>' if many else "")
        self.note.layout.display = None if many else "none"

    def _applies(self, name: str) -> bool:
        """Whether control ``name`` is shown (a hidden option does not apply to the settings chosen)."""
        return self._shown_as.get(name, self._controls()[name]).layout.display != "none"

    # ------------------------------------------------------------------ settings
    def _read(self, name: str) -> Any:
        """The value of control ``name``: a text box read by its declaration (ValueError naming the control
        for text it cannot take), any other control as it stands."""
        w = self._controls()[name]
        return parse_text(self._text_specs[name], w.value, name) if name in self._text_specs else w.value

    def _check_inputs(self) -> list[str]:
        """Read every text box shown; what cannot be taken is said under the controls at once (and a
        Run click refuses it with the same line). Returns the lines."""
        problems = []
        for name in self._text_specs:
            if self._applies(name):
                try:
                    self._read(name)
                except ValueError as e:
                    problems.append(str(e))
        if not problems and self._refused and not self.running:  # the refusal no longer holds
            self._refused = False
            self.status.value = IDLE_TEXT
        text = "; ".join(problems)
        self.check.value = (f'<span style="color:#a00">&#9888; {html.escape(self._in_labels(text))}</span>'
                            if problems else "")
        self.check.layout.display = None if problems else "none"
        return problems

    def settings(self) -> dict[str, Any]:
        """The settings a Run click would use: ``workers``, ``batch_size``, ``budget_s``,
        ``seed``, with ``network_controls`` also ``network``, ``afterstate`` and
        ``augment_symmetry``, and the scheme's options (only those that apply).

        Raises
        ------
        ValueError
            For text a box cannot take, naming the control: ``seed must be an integer >= 0, got '-7'``.
        """
        values = {name: self._read(name) for name in self.options if self._applies(name)}
        if self._network_controls:
            values.update(network=self.network.value, afterstate=bool(self.afterstate.value),
                          augment_symmetry=bool(self.augment_symmetry.value) and self.network.value != "ntuple")
        else:
            values["preset"] = self.preset.value
        return {"workers": int(self.workers.value), "batch_size": int(self.batch_size.value),
                "budget_s": float(self._read("budget_s")), "seed": int(self._read("seed")), **values}

    def set(self, **values: Any) -> ControlPanel:
        """Set controls by name (``workers``, ``batch_size``, ``budget_s``, ``seed`` or an
        option); returns the panel. A text box takes any value as its text (a value it cannot
        read is said under the controls and refused by Run). Raises ValueError for an unknown
        name or a value another control cannot take."""
        controls = self._controls()
        for name, value in values.items():
            w = controls.get(name)
            if w is None:
                raise ValueError(f"no control {name!r}; controls: {sorted(controls)}")
            if name == "batch_size" and value not in w.options:
                w.options = sorted(set(w.options) | {int(value)})
            if name == "workers" and self.scheme in SINGLE_PROCESS and value != 1:
                raise ValueError(f"{self.scheme} runs one process: workers must be 1, got {value!r}")
            if name == "workers" and value > w.max:
                w.max = int(value)
            if name in self._text_specs:
                value = "" if value is None else value if isinstance(value, str) else \
                    self._text_specs[name].to_text(value)
            try:
                w.value = value
            except Exception as e:  # noqa: BLE001 - traitlets.TraitError and friends
                raise ValueError(f"{name}: {e}") from None
        return self

    def _controls(self) -> dict[str, W.Widget]:
        """Every control of the panel by the name :meth:`set` and :meth:`settings` use (the
        network row's only with ``network_controls``)."""
        common = {"workers": self.workers, "batch_size": self.batch_size, "budget_s": self.budget_s,
                  "seed": self.seed}
        if self._network_controls:
            common.update(network=self.network, afterstate=self.afterstate, augment_symmetry=self.augment_symmetry)
        else:
            common["preset"] = self.preset
        return {**common, **self.options}

    def _config(self, s: dict[str, Any]) -> TrainConfig:
        base = self.config
        if self._network_controls:
            from ..experiments.learning import learning_config

            base = learning_config(s["network"], s["afterstate"], s["augment_symmetry"])
        elif s.get("preset", GIVEN) != GIVEN:
            base = panel_config(s["preset"])
        return base.replace(batch_size=s["batch_size"], seed=s["seed"], max_seconds=s["budget_s"],
                            total_env_steps=None)

    # ------------------------------------------------------------------ running
    @property
    def running(self) -> bool:
        """Whether a run of this panel is going on."""
        return not self._done.is_set()

    def run(self, blocking: bool = False, timeout: float | None = None, **values: Any) -> RunResult | None:
        """Start a run, as a click on Run does (after :meth:`set` of ``values``).

        Parameters
        ----------
        blocking : bool
            Wait for the run to end and return its result (for scripts and headless
            notebook runs; an interactive Stop click cannot reach a busy kernel, but
            interrupting the kernel stops the run cleanly).
        timeout : float, optional
            With ``blocking``: seconds to wait at most.

        Returns
        -------
        RunResult or None
            With ``blocking``, the run (None if it could not start); else None.
        """
        if values:
            try:
                self.set(**values)
            except ValueError as e:
                self._fail(f"ValueError: {e}")
                return None
        started = self._start()
        if blocking and started:
            self.wait(timeout)
            return self.result
        return None

    def stop(self) -> None:
        """Ask the run to end (at its next report, within about a second); keeps its data. A panel whose Run
        was refused because another panel's run goes on stops that run."""
        if self.running:
            self._stop.set()
            self.stop_button.disabled = True
            self._announce("stopping: the run ends at its next report, its workers finish and it keeps what "
                           "was gathered")
        elif self._blocker is not None:
            blocker, self._blocker = self._blocker, None
            self.stop_button.disabled, self.stop_button.tooltip = True, _STOP_TIP
            blocker.stop()
            self._set_status(f"stopping the run of the other panel ({blocker.scheme})&hellip;", colour="#a60")

            def said_when_ended() -> None:
                blocker.wait()
                if not self.running:
                    self._set_status(f"the other panel's run ({blocker.scheme}) has ended: click Run",
                                     colour="#06c")

            threading.Thread(target=said_when_ended, name="dqnlab-panel-unblock", daemon=True).start()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the run to end; returns whether it has. Ctrl-C stops the run, then waits."""
        try:
            return self._done.wait(timeout)
        except KeyboardInterrupt:
            self.stop()
            self._done.wait()
            return True

    def _on_run(self, _button: Any = None) -> None:
        """Run button handler (never raises: problems are shown in the panel)."""
        try:
            self._start()
        except Exception as e:  # noqa: BLE001 - the panel is where errors go
            self._fail(f"{type(e).__name__}: {e}")

    def _on_stop(self, _button: Any = None) -> None:
        """Stop button handler."""
        try:
            self.stop()
        except Exception as e:  # noqa: BLE001
            self._fail(f"{type(e).__name__}: {e}")

    def _start(self) -> bool:
        global _ACTIVE
        if self.running:
            self._set_status("a run is already going on: Stop it first", colour="#a60", keep=True)
            return False
        try:
            s = self.settings()
            config = self._config(s)
        except ValueError as e:
            self._fail(f"ValueError: {e}")
            self._refused = True
            return False
        workers = s.pop("workers")
        for key in ("batch_size", "budget_s", "seed", "preset", "network", "afterstate", "augment_symmetry"):
            s.pop(key, None)  # in the config; the rest are the scheme's options
        with _ACTIVE_LOCK:
            if _ACTIVE is not None and _ACTIVE.running:
                self._fail(f"another panel ({_ACTIVE.scheme}) is running: click Stop here to end its run, then "
                           "Run (two runs at once would share the CPU and measure each other)")
                self._blocker = _ACTIVE
                self.stop_button.disabled = False
                self.stop_button.tooltip = f"End the run of the other panel ({_ACTIVE.scheme})."
                return False
            _ACTIVE = self
            self._blocker = None
            self._stop.clear()
            self._done.clear()
        self.error = None
        self._settings = {"workers": workers, **s}
        self._last_draw = -math.inf
        self._report = None
        self._clear_figure()
        self._enable(False)
        self._announce(f"starting {self.scheme} x{workers}")
        self._thread = threading.Thread(target=self._work, args=(config, workers, s),
                                        name=f"dqnlab-panel-{self.scheme}", daemon=True)
        self._thread.start()
        threading.Thread(target=self._tick, name="dqnlab-panel-status", daemon=True).start()
        return True

    def _prepare(self, config: TrainConfig, workers: int, options: dict[str, Any]) -> float:
        """What a run needs before its budget starts: the native core compiled (or loaded from its
        cache) and joblib's worker processes started, each step said in the status line while it
        lasts. Returns the seconds it took."""
        from ..bench.timing import warm_up
        from ..runtime import learner
        from ..runtime.native import native_reason

        t0 = time.perf_counter()
        if not self.baselines:
            self._announce("measuring the reference players for the score plot (random play, the corner rule)")
            from .baselines import reference_scores

            scores = reference_scores()
            with self._draw_lock:
                self.baselines = scores
                self._live.set_baselines(scores)
        pool = workers if workers > 1 and not options.get("threads") else 0
        native = native_reason(config) is None and not learner.warmed()
        if pool or native:
            warm_up(pool, native=native, report=self._announce)
        return time.perf_counter() - t0

    def _work(self, config: TrainConfig, workers: int, options: dict[str, Any]) -> None:
        from ..schemes import train

        result: RunResult | None = None
        self._prep_s = 0.0
        try:
            self._prep_s = self._prepare(config, workers, options)
            self._announce(f"starting {self.scheme} x{workers}: setting up the run, whose budget of "
                           f"{config.max_seconds:g} s counts from its own start; waiting for its first report")
            result = train(self.scheme, config, workers=workers, progress=False, callback=self._callback, **options)
        except Exception as e:  # noqa: BLE001 - shown in the panel
            result = getattr(e, "partial", None)
            self.error = f"{type(e).__name__}: {e}"
            self._log_traceback()
        finally:
            with self._tick_lock:  # no tick writes a progress line over the summary below
                self._phase, self._report = None, None
            try:
                if result is not None:
                    self.result = result
                    self.results.append(result)
                    self._redraw(result, force=True)
                if self.error:
                    self._fail(self.error, kept=result)
                elif result is not None and result.env_steps == 0:
                    self._set_status(f"<b>{result.status}, with nothing done</b>: the budget of "
                                     f"{config.max_seconds:g} s ended before the first env step (the run's "
                                     f"start-up took it); give it a larger budget", colour="#a60")
                elif result is not None:
                    self._set_status(summary_text(result, self._settings, self.labels, self._prep_s), colour="#070")
            finally:
                self._enable(True)
                self._done.set()
                for hook in list(self._on_end):
                    try:
                        hook(self)
                    except Exception as e:  # noqa: BLE001 - a hook must not hide the run's result
                        self._set_status(f"after the run: {html.escape(f'{type(e).__name__}: {e}')}",
                                         colour="#a00", keep=True)

    def _announce(self, text: str) -> None:
        """Say what the run is doing now (its start-up steps, stopping); the status line counts the
        seconds while it lasts (:meth:`_tick`), until the run's first report or its end."""
        self._phase = (text, _clock())
        self._show_phase()

    def _show_phase(self) -> None:
        with self._tick_lock:
            phase = self._phase
            if phase is not None:
                self._set_status(f"{html.escape(phase[0])}&hellip; {_clock() - phase[1]:.0f} s", colour="#06c")

    def _tick(self) -> None:
        """Twice a second while the run goes on: the seconds of the step it is in (see :meth:`_announce`), then
        the run's progress with its seconds counted on between reports (a slow report never freezes the line)."""
        while not self._done.wait(0.5):
            if self._phase is not None:
                self._show_phase()
            else:
                self._show_progress()

    def _show_progress(self) -> None:
        """The progress line of the last report, its seconds counted on to now (and, when no report has come
        for :data:`_QUIET_S` seconds, how long ago the last one came)."""
        with self._tick_lock:
            report = self._report
            if report is None or self._phase is not None:
                return
            snapshot, at = report
            since = max(0.0, _clock() - at)
            self._set_status(progress_text(self.scheme, snapshot, since_report_s=since, quiet_s=_QUIET_S),
                             colour="#06c")

    def _callback(self, snapshot: RunResult) -> bool:
        """The run's callback (training thread, about once a second): redraw when
        ``redraw_every_s`` seconds have passed since the last draw started (a report up to
        :data:`_REPORT_SLACK_S` early counts), or five times a draw's cost if that is longer;
        True once Stop was clicked."""
        if self._stop.is_set():
            return True
        self._phase = None  # the run reports: its progress line takes over from the start-up steps
        self._report = (snapshot, _clock())
        wait = max(self.redraw_every_s - _REPORT_SLACK_S, 5 * self._draw_cost)
        if _clock() - self._last_draw >= wait:
            self._redraw(snapshot)
            self._show_progress()
        return self._stop.is_set()

    # ------------------------------------------------------------------ drawing
    def _redraw(self, run: RunResult | None, force: bool = False) -> None:
        """Draw ``run`` into :attr:`figure` and show it (nothing for None). A draw already going
        on makes this one a no-op, unless ``force``: then it waits for it."""
        if run is None or not self._draw_lock.acquire(blocking=force):
            return
        try:
            t0 = _clock()
            buf = io.BytesIO()
            self._live.update(run, per_worker=self.per_worker.value).savefig(buf, format="png")
            self.figure.value = buf.getvalue()
            self.figure.layout.display = None
            self._shown = run
            self._last_draw = t0
            self._draw_cost = _clock() - t0
        except Exception as e:  # noqa: BLE001 - a drawing problem must not kill the run
            self._set_status(f"could not draw: {html.escape(f'{type(e).__name__}: {e}')}", colour="#a00",
                             keep=True)
        finally:
            self._draw_lock.release()

    def _clear_figure(self) -> None:
        """Hide the figure: the run it shows is not the one the panel is about now."""
        with self._draw_lock:
            self._shown = None
            self.figure.layout.display = "none"

    def _enable(self, idle: bool) -> None:
        self.run_button.disabled = not idle
        self.stop_button.disabled = idle
        for w in self._controls().values():
            w.disabled = not idle

    # ------------------------------------------------------------------ status text
    def _set_status(self, text: str, colour: str = "#333", keep: bool = False) -> None:
        if keep and self.status.value:
            text = f"{self.status.value}<br>{text}"
        self.status.value = f'<span style="color:{colour}">{text}</span>'

    def _fail(self, message: str, kept: RunResult | None = None) -> None:
        """Show ``message`` (kept as :attr:`error`) in the controls' words; with nothing ``kept``
        of the failed run, hide the figure rather than leave an earlier run's in view."""
        self.error = message
        extra = ""
        if kept is not None:
            extra = (f"<br>kept what was gathered: {kept.env_steps:,} env steps, {kept.updates:,} updates, "
                     f"{len(kept.episodes):,} games (<code>panel.result</code>)")
        else:
            self._clear_figure()
        shown = message.removeprefix("ValueError: ")  # a setting refused: its line says it all
        self._set_status(f"<b>error</b>: {html.escape(self._in_labels(shown))}{extra}", colour="#a00")

    def _in_labels(self, message: str) -> str:
        """``message`` in the words of the panel's controls (:func:`~dqnlab.ui.status.in_labels`)."""
        return in_labels(message, self.labels)

    def _log_traceback(self) -> None:
        self.traceback = traceback.format_exc()
