"""bench env / the game rows of bench peers: well-formed rows, and gymnasium-2048's scores checked."""

import pytest

from dqnlab.bench.game import bench_game, check_g2048_scores


def test_bench_game_rows():
    res = bench_game(seconds=0.02, repeats=1, boards=8, check_moves=50)
    assert {"package", "what", "boards", "env_steps_per_s"} <= set(res["rows"][0])
    assert [r["boards"] for r in res["rows"][:3]] == [1, 8, 8]
    assert all(r["env_steps_per_s"] > 0 for r in res["rows"])
    info = res["gymnasium_2048"]
    if info["version"] is None:
        assert res["ratio_step"] is None and len(res["rows"]) == 3
    else:
        assert info["moves_checked"] == 50 and 0 <= info["scores_agree"] <= 50 and res["ratio_step"] > 0


def test_gymnasium_2048_scores_agree_with_dqnlab():
    envs = pytest.importorskip("gymnasium_2048.envs")
    moves, agree = check_g2048_scores(envs.TwentyFortyEightEnv(), 500, seed=1)
    assert agree == moves == 500  # 0.1.x (NumPy-2-safe); 0.0.x scores merges into 256+ as 0
