"""bench learning: curves at points of a budget, time to a player, checks before training, divergence."""

import pytest

from dqnlab.bench.report import machine_info


def test_learning_curve_evaluates_at_each_point_of_the_budget(tmp_path):
    from dqnlab.bench.learning import learning_curve, learning_figure, learning_markdown, time_to_player

    small = dict(ntuples="17x4", lr=0.01, n_envs=16, buffer_size=2_000, batch_size=32, learning_starts=256)
    rows = learning_curve("ntuple", "serial", 1, minutes=0.06, points=(0.5, 1.0), games=20, overrides=small,
                          run_dir=tmp_path / "run", variant={"prioritized": True, "n_step": 3})
    assert [r["preset"] for r in rows] == ["ntuple"] * len(rows) and 1 <= len(rows) <= 2
    assert {r["points_by"] for r in rows} == {"copy"} and rows[0]["minutes"] >= 0.03
    assert {r["variant"] for r in rows} == {"n_step=3, prioritized=True"}
    assert rows[-1]["minutes"] >= 0.06 * 0.99 and rows[-1]["env_steps"] > 0
    assert all(0 <= r["reach_8192"] <= r["reach_4096"] <= r["reach_2048"] <= r["reach_1024"] <= 1 for r in rows)
    assert (tmp_path / "run" / "checkpoint.pt").exists()  # the run is kept where asked
    res = {"machine": machine_info(), "minutes": 0.06, "games": 20, "rows": rows,
           "time_to_player": time_to_player(rows)}
    md = learning_markdown(res, "python -m dqnlab bench learning", "learning.png")
    assert "minutes to mean 10,000" in md and "![learning curves](learning.png)" in md
    assert len(learning_figure(res).axes) == 4


def test_the_points_are_copies_of_one_run_that_goes_on():
    from dqnlab.bench.learning import learning_curve

    small = dict(ntuples="17x4", lr=0.01, n_envs=16, buffer_size=2_000, batch_size=32, learning_starts=256)
    rows = learning_curve("ntuple", "serial", 1, minutes=0.1, points=(0.3, 0.6, 1.0), games=10, overrides=small)
    assert len(rows) == 3 and [r["status"] for r in rows] == ["completed"] * 3
    minutes = [r["minutes"] for r in rows]
    assert minutes == sorted(minutes) and minutes[0] >= 0.03 and minutes[1] >= 0.06 and minutes[2] >= 0.099
    steps = [r["env_steps"] for r in rows]
    assert steps == sorted(steps) and steps[0] > 0  # one run: its env steps only grow
    assert rows[0]["updates"] < rows[1]["updates"] < rows[2]["updates"]


def test_points_taken_two_ways_are_said_per_scheme():
    from dqnlab.bench.learning import POINTS_BY, _points_how

    rows = [{"scheme": "serial", "options": "", "points_by": "copy"}, {"scheme": "shared", "options": "lock=False"}]
    assert _points_how(rows[:1]) == POINTS_BY["copy"] and _points_how(rows[1:]) == POINTS_BY["resume"]
    assert _points_how(rows) == f"serial: {POINTS_BY['copy']}; shared (lock=False): {POINTS_BY['resume']}"


def test_the_figure_tells_every_configuration_apart():
    from dqnlab.bench.learning import learning_figure

    def rows(preset, variant, scheme, seed):
        return [{"preset": preset, "variant": variant, "scheme": scheme, "options": "", "workers": 1, "seed": seed,
                 "minutes": m, "score_mean": 1.0, "reach_2048": 0.5, "reach_4096": 0.1, "reach_8192": 0.0}
                for m in (0.5, 1.0)]

    def looks(res):
        return {line.get_label(): (line.get_color(), line.get_linestyle()) for line in learning_figure(res).axes[0].lines
                if not line.get_label().startswith("_")}

    one = looks({"rows": [*rows("default", "", "serial", 1), *rows("default", "", "shared", 1),
                          *rows("default", "n_envs=32", "shared", 1), *rows("default", "", "serial", 2)]})
    assert len(one) == 4 and len({c for c, _ in one.values()}) == 3  # a colour a configuration (not a seed)
    styles = {label: ls for label, (_, ls) in one.items()}
    assert styles["default [n_envs=32], shared x1, seed 1"] != styles["default, shared x1, seed 1"]
    two = looks({"rows": [*rows("default", "", "serial", 1), *rows("mlp", "", "serial", 1),
                          *rows("default", "", "shared", 1)]})
    assert two["default, serial x1"][0] == two["default, shared x1"][0] != two["mlp, serial x1"][0]
    assert two["default, serial x1"][1] != two["default, shared x1"][1]


def test_time_to_player_is_the_first_point_that_makes_one():
    from dqnlab.bench.learning import time_to_player

    base = {"preset": "p", "network": "ntuple", "scheme": "serial", "options": "", "workers": 1, "seed": 0}
    rows = [{**base, "minutes": m, "score_mean": s, "reach_2048": r}
            for m, s, r in [(1, 5_000, 0.0), (2, 12_000, 0.3), (3, 20_000, 0.6), (4, 25_000, 0.7)]]
    rows[3]["reach_4096"] = 0.5
    (row,) = time_to_player(rows)
    # where the curve crosses the mark, between the points around it: 5,000 -> 12,000 crosses 10,000 at 5/7
    assert row["minutes_to_10000"] == pytest.approx(1 + 5 / 7)
    assert row["minutes_to_2048_in_half"] == pytest.approx(2 + 0.2 / 0.3)
    assert row["minutes_to_4096_in_half"] == 4  # (the earlier points have no 4096 share: read as none)
    assert time_to_player(rows[1:])[0]["minutes_to_10000"] == 2  # the first point past the mark: its minutes
    assert row["final_score_mean"] == 25_000 and row["final_reach_4096"] == 0.5
    (never,) = time_to_player(rows[:1])
    assert never["minutes_to_10000"] is None and never["minutes_to_2048_in_half"] is None
    assert row["env_steps_to_10000"] is None  # (these points have no env steps)
    # the env steps there, interpolated alike: 700 -> 1,400 env steps between the points around 10,000
    (counted,) = time_to_player([{**r, "env_steps": 700 * r["minutes"]} for r in rows])
    assert counted["env_steps_to_10000"] == pytest.approx(700 * (1 + 5 / 7))
    assert counted["env_steps_to_4096_in_half"] == 2_800 and counted["minutes_to_10000"] == row["minutes_to_10000"]


def test_results_of_several_commands_merge_by_configuration():
    from dqnlab.bench.learning import learning_markdown, merge_results

    def row(scheme, options, seed, score):
        return {"preset": "default", "network": "ntuple", "variant": "", "scheme": scheme, "options": options,
                "workers": 1 if scheme == "serial" else 2, "seed": seed, "minutes": 10.0, "env_steps": 5, "updates": 1,
                "score_mean": score, "score_median": score, "reach_1024": 1.0, "reach_2048": 0.9, "reach_4096": 0.6,
                "reach_8192": 0.1, "status": "completed"}

    machine = machine_info()
    first = {"machine": machine, "minutes": 10.0, "games": 1000, "command": "one",
             "rows": [row("serial", "", 1, 90_000.0), row("shared", "lock=False", 1, 80_000.0)]}
    again = {"machine": machine, "minutes": 10.0, "games": 1000, "command": "two",
             "rows": [row("shared", "lock=False", 1, 85_000.0), row("independent", "", 1, 70_000.0)]}
    merged = merge_results(merge_results(None, first), again)
    assert [(r["scheme"], r["score_mean"]) for r in merged["rows"]] == [
        ("serial", 90_000.0), ("shared", 85_000.0), ("independent", 70_000.0)]  # the newer run of shared replaces
    assert [r["command"] for r in merged["runs"]] == ["one", "two"] and len(merged["time_to_player"]) == 3
    md = learning_markdown(merged)
    assert "Command: `one`" in md and "Command: `two`" in md and "minutes to 4096 in 50%" in md
    with pytest.raises(ValueError, match="cannot join a file of 10 minutes"):
        merge_results(merged, {**again, "minutes": 3.0})
    # a command whose every row a later one measured again drops out of the list; one with a row left stays
    third = {"machine": machine, "minutes": 10.0, "games": 1000, "command": "three",
             "rows": [row("shared", "lock=False", 1, 86_000.0), row("independent", "", 1, 71_000.0)]}
    assert [r["command"] for r in merge_results(merged, third)["runs"]] == ["one", "three"]


@pytest.mark.parametrize("kw,match", [
    (dict(schemes=("serial", "shraed")), "schemes must be scheme names"),
    (dict(schemes=("shared:lock=nope",)), "scheme spec 'shared:lock=nope'"),
    (dict(presets=()), "presets and schemes must be non-empty"),
    (dict(schemes=("shared",), workers=(1,)), "leave \\['shared'\\] with nothing to run"),
    (dict(variants=("plain", "prioritised")), "variant 'prioritised': each part must be FIELD=VALUE"),
    (dict(variants=("n_step=0",)), "variant 'n_step=0': n_step: expected an integer in 1..255"),
    (dict(presets=("default",), variants=("priority_alpha=0.5",)), "priority_alpha applies only with prioritized"),
])
def test_bench_learning_checks_everything_before_training(kw, match):
    from dqnlab.bench.learning import bench_learning

    with pytest.raises(ValueError, match=match):
        bench_learning(**{"minutes": 0.01, **kw})


def test_parse_variant():
    from dqnlab.bench.learning import parse_variant

    assert parse_variant("plain") == parse_variant("") == {}
    assert parse_variant("prioritized+n_step=3") == {"prioritized": True, "n_step": 3}
    assert parse_variant("prioritized+priority_alpha=0.5+device=cpu") == {"prioritized": True, "priority_alpha": 0.5,
                                                                           "device": "cpu"}
    with pytest.raises(ValueError, match="variant 'n_step': each part"):
        parse_variant("n_step")  # not a bool: needs a value
    # a variant is named as the command line writes it (the rows' "variant", a kept run's folder)
    from dqnlab.bench.learning import _options_text

    assert (_options_text(parse_variant("optimizer=tc+stages=8192,16384+initial_value=320000"))
            == "initial_value=320000, optimizer=tc, stages=8192,16384")


def test_a_configuration_that_diverges_is_reported_and_the_bench_goes_on():
    from dqnlab.bench.learning import learning_curve, time_to_player

    wild = dict(ntuples="17x4", lr=1e12, n_envs=16, buffer_size=2_000, batch_size=32, learning_starts=64)
    rows = learning_curve("ntuple", "serial", 1, minutes=0.05, points=(0.5, 1.0), games=10, overrides=wild)
    assert rows[-1]["status"].startswith("failed") and "non-finite TD loss" in rows[-1]["status"]
    (ttp,) = time_to_player(rows)
    assert ttp["status"].startswith("failed") and ttp["minutes_to_10000"] is None


def test_bench_learning_keeps_each_configurations_run_where_asked(tmp_path):
    from dqnlab.bench.learning import bench_learning

    res = bench_learning(["ntuple-small"], ["serial"], minutes=0.01, points=(1.0,), games=4, seeds=(3,),
                         variants=("plain", "n_step=2"), keep=tmp_path)
    assert len(res["time_to_player"]) == 2
    kept = sorted(p.name for p in tmp_path.iterdir())
    assert kept == ["ntuple-small-n_step=2-serial-x1-seed3", "ntuple-small-serial-x1-seed3"]
    assert all((tmp_path / name / "model.pt").exists() for name in kept)  # a player for evaluate / bench search
