"""The scheme notebooks' learning curves: a scheme's rows beside serial's from a bench learning results file,
and each configuration's time to a player against serial's."""

from __future__ import annotations

import json

import numpy as np
import pytest

import dqnlab
from dqnlab import experiments as ex
from dqnlab.bench.report import machine_info


def _row(scheme, options, seed, minutes, score, r2048, r4096):
    return {"preset": "default", "network": "ntuple", "variant": "", "scheme": scheme, "options": options,
            "workers": 1 if scheme == "serial" else 2, "seed": seed, "minutes": minutes,
            "env_steps": int(minutes * 60 * 100_000), "updates": 1, "score_mean": score, "score_median": score,
            "reach_1024": 1.0, "reach_2048": r2048, "reach_4096": r4096, "reach_8192": 0.0, "status": "completed"}


@pytest.fixture
def results(tmp_path):
    rows = []
    for seed in (1, 2):
        rows += [_row("serial", "", seed, 1.0, 20_000, 0.4, 0.0), _row("serial", "", seed, 2.0, 40_000, 0.8, 0.5)]
        rows += [_row("shared", "lock=False", seed, 1.0, 30_000, 0.6, 0.1),
                 _row("shared", "lock=False", seed, 2.0, 50_000, 0.9, 0.6 if seed == 1 else 0.4)]
        rows += [_row("independent", "", seed, 2.0, 9_000, 0.1, 0.0)]
    path = tmp_path / "schemes.json"
    path.write_text(json.dumps({"machine": machine_info(), "minutes": 2.0, "games": 1000, "rows": rows,
                                "runs": [{"command": "bench", "machine": machine_info()}]}))
    return path


def test_a_schemes_curves_come_with_serials(results):
    data = ex.scheme_learning("shared", results)
    assert data["measured"] and {r["scheme"] for r in data["rows"]} == {"serial", "shared"}
    assert len(data["time_to_player"]) == 4  # 2 configurations x 2 seeds
    assert not ex.scheme_learning("actors", results)["measured"]
    assert len(ex.learning_figure(data).axes) == 4
    with pytest.raises(ValueError, match="scheme must be one of"):
        ex.scheme_learning("sharde", results)
    with pytest.raises(FileNotFoundError, match="bench learning --presets default"):
        ex.scheme_learning("shared", results.with_name("none.json"))


def test_versus_serial_gives_median_minutes_and_their_ratio(results):
    table = ex.versus_serial(ex.scheme_learning(None, results)).set_index("scheme")
    # serial crosses 50% between its points (0.4 at 1 minute, 0.8 at 2); shared is past it at its first point
    assert table.loc["serial", "min to 2048 in half"] == pytest.approx(1.25)
    assert table.loc["shared", "min to 2048 in half"] == 1.0
    assert table.loc["shared", "x serial to 2048 in half"] == pytest.approx(0.8)
    assert np.isnan(table.loc["shared", "min to 4096 in half"])  # seed 2 never made 4096 in half the games
    assert table.loc["serial", "min to 4096 in half"] == 2.0 and table.loc["shared", "seeds"] == 2
    assert np.isnan(table.loc["independent", "min to 10,000"])  # never got there in the budget
    assert table.loc["serial", "env_steps_per_s"] == pytest.approx(100_000)


def test_versus_serial_puts_serial_first_whatever_the_files_order(results):
    data = json.loads(results.read_text())
    data["rows"] = [r for r in data["rows"] if r["scheme"] != "serial"] + [r for r in data["rows"]
                                                                          if r["scheme"] == "serial"]
    results.write_text(json.dumps(data))
    assert list(ex.versus_serial(ex.scheme_learning(None, results))["scheme"]) == ["serial", "shared", "independent"]


def test_versus_serial_keeps_a_variant_apart_from_its_plain_scheme(results):
    from dqnlab.bench.learning import time_to_player, versus_serial_markdown

    data = json.loads(results.read_text())
    variant = [{**_row("shared", "lock=False", seed, 2.0, 5_000, 0.0, 0.0), "variant": "prioritized=True"}
               for seed in (1, 2)]
    variant += [{**_row("serial", "", seed, 2.0, 1_000, 0.0, 0.0), "variant": "n_step=3"} for seed in (1, 2)]
    data["rows"] += variant
    results.write_text(json.dumps(data))
    table = ex.versus_serial(ex.scheme_learning(None, results))
    shared = table[table["scheme"] == "shared"].set_index("variant")
    assert list(shared["seeds"]) == [2, 2]  # two configurations, not one of four seeds
    assert shared.loc["", "min to 2048 in half"] == 1.0 and np.isnan(shared.loc["prioritized=True", "min to 2048 in half"])
    plain = table[table["scheme"] == "serial"].set_index("variant")
    assert table.iloc[0]["variant"] == "" and plain.loc["", "x serial to 2048 in half"] == 1.0  # the plain baseline
    text = versus_serial_markdown({**data, "time_to_player": ex.scheme_learning(None, results)["time_to_player"]})
    assert "shared (lock=False) (prioritized=True)" in text and "the slowest of 2 seeds (median" in text
    one = {**data, "rows": [r for r in data["rows"] if r["seed"] == 1]}
    assert "; one seed (its mean score" in versus_serial_markdown({**one, "time_to_player": time_to_player(one["rows"])})


def test_sittings_put_each_seed_beside_serials_of_its_own_file(results, tmp_path):
    data = json.loads(results.read_text())
    again = tmp_path / "again.json"  # a second sitting, on a host twice as fast for serial's seed 2
    again.write_text(json.dumps({**data, "rows": [
        {**r, "minutes": r["minutes"] / 2} if (r["scheme"], r["seed"]) == ("serial", 2) else r for r in data["rows"]]}))
    table = ex.sittings([results, again])
    assert list(table["sitting"].unique()) == ["schemes", "again"]
    shared = table[table["configuration"] == "shared (lock=False)"].set_index(["sitting", "seed"])
    # serial crosses 4096 in half at 2 minutes; shared's seed 1 between 0.1 at 1 minute and 0.6 at 2: 1.8
    assert shared.loc[("schemes", 1), "minutes"] == pytest.approx(1.8)
    assert shared.loc[("schemes", 1), "x serial minutes"] == pytest.approx(0.9)
    assert np.isnan(shared.loc[("schemes", 2), "minutes"])  # never made it
    assert shared.loc[("again", 1), "x serial minutes"] == pytest.approx(0.9)  # seed 1's serial is as it was
    serial = table[table["configuration"] == "serial"].set_index(["sitting", "seed"])
    assert serial.loc[("again", 2), "minutes"] == 1.0 and serial.loc[("again", 2), "x serial minutes"] == 1.0
    assert serial.loc[("again", 2), "env_steps_per_s"] == pytest.approx(2 * serial.loc[("schemes", 2), "env_steps_per_s"])
    assert len(table[table["configuration"] == "independent"]) == 4  # never made it: there, without ratios
    with pytest.raises(FileNotFoundError, match="no results file"):
        ex.sittings([results, tmp_path / "none.json"])


@pytest.mark.parametrize("budget", [ex.FULL, ex.SMOKE], ids=["full", "smoke"])
def test_replay_variants_train_a_buffer_that_prioritized_replay_can_choose_from(monkeypatch, budget):
    from dqnlab.experiments import learning

    seen = {}
    monkeypatch.setattr(learning, "_variants_data", lambda preset, base, *a: seen.update(preset=preset, base=base))
    with ex.use(budget):
        learning.replay_data()
    base = seen["base"]
    if budget is ex.FULL:  # what `bench learning --presets ntuple-small` measures
        want = dqnlab.TrainConfig.preset("ntuple-small")
        assert base.replace(max_seconds=want.max_seconds, total_env_steps=want.total_env_steps) == want
    assert seen["preset"] == "ntuple-small" and base.batch_size < base.buffer_size
    assert base.replace(prioritized=True, n_step=3).prioritized


@pytest.mark.parametrize("path", [ex.SCHEME_RESULTS, ex.BEST_RESULTS, ex.STEP_RESULTS, ex.EARLIER_SCHEME_RESULTS,
                                  *ex.SITTINGS, *ex.NSTEP_SITTINGS], ids=lambda p: p.stem)
def test_the_results_files_the_notebooks_read_are_in_the_checkout_with_serial_beside_each_scheme(path):
    data = ex.scheme_learning(None, path)
    assert {"serial"} < {r["scheme"] for r in data["rows"]}  # serial, and at least one scheme beside it
    assert all(t["final_score_mean"] > 0 for t in data["time_to_player"] if t["status"] == "completed")
