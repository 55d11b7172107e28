"""Command line: ``python -m dqnlab {train,evaluate,play,bench,reproduce} ...`` (``--help`` on each)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .options import Spec

__all__ = ["main", "read_config_file", "scheme_flags", "CONFIG_FILE_KEYS"]


def _number(cast, allowed: str, ok):
    """An argparse type: ``cast(text)`` satisfying ``ok``, else an error saying ``allowed``."""

    def parse(text: str):
        try:
            value = cast(text)
        except ValueError:
            value = None
        if value is None or not ok(value):
            raise argparse.ArgumentTypeError(f"expected {allowed}, got {text!r}")
        return value

    return parse


_positive_int = _number(int, "an integer >= 1", lambda v: v >= 1)
_nonneg_int = _number(int, "an integer >= 0", lambda v: v >= 0)
_positive_float = _number(float, "a finite number > 0", lambda v: 0 < v < math.inf)
_nonneg_float = _number(float, "a finite number >= 0", lambda v: 0 <= v < math.inf)


def _run_or_policy(text: str) -> str:
    """A run directory (written by ``train --out``) or a reference policy name, for argparse."""
    if text in ("random", "corner") or Path(text).is_dir():
        return text
    raise argparse.ArgumentTypeError(f"no run directory {text!r} (give a directory written by train --out, "
                                     f"or 'random' / 'corner')")


#: Top-level keys of a ``train --config`` file (a run's ``summary.json`` holds them among its results).
CONFIG_FILE_KEYS = ("scheme", "workers", "preset", "config", "options")

#: Frames of a ``play --gif`` without ``--every``: a GIF writer holds every frame in memory (see ``plots.animate``).
_GIF_MAX_FRAMES = 500


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (``dqnlab: error: ...``, exit 2), like every other error here."""

    def error(self, message: str):  # type: ignore[override]
        where = self.prog.removeprefix("python -m dqnlab").strip()
        self.exit(2, f"dqnlab: error: {where + ': ' if where else ''}{message} (see --help)\n")


def _parser() -> argparse.ArgumentParser:
    from .config import PRESETS, TrainConfig
    from .options import specs
    from .schemes import SCHEMES

    p = _Parser(prog="python -m dqnlab", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True, metavar="{train,evaluate,play,bench,reproduce}")

    t = sub.add_parser("train", help="train an agent; writes DIR/summary.json, episodes.csv, weights, run.png",
                       description="Train an agent. Every TrainConfig field and every scheme option is a flag; "
                                   "--config FILE gives them from a file, and flags override it.")
    t.add_argument("--scheme", choices=sorted(SCHEMES), help="training scheme (default serial)")
    t.add_argument("--workers", type=_positive_int, help="worker processes (default 1)")
    t.add_argument("--preset", choices=sorted(PRESETS), help="hyperparameter preset (default 'default'; with "
                   "--network and no preset: that family's preset, mlp-afterstate for --network mlp --afterstate)")
    t.add_argument("--config", type=Path, metavar="FILE",
                   help="take scheme, workers, preset, config (a table of TrainConfig fields) and options (a table "
                        "of the scheme's options) from FILE: TOML or JSON, or a finished run's summary.json (or its "
                        "directory) to rerun that configuration; flags given here override the file (a budget flag "
                        "replaces the file's budget; another --scheme leaves out the file's options)")
    t.add_argument("--minutes", type=_positive_float,
                   help="wall-clock budget in minutes (--max-seconds in minutes)")
    t.add_argument("--backend", choices=["loky", "dask"],
                   help="where the workers run: loky (local processes, the default) or dask (a dask.distributed "
                        "cluster; needs the 'cluster' extra). Not for serial or shared")
    t.add_argument("--dask-scheduler", metavar="ADDR",
                   help="with --backend dask: address of a running scheduler, e.g. tcp://10.0.0.5:8786 "
                        "(default: start a local cluster of --workers processes for the run)")
    t.add_argument("--out", type=Path, help="run directory (default runs/SCHEME-TIME; with --resume: DIR)")
    t.add_argument("--checkpoint-every", type=_nonneg_float, metavar="SECONDS",
                   help="seconds between checkpoints in the run directory (default 300; 0 = about every second; "
                        "a checkpoint is also written at the end, on Ctrl-C and on Stop)")
    t.add_argument("--resume", type=Path, metavar="DIR",
                   help="continue the run in DIR from its checkpoint (same scheme, workers, config and options); "
                        "with --env-steps N / --minutes M / --max-seconds S: N more env steps / M more minutes / "
                        "S more seconds, else the rest of its budget")
    t.add_argument("--eval-games", type=_nonneg_int, default=100,
                   help="greedy games played after training for the summary (0 = none; default 100)")
    t.add_argument("--no-progress", action="store_true", help="no progress bar")
    t.add_argument("--no-tensorboard", action="store_true",
                   help="write no TensorBoard event files (default: DIR/tb/, about once a second; "
                        "watch with tensorboard --logdir runs/)")
    _add_flags(t.add_argument_group("config (TrainConfig fields; default: the preset's, else TrainConfig's)"),
               specs(TrainConfig).values())
    for name, declared in scheme_flags().items():
        _add_flags(t.add_argument_group(f"{name} options (only with --scheme {name})"), declared.values(),
                   defaults=True)

    e = sub.add_parser("evaluate", help="greedy play of a trained run (or a reference policy)")
    e.add_argument("run", type=_run_or_policy, help="run directory, or 'random' / 'corner'")
    e.add_argument("--games", type=_positive_int, default=200, help="games to play (default 200)")
    e.add_argument("--seed", type=_nonneg_int, default=0, help="seed of the games (default 0)")
    e.add_argument("--json", action="store_true", help="print JSON")
    e.add_argument("--plot", type=Path, metavar="FILE",
                   help="also save the figure of the games there (largest-tile distribution and score histogram; "
                        "e.g. eval.png)")

    pl = sub.add_parser("play", help="watch a trained run (or a reference policy) play one greedy game: a GIF, "
                                     "or a text replay in the terminal")
    pl.add_argument("run", type=_run_or_policy, help="run directory, or 'random' / 'corner'")
    pl.add_argument("--seed", type=_nonneg_int, default=0,
                    help="seed of the tile spawns (default 0; the game is the first of evaluate --seed S)")
    pl.add_argument("--max-moves", type=_positive_int, metavar="N",
                    help="stop after N moves (default: play to the end)")
    pl.add_argument("--gif", type=Path, metavar="FILE.gif",
                    help="write the game as an animated GIF (the board, and the Q-values of the four moves beside it) "
                         "instead of the text replay")
    pl.add_argument("--every", type=_positive_int, metavar="N",
                    help=f"one frame (GIF) or board (text) every N moves, the start and the end always included "
                         f"(default 1; a GIF of a game of more than {_GIF_MAX_FRAMES - 1} moves: the smallest N that "
                         f"keeps it to {_GIF_MAX_FRAMES} frames)")
    pl.add_argument("--fps", type=_positive_float, help="GIF: frames per second (default 5)")
    pl.add_argument("--delay", type=_nonneg_float, metavar="SECONDS",
                    help="text replay: pause between moves (default 0.1 on a terminal, 0 otherwise)")

    b = sub.add_parser("bench", help="measure speed (prints a table or JSON)")
    b.add_argument("what", choices=["game", "update", "scaling", "acting", "peers", "learner", "learning"],
                   help="game: moves/s of the rules, the compiled core (1 and 2 threads) beside the NumPy rules; update: legacy vs batched; "
                        "scaling: env steps/s, updates/s and time split of schemes x worker counts; "
                        "acting: env steps/s of one process's acting at each --n-envs (vectorised acting); "
                        "peers: dqnlab beside Stable-Baselines3 and gymnasium-2048 (extra 'bench'); "
                        "learner: GFLOP/s of an update beside a large matrix product, before/after tuning; "
                        "learning: greedy score of 1,000 games at points of a training budget, and the minutes "
                        "to a player (mean 10,000; 2048 in half the games)")
    b.add_argument("--json", action="store_true", help="print JSON")
    b.add_argument("--schemes", help="scaling, learning: comma-separated schemes (default serial,independent,shared,"
                                     "sharded,averaged; learning: serial,shared); scaling: each with optional "
                                     ":OPTION=VALUE scheme options, e.g. sharded:comm=joblib, averaged:average_every=4 "
                                     "(sharded:joblib for short)")
    b.add_argument("--workers", help="scaling, learning: comma-separated worker counts (default 1,2)")
    b.add_argument("--presets", help="learning: comma-separated presets (default default,cnn,mlp-afterstate,mlp)")
    b.add_argument("--minutes", type=_positive_float, help="learning: training budget of each configuration "
                                                           "(default 10)")
    b.add_argument("--games", type=_positive_int, help="learning: greedy games per evaluation (default 1000)")
    b.add_argument("--seeds", help="learning: comma-separated training seeds (default 0)")
    b.add_argument("--variants", help="learning: comma-separated config variants of each preset, each TrainConfig "
                                      "FIELD=VALUE joined by '+' (a bool field alone: True; plain: the preset), e.g. "
                                      "plain,prioritized,n_step=3,prioritized+n_step=3 (default plain)")
    b.add_argument("--figure", type=Path, metavar="PNG", help="learning: also save the curves there "
                                                              "(e.g. docs/learning.png)")
    b.add_argument("--lock", action=argparse.BooleanOptionalAction, default=None,
                   help="learning: the shared scheme's lock (default locked; --no-lock: Hogwild)")
    b.add_argument("--shared-threads", action=argparse.BooleanOptionalAction, default=None,
                   help="learning: the shared scheme's workers as threads of one process (default processes)")
    b.add_argument("--seconds", type=_positive_float, help="scaling: seconds of each run (default 20)")
    b.add_argument("--eval-games", type=_nonneg_int,
                   help="scaling: greedy games played with each run's final weights (default 0 = none)")
    b.add_argument("--n-envs", dest="bench_n_envs", metavar="N,N,...",
                   help="acting: comma-separated boards stepped at once (default 1,8,64)")
    b.add_argument("--write", type=Path, metavar="PATH",
                   help="peers, learner, learning: also write the results as markdown into PATH (its own section; "
                        "e.g. docs/benchmarks.md, docs/learning.md)")
    b.add_argument("--threads", type=_positive_int, default=1,
                   help="peers, learner: PyTorch threads of the measuring process (default 1)")
    b.add_argument("--quick", action="store_true", help="peers, learner: tiny budgets, for a first look")
    b.add_argument("--no-keras", action="store_true",
                   help="peers: leave out the legacy per-transition loop in Keras (slow)")
    b.add_argument("--compile", action="store_true",
                   help="learner: also time torch.compile-d networks (compiling takes tens of seconds)")
    b.add_argument("--devices", default="cpu",
                   help="learner: comma-separated learner devices whose updates/s to report (cpu, cuda, auto; "
                        "default cpu)")

    r = sub.add_parser("reproduce", help="regenerate every notebook's final figure as OUT/<notebook>.png")
    r.add_argument("--out", type=Path, default=Path("figures"), help="directory of the PNGs (default figures/)")
    r.add_argument("--smoke", action="store_true",
                   help="tiny budgets (seconds per figure; also on when DQNLAB_SMOKE=1)")
    r.add_argument("--only", help="comma-separated notebooks, by name or number (e.g. 00,07_compare_schemes)")
    return p


def _flag_name(spec: Spec) -> str:
    """The flag as errors name it: ``--sync-every``, ``--lock/--no-lock``."""
    return f"{spec.flag}/--no-{spec.flag[2:]}" if spec.kind == "bool" else spec.flag


def _name_the_flag(message: str) -> str:
    """``message`` with the flag in front when it begins with the name of an option or a
    config field (``actor_epsilon must be ...`` -> ``--actor-epsilon: actor_epsilon must be ...``),
    as the checks made while a run starts word them."""
    from .config import TrainConfig
    from .options import specs

    declared = {**specs(TrainConfig), **{n: s for d in scheme_flags().values() for n, s in d.items()}}
    name, _, rest = message.removeprefix("TrainConfig.").partition(" ")
    spec = declared.get(name)
    if spec is not None and spec.applies is not None and rest.startswith("applies only with"):
        # (TrainConfig.)priority_alpha applies only with prioritized True ... -> in flags
        dep = declared[spec.applies.name]

        def flag(value: Any) -> str:
            if dep.kind == "bool":
                return dep.flag if value else f"--no-{dep.flag[2:]}"
            return f"{dep.flag} {dep.to_text(value)}"

        cond = " or ".join(flag(v) for v in spec.applies.values)
        return f"{_flag_name(spec)} applies only with {'a value other than ' if spec.applies.negate else ''}{cond}"
    return f"{_flag_name(spec)}: {message}" if spec is not None and not message.startswith("TrainConfig.") \
        else message


def _flag_type(spec: Spec):
    """An argparse type reading ``spec``'s value from text (see :meth:`dqnlab.options.Spec.from_text`)."""

    def parse(text: str):
        try:
            return spec.from_text(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    return parse


def _add_flags(group, declared, defaults: bool = False) -> None:
    """One flag per declaration in ``declared`` (dest: the field's name; not given: no attribute, so that
    ``none`` is a value):
    ``--name VALUE``, or ``--name/--no-name`` for a bool; help: the doc, unit, when it
    applies and, with ``defaults``, the default."""
    for spec in declared:
        notes = [spec.unit] if spec.unit else []
        if spec.kind != "bool" and not spec.choices:
            notes.append(spec.allowed)
        if spec.applies is not None:
            notes.append(f"only with {spec.applies.text(lambda n: '--' + n.replace('_', '-'), str)}")
        if defaults and spec.default is not dataclasses.MISSING:
            notes.append(f"default {spec.to_text(spec.default)}")
        if spec.flag != "--" + spec.name.replace("_", "-"):  # a file's key is the field's name
            notes.append(f"the field {spec.name}")
        text = (spec.doc + (f" ({'; '.join(notes)})" if notes else "")).replace("%", "%%")
        if spec.kind == "bool":
            group.add_argument(spec.flag, dest=spec.name, action=argparse.BooleanOptionalAction,
                               default=argparse.SUPPRESS, help=text)
            continue
        if spec.choices:
            metavar = "{" + ",".join(map(str, spec.choices)) + (",E1,E2,..." if spec.kind == "custom" else "") + "}"
        else:
            metavar = {"int": "N", "float": "X", "ints": "N,N,...", "dict": "JSON"}.get(spec.kind, spec.name.upper())
        group.add_argument(spec.flag, dest=spec.name, type=_flag_type(spec), default=argparse.SUPPRESS, help=text,
                           metavar=metavar + ("|none" if spec.nullable else ""))


def scheme_flags() -> dict[str, dict[str, Spec]]:
    """Each scheme with options -> the declarations of its options (their flags are
    ``train``'s scheme options).

    Raises
    ------
    TypeError
        If two schemes declare one option name differently, or an option is named like
        a TrainConfig field (one flag each).
    """
    from .config import TrainConfig
    from .options import specs
    from .schemes import SCHEMES

    seen: dict[str, Spec] = dict(specs(TrainConfig))
    out: dict[str, dict[str, Spec]] = {}
    for name, module in SCHEMES.items():
        declared = specs(module.Options)
        for option, spec in declared.items():
            if seen.setdefault(option, spec) != spec:
                raise TypeError(f"option {option!r} of scheme {name!r} is declared differently elsewhere")
        fresh = {option: spec for option, spec in declared.items() if all(
            option not in specs(SCHEMES[other].Options) for other in out)}
        if fresh:
            out[name] = fresh
    return out


def _given(args: argparse.Namespace, declared) -> dict[str, Any]:
    """The values of ``declared``'s flags given on the command line, checked (a choice is
    checked here rather than by argparse, so that the error is main's one line, exit 2).

    Raises
    ------
    ValueError
        ``--flag: name must be ..., got ...``.
    """
    out = {}
    for spec in declared:
        if spec.name in vars(args):
            try:
                out[spec.name] = spec.validate(getattr(args, spec.name))
            except ValueError as e:
                raise ValueError(f"{_flag_name(spec)}: {e}") from None
    return out


def read_config_file(path: str | os.PathLike) -> dict[str, Any]:
    """The run settings in a ``train --config`` file: its keys among :data:`CONFIG_FILE_KEYS`.

    ``path`` is a TOML (``.toml``) or JSON (``.json``) file, or a run directory (its
    ``summary.json``, whose other keys, the run's results, are left out). In a TOML
    file, ``"none"`` stands for None (TOML has no null).

    Raises
    ------
    ValueError
        For a missing or unreadable file, another suffix, an unknown key, or ``config``
        or ``options`` that are not tables.
    """
    p = Path(path)
    if p.is_dir():
        p = p / "summary.json"
    if not p.is_file():
        raise ValueError(f"--config: no file {str(p)!r}")
    try:
        if p.suffix == ".toml":
            import tomllib

            data = tomllib.loads(p.read_text())
        elif p.suffix == ".json":
            data = json.loads(p.read_text())
        else:
            raise ValueError("expected a .toml or .json file, or a run directory")
    except ValueError as e:  # tomllib.TOMLDecodeError and json.JSONDecodeError are ValueErrors
        raise ValueError(f"--config {str(p)!r}: {e}") from None
    if not isinstance(data, dict):
        raise ValueError(f"--config {str(p)!r}: expected a table of {list(CONFIG_FILE_KEYS)}")
    summary = "env_steps" in data and "status" in data  # a run's summary.json
    unknown = sorted(set(data) - set(CONFIG_FILE_KEYS))
    if unknown and not summary:
        raise ValueError(f"--config {str(p)!r}: unknown key(s) {unknown}; allowed: {list(CONFIG_FILE_KEYS)}")
    for key in ("config", "options"):
        if not isinstance(data.get(key, {}), dict):
            raise ValueError(f"--config {str(p)!r}: {key} must be a table of names and values")
    return {key: data[key] for key in CONFIG_FILE_KEYS if key in data}


def _from_file(values: dict[str, Any], declared: dict[str, Spec]) -> dict[str, Any]:
    """A file's values, with ``"none"`` read as None where a field takes None."""
    return {k: None if isinstance(v, str) and v.lower() == "none" and k in declared and declared[k].nullable
            else v for k, v in values.items()}


def _config_from_args(args: argparse.Namespace, file: dict[str, Any] | None = None):
    """The TrainConfig of ``train``'s arguments: the preset, then the ``--config`` file's
    ``config`` (``file``: read already), then the flags; a budget given by flags
    (``--env-steps``, ``--max-seconds``, ``--minutes``) replaces the whole budget."""
    from .config import TrainConfig, family_preset
    from .options import specs

    if file is None:
        file = read_config_file(args.config) if args.config is not None else {}
    declared = specs(TrainConfig)
    flags = _given(args, declared.values())
    if args.minutes is not None:
        if "max_seconds" in flags:
            raise ValueError("--minutes and --max-seconds cannot be combined (both set the time budget)")
        flags["max_seconds"] = args.minutes * 60.0
    if {"total_env_steps", "max_seconds"} & set(flags):
        flags = {"total_env_steps": None, "max_seconds": None, **flags}
    values = {**_from_file(file.get("config", {}), declared), **flags}
    # --network without --preset: that family's preset (the default is the n-tuple network's)
    network = values.get("network")
    preset = args.preset or file.get("preset") or (family_preset(network, values.get("afterstate"))
                                                   if network else "default")
    try:
        return TrainConfig.preset(preset, **values)
    except ValueError as e:  # a value of the file's: say where it came from
        bad = [k for k in file.get("config", {}) if k not in flags and f".{k} " in f" {e} "]
        raise ValueError(f"--config {str(args.config)!r}: {e}" if bad else str(e)) from None


def _print_table(rows: list[dict[str, Any]]) -> None:
    import pandas as pd

    def fmt(x: float) -> str:
        return f"{x:,.0f}" if abs(x) >= 100 else f"{x:,.2f}" if abs(x) >= 1 else f"{x:.3g}"

    with pd.option_context("display.float_format", fmt, "display.width", 160):
        print(pd.DataFrame(rows).to_string(index=False))


def _cmd_train(args: argparse.Namespace) -> int:
    import matplotlib

    matplotlib.use("Agg")
    from .evaluation import evaluate
    from .schemes import DivergedError, WorkerError, train

    file_options: dict[str, Any] = {}
    if args.resume is not None:
        config = _resume_config(args)
    else:
        file = read_config_file(args.config) if args.config is not None else {}
        scheme = args.scheme or file.get("scheme") or "serial"
        if scheme == file.get("scheme", scheme):  # the file's options are its scheme's
            file_options = file.get("options", {})
        args.scheme, args.workers = scheme, args.workers or file.get("workers") or 1
        config = _config_from_args(args, file)
    options = _scheme_options(args, file_options)
    out = args.out or args.resume or Path("runs") / f"{args.scheme}-{time.strftime('%Y%m%d-%H%M%S')}"
    if args.resume is None and any((Path(out) / name).exists() for name in ("checkpoint.pt", "summary.json")):
        raise ValueError(f"--out {str(out)!r} already holds a run; continue it with --resume {str(out)!r} "
                         f"or choose another --out")
    every = args.checkpoint_every
    if every is None and args.resume is None:
        every = 300.0
    try:
        run = train(args.scheme, config, workers=args.workers, progress=not args.no_progress,
                    backend=args.backend, dask_scheduler=args.dask_scheduler, run_dir=out, checkpoint_every=every,
                    resume=args.resume, tensorboard=not args.no_tensorboard, **options)
    except DivergedError as e:  # the partial run and the last good checkpoint are in OUT (train wrote them)
        out.mkdir(parents=True, exist_ok=True)
        (out / "error.txt").write_text(str(e) + "\n")
        games = len(e.partial.episodes) if e.partial is not None else 0
        print(f"dqnlab: error: {e} (the {games} games gathered are saved in {out}/; checkpoint.pt there is the last "
              f"good checkpoint, if one was written)", file=sys.stderr)
        return 1
    except WorkerError as e:
        # what was gathered is in OUT already: train() saves the partial run in its run directory
        out.mkdir(parents=True, exist_ok=True)
        (out / "worker_error.txt").write_text(str(e) + "\n")
        games = len(e.partial.episodes) if e.partial is not None else 0
        who = f"worker {e.worker}" if e.worker is not None else "a worker"
        print(f"dqnlab: error: {e.scheme}: {who} failed: {e.message} (traceback in {out / 'worker_error.txt'}; "
              f"the {games} games gathered before the fault are saved in {out}/)", file=sys.stderr)
        return 1
    fig = run.plot()  # (train() wrote the result files to its run directory, OUT)
    fig.savefig(out / "run.png", dpi=100)
    s = run.summary()
    split = ", ".join(f"{k} {v:.1f} s" for k, v in s["time_split"].items())
    print(f"\n{run.scheme} x{run.workers} [{run.status}]: {s['env_steps']:,} env steps, {s['updates']:,} updates, "
          f"{s['episodes']:,} games in {s['wall_time_s']:.1f} s")
    print(f"speed: {s['env_steps_per_s']:,.0f} env steps/s, {s['updates_per_s']:,.1f} updates/s; time: {split}")
    start_up, budget_s = run.start_up_s(), run.config.max_seconds
    if budget_s and start_up is not None and start_up > 0.1 * budget_s:  # where a tenth of the budget went
        print(f"start-up: {start_up:.1f} s of the {budget_s:g} s budget went by before the first report of an env "
              f"step (starting worker processes, the all-reduce group or shared memory, compiling the core)")
    lag = run.extra.get("param_lag") or {}
    if lag.get("mean") is not None:  # actors: how stale the acting weights were, and the ratio held
        achieved = run.extra.get("achieved_replay_ratio_learning")
        print(f"parameter lag: mean {lag['mean']:,.1f} updates (p95 {lag['p95']:,.0f}, max {lag['max']:,.0f}); "
              + ("learning never started (" if achieved is None else
                 f"replay ratio {achieved:.2f} samples/env step since learning started (")
              + f"target {run.extra['replay_ratio']:g}, floor {run.extra['min_replay_ratio']:g})")
    replay = run.extra.get("replay") or {}
    if replay.get("prioritized"):  # the priorities' state at the end, and how much the sampling was corrected
        print(f"prioritized replay: alpha {replay['alpha']:g}, beta {replay['beta']:.2f} now; priorities "
              f"{replay['priority_min']:.3g}..{replay['priority_max']:.3g} (mean {replay['priority_mean']:.3g}); "
              f"{replay['priority_updates']:,} re-prioritised, {replay['given_priorities']:,} from actors; "
              f"mean importance weight {replay['is_weight_mean'] or float('nan'):.2f}")
    if s["episodes"]:
        print(f"training games: mean score {s['score_mean']:,.0f}, last 100 {s['score_mean_last100']:,.0f}, "
              f"best {s['score_max']:,}, largest tile {s['max_tile_max']:,}")
    if args.eval_games and run.status == "interrupted":
        print("interrupted: skipping the greedy evaluation (python -m dqnlab evaluate DIR plays it later)")
    elif args.eval_games:
        seed = run.config.seed
        ev = evaluate(run, games=args.eval_games, seed=seed + 1).summary()
        ref = evaluate("random", games=args.eval_games, seed=seed + 1).summary()
        tiles = ", ".join(f"{t}: {c}" for t, c in ev["max_tile_counts"].items())
        print(f"greedy play, {ev['games']} games: mean score {ev['score_mean']:,.0f} "
              f"(random play {ref['score_mean']:,.0f}); largest tiles {{{tiles}}}")
    if (out / "checkpoint.pt").is_file():
        print(f"saved to {out}/ (checkpoint.pt, summary.json, episodes.csv, history.csv, model.pt, "
              f"run.png); continue it with python -m dqnlab train --resume {out} [--env-steps N | --minutes M]")
    else:
        print(f"saved to {out}/ (summary.json, episodes.csv, history.csv, model.pt, run.png)")
    if not args.no_tensorboard:
        tensorboard = Path(sys.executable).parent / "tensorboard"  # the one installed beside this Python
        print(f"curves in TensorBoard: {tensorboard if tensorboard.exists() else 'tensorboard'} --logdir {out}")
    if s["env_steps"] == 0 and run.status == "completed":
        print(f"dqnlab: error: nothing was trained: the budget{f' of {budget_s:g} s' if budget_s else ''} ended "
              f"before the first env step (starting {run.workers} worker process{'es' if run.workers > 1 else ''} "
              f"and what the scheme sets up took it); give it a larger budget (--minutes, --max-seconds)",
              file=sys.stderr)
        return 1
    return 130 if run.status == "interrupted" else 0


def _resume_config(args: argparse.Namespace):
    """``train --resume DIR``: the checkpoint's config, with the budget extended by
    ``--env-steps N`` (N more), ``--minutes M`` (M more), ``--max-seconds S`` (S more);
    flags that would change the config are errors."""
    from .config import TrainConfig
    from .options import specs
    from .runtime.checkpoint import load_checkpoint

    declared = specs(TrainConfig)
    flags = _given(args, declared.values())
    given = [flag for flag, value in (("--preset", args.preset), ("--config", args.config)) if value is not None]
    given += [_flag_name(declared[name]) for name in flags if name not in ("total_env_steps", "max_seconds")]
    if given:
        raise ValueError(f"{', '.join(given)} cannot be combined with --resume: a resumed run keeps its config "
                         f"(only the budget may change: --env-steps N, --minutes M or --max-seconds S for more)")
    if args.minutes is not None and flags.get("max_seconds") is not None:
        raise ValueError("--minutes and --max-seconds cannot be combined (both set the time budget)")
    ck = load_checkpoint(args.resume)
    args.scheme = args.scheme or ck["scheme"]
    config = TrainConfig.from_dict(ck["config"])
    more_steps = flags.get("total_env_steps")
    more_s = flags.get("max_seconds") if args.minutes is None else 60.0 * args.minutes
    if more_steps is not None or more_s is not None:
        config = config.replace(
            total_env_steps=None if more_steps is None else int(ck["env_steps"]) + more_steps,
            max_seconds=None if more_s is None else float(ck["loop"]["elapsed"]) + more_s)
    return config


def _scheme_options(args: argparse.Namespace, file_options: dict[str, Any]) -> dict[str, Any]:
    """The scheme options of ``--config``'s ``file_options`` and the flags (which win),
    checked against ``--scheme`` and against the values of the options they depend on
    (ValueError naming the flag)."""
    from .options import specs
    from .schemes import SCHEMES

    everything = [spec for declared in scheme_flags().values() for spec in declared.values()]
    given = _given(args, everything)
    takes = specs(SCHEMES[args.scheme].Options)
    wrong = [spec for spec in everything if spec.name in given and spec.name not in takes]
    if wrong:
        flags = ", ".join(_flag_name(spec) for spec in wrong)
        allowed = ", ".join(_flag_name(spec) for spec in takes.values()) or "none"
        verb = "does" if len(wrong) == 1 else "do"
        raise ValueError(f"{flags} {verb} not apply to --scheme {args.scheme} (its options: {allowed})")
    from_file = _from_file(file_options, takes)
    values = {name: spec.default for name, spec in takes.items()}
    values.update(from_file, **given)
    # a flag that does not apply is an error; so is a file's value that does not apply, unless it is the
    # default (a run's summary.json lists every option)
    for name in [*given, *(n for n in from_file if n not in given and n in takes)]:
        spec, applies = takes[name], takes[name].applies
        if applies is not None and not applies.holds(values) and (name in given or values[name] != spec.default):
            dep = takes[applies.name]
            where = _flag_name(spec) if name in given else f"{name} = {values[name]!r} (from --config)"
            raise ValueError(f"{where} applies only with {applies.text(lambda n: dep.flag, str)}, "  # noqa: B023 - called in this iteration
                             f"not {dep.flag} {values[applies.name]}")
    return {**from_file, **given}


def _cmd_evaluate(args: argparse.Namespace) -> int:
    from .evaluation import evaluate

    ev = evaluate(args.run, games=args.games, seed=args.seed)
    s = ev.summary()
    if args.json:
        print(json.dumps(s, indent=2))
    else:
        print(f"{args.run}: {s['games']} games, mean score {s['score_mean']:,.0f} (median {s['score_median']:,.0f}, "
              f"best {s['score_max']:,}); reached 512 / 1024 / 2048 / 4096 in {s['reach_512']:.0%} / "
              f"{s['reach_1024']:.0%} / {s['reach_2048']:.0%} / {s['reach_4096']:.0%}")
        print("largest tile: " + ", ".join(f"{t}: {c}" for t, c in s["max_tile_counts"].items()))
    if args.plot is not None:
        import matplotlib

        matplotlib.use("Agg")
        args.plot.parent.mkdir(parents=True, exist_ok=True)
        ev.plot().savefig(args.plot, dpi=100)
        print(f"wrote {args.plot}", file=sys.stderr if args.json else sys.stdout)
    return 0


def _cmd_play(args: argparse.Namespace) -> int:
    from .evaluation import play

    if args.gif is None and args.fps is not None:
        raise ValueError("--fps applies only with --gif")
    if args.gif is not None and args.delay is not None:
        raise ValueError("--delay applies only to the text replay (without --gif)")
    if args.gif is not None and args.gif.suffix.lower() != ".gif":
        raise ValueError(f"--gif must name a .gif file, got {str(args.gif)!r}")
    game = play(args.run, seed=args.seed, max_moves=args.max_moves)
    end = (f"{game.moves:,} moves, score {game.score:,}, largest tile {game.max_tile:,}"
           + (" (stopped by --max-moves)" if game.truncated else ""))
    if args.gif is None:
        delay = args.delay if args.delay is not None else (0.1 if sys.stdout.isatty() else 0.0)
        for t in game.frames(args.every or 1).tolist():
            if t and delay:
                time.sleep(delay)
            print(game.text(t) + "\n", flush=True)
        print(f"{args.run}, seed {args.seed}: {end}")
        return 0
    import matplotlib

    matplotlib.use("Agg")
    from .plots import animate

    every, max_frames = args.every or 1, None if args.every else _GIF_MAX_FRAMES
    shown = game.frames(every, max_frames)
    args.gif.parent.mkdir(parents=True, exist_ok=True)
    print(f"drawing {len(shown):,} frames ...", flush=True)
    animate(game, every, max_frames, interval_ms=1000.0 / (args.fps or 5.0)).save(args.gif, writer="pillow")
    print(f"wrote {args.gif}: {len(shown):,} frames of a game of {end}")
    if args.every is None and len(shown) < game.moves + 1:
        print(f"(a frame every {shown[1]:,} moves, to keep the GIF to {_GIF_MAX_FRAMES} frames; --every 1 draws "
              f"all {game.moves + 1:,} boards)")
    return 0


def _csv(text: str | None, default: str) -> list[str]:
    return [x.strip() for x in (text or default).split(",") if x.strip()]


def _int_list(text: str | None, default: str, flag: str) -> list[int]:
    """Comma-separated integers >= 1 (``default`` when ``text`` is None); ValueError naming ``flag``."""
    items = _csv(text, default)
    if not items or not all(x.isdigit() and int(x) >= 1 for x in items):
        raise ValueError(f"{flag} must be comma-separated integers >= 1, got {text!r}")
    return [int(x) for x in items]


def _cmd_bench(args: argparse.Namespace) -> int:
    from .bench import bench_rules, bench_scaling, bench_update

    if args.what == "learning":
        return _cmd_bench_learning(args)
    if any(v is not None for v in (args.presets, args.minutes, args.games, args.seeds, args.figure, args.lock,
                                   args.shared_threads)):
        raise ValueError("--presets, --minutes, --games, --seeds, --figure, --lock/--no-lock and --shared-threads "
                         "apply only to 'bench learning'")
    if args.what != "scaling" and any(v is not None for v in (args.schemes, args.workers, args.seconds,
                                                                args.eval_games)):
        raise ValueError("--schemes, --workers, --seconds and --eval-games apply only to 'bench scaling' "
                         "(--schemes and --workers also to 'bench learning')")
    if args.what != "acting" and args.bench_n_envs is not None:
        raise ValueError("--n-envs applies only to 'bench acting'")
    if args.what in ("peers", "learner"):
        return _cmd_bench_peers_learner(args)
    if args.write is not None or args.quick or args.no_keras or args.compile or args.threads != 1:
        raise ValueError("--write, --threads, --quick, --no-keras and --compile apply only to "
                         "'bench peers' and 'bench learner'")
    if args.what == "scaling":
        workers = _int_list(args.workers, "1,2", "--workers")
        seconds = args.seconds if args.seconds is not None else 20.0
        rows = bench_scaling(_csv(args.schemes, "serial,independent,shared,sharded,averaged"), workers, seconds,
                             eval_games=args.eval_games or 0)
        if args.json:
            print(json.dumps(rows, indent=2))
        else:
            cols = ["spec", "workers", "env_steps_per_s", "updates_per_s", "acting", "learning", "communication",
                    "speedup_vs_serial"] + (["greedy_score_mean"] if args.eval_games else [])
            _print_table([{c: r[c] for c in cols} for r in rows])
            print(f"each row: one run of {seconds:g} s (mlp preset, learning_starts {rows[0]['learning_starts']:,} "
                  f"per learner); acting / learning / communication: fractions of the time split, summed over "
                  f"workers; speedup: env steps/s over serial's")
    elif args.what == "acting":
        from .bench import bench_acting

        sizes = _int_list(args.bench_n_envs, "1,8,64", "--n-envs")
        rows = bench_acting(sizes)
        if args.json:
            print(json.dumps(rows, indent=2))
        else:
            _print_table([{c: r[c] for c in ("n_envs", "env_steps_per_s", "us_per_env_step", "ms_per_step",
                                             "speedup")} for r in rows])
            print("acting of one process (1 PyTorch thread, greedy: every board through the network; no learning): "
                  "one batched forward pass, one vectorised game step and the replay append per step")
    elif args.what == "game":
        rows = bench_rules()
        print(json.dumps(rows, indent=2)) if args.json else _print_table(rows)
    else:
        res = bench_update()
        if args.json:
            print(json.dumps(res, indent=2))
        else:
            _print_table(res["rows"])
            print(f"batched update is {res['ratio']:,.0f}x faster per env step than the per-transition loop "
                  f"in PyTorch" + (f", {res['ratio_keras']:,.0f}x faster than the same loop in Keras"
                                   if res["ratio_keras"] else " (Keras not installed)"))
    return 0


def _cmd_bench_learning(args: argparse.Namespace) -> int:
    from .bench import write_section
    from .bench.learning import bench_learning, learning_figure, learning_markdown

    if args.seconds is not None or args.eval_games is not None or args.bench_n_envs is not None or args.quick \
            or args.no_keras or args.compile or args.threads != 1:
        raise ValueError("bench learning takes --presets, --variants, --schemes, --workers, --minutes, --games, "
                         "--seeds, --lock/--no-lock, --shared-threads, --write, --figure and --json")
    from .config import PRESETS

    presets = _csv(args.presets, "default,cnn,mlp-afterstate,mlp")
    unknown = [p for p in presets if p not in PRESETS]
    if unknown or not presets:
        raise ValueError(f"--presets must name presets among {sorted(PRESETS)}, got {args.presets!r}")
    seeds = [int(x) for x in _csv(args.seeds, "0") if x.isdigit()]
    if len(seeds) != len(_csv(args.seeds, "0")):
        raise ValueError(f"--seeds must be comma-separated integers >= 0, got {args.seeds!r}")
    schemes = _csv(args.schemes, "serial,shared")
    if (args.lock is not None or args.shared_threads is not None) and "shared" not in schemes:
        raise ValueError("--lock/--no-lock and --shared-threads apply only with the shared scheme in --schemes")
    shared = {k: v for k, v in (("lock", args.lock), ("threads", args.shared_threads)) if v is not None}
    options = {"shared": shared} if shared else None
    res = bench_learning(presets, schemes, _int_list(args.workers, "1,2", "--workers"),
                         minutes=args.minutes or 10.0, games=args.games or 1_000, seeds=seeds, options=options,
                         progress=not args.json, variants=_csv(args.variants, "plain"))
    command = "python -m dqnlab bench " + " ".join(sys.argv[2:] if sys.argv[1:2] == ["bench"] else ["learning"])
    if args.figure is not None:
        import matplotlib

        matplotlib.use("Agg")
        args.figure.parent.mkdir(parents=True, exist_ok=True)
        learning_figure(res).savefig(args.figure, dpi=100)
    if args.write is not None:
        figure = None if args.figure is None else os.path.relpath(args.figure, args.write.parent)
        write_section(args.write, f"learning {res['minutes']:g} min", learning_markdown(res, command, figure))
    if args.json:
        print(json.dumps(res, indent=2))
    else:
        _print_table([{k: r[k] for k in ("preset", "variant", "scheme", "options", "workers", "seed", "minutes",
                                        "env_steps",
                                        "score_mean", "reach_1024", "reach_2048", "reach_4096")}
                      for r in res["rows"]])
        print()
        _print_table(res["time_to_player"])
    return 0


def _cmd_bench_peers_learner(args: argparse.Namespace) -> int:
    from . import bench

    if args.what == "peers" and args.compile:
        raise ValueError("--compile applies only to 'bench learner'")
    if args.what == "learner" and args.no_keras:
        raise ValueError("--no-keras applies only to 'bench peers'")
    command = "python -m dqnlab bench " + " ".join(sys.argv[2:] if sys.argv[1:2] == ["bench"] else [args.what])
    if args.what == "peers":
        quick = dict(presets=("seed",), seconds=3.0, scheme_seconds=6.0, keras=False, game_seconds=0.1,
                     update_min_time=0.05) if args.quick else {}
        res = bench.bench_peers(threads=args.threads, **{"keras": not args.no_keras, **quick})
        text = bench.peers_markdown(res, command)
    else:
        quick = dict(presets=("mlp",), rounds=3, min_time=0.05, matmul_n=1024) if args.quick else {}
        devices = tuple(d.strip() for d in args.devices.split(",") if d.strip())
        res = bench.bench_learner(threads=args.threads, compile=args.compile, devices=devices, **quick)
        text = bench.learner_markdown(res, command)
    print(json.dumps(res, indent=2, default=str) if args.json else text)
    if args.write is not None:
        bench.write_section(args.write, args.what, text)
        print(f"wrote the '{args.what}' section of {args.write}", file=sys.stderr)
    return 0


def _cmd_reproduce(args: argparse.Namespace) -> int:
    import matplotlib

    matplotlib.use("Agg")
    from .experiments import NOTEBOOKS, reproduce

    names = None
    if args.only is not None:
        names = []
        for item in _csv(args.only, ""):
            match = [n for n in NOTEBOOKS if n == item or n.split("_")[0] == item]
            if not match:
                raise ValueError(f"--only: no notebook {item!r}; choose from {list(NOTEBOOKS)}")
            names += match
    written = reproduce(args.out, smoke=args.smoke or None, names=names)
    done = [p for p in written.values() if p is not None]
    print(f"wrote {len(done)} figure(s) to {args.out}/" + (f"; skipped {len(written) - len(done)}"
                                                           if len(done) < len(written) else ""))
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status (2 for bad input, no traceback)."""
    args = _parser().parse_args(argv)
    try:
        return {"train": _cmd_train, "evaluate": _cmd_evaluate, "play": _cmd_play, "bench": _cmd_bench,
                "reproduce": _cmd_reproduce}[args.command](args)
    except ValueError as e:
        message = _name_the_flag(str(e)) if args.command == "train" else str(e)
        print(f"dqnlab: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # outside a run (a run ends cleanly on Ctrl-C and returns 130 itself)
        print("dqnlab: interrupted", file=sys.stderr)
        return 130

