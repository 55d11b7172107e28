"""Progress bars: the clock they read, how often they write to a log, the time left of every long command."""

import io
import math

import numpy as np
import pytest

from dqnlab import bars
from dqnlab.config import TrainConfig
from dqnlab.evaluation import evaluate, play
from dqnlab.runtime.loop import RunLoop
from dqnlab.runtime.progress import Progress


@pytest.mark.parametrize("seconds,text", [(0, "0:00"), (65.4, "1:05"), (3723, "1:02:03"), (None, "?"),
                                          (math.nan, "?"), (-3, "0:00")])
def test_clock(seconds, text):
    assert bars.clock(seconds) == text


def test_a_bar_into_a_log_is_redrawn_seldom():
    log = io.StringIO()
    with bars.progress_bar(total=1000, file=log) as bar:
        assert bar.mininterval == bars.LOG_INTERVAL_S
        for _ in range(1000):
            bar.update()
    assert log.getvalue().count("\r") <= 3  # the first draw and the last, not one per step


def _loop(**budget):
    config = TrainConfig.preset("mlp", **{"total_env_steps": None, "max_seconds": None, **budget})
    return RunLoop(config, progress=True)


def _report(loop, t, env_steps, games=()):
    loop.t0 -= t - loop.elapsed  # as if t seconds had passed
    loop.record(Progress(env_steps, 0, list(games), {}, {}))


def test_the_training_bar_fills_to_the_time_budget_with_the_time_left(capsys):
    loop = _loop(max_seconds=600.0)
    _report(loop, 10.0, 20_000)
    _report(loop, 60.0, 120_000, [{"score": 1000}, {"score": 3000}])
    assert loop.budget_used() == pytest.approx(0.1, abs=0.01)
    text = loop.bar.desc
    assert text.startswith("1:00 of 10:00, 9:00 left; 120,000 env steps, 2,000 env steps/s; score 2,000")
    loop.close()
    err = capsys.readouterr().err
    assert "10%|" in err and "9:00 left" in err and "it/s" not in err  # one speed: env steps/s


def test_the_training_bar_of_an_env_step_budget_says_the_time_left_at_the_speed_now(capsys):
    loop = _loop(total_env_steps=1_000_000)
    _report(loop, 5.0, 10_000)
    _report(loop, 20.0, 100_000)  # 6,000 env steps/s over the last 15 s (the first report was 15 s before)
    assert loop.budget_used() == pytest.approx(0.1)
    assert loop.bar.desc.startswith("0:20, 2:30 left; 100,000 of 1,000,000 env steps, 6,000 env steps/s")
    loop.close()
    capsys.readouterr()


def test_evaluate_and_play_count_their_games_and_moves_on_stderr(capsys):
    ev = evaluate("corner", games=20, seed=1, progress=True)
    err = capsys.readouterr().err
    assert "games: 100%" in err and "20/20 [" in err and "<00:00" in err  # games done of all, and the time left
    quiet = evaluate("corner", games=20, seed=1)
    assert capsys.readouterr().err == "" and np.array_equal(quiet.scores, ev.scores)
    game = play("corner", seed=1, progress=True)
    assert f"playing: {game.moves} moves [" in capsys.readouterr().err
