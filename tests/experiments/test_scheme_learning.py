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
    path.write_text(json.dumps({"kind": "learning", "measures": "two schemes beside serial", "machine": machine_info(),
                                "minutes": 2.0, "games": 1000, "rows": rows, "time_to_player": [],
                                "runs": [{"command": "bench", "commit": "abc", "machine": machine_info()}]}))
    return path


def test_a_schemes_curves_come_with_serials(results):
    data = ex.scheme_learning("shared", results)
    assert data["measured"] and {r["scheme"] for r in data["rows"]} == {"serial", "shared"}
    assert len(data["time_to_player"]) == 4  # 2 configurations x 2 seeds
    assert not ex.scheme_learning("actors", results)["measured"]
    assert len(ex.learning_figure(data).axes) == 4
    with pytest.raises(ValueError, match="scheme must be one of"):
        ex.scheme_learning("sharde", results)
    with pytest.raises(FileNotFoundError, match="no results record"):
        ex.scheme_learning("shared", results.with_name("none.json"))
    tables = results.with_name("tables.json")
    tables.write_text(json.dumps({"kind": "tables", "measures": "m", "machine": {}, "tables": {}}))
    with pytest.raises(ValueError, match="is a 'tables' record, not a learning record"):
        ex.scheme_learning("shared", tables)


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
    assert "shared (lock=False) (prioritized=True)" in text and "Minutes: the slowest of 2 seeds (their median" in text
    one = {**data, "rows": [r for r in data["rows"] if r["seed"] == 1]}
    assert "Minutes: one seed (its mean score" in versus_serial_markdown({**one, "time_to_player": time_to_player(one["rows"])})


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


def test_the_stores_learning_records_have_serial_beside_each_scheme():
    from pathlib import Path

    store = Path(__file__).resolve().parents[2] / "docs" / "results"
    for name in ("learning-schemes", "learning-schemes-one-step", "learning-threads", "learning-two-step",
                 "learning-hour"):
        data = ex.scheme_learning(None, store / f"{name}.json")
        assert {"serial"} < {r["scheme"] for r in data["rows"]}, name  # serial, and a scheme beside it
        assert all(t["final_score_mean"] > 0 for t in data["time_to_player"] if t["status"] == "completed")
