"""The notebooks' panels on the strong learner, and panels that stay live and truthful (issue 61, items 2 and 4).

Driven through the widgets (clicks, values) and waited on with generous bounded loops, never timed."""

import dataclasses
import html
import re
import threading
import time
import types
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pytest

ipywidgets = pytest.importorskip("ipywidgets")

import dqnlab
from dqnlab.experiments.budgets import SMOKE, explore_config
from dqnlab.options import SchemeOptions, option
from dqnlab.plots import LiveFigure
from dqnlab.ui import panels, run_panel


@dataclass(frozen=True)
class SlowOptions(SchemeOptions):
    """Options of the scheme for tests."""

    lock: bool = option(True, "Use a lock.")


def synthetic_run(seconds=20, status="completed", final_burst=False, loss_rows=None):
    """A run of ``seconds`` reports a second apart at 1,000 env steps/s and 100 updates/s, a game a second;
    ``final_burst``: a last row 0.05 s after the one before with 3,000 env steps more (the final totals a
    stopped run records); ``loss_rows``: the rows with a TD loss (default all)."""
    t = np.arange(seconds + 1, dtype=float)
    steps, updates = t * 1_000, t * 100
    if final_burst:
        t, steps, updates = np.append(t, t[-1] + 0.05), np.append(steps, steps[-1] + 3_000), np.append(updates,
                                                                                                     updates[-1])
    loss = np.full(len(t), np.nan)
    loss[slice(None) if loss_rows is None else loss_rows] = 2.0
    history = pd.DataFrame({"wall_time_s": t, "env_steps": steps, "updates": updates, "loss": loss})
    episodes = pd.DataFrame([{"worker": 0, "episode": int(s), "env_steps": int(s) * 100, "wall_time_s": s,
                              "score": 1_000.0 + 100 * s, "max_tile": 128, "moves": 100, "epsilon": 0.0,
                              "loss": np.nan} for s in t[1:]])
    return dqnlab.RunResult(scheme="serial", config=explore_config(SMOKE), workers=1, episodes=episodes,
                            env_steps=int(steps[-1]), updates=int(updates[-1]), wall_time_s=float(t[-1]),
                            time_split={"acting": 1.0, "learning": 1.0}, weights={}, history=history, status=status)


def until_stopped(config, options, *, workers=1, progress=True, callback=None, **_):
    """A scheme for tests that reports every 0.02 s until its callback asks it to stop."""
    run = synthetic_run(status="running")
    for _ in range(20_000):  # at most 400 s
        if callback(run):
            break
        time.sleep(0.02)
    return dataclasses.replace(run, status="stopped", workers=workers)


@pytest.fixture
def slow_scheme(monkeypatch):
    """``slow``: a scheme that runs until stopped."""
    module = types.SimpleNamespace(__doc__="``slow``: runs until stopped.", Options=SlowOptions, run=until_stopped)
    monkeypatch.setitem(dqnlab.SCHEMES, "slow", module)
    try:
        from dqnlab.ui import baselines
    except ImportError:  # before the panels drew the reference players: the tests that need them fail
        return "slow"
    monkeypatch.setattr(baselines, "reference_scores", lambda: {"random": 1_000.0, "corner": 2_500.0})
    return "slow"


@pytest.fixture
def config():
    return explore_config(SMOKE, max_seconds=1.0, hidden=(32,), n_envs=8, learning_starts=200)


def _until(condition, what, timeout=120.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"waited {timeout:g} s for {what}"
        time.sleep(0.02)


def _stop_all(*ps):
    for p in ps:
        p.stop()
    for p in ps:
        assert p.wait(60)


# ------------------------------------------------------------------------------ item 2: the learner shown
def test_panels_train_the_strong_learner_by_default_and_show_the_choice():
    panel = panels.control_panel("serial")
    assert panel.preset.value == "default" and panel.preset.layout.display != "none"
    assert {"default", "ntuple-small", "mlp"} <= set(panel.preset.options)
    assert panel._shown_as["preset"].layout.display is None  # in view, with its label
    config = panel._config(panel.settings())
    assert config.network == "ntuple" and config.optimizer == "tc"  # the strong learner
    panel.set(preset="mlp")
    assert panel._config(panel.settings()).network == "mlp"
    strong = panels.control_panel("sharded", workers=2)  # on threads: every scheme starts on the strong learner
    assert strong.preset.value == "default" and strong._config(strong.settings()).ntuples == "4x6"
    sp = panels.scheme_panel(["serial", "sharded"])
    sp.scheme.value = "sharded"
    assert sp.panel.preset.value == "default"
    sp.scheme.value = "serial"
    sp.panel.set(preset="mlp")
    sp.scheme.value = "sharded"
    assert sp.panel.preset.value == "mlp"  # a learner chosen does
    given = panels.control_panel("serial", explore_config(SMOKE))
    assert given.preset.value == run_panel.GIVEN and given._config(given.settings()).network == "mlp"


def test_the_reference_players_are_measured_once_and_drawn_on_the_score_plot(monkeypatch):
    from dqnlab.ui import baselines

    calls = []
    real = dqnlab.evaluation.evaluate

    def counted(policy, **kw):
        calls.append(policy)
        return real(policy, **kw)

    monkeypatch.setattr(dqnlab.evaluation, "evaluate", counted)
    dqnlab.evaluation.reference_results.cache_clear()
    try:
        scores = baselines.reference_scores(games=24)
        assert baselines.reference_scores(games=24) == scores and sorted(calls) == ["corner", "random"]  # once
    finally:
        dqnlab.evaluation.reference_results.cache_clear()
    assert 300 < scores["random"] < scores["corner"] < 6_000
    live = LiveFigure(baselines=scores)
    live.update(synthetic_run())
    levels = {float(line.get_ydata()[0]) for line in live.ax_score.lines if line.get_label().startswith("_")}
    assert levels == set(scores.values())
    texts = [t.get_text() for t in live.ax_score.texts]
    assert any(t.startswith("random ") for t in texts) and any(t.startswith("corner ") for t in texts)
    low, high = live.ax_score.get_ylim()
    assert low <= scores["random"] and scores["corner"] <= high  # in view


def test_notebook_00s_reference_players_are_the_games_the_panels_draw(monkeypatch):
    from dqnlab import experiments as ex
    from dqnlab.ui import baselines

    monkeypatch.setenv("DQNLAB_SMOKE", "1")
    with ex.use(SMOKE):
        data = ex.game_data()
    table = {name: float(result.scores.mean()) for name, result in data["baselines"].items()}
    assert table == baselines.reference_scores() and data["games"] == ex.game.SMOKE_REFERENCE_GAMES


def test_a_panel_run_draws_the_reference_players(slow_scheme, config):
    panel = run_panel.ControlPanel(slow_scheme, config)
    panel.run_button.click()
    _until(lambda: panel._report is not None, "the first report")
    panel.stop_button.click()
    assert panel.wait(60)
    assert panel.baselines == {"random": 1_000.0, "corner": 2_500.0}
    assert {t.get_text() for t in panel._live.ax_score.texts} >= {"random 1,000", "corner 2,500"}


def test_no_run_is_named_best_where_the_scores_are_within_noise():
    from dqnlab.ui.status import ranking_text

    rng = np.random.default_rng(0)
    close = {"sync=none": rng.normal(1_638, 500, 20), "sync=periodic": rng.normal(1_600, 500, 20)}
    text = ranking_text(close)
    assert "within noise" in text and "sync=none" not in text and "highest" not in text
    apart = {"shared x2": rng.normal(9_000, 500, 20), "serial x1": rng.normal(2_000, 500, 20)}
    assert "highest" in ranking_text(apart) and "shared x2" in ranking_text(apart)


def test_the_comparison_draws_the_scores_beside_the_reference_players(slow_scheme, config, monkeypatch):
    sp = panels.scheme_panel(["slow"], config)
    sp.panel.run_button.click()
    _until(lambda: sp.panel._report is not None, "the first report")
    sp.panel.stop_button.click()
    assert sp.panel.wait(60)
    sp.compare_button.click()
    assert sp.comparison.value and "one run: nothing to rank" in sp.message.value, sp.message.value


# ------------------------------------------------------------------------------ item 4: live and truthful
def test_running_a_panels_cell_again_shows_the_running_panel(slow_scheme, config):
    panel = panels.control_panel("slow", config)
    panel.run_button.click()
    try:
        assert panels.control_panel("slow", config) is panel  # its Stop button in view again
        assert not panel.stop_button.disabled
    finally:
        _stop_all(panel)


def test_a_panel_refused_by_another_run_can_stop_it(slow_scheme, config):
    first = panels.control_panel("slow", config)
    first.run_button.click()
    other = panels.control_panel("serial", config)
    try:
        other.run_button.click()
        assert not other.running and "another panel (slow) is running" in other.status.value
        assert not other.stop_button.disabled  # the way to stop it, here
        other.stop_button.click()
        assert first.wait(60) and first.result.status == "stopped"
        _until(lambda: "has ended: click Run" in other.status.value, "the line saying Run can go now")
        assert other.stop_button.disabled
    finally:
        _stop_all(first)


def test_switching_scheme_while_a_run_goes_on_keeps_the_running_panel(slow_scheme, config):
    sp = panels.scheme_panel(["slow", "serial"], config)
    running = sp.panel
    running.run_button.click()
    try:
        sp.scheme.value = "serial"
        assert sp.scheme.value == "slow" and sp._holder.children == (running.widget,)
        assert "Stop it before switching" in sp.message.value
        again = panels.scheme_panel(["serial", "slow"], config)  # its cell run again
        assert again.scheme.value == "slow" and again.panel is running
    finally:
        _stop_all(running)
    _until(lambda: "Stop it before" not in sp.message.value, "the stale line to go")


def test_the_no_run_yet_line_goes_when_a_run_ends(slow_scheme, config):
    sp = panels.scheme_panel(["slow"], config)
    sp.compare_button.click()
    assert "no run yet" in sp.message.value
    sp.panel.run_button.click()
    _until(lambda: sp.panel._report is not None, "the first report")
    sp.panel.stop_button.click()
    assert sp.panel.wait(60)
    _until(lambda: "no run yet" not in sp.message.value, "the stale line to go")
    assert "to compare" in sp.message.value


def test_the_status_line_counts_on_while_no_report_comes(slow_scheme, config, monkeypatch):
    now = [1_000.0]
    monkeypatch.setattr(run_panel, "_clock", lambda: now[0])
    released = threading.Event()

    def one_report_then_quiet(config, options, *, workers=1, progress=True, callback=None, **_):
        run = dataclasses.replace(synthetic_run(seconds=5, status="running"), config=config)
        callback(run)
        released.wait(120)  # a slow report: workers starting, a joblib round trip
        return dataclasses.replace(run, status="completed")

    monkeypatch.setattr(dqnlab.SCHEMES["slow"], "run", one_report_then_quiet)
    panel = panels.control_panel("slow", config, budget_s=60)
    panel.run_button.click()
    try:
        _until(lambda: "5 s of 60 s" in panel.status.value, "the first report's line")
        now[0] += 12.0  # twelve seconds without a report
        _until(lambda: "17 s of 60 s" in panel.status.value, "the line to count on")
        assert "last report 12 s ago" in panel.status.value
    finally:
        released.set()
        assert panel.wait(60)


def test_no_rate_spike_after_stop():
    live = LiveFigure()
    live.update(synthetic_run(final_burst=True, status="stopped"))
    rates = live._sps.get_ydata()
    assert rates.max() <= 1_100  # the final totals, 3,000 steps in 0.05 s, are no rate of 60,000/s
    assert "over the run" in live.ax_speed.get_title() and "60,000" not in live.ax_speed.get_title()
    live.update(synthetic_run(status="running"))
    assert "1,000 env steps/s, 100.0 updates/s now" in live.ax_speed.get_title()


def test_a_single_td_loss_is_drawn_where_the_title_gives_it():
    live = LiveFigure()
    live.update(synthetic_run(loss_rows=[-1]))  # e.g. joblib's comm: the loss of the last report only
    assert live.ax_loss.get_title().endswith(": 2")
    (line,) = live.ax_loss.lines
    assert len(line.get_xdata()) == 1 and line.get_marker() not in ("None", "", None)  # a point, not nothing
    live.update(synthetic_run())
    assert line.get_marker() in ("None", "", None)  # a line where there are many


def test_the_td_loss_title_and_ticks_are_plain_numbers():
    run = synthetic_run()
    run.history["loss"] = np.linspace(12_000.0, 9_080.4, len(run.history))
    live = LiveFigure()
    live.update(run)
    live.figure.canvas.draw()
    assert live.ax_loss.get_title() == "TD loss (log scale): 9,080"
    ticks = [t.get_text() for t in live.ax_loss.get_yticklabels(minor=False) + live.ax_loss.get_yticklabels(minor=True)]
    assert any(ticks) and not [t for t in ticks if "e" in t or "\u00d7" in t or "$" in t], ticks


def test_each_worker_keeps_its_own_colour_on_the_score_plot():
    run = synthetic_run()
    late = run.episodes.copy()
    late["worker"], late["score"] = 1, late["score"] * 2
    live = LiveFigure()
    live.update(dataclasses.replace(run, workers=2, episodes=late), per_worker=True)  # worker 1 finishes first
    live.update(dataclasses.replace(run, workers=2, episodes=pd.concat([late, run.episodes])), per_worker=True)
    colours = {line.get_label().rsplit(" ", 1)[-1]: line.get_color() for line in live._scores.values()}
    assert colours == {"0": "C0", "1": "C1"}


def test_more_workers_than_cores_are_said(config, monkeypatch):
    monkeypatch.setattr(run_panel.os, "cpu_count", lambda: 2)
    panel = panels.control_panel("independent", config, workers=2)
    assert panel.note.layout.display == "none"
    panel.workers.value = 8
    assert panel.note.layout.display is None and "8 workers on 2 CPU cores" in panel.note.value
    panel.workers.value = 2
    assert panel.note.layout.display == "none"


_CODE = re.compile(r"\w+_\w+|\*\*|[A-Za-z]\(|[A-Za-z_]\.[A-Za-z]|\bNone\b|\bTrue\b|\bFalse\b")


@pytest.mark.parametrize("scheme", sorted(dqnlab.SCHEMES))
def test_tooltips_are_plain_words(scheme, config):
    panel = run_panel.ControlPanel(scheme, config, network_controls=True)
    for name, box in panel._shown_as.items():
        for part in box.children:
            shown = part.value if isinstance(part, ipywidgets.HTML) else ""
            tips = [getattr(part, "tooltip", None)] + re.findall(r'title="([^"]*)"', shown)
            for tip in filter(None, tips):
                assert not _CODE.search(html.unescape(tip)), f"{scheme} {name}: {tip}"


def test_the_command_line_help_keeps_the_declared_docs():
    from dqnlab.options import specs
    from dqnlab.schemes import actors

    spec = specs(actors.Options)["min_replay_ratio"]
    assert "SLACK_UPDATES" in spec.doc and "SLACK_UPDATES" not in spec.tooltip


def test_the_replay_ratio_is_said_in_words_with_consistent_rounding():
    from dqnlab.ui import status

    run = dataclasses.replace(synthetic_run(), scheme="actors", extra={
        "achieved_replay_ratio": 3.95, "achieved_replay_ratio_learning": 3.99, "min_replay_ratio": 4,
        "replay_ratio": 8.0, "slack_updates": 32})
    text = status.summary_text(run, {"workers": 2}, {"budget_s": "budget (s)"}, 0.0)
    assert "3.95 samples per env step" in text and "floor of 4.00" in text and "3.99 since learning started" in text
    assert "throttle" in text and "(floor 4)" not in text
    assert status.replay_ratio_text(synthetic_run()) is None  # a run without a throttle says nothing of it


def test_a_smoke_mode_panel_trains_its_default_learner_without_diverging(monkeypatch, slow_scheme):
    monkeypatch.setenv("DQNLAB_SMOKE", "1")
    panel = panels.control_panel("serial", budget_s=1)
    assert panel.preset.value == "default"
    run = panel.run(blocking=True, timeout=300)
    assert panel.error is None and run.status == "completed" and run.updates > 0, panel.error


def test_an_unset_option_reads_auto_in_the_status_line():
    from dqnlab.ui import status

    text = status.summary_text(synthetic_run(), {"learner_threads": None, "workers": 2},
                               {"budget_s": "budget (s)", "learner_threads": "learner threads"}, 0.0)
    assert "learner threads=auto" in text and "None" not in text
    assert f"{synthetic_run().config.network} network" in text  # the learner it trained, too


@pytest.mark.parametrize("scheme", ["serial", "independent", "shared", "sharded", "averaged", "actors"])
def test_score_per_worker_is_offered_where_workers_play_their_own_games(scheme):
    panel = panels.control_panel(scheme, workers=1 if scheme == "serial" else 2)
    assert (panel._shown_as["per_worker"].layout.display != "none") is (scheme in ("independent", "shared", "actors"))
