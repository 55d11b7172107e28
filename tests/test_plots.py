"""The run figure's panels: a greedy learner's third panel shows the tiles its games reach."""

from __future__ import annotations

from types import SimpleNamespace

import matplotlib
import numpy as np
import pandas as pd
import pytest

matplotlib.use("Agg")


def _run(epsilon):
    t = np.arange(1.0, 5.0)
    history = pd.DataFrame({"wall_time_s": t, "env_steps": 100 * t, "loss": 1.0 / t, "q_max_mean": t,
                            "epsilon": epsilon})
    episodes = pd.DataFrame({"worker": 0, "wall_time_s": t, "env_steps": 100 * t, "score": 1000 * t,
                             "max_tile": [1024, 2048, 4096, 8192]})
    return SimpleNamespace(history=history, episodes=episodes)


def test_a_learner_that_does_not_explore_shows_the_share_of_games_reaching_each_tile():
    from matplotlib.figure import Figure

    from dqnlab.plots import plot_diagnostics

    axes = Figure().subplots(1, 3)
    plot_diagnostics(_run([0.0] * 4), axes, window=4)
    assert axes[2].get_title() == "games reaching a tile (epsilon 0 throughout)"
    shares = {line.get_label(): line.get_ydata()[-1] for line in axes[2].get_lines()}
    assert shares == pytest.approx({"2048": 3 / 4, "4096": 2 / 4, "8192": 1 / 4})
    assert [ax.get_title() for ax in axes[:2]] == ["TD loss", "mean max-Q"]

    axes = Figure().subplots(1, 3)
    plot_diagnostics(_run([1.0, 0.5, 0.2, 0.1]), axes)  # an exploring learner keeps its epsilon panel
    assert axes[2].get_title() == "exploration"
    np.testing.assert_allclose(axes[2].get_lines()[0].get_ydata(), [1.0, 0.5, 0.2, 0.1])


def test_tiles_against_env_steps_and_a_bad_axis():
    from dqnlab.plots import plot_tiles

    ax = plot_tiles(_run([0.0] * 4), x="env_steps", window=2)
    np.testing.assert_allclose(ax.get_lines()[0].get_xdata(), [100, 200, 300, 400])
    with pytest.raises(ValueError, match="x must be 'wall_time_s' or 'env_steps'"):
        plot_tiles(_run([0.0] * 4), x="minutes")


def test_the_run_figure_has_one_games_panel_with_the_greedy_games_and_every_line_in_a_legend():
    from dqnlab.evaluation import EvalResult
    from dqnlab.plots import plot_run

    t = np.arange(0.0, 21.0)
    steps = np.r_[0.0, 5000.0, 1000.0 * t[2:] + 3000]  # a start-up burst: 5,000 env steps/s, then 1,000
    history = pd.DataFrame({"wall_time_s": t, "env_steps": steps, "updates": 10 * t, "loss": 1.0 / (1 + t),
                            "q_max_mean": t, "epsilon": 1.0 - t / 40})
    episodes = pd.DataFrame({"worker": 0, "wall_time_s": t[1:], "env_steps": steps[1:], "score": 100 * t[1:],
                             "max_tile": 256})
    run = SimpleNamespace(scheme="serial", workers=1, env_steps=23_000, updates=200, wall_time_s=20.0,
                          history=history, episodes=episodes)
    greedy = EvalResult(np.array([1000, 2000, 3000]), np.array([128, 256, 256]), np.array([1, 1, 1]))
    fig = plot_run(run, window=5, greedy=greedy)
    games, speed, loss, q, eps, updates = fig.axes
    assert [ax.get_title() for ax in (games, speed, loss, q, eps)] == \
        ["training games", "speed", "TD loss", "mean max-Q", "exploration"]
    assert [text.get_text() for text in games.get_legend().get_texts()] == \
        ["each game", "mean of the last 5 games", "greedy play after training, 3 games: mean 2,000 (bar: middle half)"]
    assert [text.get_text() for text in speed.get_legend().get_texts()] == ["env steps/s", "updates/s"]
    assert updates.get_lines()[0].get_label() == "updates/s"
    assert 1000 < speed.get_ylim()[1] < 2000  # the start-up burst (5,000/s) left out of the limits
    assert eps.get_lines()[0].get_ydata()[-1] == pytest.approx(0.5)


def test_bars_take_a_colour_each_and_slant_names_that_would_meet():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import to_hex

    from dqnlab.plots import plot_bars

    _, ax = plt.subplots()
    plot_bars([1.0, 2.0], ["serial x1", "shared x2"], ax, colors=["0.55", "C2"])
    assert [to_hex(p.get_facecolor()) for p in ax.patches] == [to_hex("0.55"), to_hex("C2")]
    assert ax.get_xticklabels()[0].get_rotation() == 0  # short names stay level
    _, ax = plt.subplots()
    plot_bars([1.0, 2.0, 3.0], ["serial x1", "independent x2", "averaged (average_every=16) x2"], ax)
    assert all(label.get_rotation() == 30 and label.get_ha() == "right" for label in ax.get_xticklabels())
    plt.close("all")
