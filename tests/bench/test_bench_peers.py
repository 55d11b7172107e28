"""bench peers: well-formed results on tiny budgets (never timings), its markdown and record, failed rows."""

import numpy as np
import pytest
import torch

from dqnlab.bench import peers, store


def test_compare_sb3_rows_on_a_tiny_budget():
    pytest.importorskip("stable_baselines3")
    res = peers.compare_sb3("seed", seconds=0.3, warmup=80, chunk_s=0.05)
    ours, theirs = res["rows"]
    assert ours["name"] == "dqnlab serial" and theirs["name"].startswith("SB3")
    for r in res["rows"]:
        assert r["env_steps"] > 0 and r["env_steps_per_s"] > 0
        assert r["updates_per_1000_steps"] == pytest.approx(1000.0, rel=0.05)  # one update per move
    assert res["ratio"] > 0 and res["ratio_turns"] > 0 and res["threads"] == 1
    assert torch.get_num_threads() == 1  # restored (conftest pins 1)


def test_bench_peers_markdown_and_its_record_in_the_store(tmp_path):
    pytest.importorskip("stable_baselines3")
    res = peers.bench_peers(presets=("seed",), seconds=0.3, schemes=("serial",), workers=1, scheme_seconds=1.0,
                            keras=False, game_seconds=0.02, update_min_time=0.01, warmup=64)
    (s,) = res["sb3"]
    (row,) = s["schemes"]
    assert row["name"] == "dqnlab serial x1" and row["status"] == "completed"
    assert set(res) >= {"machine", "threads", "game", "update", "sb3"}
    text = peers.peers_markdown(res)
    assert "× SB3" in text and "Hyperparameter mapping" in text and res["machine"]["cpu"] in text
    path = tmp_path / "results" / "speed-peers.json"
    store.save(path, store.stamp(res, "peers", "dqnlab beside SB3", "python -m dqnlab bench peers --quick"))
    out = store.markdown(path)
    assert out.startswith("*dqnlab beside SB3*") and "× SB3" in out and "Hyperparameter mapping" in out
    assert "`python -m dqnlab bench peers --quick` at `" in out and "## Peers" not in out


def test_a_failing_scheme_gives_a_failed_row_not_a_lost_run(monkeypatch):
    pytest.importorskip("stable_baselines3")
    fake = {"rows": [{"env_steps_per_s": 10.0}, {"env_steps_per_s": 5.0}]}
    monkeypatch.setattr(peers, "compare_sb3", lambda *a, **k: dict(fake))

    def boom(*args, **kwargs):
        raise RuntimeError("worker 0 failed: boom\ntraceback ...")

    monkeypatch.setattr(peers, "scheme_rate", boom)
    res = peers.bench_peers(presets=("seed",), schemes=("actors",), keras=False, game_seconds=0.01,
                            update_min_time=0.005)
    (row,) = res["sb3"][0]["schemes"]
    assert row["status"] == "failed" and row["window"] == "failed: worker 0 failed: boom"
    assert np.isnan(row["ratio"])


def test_replay_ratio_check_of_parallel_rows():
    serial = {"updates_per_1000_steps": 1000.0}
    assert peers.same_replay_ratio({"updates_per_1000_steps": 1020.0, "window": "after warm-up"}, serial)
    assert peers.same_replay_ratio({"updates_per_1000_steps": 501.0, "window": "after warm-up"}, serial) is False
    assert peers.same_replay_ratio({"updates_per_1000_steps": 800.0, "window": "whole run"}, serial) is None
    assert peers.same_replay_ratio({"updates_per_1000_steps": float("nan")}, serial) is None
