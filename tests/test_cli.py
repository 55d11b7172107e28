import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import dqnlab
from dqnlab import TrainConfig, evaluate, load_player, play
from dqnlab.cli import main
from dqnlab.runtime.checkpoint import load_checkpoint
from dqnlab.runtime.results import TIME_SPLIT_KEYS

ROOT = Path(__file__).resolve().parents[1]


def _main(args, capsys):
    """``main(args)``'s exit status and stderr, argparse's exits included."""
    try:
        code = main(args)
    except SystemExit as e:
        code = e.code
    return code, capsys.readouterr().err


def _cli(*args, timeout=120):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "dqnlab", *args], check=False, capture_output=True, text=True,
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
    for name in ("episodes.csv", "model.pt", "run.png"):
        assert (out / name).stat().st_size > 0
    printed = capsys.readouterr().out
    greedy = evaluate(out, games=5, seed=1)  # the summary's games: seed + 1
    assert "env steps/s" in printed and f"greedy play, 5 games: {greedy.describe()} (random play: mean" in printed
    assert re.search(r"^training games: [\d,]+; the last \d+: mean [\d,]+, median [\d,]+, best [\d,]+; \d+ in "
                     r"[\d.]+% of games", printed, re.MULTILINE)

    assert main(["evaluate", str(out), "--games", "7", "--seed", "2", "--json"]) == 0
    ev = json.loads(capsys.readouterr().out)
    assert ev["games"] == 7 and ev["score_mean"] > 0
    assert main(["evaluate", str(out), "--games", "7", "--seed", "2"]) == 0
    said = capsys.readouterr()
    assert said.out == f"{out}: 7 games: {evaluate(out, games=7, seed=2).describe()}\n"
    assert "7/7 [" in said.err  # the games' progress bar, on stderr


def test_apex_with_prioritized_n_step_replay_from_the_command_line(tmp_path, capsys):
    out = tmp_path / "apex"
    assert main(["train", "--scheme", "actors", "--workers", "2", "--prioritized", "--n-step", "3", "--preset", "mlp",
                 "--hidden", "32", "--env-steps", "3000", "--n-envs", "8", "--batch-size", "32",
                 "--learning-starts", "300", "--out", str(out), "--eval-games", "0", "--no-progress"]) == 0
    s = json.loads((out / "summary.json").read_text())
    assert s["config"]["prioritized"] and s["config"]["n_step"] == 3
    replay = s["extra"]["replay"]
    assert replay["prioritized"] and replay["given_priorities"] == replay["added"] > 0 and replay["priority_updates"] > 0
    printed = capsys.readouterr().out
    assert f"{replay['given_priorities']:,} from actors" in printed and "prioritized replay: alpha 0.6" in printed


def test_minutes_budget_maps_to_seconds(tmp_path):
    from dqnlab.cli.parser import build_parser as _parser
    from dqnlab.cli.settings import config_from_args as _config_from_args

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
def test_bad_arguments_give_one_clear_line(args, needle, capsys):
    code, err = _main(args, capsys)
    assert code == 2
    assert needle in err
    assert "Traceback" not in err


def test_bench_functions_report_rows():
    from dqnlab.bench import bench_rules, bench_update

    rows = bench_rules(boards=256, repeats=1, min_time=0.01, threads=(1, 2))
    assert [(r["what"].split(":")[0], r["threads"]) for r in rows] == [("NumPy rules", 1)] + [("core", 1)] * 2 \
        + [("core", 2)] * 2 + [("Game2048.step (one board, gymnasium API)", 1)]
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


def test_bench_scaling_runs_each_preset_asked_for_and_names_it(capsys):
    from dqnlab.bench.scaling import scaling_config

    code = main(["bench", "scaling", "--presets", "mlp,ntuple-small", "--schemes", "serial", "--workers", "1",
                 "--seconds", "0.5", "--json"])
    assert code == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["preset"], r["spec"]) for r in rows] == [("mlp", "serial"), ("ntuple-small", "serial")]
    assert rows[0]["learning_starts"] == 2_000 and scaling_config("mlp").buffer_size == 50_000
    assert scaling_config("default") == TrainConfig.preset("default")


def test_a_second_run_into_the_same_out_says_what_to_do_and_overwrite_replaces_it(tmp_path, capsys):
    out = tmp_path / "run"
    args = ["train", "--preset", "mlp", "--env-steps", "200", "--n-envs", "8", "--out", str(out), "--eval-games", "0",
            "--no-progress"]
    assert main(args) == 0
    before = (out / "summary.json").read_text()
    assert main(args) == 2
    assert capsys.readouterr().err == (f"dqnlab: error: --out {out} already holds a run: --resume {out} continues "
                                       f"it, --overwrite replaces it, or choose another --out\n")
    assert (out / "summary.json").read_text() == before
    umask = os.umask(0)
    os.umask(umask)
    assert (out / "summary.json").stat().st_mode & 0o777 == 0o666 & ~umask  # not owner-only like a temp file

    (out / "error.txt").write_text("an earlier run's error")
    (out / "notes.txt").write_text("the user's own file")
    assert main([*args, "--overwrite", "--env-steps", "400"]) == 0
    assert json.loads((out / "summary.json").read_text())["env_steps"] == 400
    assert not (out / "error.txt").exists() and (out / "notes.txt").exists()
    code, err = _main(["train", "--resume", str(out), "--overwrite"], capsys)
    assert code == 2 and "--overwrite cannot be combined with --resume" in err


def test_version_is_pyprojects(capsys):
    import tomllib

    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0 and capsys.readouterr().out == f"dqnlab {version}\n"
    assert dqnlab.__version__ == version


def test_argparse_errors_are_one_line():
    r = _cli("train", "--workers", "0")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and r.stderr.startswith("dqnlab: error: train:")
    r = _cli("evaluate", "random", "--search", "4")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "argument --search: invalid choice: 4" in r.stderr


# ------------------------------------------------------------------------ generated flags
def _sample(spec):
    """A valid value of ``spec`` other than its default, and its command-line text."""
    if spec.kind == "bool":
        return not spec.default, None
    if spec.choices:
        value = next(c for c in reversed(spec.choices) if c != spec.default)
        return value, str(value)
    if spec.kind == "int":
        value = (spec.low or 0) + 3
    elif spec.kind == "float":
        value = 0.5 if spec.high == 1 else (spec.low or 0) + 2.5
    elif spec.kind == "ints":
        value = (64, 32)
    elif spec.kind == "dict":
        value = {"note": "x", "n": 2}
    else:  # ntuples
        value = ((0, 1, 2, 3), (4, 5, 6, 7))
    return value, spec.to_text(value)


def test_every_config_field_is_a_flag_that_round_trips():
    from dqnlab.cli.flags import flags_given as _given
    from dqnlab.cli.parser import build_parser as _parser
    from dqnlab.config import TrainConfig
    from dqnlab.options import specs

    declared = specs(TrainConfig)
    for name, spec in declared.items():
        value, text = _sample(spec)
        if text is None:
            argv = [spec.flag if value else f"--no-{spec.flag[2:]}"]
        else:
            argv = [spec.flag, text]
        args = _parser().parse_args(["train", *argv])
        assert _given(args, declared.values()) == {name: value}, name
        if spec.nullable:
            args = _parser().parse_args(["train", spec.flag, "none"])
            assert getattr(args, name) is None and name in vars(args)
    args = _parser().parse_args(["train", "--preset", "mlp", "--hidden", "64,32", "--no-double-dqn", "--lr", "0.01",
                                 "--max-grad-norm", "none", "--gamma", "0.9", "--ntuples", "17x4"])
    from dqnlab.cli.settings import config_from_args as _config_from_args

    c = _config_from_args(args)
    assert (c.hidden, c.double_dqn, c.lr, c.max_grad_norm, c.gamma, c.ntuples) == ((64, 32), False, 0.01, None, 0.9,
                                                                                  "17x4")
    assert c.replay_ratio == TrainConfig.preset("mlp").replay_ratio  # the rest: the preset's


def test_help_shows_every_field_and_option_with_its_doc(capsys):
    from dqnlab.cli import scheme_flags
    from dqnlab.config import TrainConfig
    from dqnlab.options import specs

    try:
        main(["train", "--help"])
    except SystemExit as e:
        assert e.code == 0
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    for spec in [*specs(TrainConfig).values(), *(s for d in scheme_flags().values() for s in d.values())]:
        assert spec.flag in text and " ".join(spec.doc.split()) in text, spec.name
    assert "--double-dqn, --no-double-dqn" in text and "--hidden N,N,..." in text and "--max-moves N|none" in text
    assert "independent options (only with --scheme independent)" in text
    assert "(updates; an integer >= 1 or None; default none)" in text and "(a number in (0, 1]; only with --sync final; " in text
    assert "{none,periodic,final,weighted,best,sum}" in text


@pytest.mark.parametrize("argv,needle", [
    (["--gamma", "2"], "argument --gamma: expected a number in [0, 1], got '2'"),
    (["--hidden", "64,x"], "argument --hidden: expected a non-empty tuple of integers >= 1, got '64,x'"),
    (["--max-moves", "never"], "argument --max-moves: expected an integer >= 1 or None, got 'never'"),
    (["--actor-epsilon", "0.1,2"], "argument --actor-epsilon: expected one of ['schedule', 'apex'] or numbers"),
])
def test_bad_flag_values_are_one_line_naming_the_flag(argv, needle, capsys):
    code, err = _main(["train", *argv], capsys)
    assert code == 2 and needle in err and err.count("\n") == 1, err


@pytest.mark.parametrize("argv,needle", [
    (["--loss", "l1"], "--loss: loss must be one of ['huber', 'mse'], got 'l1'"),
    (["--scheme", "independent", "--sync", "none", "--temperature", "5"],
     "--temperature applies only with --sync weighted, not --sync none"),
    (["--scheme", "actors", "--lock"], "--lock/--no-lock does not apply to --scheme actors (its options: "
                                       "--weights-every, --min-replay-ratio, --actor-epsilon"),
    (["--minutes", "1", "--max-seconds", "5"], "--minutes and --max-seconds cannot be combined"),
    (["--priority-alpha", "0.5"], "--priority-alpha applies only with --prioritized"),
    (["--scheme", "shared", "--device", "cuda"], "device 'cuda' is for the schemes"),
])
def test_bad_combinations_are_one_line_errors(capsys, argv, needle):
    assert main(["train", "--env-steps", "100", "--eval-games", "0", "--no-progress", *argv]) == 2
    err = capsys.readouterr().err
    assert needle in err and len(err.strip().splitlines()) == 1, err


# ------------------------------------------------------------------------ --config
def _config(tmp_path, argv):
    from dqnlab.cli.parser import build_parser as _parser
    from dqnlab.cli.settings import config_from_args as _config_from_args
    from dqnlab.cli.settings import read_config_file
    from dqnlab.cli.settings import scheme_options as _scheme_options

    args = _parser().parse_args(["train", *argv])
    file = read_config_file(args.config)
    args.scheme = args.scheme or file.get("scheme", "serial")
    options = file.get("options", {}) if args.scheme == file.get("scheme", args.scheme) else {}
    return _config_from_args(args, file), _scheme_options(args, options), file


def test_config_from_toml_and_json_with_flags_overriding(tmp_path):
    toml = tmp_path / "run.toml"
    toml.write_text('scheme = "independent"\nworkers = 2\npreset = "mlp"\n\n[config]\nlr = 0.002\nhidden = [64, 64]\n'
                    'max_moves = "none"\nbatch_size = 64\n\n[options]\nsync = "final"\nfinal_fraction = 0.5\n')
    config, options, file = _config(tmp_path, ["--config", str(toml), "--lr", "0.01", "--sync-every", "9"])
    assert (file["scheme"], file["workers"]) == ("independent", 2)
    assert (config.lr, config.hidden, config.max_moves, config.batch_size) == (0.01, (64, 64), None, 64)
    assert config.n_envs == 32  # the mlp preset's
    assert options == {"sync": "final", "final_fraction": 0.5, "sync_every": 9}
    js = tmp_path / "run.json"
    js.write_text(json.dumps({"preset": "seed", "config": {"seed": 7, "total_env_steps": 500}}))
    config, options, _ = _config(tmp_path, ["--config", str(js), "--minutes", "2"])
    assert (config.seed, config.encoding, config.max_seconds, config.total_env_steps) == (7, "raw", 120.0, None)
    assert options == {}


@pytest.mark.parametrize("text,needle", [
    ('[config]\nlr = -1\n', "TrainConfig.lr must be a number > 0, got -1"),
    ('[config]\nbatchsize = 3\n', "unknown TrainConfig field(s) ['batchsize']"),
    ('schem = "serial"\n', "unknown key(s) ['schem']"),
    ('scheme = "serial"\n[options]\nsync = "none"\n', "does not take option(s) ['sync']"),
    ('config = [1\n', "--config"),
    ('[config]\nlr = -1\n', "bad.toml"),  # the error says which file
    ('scheme = "independent"\nworkers = 2\n[options]\nsync = "periodic"\nfinal_fraction = 0.5\n',
     "final_fraction = 0.5 (from --config) applies only with --sync final, not --sync periodic"),
])
def test_bad_config_files_are_one_line_errors(tmp_path, capsys, text, needle):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    assert main(["train", "--config", str(path), "--env-steps", "100", "--eval-games", "0", "--no-progress",
                 "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert needle in err and len(err.strip().splitlines()) == 1, err


def test_a_finished_runs_summary_reruns_its_configuration(tmp_path, capsys):
    first = tmp_path / "first"
    assert main(["train", "--preset", "mlp", "--scheme", "independent", "--workers", "2", "--env-steps", "400",
                 "--n-envs", "4", "--batch-size", "16", "--hidden", "16", "--sync", "best", "--sync-every", "7",
                 "--eval-games", "0", "--no-progress", "--no-tensorboard", "--out", str(first)]) == 0
    again = tmp_path / "again"
    assert main(["train", "--config", str(first), "--seed", "3", "--eval-games", "0", "--no-progress",
                 "--no-tensorboard", "--out", str(again)]) == 0
    a, b = (json.loads((d / "summary.json").read_text()) for d in (first, again))
    assert (b["scheme"], b["workers"], b["options"]) == (a["scheme"], a["workers"], a["options"])
    assert b["options"]["sync"] == "best" and b["options"]["sync_every"] == 7
    assert b["config"] == {**a["config"], "seed": 3}  # the flag overrides the file
    assert b["env_steps"] == 400


@pytest.mark.parametrize("argv,match", [
    (["bench", "learning", "--presets", "best"], "--presets must name presets"),
    (["bench", "learning", "--seconds", "3"], "'bench learning' takes"),
    (["bench", "learning", "--schemes", "shared:lock=maybe"], "scheme spec 'shared:lock=maybe': lock:"),
    (["bench", "learning", "--schemes", "serial:lock=false"], "serial takes options none, not 'lock'"),
    (["bench", "game", "--minutes", "3"], "'bench game' takes --results and --json, not --minutes"),
    (["bench", "game", "--variants", "plain", "--figure", "f.png"], "not --figure, --variants"),
    (["bench", "readme", "--seeds", "1"], "'bench readme' takes --results, --write and --json, not --seeds"),
    (["bench", "learning", "--run", "runs/x"], "not --run"),
    (["bench", "game", "--devices", "cpu"], "not --devices"),
    (["bench", "search", "--run", "runs/x", "--variants", "plain"], "'bench search' takes --depths, --games, --results, --run, --seed and --json, not --variants"),
    (["bench", "search", "--run", "runs/x", "--depths", "1,5"], "--depths must be comma-separated plies, each in 1..3"),
    (["bench", "search", "--depths", "1"], "bench search needs --run DIR"),
])
def test_bench_learning_flag_errors_are_one_line(argv, match, capsys):
    from dqnlab.cli import main

    assert main(argv) == 2
    err = capsys.readouterr().err
    assert match in err and len(err.strip().splitlines()) == 1


def test_bench_learning_results_record_must_be_one_and_of_the_same_budget(tmp_path, capsys):
    from dqnlab.cli import main

    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    assert main(["bench", "learning", "--results", str(bad)]) == 2
    assert "bad.json' is not a results record" in capsys.readouterr().err
    torn = tmp_path / "torn.json"
    torn.write_text('{"kind": "learning", "mea')
    assert main(["bench", "learning", "--results", str(torn)]) == 2
    assert "torn.json' is not a readable results record" in capsys.readouterr().err
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"kind": "learning", "measures": "m", "minutes": 3, "games": 1000, "rows": [],
                                 "time_to_player": [], "machine": {}}))
    assert main(["bench", "learning", "--results", str(other), "--minutes", "10"]) == 2
    assert "holds 3-minute runs of 1000 games: give the same --minutes and --games" in capsys.readouterr().err
    assert main(["bench", "learning", "--redraw", "--results", str(tmp_path / "none.json")]) == 2
    assert "--redraw needs an existing --results record" in capsys.readouterr().err
    assert main(["bench", "learning", "--redraw", "--results", str(other), "--seeds", "1"]) == 2
    assert "--redraw trains nothing: it takes --results and --figure, not --seeds" in capsys.readouterr().err


def test_bench_learning_redraw_draws_the_records_figure(tmp_path):
    from dqnlab.bench.report import machine_info
    from dqnlab.cli import main

    row = {"preset": "default", "network": "ntuple", "variant": "", "scheme": "serial", "options": "", "workers": 1,
           "seed": 1, "minutes": 1.0, "env_steps": 10, "updates": 1, "score_mean": 20_000.0, "score_median": 1.0,
           "reach_1024": 1.0, "reach_2048": 0.6, "reach_4096": 0.1, "reach_8192": 0.0, "status": "completed"}
    results = tmp_path / "schemes.json"
    before = json.dumps({"kind": "learning", "measures": "m", "machine": machine_info(), "minutes": 1.0, "games": 10,
                         "rows": [row], "time_to_player": [], "runs": []})
    results.write_text(before)
    png = tmp_path / "schemes.png"
    assert main(["bench", "learning", "--redraw", "--results", str(results), "--figure", str(png)]) == 0
    assert png.stat().st_size > 0 and results.read_text() == before  # the record is left as it was


def test_bench_writes_a_tables_record_and_readme_draws_from_the_store(tmp_path, monkeypatch):
    from dqnlab import bench
    from dqnlab.bench import store
    from dqnlab.cli import main

    monkeypatch.setattr(bench, "bench_rules", lambda: [{"what": "core", "threads": 1, "moves_per_s": 5.0}])
    record = tmp_path / "speed-game.json"
    assert main(["bench", "game", "--results", str(record)]) == 0
    rec = store.load(record)
    assert rec["kind"] == "tables" and rec["tables"] == {"game": [{"what": "core", "threads": 1, "moves_per_s": 5.0}]}
    assert rec["command"].startswith("python -m dqnlab bench") and rec["commit"] and rec["machine"]["date_utc"]
    assert "| core | 1 | 5.0 |" in store.markdown(record)
    readme = tmp_path / "README.md"
    repo = Path(__file__).resolve().parents[1]
    readme.write_text("# x\n<!-- results schemes -->\nold\n<!-- /results schemes -->\ntail\n")
    assert main(["bench", "readme", "--results", str(repo / "docs" / "results"), "--write", str(readme)]) == 0
    text = readme.read_text()
    assert "old" not in text and text.endswith("<!-- /results schemes -->\ntail\n") and "| [`serial`](docs/schemes/serial.md) |" in text


def test_cli_rejects_options_of_other_bench_commands(capsys):
    from dqnlab.cli import main

    assert main(["bench", "game", "--write", "x.md"]) == 2
    assert "'bench game' takes --results and --json, not --write" in capsys.readouterr().err
    assert main(["bench", "peers", "--compile"]) == 2
    assert "'bench peers' takes --no-keras, --quick, --results, --threads and --json, not --compile" in capsys.readouterr().err


def test_reproduce_rejects_an_unknown_notebook(capsys):
    from dqnlab.cli import main

    assert main(["reproduce", "--only", "99_nope"]) == 2
    assert "no notebook '99_nope'" in capsys.readouterr().err


def test_cli_resume_adds_env_steps_to_the_run(small_run, capsys):
    code = main(["train", "--resume", str(small_run), "--env-steps", "240", "--eval-games", "0", "--no-progress"])
    assert code == 0
    summary = json.loads((small_run / "summary.json").read_text())
    assert summary["env_steps"] == 640 and summary["status"] == "completed"
    assert load_checkpoint(small_run)["env_steps"] == 640
    assert "--resume" in capsys.readouterr().out  # tells how to continue


@pytest.mark.parametrize("argv,needle", [
    (["--resume", "{run}", "--env-steps", "10", "--seed", "3"], "--seed cannot be combined with --resume"),
    (["--resume", "{run}", "--env-steps", "10", "--preset", "seed"], "--preset cannot be combined with --resume"),
    (["--resume", "{run}", "--env-steps", "10", "--scheme", "shared"], "cannot be resumed as scheme 'shared'"),
    (["--resume", "{run}", "--env-steps", "10", "--workers", "2"], "cannot be resumed with workers=2"),
    (["--resume", "{run}"], "already used its budget"),
    (["--resume", "{tmp}"], "not a dqnlab run directory"),
])
def test_cli_resume_errors_are_one_line(small_run, tmp_path, capsys, argv, needle):
    argv = [a.format(run=small_run, tmp=tmp_path) for a in argv]
    code = main(["train", "--no-progress", "--eval-games", "0", *argv])
    err = capsys.readouterr().err
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_no_tensorboard_writes_no_event_files(cfg, tmp_path, capsys):
    dqnlab.train("serial", cfg.replace(total_env_steps=600), progress=False, run_dir=tmp_path / "api",
                 tensorboard=False)
    assert (tmp_path / "api" / "history.csv").is_file() and not (tmp_path / "api" / "tb").exists()
    with pytest.raises(ValueError, match="tensorboard must be True or False"):
        dqnlab.train("serial", cfg, progress=False, run_dir=tmp_path / "bad", tensorboard="no")
    argv = ["train", "--preset", "mlp", "--env-steps", "600", "--n-envs", "8", "--eval-games", "0", "--no-progress"]
    assert main([*argv, "--out", str(tmp_path / "cli"), "--no-tensorboard"]) == 0
    assert (tmp_path / "cli" / "summary.json").is_file() and not (tmp_path / "cli" / "tb").exists()
    assert main([*argv, "--out", str(tmp_path / "cli-tb")]) == 0
    assert list((tmp_path / "cli-tb" / "tb").glob("events.out.tfevents.*"))
    assert "tensorboard --logdir" in capsys.readouterr().out


def test_cli_bench_acting_json(capsys):
    assert main(["bench", "acting", "--n-envs", "2", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows[0]["n_envs"] == 2 and rows[0]["env_steps_per_s"] > 0
    assert main(["bench", "game", "--n-envs", "2"]) == 2


@pytest.mark.parametrize("argv,match", [
    (["--scheme", "independent", "--weights-every", "5"], "--weights-every does not apply to --scheme independent"),
    (["--scheme", "actors", "--sync", "none"], "--sync does not apply to --scheme actors"),
    (["--scheme", "actors", "--actor-epsilon", "0.1,0.2,0.3", "--workers", "2"], "--actor-epsilon: actor_epsilon must be one of"),
])
def test_cli_actor_option_errors_are_one_line(capsys, tmp_path, argv, match):
    code = main(["train", "--preset", "mlp", *argv, "--env-steps", "100", "--no-progress",
                 "--out", str(tmp_path / "x")])
    err = capsys.readouterr().err
    assert code == 2 and match in err and len(err.strip().splitlines()) == 1


def test_cli_trains_actors_and_writes_time_split_and_lag(capsys, tmp_path):
    out = tmp_path / "run"
    code = main(["train", "--preset", "mlp", "--scheme", "actors", "--workers", "2", "--env-steps", "3000",
                 "--n-envs", "8",
                 "--batch-size", "32", "--replay-ratio", "4", "--weights-every", "10", "--no-share-weights",
                 "--actor-epsilon", "apex",
                 "--min-replay-ratio", "1", "--eval-games", "0", "--no-progress", "--out", str(out)])
    assert code == 0
    printed = capsys.readouterr().out
    assert "parameter lag: mean" in printed
    s = json.loads((out / "summary.json").read_text())
    assert s["scheme"] == "actors" and s["workers"] == 2
    assert set(s["time_split"]) == set(TIME_SPLIT_KEYS)
    assert s["extra"]["param_lag"]["unit"] == "learner updates" and s["extra"]["param_lag"]["mean"] is not None
    assert s["config"]["replay_ratio"] == 4.0
    assert s["options"] == {"weights_every": 10, "min_replay_ratio": 1.0, "actor_epsilon": "apex", "lockstep": False,
                            "share_weights": False, "threads": False}
    assert s["extra"]["weights"] == "sent as changes"


def test_cli_worker_fault_saves_partial_run(capsys, tmp_path):
    from dqnlab.parallel.faults import inject

    out = tmp_path / "run"
    with inject({"worker": 1, "after_updates": 30}):
        code = main(["train", "--preset", "mlp", "--scheme", "sharded", "--workers", "2", "--env-steps", "20000",
                     "--n-envs", "4", "--batch-size", "32", "--eval-games", "0", "--no-progress", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 1 and "worker 1 failed" in err and len(err.strip().splitlines()) == 1
    assert "injected fault" in (out / "worker_error.txt").read_text()
    assert json.loads((out / "summary.json").read_text())["status"] == "failed"


def test_cli_trains_independent_and_writes_summary(capsys, tmp_path):
    out = tmp_path / "run"
    code = main(["train", "--preset", "mlp", "--scheme", "independent", "--workers", "2", "--env-steps", "3000",
                 "--n-envs", "8",
                 "--batch-size", "32", "--sync", "periodic", "--sync-every", "20", "--eval-games", "0",
                 "--no-progress", "--out", str(out)])
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["scheme"] == "independent" and summary["workers"] == 2
    assert set(summary["time_split"]) == set(TIME_SPLIT_KEYS) and summary["time_split"]["acting"] > 0
    assert summary["options"]["sync"] == "periodic" and summary["options"]["sync_every"] == 20
    assert len(summary["extra"]["per_worker"]) == 2
    assert summary["env_steps"] >= 3000


@pytest.mark.parametrize("argv,match", [
    (["--scheme", "independent", "--sync", "sometimes"], "sync must be one of"),
    (["--scheme", "shared", "--sync-every", "5"], "--sync-every does not apply to --scheme shared"),
    (["--scheme", "serial", "--no-lock"], "--lock/--no-lock does not apply"),
    (["--scheme", "independent", "--temperature", "10"], "--temperature applies only with --sync weighted"),
    (["--scheme", "independent", "--sync", "periodic", "--final-fraction", "0.5"], "--final-fraction applies only"),
])


def test_cli_option_errors(capsys, tmp_path, argv, match):
    code = main(["train", "--preset", "mlp", "--env-steps", "100", "--eval-games", "0", "--no-progress",
                 "--out", str(tmp_path / "r"), *argv])
    err = capsys.readouterr().err
    assert code == 2 and match in err and len(err.strip().splitlines()) == 1


def test_one_line_says_the_games_everywhere():
    from dqnlab.evaluation import EvalResult, percent

    ev = EvalResult(np.array([100, 200, 300, 105_907]), np.array([512, 1024, 2048, 2048]), np.array([1, 2, 3, 4]))
    assert ev.describe() == "mean 26,627, median 250, best 105,907; 512 in 100% of games, 1024 in 75%, 2048 in 50%"
    assert EvalResult(np.array([4]), np.array([4]), np.array([1])).describe() == "mean 4, median 4, best 4; 4 in 100% of games"
    strong = EvalResult(np.arange(4), np.array([256, 2048, 8192, 16384]), np.arange(4))
    assert strong.describe().endswith("; 2048 in 75% of games, 4096 in 50%, 8192 in 50%, 16384 in 25%")
    assert [percent(p) for p in (0, 0.005, 0.5, 0.995, 1)] == ["0%", "0.5%", "50%", "99.5%", "100%"]


def test_eval_plot_draws_the_largest_tiles_and_the_scores(tmp_path, capsys):
    fig = evaluate("corner", games=20, seed=0).plot()
    assert len(fig.axes) == 2
    assert [ax.get_xlabel() for ax in fig.axes] == ["largest tile", "score (points)"]
    png = tmp_path / "figs" / "eval.png"
    assert main(["evaluate", "random", "--games", "10", "--plot", str(png)]) == 0
    assert png.read_bytes()[:4] == b"\x89PNG" and f"wrote {png}" in capsys.readouterr().out


@pytest.mark.parametrize("args,needle", [
    (["play", "no-such-dir"], "no run directory 'no-such-dir' (give a directory written by train --out"),
    (["play", "random", "--every", "0"], "--every: expected an integer >= 1, got '0'"),
    (["play", "random", "--fps", "3"], "--fps applies only with --gif"),
    (["play", "random", "--gif", "x.gif", "--delay", "1"], "--delay applies only to the text replay"),
    (["play", "random", "--gif", "x.png"], "--gif must name a .gif file, got 'x.png'"),
    (["play", "random", "--gif", "/no-such-folder/x.gif"], "--gif '/no-such-folder/x.gif': no folder '/no-such-folder'"),
    (["play", "random", "--max-moves", "-3"], "--max-moves: expected an integer >= 1"),
])
def test_cli_play_bad_input_is_one_clear_line(args, needle, capsys):
    code, err = _main(args, capsys)
    assert code == 2 and needle in err and err.startswith("dqnlab: error:") and err.count("\n") == 1


def test_cli_play_replays_as_text(trained, capsys):
    assert main(["play", str(trained[0]), "--seed", "2", "--max-moves", "4"]) == 0
    out = capsys.readouterr().out
    game = play(trained[1], seed=2, max_moves=4)
    assert out.startswith("start, score 0") and "move 4/4:" in out and "(Q: up" in out
    assert out.rstrip().endswith(f"score {game.score:,}, largest tile {game.max_tile:,} (stopped by --max-moves)")
    assert main(["play", "corner", "--every", "3", "--max-moves", "7"]) == 0
    assert [line.split(":")[0] for line in capsys.readouterr().out.splitlines() if line.startswith("move ")] == \
        ["move 3/7", "move 6/7", "move 7/7"]


def test_cli_play_keeps_a_long_game_to_the_frame_cap(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr("dqnlab.cli.games.GIF_MAX_FRAMES", 5)
    gif = tmp_path / "game.gif"
    assert main(["play", "corner", "--gif", str(gif), "--max-moves", "40", "--fps", "20"]) == 0
    with Image.open(gif) as im:
        assert im.n_frames == 5
    assert "a frame every 10 moves, to keep the GIF to 5 frames; --every 1 draws all 41 boards" in \
        capsys.readouterr().out


@pytest.mark.slow  # draws every frame of a whole game
def test_cli_play_writes_a_gif_of_a_full_game(trained, tmp_path, capsys):
    gif = tmp_path / "out" / "game.gif"
    gif.parent.mkdir()  # play writes into a folder that exists
    assert main(["play", str(trained[0]), "--gif", str(gif), "--seed", "2"]) == 0
    game = play(trained[1], seed=2)
    with Image.open(gif) as im:
        assert im.n_frames == game.moves + 1
    said = capsys.readouterr()
    assert f"wrote {gif}: {game.moves + 1:,} frames" in said.out
    frames = game.moves + 1  # the bars on stderr: the moves played, then the frames drawn and the time left
    assert f"playing: {game.moves} moves [" in said.err and "drawing frames: 100%" in said.err
    assert re.search(rf"{frames}/{frames} \[\d\d:\d\d<00:00", said.err)


def test_a_run_that_did_nothing_says_so_and_fails(tmp_path, capsys, monkeypatch):
    import dataclasses

    import dqnlab.schemes

    real = dqnlab.schemes.train

    def nothing(*args, **kwargs):
        """The run as it ends when its budget went by before the first env step (a slow start-up)."""
        run = real(*args, **kwargs)
        return dataclasses.replace(run, env_steps=0, updates=0, episodes=run.episodes.iloc[:0],
                                   history=run.history.iloc[:1].assign(env_steps=0, updates=0))

    monkeypatch.setattr(dqnlab.schemes, "train", nothing)
    code, err = _main(["train", "--max-seconds", "2", "--preset", "mlp", "--hidden", "16", "--n-envs", "4",
                       "--eval-games", "0", "--no-tensorboard", "--out", str(tmp_path / "run")], capsys)
    (line,) = [line for line in err.splitlines() if line.startswith("dqnlab:")]  # one line, below the progress bar
    assert code == 1 and "nothing was trained: the budget of 2 s ended before the first env step" in line
    assert (tmp_path / "run" / "summary.json").is_file()  # what there is, is kept


def test_start_up_that_took_a_tenth_of_the_budget_is_said(tmp_path, capsys):
    from dqnlab.runtime.results import RunResult

    code = main(["train", "--scheme", "independent", "--workers", "2", "--max-seconds", "3", "--preset", "mlp",
                 "--hidden", "16", "--n-envs", "4", "--eval-games", "0", "--no-tensorboard",
                 "--out", str(tmp_path / "run")])
    run = RunResult.load(tmp_path / "run")
    captured = capsys.readouterr()
    if run.env_steps == 0:  # a machine so busy that starting the workers took the whole budget: said so
        assert code == 1 and "nothing was trained" in captured.err
    else:
        assert code == 0 and run.start_up_s() > 0
        assert ("s of the 3 s budget went by before the first report of an env step" in captured.out) == \
            (run.start_up_s() > 0.3)


@pytest.fixture(scope="module")
def full_run(tmp_path_factory):
    """A run directory with every file a run writes (checkpoint.pt, summary.json, episodes.csv, history.csv,
    model.pt, run.png, tb/)."""
    out = tmp_path_factory.mktemp("full") / "run"
    assert main(["train", "--preset", "mlp", "--env-steps", "1200", "--n-envs", "8", "--batch-size", "32",
                 "--eval-games", "0", "--no-progress", "--out", str(out)]) == 0
    return out


def _contents(directory):
    return {p.relative_to(directory): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("name", ["model.pt", "summary.json", "episodes.csv", "history.csv", "checkpoint.pt"])
def test_a_run_file_cut_short_is_one_line_naming_it_and_changes_nothing(full_run, tmp_path, name, capsys):
    run = tmp_path / "run"
    shutil.copytree(full_run, run)
    torn = run / name
    os.truncate(torn, torn.stat().st_size // 2)  # a disk that filled, a copy interrupted
    before = _contents(run)
    if name == "checkpoint.pt":
        commands = [["train", "--resume", str(run), "--env-steps", "100", "--no-progress"]]
    else:
        commands = [["evaluate", str(run), "--games", "2"], ["play", str(run)]]
        with pytest.raises(ValueError, match=re.escape(f"{str(torn)!r} is not a readable")):
            load_player(run)
    if name == "summary.json":
        commands.append(["train", "--config", str(run), "--out", str(tmp_path / "other")])
    capsys.readouterr()
    for argv in commands:
        code, err = _main(argv, capsys)
        assert code == 2, argv
        (line,) = err.strip().splitlines()
        assert line.startswith("dqnlab: error: ") and f"{str(torn)!r} is not a readable" in line, argv
    assert _contents(run) == before
    assert not (tmp_path / "other").exists()


def test_a_results_file_cut_short_is_one_line_naming_it(tmp_path, capsys):
    from dqnlab import experiments as ex
    from dqnlab.bench.report import machine_info

    torn = tmp_path / "results.json"
    torn.write_text(json.dumps({"kind": "learning", "measures": "m", "machine": machine_info(), "minutes": 2.0,
                                "games": 1000, "rows": [], "time_to_player": []}, indent=1))
    os.truncate(torn, torn.stat().st_size // 2)
    code, err = _main(["bench", "learning", "--redraw", "--results", str(torn)], capsys)
    assert code == 2
    (line,) = err.strip().splitlines()
    assert f"{str(torn)!r} is not a readable results record (JSONDecodeError" in line
    with pytest.raises(ValueError, match=re.escape(f"{str(torn)!r} is not a readable results record")):
        ex.scheme_learning(None, torn)
