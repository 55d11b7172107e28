"""bench search: each depth plays the same games and is timed; bad depths are named before any game."""

import pytest

from dqnlab import DQNAgent, TrainConfig
from dqnlab.bench.search import bench_search


@pytest.mark.slow  # games at every depth of expectimax, the deepest slow
def test_each_depth_plays_the_same_games_and_is_timed(ntuple_agent):
    rows = bench_search(ntuple_agent, depths=(1, 2), games=3, seed=4, max_moves=25)
    assert [r["depth"] for r in rows] == [1, 2]
    for r in rows:
        assert r["games"] == 3 and r["moves"] == 75 and r["seconds"] > 0
        assert r["moves_per_s"] == pytest.approx(r["moves"] / r["seconds"])
        assert 0 <= r["reach_8192"] <= r["reach_2048"] <= 1
    assert rows[0]["score_mean"] != rows[1]["score_mean"] or rows[0]["score_median"] != rows[1]["score_median"]


@pytest.mark.parametrize(("depths", "match"), [((), "depths must name at least one depth"),
                                               ((1, 4), r"search must be an integer in 1\.\.3")])
def test_bad_depths_are_named(ntuple_agent, depths, match):
    with pytest.raises(ValueError, match=match):
        bench_search(ntuple_agent, depths=depths, games=1)


def test_a_player_that_cannot_search_is_named_before_any_game():
    mlp = DQNAgent(TrainConfig.preset("mlp", hidden=(8,)), seed=0)
    with pytest.raises(ValueError, match="search=2 needs a player of an n-tuple network"):
        bench_search(mlp, depths=(1, 2), games=1)
