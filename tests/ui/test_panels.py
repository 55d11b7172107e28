"""The control panels, driven through their callbacks (ipywidgets would swallow their errors)."""

import dataclasses
import html
import math
import time
import types
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pytest

ipywidgets = pytest.importorskip("ipywidgets")

import dqnlab
from dqnlab.experiments.budgets import SMOKE, explore_config
from dqnlab.options import SchemeOptions, option, unless, when
from dqnlab.plots import LiveFigure
from dqnlab.schemes import serial
from dqnlab.ui import panels, run_panel


@dataclass(frozen=True)
class FakeOptions(SchemeOptions):
    """Options of the scheme for tests."""

    sync: str = option("periodic", "Sync schedule.", choices=("none", "periodic", "final"))
    sync_every: int = option(100, "Updates between syncs.", unit="updates", low=1, applies=unless("sync", "none"))
    final_fraction: float = option(0.25, "Last fraction of the budget in which final syncs.", low=0, high=1,
                                   low_open=True, applies=when("sync", "final"))
    lock: bool = option(True, "Use a lock.")
    ratio: float | None = option(None, "A number or None (default).", low=0)


def fake_run(config, options, *, workers=1, progress=True, callback=None, _fault=None):
    """A scheme for tests: serial training that records the options it was given."""
    if _fault:
        err = RuntimeError("worker 1 failed")
        err.partial = serial.run(config, serial.Options(), progress=False)
        raise err
    run = serial.run(config, serial.Options(), progress=progress, callback=callback)
    run.workers = workers
    run.options = options.to_dict()
    return run


def fake_module(run=fake_run):
    """A scheme module (as :data:`dqnlab.SCHEMES` holds them) of ``FakeOptions`` and ``run``."""
    return types.SimpleNamespace(__doc__="``fake``: a scheme for tests.", Options=FakeOptions, run=run)


@pytest.fixture
def fake_scheme(monkeypatch):
    monkeypatch.setitem(dqnlab.SCHEMES, "fake", fake_module())
    return "fake"


@pytest.fixture
def config():
    return explore_config(SMOKE, max_seconds=1.0, hidden=(32,), n_envs=8, learning_starts=200)


def _finish(panel, timeout=60):
    assert panel.wait(timeout), "the run did not end"
    return panel.result


def test_smoke_flag_and_budget(monkeypatch):
    monkeypatch.setenv("DQNLAB_SMOKE", "1")
    assert panels.smoke_mode() and panels.budget(60, 2) == 2
    assert explore_config().max_seconds == 2.0
    monkeypatch.setenv("DQNLAB_SMOKE", "0")
    assert not panels.smoke_mode() and panels.budget(60, 2) == 60
    monkeypatch.delenv("DQNLAB_SMOKE")
    assert not panels.smoke_mode()


def test_options_come_from_the_schemes_declaration(fake_scheme):
    opts = panels.scheme_options(fake_scheme)
    assert list(opts) == ["sync", "sync_every", "final_fraction", "lock", "ratio"]  # no config/callback/_fault
    assert opts["sync"]["kind"] == "choice" and opts["sync"]["choices"] == ["none", "periodic", "final"]
    assert (opts["sync_every"]["kind"], opts["final_fraction"]["kind"], opts["lock"]["kind"]) == ("int", "float",
                                                                                                  "bool")
    assert opts["sync_every"]["doc"] == "Updates between syncs."
    assert opts["ratio"]["kind"] == "optional float" and opts["ratio"]["default"] is None
    assert panels.scheme_options("serial") == {}
    panel = panels.control_panel(fake_scheme, explore_config(SMOKE))
    w = panel.options["sync_every"]  # the declaration's doc is the tooltip, its name and unit the label
    assert (w.tooltip, panel.labels["sync_every"]) == ("Updates between syncs.", "sync every (updates)")
    actors = panels.scheme_options("actors")
    assert actors["actor_epsilon"]["choices"] == ["schedule", "apex"] and actors["learner_threads"]["kind"] == \
        "optional int"
    for name in dqnlab.SCHEMES:  # every real scheme builds a panel
        panels.control_panel(name, explore_config(SMOKE))


def test_panel_shows_only_the_controls_that_apply(fake_scheme, config):
    panel = panels.control_panel(fake_scheme, config, sync="none")
    shown = {n for n in panel.options if panel._applies(n)}
    assert shown == {"sync", "lock", "ratio"}  # sync_every does not apply without syncing
    panel.options["sync"].value = "final"
    shown = {n for n in panel.options if panel._applies(n)}
    assert shown == {"sync", "sync_every", "final_fraction", "lock", "ratio"}
    assert "sync_every" in panel.settings() and "final_fraction" in panel.settings()
    serial_panel = panels.control_panel("serial", config)
    assert serial_panel._shown_as["workers"].layout.display == "none" and serial_panel.options == {}
    with pytest.raises(ValueError, match="workers must be 1"):
        serial_panel.set(workers=2)


def test_unknown_scheme_or_option_is_an_error_at_creation(config):
    with pytest.raises(ValueError, match="scheme must be one of"):
        panels.control_panel("nope")
    with pytest.raises(ValueError, match="does not take"):
        panels.control_panel("serial", config, sync="periodic")
    with pytest.raises(ValueError, match="no control"):
        panels.control_panel("serial", config).set(colour="red")


def test_run_click_trains_with_the_panels_settings(fake_scheme, config):
    panel = panels.control_panel(fake_scheme, config)
    panel.set(workers=3, batch_size=32, budget_s=1.0, seed=4, sync="final", sync_every=7, final_fraction=0.5)
    panel.options["lock"].value = False
    panel.run_button.click()
    assert panel.running and panel.run_button.disabled and not panel.stop_button.disabled
    run = _finish(panel)
    assert panel.error is None, panel.error
    assert run.status == "completed" and run.env_steps > 0
    assert run.workers == 3 and run.config.batch_size == 32 and run.config.seed == 4
    assert run.config.max_seconds == 1.0 and run.config.total_env_steps is None
    assert run.options == {"sync": "final", "sync_every": 7, "final_fraction": 0.5, "lock": False, "ratio": None}
    assert not panel.run_button.disabled and panel.stop_button.disabled
    assert panel.figure.value[:4] == b"\x89PNG"  # the live figure was drawn
    assert "completed" in panel.status.value and "env steps/s" in panel.status.value
    assert panel.results == [run]


@pytest.mark.skipif("independent" not in dqnlab.SCHEMES, reason="independent scheme not available")
def test_run_click_with_a_real_parallel_scheme(config):
    panel = panels.control_panel("independent", config.replace(max_seconds=2.0))
    panel.set(workers=2, batch_size=32, sync="periodic", sync_every=10)
    panel.run_button.click()
    run = _finish(panel, timeout=120)
    assert panel.error is None, panel.error
    assert run.workers == 2 and run.config.batch_size == 32
    assert run.options["sync"] == "periodic" and run.options["sync_every"] == 10


def test_stop_ends_the_run_early_and_keeps_what_was_gathered(config):
    panel = panels.control_panel("serial", config, budget_s=120)
    t0 = time.perf_counter()
    panel.run_button.click()
    deadline = time.perf_counter() + 30
    while "running" not in panel.status.value and time.perf_counter() < deadline:
        time.sleep(0.1)  # until the first report (the run has gathered data)
    time.sleep(0.5)
    panel.stop_button.click()
    run = _finish(panel, timeout=30)
    assert time.perf_counter() - t0 < 60  # far from the 120 s budget
    assert run.status == "stopped" and panel.error is None
    assert run.env_steps > 0 and len(run.history) > 1
    assert "stopped" in panel.status.value
    assert not panel.run_button.disabled


def test_a_second_run_while_one_goes_on_is_refused_in_the_panel(config):
    panel = panels.control_panel("serial", config, budget_s=30)
    panel.run_button.click()
    try:
        panel._on_run()  # e.g. run() from code while the button is disabled
        assert "already" in panel.status.value
        assert panels.control_panel("serial", config) is panel  # the cell run again: the running panel
        other = run_panel.ControlPanel("serial", config)
        other.run_button.click()
        assert not other.running and "another panel" in (other.error or "")
    finally:
        panel.stop()
        _finish(panel)


def test_bad_combinations_are_reported_in_the_panel_not_raised(fake_scheme, config):
    panel = panels.control_panel(fake_scheme, config, sync="periodic")
    panel.set(sync_every=0)  # the scheme rejects it when the run starts (in the thread)
    panel.run_button.click()
    _finish(panel)
    assert panel.error.startswith("ValueError: sync_every must be")
    assert "error" in panel.status.value and not panel.run_button.disabled

    small = panels.control_panel("serial", config.replace(buffer_size=100))
    small.set(batch_size=256)  # TrainConfig rejects it before the run starts
    small.run_button.click()
    assert not small.running and "batch_size" in small.error and "error" in small.status.value

    if "sharded" in dqnlab.SCHEMES:
        sharded = panels.control_panel("sharded", config)
        sharded.set(workers=3, batch_size=2)  # one transition per shard at least
        sharded.run_button.click()
        _finish(sharded)
        assert "batch_size >= workers" in sharded.error


def test_optional_numbers_are_parsed_and_bad_text_is_reported(fake_scheme, config):
    panel = panels.control_panel(fake_scheme, config, ratio=2.5)
    assert panel.settings()["ratio"] == 2.5
    panel.options["ratio"].value = ""
    assert panel.settings()["ratio"] is None
    panel.set(ratio=0.5)
    run = panel.run(blocking=True)
    assert run.options["ratio"] == 0.5
    panel.options["ratio"].value = "lots"
    assert panel.run(blocking=True) is None
    assert panel.error == "ValueError: ratio must be a number >= 0 or empty (the default), got 'lots'"
    assert "ratio must be" in repr(panel)


@pytest.mark.parametrize("name, text, line", [
    ("budget_s", "-5", "budget (s) must be a number > 0, got '-5'"),
    ("budget_s", "abc", "budget (s) must be a number > 0, got 'abc'"),
    ("seed", "-7", "seed must be an integer >= 0, got '-7'"),
    ("seed", "1e3", "seed must be an integer >= 0, got '1e3'"),
    ("sync_every", "1e3", "sync every (updates) must be an integer >= 1, got '1e3'"),
    ("sync_every", "0", "sync every (updates) must be an integer >= 1, got '0'"),
    ("final_fraction", "2", "final fraction must be a number in (0, 1], got '2'"),
])
def test_every_text_box_refuses_what_it_cannot_take_at_once_and_at_run(fake_scheme, config, name, text, line):
    panel = panels.control_panel(fake_scheme, config, sync="final")
    panel.set(**{name: text})
    assert panel._controls()[name].value == text  # kept as typed, not bent to fit
    assert panel.check.layout.display is None and html.escape(line) in panel.check.value  # said at once
    assert panel.run(blocking=True) is None and not panel.running  # and refused by Run
    assert html.escape(line) in panel.status.value and panel.error.startswith("ValueError: ")
    assert "ValueError" not in panel.status.value  # the line says it all, in the controls' words
    panel.set(**{name: {"budget_s": "1", "seed": "3", "sync_every": "1000", "final_fraction": "0.5"}[name]})
    assert panel.check.layout.display == "none" and panel.settings()  # fixed: the line goes
    assert "error" not in panel.status.value and "click Run" in panel.status.value  # and so does the refusal


def _shown(panel, name):
    return panel._shown_as[name] if name != "per_worker" else next(
        b for b in panel.widget.children[3].children if panel.per_worker in getattr(b, "children", ()))


def test_every_control_has_its_declarations_doc_as_tooltip(config):
    from dqnlab.config import TrainConfig
    from dqnlab.options import specs

    docs = specs(TrainConfig)
    panel = panels.learning_panel("actors", budget_s=1)
    assert panel.seed.tooltip == docs["seed"].tooltip and panel.batch_size.tooltip == docs["batch_size"].tooltip
    assert panel.network.tooltip.startswith(docs["network"].tooltip)
    assert panel.afterstate.tooltip == docs["afterstate"].tooltip and panel.afterstate.description == ""
    for name, w in {**panel._controls(), "per_worker": panel.per_worker}.items():
        assert w.tooltip and w.tooltip != getattr(w, "description", None), name  # never the label again, never null
        label = next(c for c in _shown(panel, name).children if isinstance(c, ipywidgets.HTML))  # the label beside
        assert w.description == "" and f'title="{html.escape(w.tooltip)}"' in label.value, name  # carries it too
    for name, spec in panels.scheme_options("actors").items():
        assert panel.options[name].tooltip == spec["spec"].tooltip  # the doc, in plain words where it names code


def test_switching_scheme_keeps_the_common_settings(config):
    sp = panels.scheme_panel(["serial", "independent", "shared"], config)
    sp.panel.set(budget_s=7, seed=3, batch_size=64)
    sp.scheme.value = "independent"
    assert {k: sp.panel.settings()[k] for k in ("budget_s", "seed", "batch_size")} == \
        {"budget_s": 7.0, "seed": 3, "batch_size": 64}
    sp.panel.set(workers=3)
    sp.scheme.value = "shared"
    assert sp.panel.settings()["workers"] == 3 and sp.panel.settings()["budget_s"] == 7.0


def test_a_run_that_did_no_env_step_says_so(fake_scheme, config, monkeypatch):
    import functools

    def nothing(config, options, *, workers=1, progress=True, callback=None, _fault=None):
        run = fake_run(config.replace(total_env_steps=None), options, workers=workers, progress=False)
        return dataclasses.replace(run, env_steps=0, updates=0, episodes=run.episodes.iloc[:0])

    monkeypatch.setitem(dqnlab.SCHEMES, "fake", fake_module(functools.partial(nothing)))
    panel = panels.control_panel("fake", config)
    run = panel.run(blocking=True)
    assert run.env_steps == 0 and "with nothing done" in panel.status.value and "#070" not in panel.status.value


def test_start_up_is_said_in_the_status_line_while_it_lasts(config, monkeypatch):
    from dqnlab.bench import timing

    seen = []
    panel = panels.control_panel("independent", config, workers=2, budget_s=1)
    real = panel._set_status
    monkeypatch.setattr(panel, "_set_status", lambda text, **kw: (seen.append(text), real(text, **kw)))
    monkeypatch.setattr(timing, "_import_dqnlab", lambda: time.sleep(1.2) or 1)  # a slow worker start
    run = panel.run(blocking=True)
    assert run.status == "completed"
    starting = [t for t in seen if "starting 2 worker processes" in t]
    assert len(starting) >= 2 and starting[-1] != starting[0]  # counted while it lasts (twice a second)
    assert any("worker 2 of 2 ready" in t for t in seen) and any("setting up the run" in t for t in seen)
    assert "before the budget" in panel.status.value  # the summary says where that time went


def test_a_failed_run_keeps_its_partial_result(fake_scheme, config, monkeypatch):
    import functools

    monkeypatch.setitem(dqnlab.SCHEMES, "fake", fake_module(functools.partial(fake_run, _fault=True)))
    panel = panels.control_panel("fake", config)
    panel.run_button.click()
    _finish(panel)
    assert panel.error == "RuntimeError: worker 1 failed"
    assert panel.result is not None and panel.result.env_steps > 0
    assert "kept what was gathered" in panel.status.value


def test_blocking_run_returns_the_result(config):
    panel = panels.control_panel("serial", config)
    run = panel.run(blocking=True, batch_size=16, budget_s=1.0)
    assert run is panel.result and run.config.batch_size == 16 and run.status == "completed"
    assert panel.run(blocking=True, workers=2) is None and "workers must be 1" in panel.error


def test_scheme_panel_switches_schemes_and_compares_runs(fake_scheme, config):
    sp = panels.scheme_panel(["serial", fake_scheme], config)
    assert sp.panel.scheme == "serial"
    sp.compare_button.click()
    assert "no run yet" in sp.message.value
    sp.scheme.value = fake_scheme
    assert sp.panel.scheme == fake_scheme and sp._holder.children == (sp.panel.widget,)
    sp.panel.run(blocking=True)
    sp.compare_button.click()
    assert sp.comparison.value[:4] == b"\x89PNG" and "compared 1" in sp.message.value
    with pytest.raises(ValueError):
        panels.scheme_panel(["nope"])


def test_interrupting_a_blocking_run_stops_it_cleanly(config, python_sigint):
    import os
    import signal
    import threading

    panel = panels.control_panel("serial", config, budget_s=120)
    timer = threading.Timer(2.0, os.kill, (os.getpid(), signal.SIGINT))  # "interrupt the kernel"
    timer.start()
    t0 = time.perf_counter()
    run = panel.run(blocking=True)
    timer.join()
    assert time.perf_counter() - t0 < 60
    assert run.status == "stopped" and run.env_steps > 0 and not panel.running


def test_learning_panel_trains_the_network_family_chosen(monkeypatch):
    monkeypatch.setenv("DQNLAB_SMOKE", "1")
    panel = panels.learning_panel("shared", "ntuple", workers=1, budget_s=1.0)
    assert panel.options["lock"].value is False  # Hogwild by default, as Jaskowski 2018
    assert panel.settings()["network"] == "ntuple" and panel._shown_as["augment_symmetry"].layout.display == "none"
    panel.set(network="mlp", afterstate=True, augment_symmetry=True)
    s = panel.settings()
    assert (s["network"], s["afterstate"], s["augment_symmetry"]) == ("mlp", True, True)
    config = panel._config(s)
    assert (config.network, config.afterstate, config.augment_symmetry) == ("mlp", True, True)
    assert config.max_seconds == 1.0 and config.total_env_steps is None
    panel.set(network="cnn", afterstate=False)
    run = panel.run(blocking=True)
    assert panel.error is None and run.config.network == "cnn" and not run.config.afterstate
    assert run.env_steps > 0
    with pytest.raises(ValueError, match="network"):
        panels.learning_panel("serial", "transformer")


# ------------------------------------------------------------------------------ panel polish
def synthetic_run(workers=1, loss=True, warm_up_s=5, seconds=20):
    """A run of ``seconds`` reports, one a second: ``warm_up_s`` of acting only at 10,000 env
    steps/s, then 1,000 env steps/s and 100 updates/s (the TD loss falling from 100 to 1), and a
    game a second per worker from the first second."""
    t = np.arange(seconds + 1, dtype=float)
    rate = np.where(t[1:] <= warm_up_s, 10_000, 1_000)
    history = pd.DataFrame({"wall_time_s": t, "env_steps": np.concatenate([[0], np.cumsum(rate)]),
                            "updates": np.maximum(t - warm_up_s, 0) * 100})
    if loss:
        history["loss"] = np.where(t > warm_up_s, np.geomspace(100, 1, len(t)), np.nan)
    episodes = pd.DataFrame([{"worker": w, "episode": int(s), "env_steps": int(s) * 100, "wall_time_s": s,
                              "score": 1_000 * (s + w), "max_tile": 128, "moves": 100, "epsilon": 0.1,
                              "loss": np.nan} for s in t[1:] for w in range(workers)])
    return dqnlab.RunResult(scheme="serial", config=explore_config(SMOKE), workers=workers, episodes=episodes,
                            env_steps=int(history["env_steps"].iloc[-1]), updates=int(history["updates"].iloc[-1]),
                            wall_time_s=float(t[-1]), time_split={"acting": 1.0, "learning": 1.0}, weights={},
                            history=history)


def test_live_figure_scales_speed_to_the_steady_rate_and_marks_the_warm_up():
    live = LiveFigure()
    live.update(synthetic_run())
    top = live.ax_speed.get_ylim()[1]
    assert 1_000 <= top < 2_000  # the steady 1,000 env steps/s, not the 10,000 of the warm-up
    (band,) = live.ax_speed.patches  # 0 s to the last report without updates, its rate (off the scale) said below
    assert band.get_x() == 0 and band.get_width() == 5
    assert live.ax_speed.get_xlabel() == "wall time (s); grey: warm-up"
    assert "warm-up peak 10,000/s" in next(t.get_text() for t in live.ax_speed.texts)  # said inside, at the top
    assert 100 <= live.ax_updates.get_ylim()[1] < 200
    assert live.ax_speed.get_legend() is None  # the axis labels say which line is which: nothing covers the lines
    assert live.ax_speed.get_ylabel() == "env steps / s (solid)" and live.ax_updates.get_ylabel() == "updates / s (dashed)"
    assert "3,250 env steps/s, 75.0 updates/s over the run" in live.ax_speed.get_title()  # it has ended
    live.update(dataclasses.replace(synthetic_run(), status="running"))  # a snapshot: the rate now
    assert "1,000 env steps/s, 100.0 updates/s now" in live.ax_speed.get_title()


def test_live_figure_of_an_empty_run_shows_no_ticks_and_no_scale_of_the_run_before():
    live = LiveFigure()
    live.update(synthetic_run(loss=True))
    live.figure.canvas.draw()
    loss_ticks = [t.get_text() for t in live.ax_loss.get_yticklabels(which="both") if t.get_text()]
    assert loss_ticks and all("e-0" not in t for t in loss_ticks)  # one way of writing: 0.6, 1, 2 (not 6e-01)
    empty = synthetic_run()
    empty = dataclasses.replace(empty, history=empty.history.iloc[:1], episodes=empty.episodes.iloc[:0],
                                env_steps=0, updates=0, wall_time_s=3.0)
    live.update(empty)
    live.figure.canvas.draw()
    for ax in (live.ax_speed, live.ax_loss, live.ax_score):
        assert not [t.get_text() for t in ax.get_yticklabels(which="both") if t.get_text()]  # no "800m", "-40m"
    assert live.ax_score.get_ylim() == (0.0, 1.0) and live.ax_speed.get_ylim() == (0.0, 1.0)
    assert live.ax_score.get_xlim() == (0.0, 3.0)  # to the run's clock, as the status line says it
    live.update(synthetic_run())  # games again: the score axis scales to them, not stuck at 0..1
    assert live.ax_score.get_ylim()[1] > 10


def test_live_figure_draws_the_td_loss_when_the_history_has_it():
    live = LiveFigure()
    live.update(synthetic_run(loss=True))
    (line,) = live.ax_loss.lines
    xs, ys = line.get_data()
    assert len(xs) == 15 and xs[0] == 6 and np.isfinite(ys).all()  # NaN during the warm-up is left out
    assert live.ax_loss.get_yscale() == "log" and live.ax_loss.get_title() == "TD loss (log scale): 1"
    live.update(synthetic_run(loss=False))  # a history without the column: said, not an error
    assert len(line.get_xdata()) == 0
    assert [t.get_text() for t in live.ax_loss.texts] == ["not recorded in this run"]
    live.update(synthetic_run(loss=True, warm_up_s=20))
    assert [t.get_text() for t in live.ax_loss.texts] == ["no update yet"]


def test_live_figure_redraws_the_same_figure_and_lines():
    live = LiveFigure()
    fig = live.update(synthetic_run(workers=2))
    speed, loss = live.ax_speed.lines[0], live.ax_loss.lines[0]
    assert [line.get_label() for line in live.ax_score.lines] == ["serial x2"]
    assert live.update(synthetic_run(workers=2, seconds=30), per_worker=True) is fig
    assert live.ax_speed.lines[0] is speed and live.ax_loss.lines[0] is loss
    assert live.ax_speed.get_xlim() == (0, 30)
    assert [line.get_label() for line in live.ax_score.lines] == ["serial x2 worker 0", "serial x2 worker 1"]
    assert live.ax_score.get_legend() is not None
    live.update(synthetic_run(workers=2), per_worker=False)
    assert len(live.ax_score.lines) == 1 and live.ax_score.get_legend() is None
    assert len(live.ax_speed.patches) == 1  # the warm-up band replaced, not piled up
    live.update(synthetic_run(warm_up_s=0))  # learning from the first report: no band
    assert not live.ax_speed.patches and live.ax_speed.get_xlabel() == "wall time (s)"


def test_the_figure_redraws_every_two_seconds_when_reports_come_about_a_second_apart(config, monkeypatch):
    panel = panels.control_panel("serial", config)
    run = panel.run(blocking=True)
    now = [1_000.0]
    monkeypatch.setattr(run_panel, "_clock", lambda: now[0])
    panel._last_draw = -math.inf
    draws = []
    for i, jitter in enumerate([0.0, 0.1, -0.1, 0.2, -0.2, 0.05, 0.15, -0.15, 0.0, 0.1, -0.05]):
        now[0] = 1_000.0 + i + jitter  # the run's reports: about a second apart
        before = panel._last_draw
        assert panel._callback(run) is False
        if panel._last_draw != before:
            draws.append(now[0])
    assert len(draws) == 6 and np.allclose(np.diff(draws), 2.0, atol=0.4)


def test_nothing_is_shown_under_the_buttons_until_a_run_draws(fake_scheme, config):
    panel = panels.control_panel("serial", config)
    assert panel.figure.layout.display == "none" and panel.figure.value == b""  # no broken-image icon
    panel.run(blocking=True)
    assert panel.figure.layout.display is None and panel.figure.value[:4] == b"\x89PNG"
    sp = panels.scheme_panel(["serial", fake_scheme], config)
    assert sp.comparison.layout.display == "none"
    sp.panel.run(blocking=True)
    sp.compare()
    assert sp.comparison.layout.display is None and sp.comparison.value[:4] == b"\x89PNG"


def test_a_failed_run_does_not_leave_the_figure_of_the_run_before(fake_scheme, config):
    panel = panels.control_panel(fake_scheme, config, sync="periodic")
    panel.run(blocking=True)
    assert panel.figure.layout.display is None
    panel.set(sync_every=0)  # the scheme refuses it in the training thread: nothing gathered
    panel.run(blocking=True)
    assert panel.error and panel.figure.layout.display == "none"
    panel.set(sync_every=5)
    panel.run(blocking=True)
    assert panel.error is None and panel.figure.layout.display is None
    panel.options["ratio"].value = "lots"  # refused before the run starts
    panel.run(blocking=True)
    assert panel.error and panel.figure.layout.display == "none"
    panel.per_worker.value = True  # a redraw request now has nothing to show
    assert panel.figure.layout.display == "none"


def test_status_lines_use_the_controls_labels(fake_scheme, config):
    panel = panels.control_panel(fake_scheme, config, sync="final")
    panel.run(blocking=True, sync_every=7, final_fraction=0.5)
    assert "sync every (updates)=7, final fraction=0.5" in panel.status.value  # the summary of the run
    panel.set(sync_every=0)
    panel.run(blocking=True)
    assert panel.error.startswith("ValueError: sync_every must be")  # as raised, for code
    assert "sync every (updates) must be" in panel.status.value and "sync_every" not in panel.status.value
    small = panels.control_panel("serial", config.replace(buffer_size=100))
    small.run(blocking=True, batch_size=256)
    assert "batch_size" in small.error and "batch size must be" in small.status.value
    assert "batch_size" not in small.status.value
    actors = panels.control_panel("actors", config)
    assert actors._in_labels("min_replay_ratio must be in [0, replay_ratio]; TrainConfig.max_seconds > 0; sync") == \
        "min replay ratio must be in [0, replay_ratio]; budget (s) > 0; sync"
