import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dqnlab.cli import main

ROOT = Path(__file__).resolve().parents[1]


def _cli(*args, timeout=120):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "dqnlab", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def test_train_writes_the_run_and_evaluate_reads_it(tmp_path, capsys):
    out = tmp_path / "run"
    code = main(["train", "--preset", "mlp", "--env-steps", "1200", "--n-envs", "8", "--batch-size", "32",
                 "--out", str(out),
                 "--eval-games", "5", "--no-progress"])
    assert code == 0
    s = json.loads((out / "summary.json").read_text())
    assert s["scheme"] == "serial" and s["workers"] == 1 and s["env_steps"] == 1200
    assert s["config"]["batch_size"] == 32 and s["config"]["n_envs"] == 8
    assert set(s["time_split"]) == {"acting", "learning", "communication"}
    for name in ("episodes.csv", "weights.npz", "model.pt", "run.png"):
        assert (out / name).stat().st_size > 0
    printed = capsys.readouterr().out
    assert "env steps/s" in printed and "greedy play, 5 games" in printed

    assert main(["evaluate", str(out), "--games", "7", "--seed", "2", "--json"]) == 0
    ev = json.loads(capsys.readouterr().out)
    assert ev["games"] == 7 and ev["score_mean"] > 0


def test_minutes_budget_maps_to_seconds(tmp_path):
    from dqnlab.cli import _config_from_args, _parser

    args = _parser().parse_args(["train", "--minutes", "0.5", "--preset", "seed"])
    c = _config_from_args(args)
    assert c.max_seconds == 30.0 and c.total_env_steps is None and c.encoding == "raw"


@pytest.mark.parametrize("args,needle", [
    (["train", "--batch-size", "0"], "--batch-size: expected an integer >= 1"),
    (["train", "--batch-size", "999999", "--env-steps", "10"], "TrainConfig.batch_size must be"),
    (["train", "--scheme", "magic"], "invalid choice: 'magic'"),
    (["train", "--minutes", "-1"], "--minutes: expected a finite number > 0"),
    (["evaluate", "no-such-dir"], "no run directory 'no-such-dir'"),
    (["evaluate", "random", "--games", "x"], "--games: expected an integer"),
    (["bench", "gpu"], "invalid choice: 'gpu'"),
])
def test_bad_arguments_give_one_clear_line(args, needle):
    r = _cli(*args)
    assert r.returncode == 2
    assert needle in r.stderr
    assert "Traceback" not in r.stderr


def test_bench_functions_report_rows():
    from dqnlab.bench import bench_env, bench_update

    rows = bench_env(sizes=(1, 64), repeats=1, min_time=0.01)
    assert [r["boards"] for r in rows] == [1, 64, 1]
    assert all(r["moves_per_s"] > 0 for r in rows)
    res = bench_update(repeats=1, min_time=0.01, keras=False)
    assert {r["method"] for r in res["rows"]} == {"batched", "legacy_torch"}
    assert res["ratio"] > 0 and res["ratio_keras"] is None


def test_bench_scaling_scores_each_run_on_the_same_games():
    from dqnlab.bench import bench_scaling

    (row,) = bench_scaling(["serial"], [1], seconds=0.5, eval_games=3)
    assert row["scheme"] == "serial" and row["env_steps"] > 0
    assert row["greedy_score_mean"] > 0
    (plain,) = bench_scaling(["serial"], [1], seconds=0.5)
    assert plain["greedy_score_mean"] is None


def test_train_refuses_to_overwrite_a_run(tmp_path, capsys):
    out = tmp_path / "run"
    args = ["train", "--preset", "mlp", "--env-steps", "200", "--n-envs", "8", "--out", str(out), "--eval-games", "0",
            "--no-progress"]
    assert main(args) == 0
    before = (out / "summary.json").read_text()
    assert main(args) == 2
    assert "already holds a run" in capsys.readouterr().err
    assert (out / "summary.json").read_text() == before
    umask = os.umask(0)
    os.umask(umask)
    assert (out / "summary.json").stat().st_mode & 0o777 == 0o666 & ~umask  # not owner-only like a temp file


def test_argparse_errors_are_one_line():
    r = _cli("train", "--workers", "0")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and r.stderr.startswith("dqnlab: error: train:")
