"""The notebooks' figures from small synthetic data: at most 10 inches wide, plain tick labels, a legend only
over labelled lines, distinct colours, names that do not run together."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pytest

from dqnlab import experiments as ex


@pytest.fixture(autouse=True)
def _close():
    yield
    plt.close("all")


def _labels(fig) -> list[str]:
    """Every tick label of the figure's visible axes, drawn."""
    fig.canvas.draw()
    return [t.get_text() for ax in fig.axes if ax.get_visible()
            for t in (*ax.get_xticklabels(which="both"), *ax.get_yticklabels(which="both"))]


def _fits(fig) -> None:
    assert fig.get_size_inches()[0] <= 10
    labels = _labels(fig)
    assert not [t for t in labels if "e+" in t or "e-" in t or "×" in t or "^" in t], labels


def test_plain_log_ticks_over_a_narrow_range_and_at_given_ticks():
    fig, (a, b) = plt.subplots(1, 2)
    a.plot([0.008434, 0.00845], [1, 2], "o")
    a.set_xscale("log")
    ex.reading.plain_log_ticks(a, "x")
    b.plot([32, 64, 128], [3.5, 13, 40], "o")
    b.set(xscale="log", yscale="log")
    ex.reading.plain_log_ticks(b, "x", ticks=[32, 64, 128])
    ex.reading.plain_log_ticks(b, "y")
    _fits(fig)
    lo, hi = a.get_xlim()
    assert hi / lo == pytest.approx(10)
    assert [t.get_text() for t in b.get_xticklabels()] == ["32", "64", "128"]
    assert "10" in [t.get_text() for t in b.get_yticklabels(which="both")]


def test_the_game_figure_names_each_speed_once_and_keeps_its_legends_above_the_bars():
    from dqnlab.evaluation import EvalResult

    rng = np.random.default_rng(0)

    def ev(mean, tiles):
        return EvalResult(rng.gamma(4, mean / 4, 50).astype(int), rng.choice(tiles, 50), np.full(50, 100))

    speed = [{"what": "NumPy rules: move_batch (before the core)", "threads": 1, "boards": 64, "moves_per_s": 3e6},
             {"what": "core: move_batch (bitboards)", "threads": 2, "boards": 64, "moves_per_s": 6e6},
             {"what": "Game2048.step (one board, gymnasium API)", "threads": 1, "boards": 1, "moves_per_s": 8e3}]
    fig = ex.game_figure({"games": 50, "baselines": {"random": ev(1100, [64, 128]), "corner": ev(2400, [128, 256])},
                          "speed": speed})
    _fits(fig)
    assert [t.get_text() for t in fig.axes[2].get_yticklabels()] == \
        ["NumPy rules: move_batch", "core: move_batch x2", "Game2048.step"]
    for ax in fig.axes[:2]:
        tallest = max(p.get_height() for p in ax.patches)
        assert tallest < 0.8 * ax.get_ylim()[1]  # the legend's room
