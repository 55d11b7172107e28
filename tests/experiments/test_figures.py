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


def _apart(texts) -> bool:
    """Whether no two of the drawn ``texts`` overlap."""
    boxes = [t.get_window_extent() for t in texts if t.get_text()]
    return not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])


def _slanted_apart(ax) -> bool:
    """Whether the x tick labels of ``ax``, slanted alike, keep a line's height between each other."""
    import math

    labels = ax.get_xticklabels()
    xs = sorted(ax.transData.transform([(tick, 0) for tick in ax.get_xticks()])[:, 0])
    angle = math.radians(labels[0].get_rotation())
    line = labels[0].get_fontsize() * ax.figure.dpi / 72
    return 0 < angle and float(np.diff(xs).min()) * math.sin(angle) > line


def test_the_serial_figure_keeps_its_names_apart_and_its_numbers_inside():
    from types import SimpleNamespace

    import pandas as pd

    from dqnlab.experiments.serial import _projection

    def run(steps_per_s, moves):
        return SimpleNamespace(episodes=pd.DataFrame({"moves": moves}), env_steps=100, env_steps_per_s=steps_per_s,
                               time_split={"acting": 0.3, "learning": 0.7})

    rows = [{"method": m, "seconds_per_env_step": s} for m, s in
            (("batched", 0.0017), ("legacy_torch", 0.05), ("legacy_keras", 0.3))]
    data = {"bench": {"rows": rows}, "random_moves": [143], "seed_run": run(630, [140]), "fast_run": run(6600, [104])}
    data["projection"] = _projection(data)
    fig = ex.serial_figure(data)
    _fits(fig)
    for ax in fig.axes[:2]:
        assert _apart(ax.get_xticklabels())
        inside = ax.get_window_extent()
        assert all(inside.y1 >= t.get_window_extent().y1 for t in ax.texts)  # each bar's number below the top


def _trial(label, games=(), divergence=(), greedy=1000.0):
    """A Trial of a 2-worker run whose ``games`` (worker, wall time, score) finished."""
    from types import SimpleNamespace

    import pandas as pd

    from dqnlab.experiments.trials import Trial

    episodes = pd.DataFrame(list(games), columns=["worker", "wall_time_s", "score"]).assign(env_steps=10)
    run = SimpleNamespace(scheme="independent", workers=2, episodes=episodes, extra={"divergence": list(divergence)})
    return Trial(label, run, pd.DataFrame({"score_mean": [greedy]}))


def test_the_independent_figure_says_no_data_and_draws_a_worker_of_one_game(recwarn):
    trials = [_trial("sync=none", [(1, 0.5, 385)], [{"wall_time_s": 0.25, "divergence_rel": 0.03, "synced": False}]),
              _trial("sync=periodic")]
    fig = ex.independent_figure({"schedules": trials, "intervals": [], "workers": 2, "seconds": 0.5,
                                 "sync_every": 20})
    _fits(fig)
    assert not [w for w in recwarn if "legend" in str(w.message)]
    one, empty = fig.axes[:2]
    (line,) = one.get_lines()
    assert line.get_marker() == "o" and line.get_label() == "independent x2 worker 1"
    assert one.get_legend() is not None and empty.get_legend() is None
    assert [t.get_text() for t in empty.texts] == ["no data"]


def test_the_shared_figure_keeps_its_legends_off_the_data_and_every_point_inside():
    from types import SimpleNamespace

    import pandas as pd

    from dqnlab.experiments.trials import Trial

    def trial(label, lock, speed):
        run = SimpleNamespace(updates_per_s=speed, env_steps_per_s=10 * speed, extra={"lock_wait_s": 0.5 * lock},
                              time_split={"acting": 1.0, "learning": 1.0},
                              config=SimpleNamespace(batch_size=128, network="ntuple"))
        return Trial(label, run, pd.DataFrame({"score_mean": [speed]}), {"workers": 2, "lock": lock})

    data = {"trials": [trial("x2 lock", True, 370.0), trial("x2 lock-free", False, 550.0)], "workers": [2],
            "threads": [trial("x2 lock-free, processes", False, 570.0), trial("x2 lock-free, threads", False, 650.0)],
            "seconds": 0.5}
    fig = ex.shared_figure(data)
    _fits(fig)
    panels, legends = fig.axes[:5], fig.axes[5]
    assert all(ax.get_legend() is None for ax in panels) and legends.get_legend() is not None
    for ax in panels[:4]:
        bottom, top = ax.get_ylim()
        assert all(bottom < y < top for line in ax.get_lines() for y in line.get_ydata())


def test_the_sharded_figure_tells_the_channels_apart_in_plain_ticks():
    from types import SimpleNamespace

    import pandas as pd
    from matplotlib.colors import to_hex

    from dqnlab.experiments.trials import Trial

    def trial(comm, speed):
        run = SimpleNamespace(updates_per_s=speed, extra={"round_ms_mean": 500 / speed}, workers=2,
                              time_split={"acting": 0.1, "learning": 0.3, "communication": 0.6},
                              config=SimpleNamespace(batch_size=64))
        return Trial(f"B=64 x2 {comm}", run, pd.DataFrame(), {"workers": 2, "comm": comm})

    fig = ex.sharded_figure({"trials": [trial("joblib", 48.0), trial("allreduce", 103.0)], "workers": [2],
                             "batch_sizes": [64], "comms": ["joblib", "allreduce"], "seconds": 0.5})
    _fits(fig)
    (legend,) = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == ["2 workers, joblib", "2 workers, allreduce"]
    assert len({to_hex(h.get_color()) for h in legend.legend_handles}) == 2
    assert [t.get_text() for t in fig.axes[1].get_xticklabels()] == ["64"]
    assert _apart([ax.xaxis.label for ax in fig.axes])


def test_the_compare_figure_draws_each_scheme_in_its_colour_and_its_numbers_under_the_titles():
    from types import SimpleNamespace

    import pandas as pd
    from matplotlib.colors import to_hex

    from dqnlab.experiments.reading import SCHEME_COLOURS
    from dqnlab.experiments.trials import Trial

    def trial(scheme, speed):
        episodes = pd.DataFrame({"worker": 0, "wall_time_s": [0.2, 0.4], "env_steps": 10, "score": [400, 500]})
        run = SimpleNamespace(scheme=scheme, workers=2, env_steps_per_s=10 * speed, updates_per_s=speed,
                              episodes=episodes, history=pd.DataFrame(), time_split={"acting": 0.3, "learning": 0.7})
        greedy = pd.DataFrame({"wall_time_s": [0.2, 0.5], "env_steps": [900, 1400], "score_mean": [1000.0, speed],
                               "score_sem": [50.0, 60.0]})
        return Trial(f"{scheme} x2", run, greedy)

    schemes = ["serial", "actors", "averaged", "independent", "sharded", "shared"]
    fig = ex.compare_figure({"trials": [trial(s, 100.0 * (i + 1)) for i, s in enumerate(schemes)], "seconds": 0.5,
                             "workers": 2, "cores": 2})
    _fits(fig)
    want = [to_hex(SCHEME_COLOURS[s]) for s in schemes]
    for ax in fig.axes[:2]:
        assert [to_hex(bar.get_facecolor()) for bar in ax.patches] == want
        assert all(ax.get_window_extent().y1 > t.get_window_extent().y1 for t in ax.texts)
        assert _slanted_apart(ax)
    for ax in fig.axes[3:6]:
        assert [to_hex(line.get_color()) for line in ax.get_lines()] == want
    (legend,) = fig.legends
    assert [to_hex(h.get_color()) for h in legend.legend_handles] == want


def test_the_learning_figure_gives_each_configuration_a_colour_and_plain_minutes():
    from matplotlib.colors import to_hex

    def row(preset, scheme, workers, minutes, variant=""):
        return {"preset": preset, "network": preset, "variant": variant, "scheme": scheme, "workers": workers,
                "options": "", "seed": 0, "minutes": minutes, "score_mean": 5000.0, "reach_2048": 0.0,
                "reach_4096": 0.0, "reach_8192": 0.0}

    rows = [row("ntuple", "serial", 1, 0.008434), row("mlp-afterstate", "serial", 1, 0.0085),
            row("ntuple", "shared", 2, 0.00845)]
    fig = ex.learning_figure({"rows": rows})
    _fits(fig)
    assert len({to_hex(line.get_color()) for line in fig.axes[0].get_lines()[:3]}) == 3
    assert "0.01" in [t.get_text() for t in fig.axes[0].get_xticklabels(which="both")]
