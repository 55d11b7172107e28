"""The ``train`` command: train a scheme into a run directory, then report the run (and its greedy games)."""

from __future__ import annotations

import argparse
import shlex
import shutil
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .settings import config_from_args, read_config_file, resume_config, scheme_options

if TYPE_CHECKING:
    from ..runtime.results import RunResult

__all__ = ["cmd_train", "RUN_FILES"]

#: What a run writes into its directory (``tb``: a folder), which ``--overwrite`` removes before the run; nothing else
#: there is touched.
RUN_FILES = ("checkpoint.pt", "summary.json", "episodes.csv", "history.csv", "model.pt", "run.png",
             "error.txt", "worker_error.txt", "tb")


def cmd_train(args: argparse.Namespace) -> int:
    """``train``: run the scheme with the settings of the flags (over ``--config``'s, or ``--resume``'s
    checkpoint) into its run directory, and report it; 1 if the run failed or trained nothing, 130 if it
    was interrupted."""
    import matplotlib

    matplotlib.use("Agg")
    from ..schemes import DivergedError, WorkerError, train

    config, options, out = _settings(args)
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
    _report(run, args, out)
    budget_s = run.config.max_seconds
    if run.env_steps == 0 and run.status == "completed":
        print(f"dqnlab: error: nothing was trained: the budget{f' of {budget_s:g} s' if budget_s else ''} ended "
              f"before the first env step (starting {run.workers} worker process{'es' if run.workers > 1 else ''} "
              f"and what the scheme sets up took it); give it a larger budget (--minutes, --max-seconds)",
              file=sys.stderr)
        return 1
    return 130 if run.status == "interrupted" else 0


def _settings(args: argparse.Namespace) -> tuple[Any, dict[str, Any], Path]:
    """``(config, scheme options, run directory)`` of ``train``'s arguments (``args.scheme`` and
    ``args.workers`` filled in from ``--config`` or the checkpoint)."""
    file_options: dict[str, Any] = {}
    if args.overwrite and args.resume is not None:
        raise ValueError("--overwrite cannot be combined with --resume (a resumed run goes on in its directory)")
    if args.resume is not None:
        config = resume_config(args)
    else:
        file = read_config_file(args.config) if args.config is not None else {}
        scheme = args.scheme or file.get("scheme") or "serial"
        if scheme == file.get("scheme", scheme):  # the file's options are its scheme's
            file_options = file.get("options", {})
        args.scheme, args.workers = scheme, args.workers or file.get("workers") or 1
        config = config_from_args(args, file)
    options = scheme_options(args, file_options)
    out = args.out or args.resume or Path("runs") / f"{args.scheme}-{time.strftime('%Y%m%d-%H%M%S')}"
    if args.resume is None and any((Path(out) / name).exists() for name in ("checkpoint.pt", "summary.json")):
        if not args.overwrite:
            where = shlex.quote(str(out))
            raise ValueError(f"--out {where} already holds a run: --resume {where} continues it, --overwrite "
                             f"replaces it, or choose another --out")
        for name in RUN_FILES:
            path = Path(out) / name
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)
    return config, options, out


def _report(run: RunResult, args: argparse.Namespace, out: Path) -> None:
    """Print what the run did (speed, time split, lag and replay, games, the greedy games of ``--eval-games``),
    save its figure into ``out`` (with the greedy games marked) and say where its files are. An interrupted run
    skips the figure and the greedy games: its prompt comes back at once."""
    from ..evaluation import EvalResult, evaluate
    from ..runtime.loop import RECENT_GAMES

    interrupted = run.status == "interrupted"  # (someone waits for Ctrl-C to end the run: nothing optional)
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
        last = run.episodes.tail(RECENT_GAMES)
        played = EvalResult(*(last[column].to_numpy() for column in ("score", "max_tile", "moves")))
        print(f"training games: {s['episodes']:,}; the last {len(last):,}: {played.describe()}")
    if interrupted:
        print(f"interrupted: skipping the figure and the greedy evaluation (dqnlab.RunResult.load({str(out)!r})"
              f".plot() draws it; python -m dqnlab evaluate {out} plays them)")
    else:
        greedy = None
        if args.eval_games:
            seed = run.config.seed
            greedy = evaluate(run, games=args.eval_games, seed=seed + 1, progress=not args.no_progress)
            random_mean = evaluate("random", games=args.eval_games, seed=seed + 1).scores.mean()
            print(f"greedy play, {args.eval_games} games: {greedy.describe()} (random play: mean {random_mean:,.0f})")
        run.plot(greedy=greedy).savefig(out / "run.png", dpi=100)  # (train() wrote the result files to OUT)
    files = "summary.json, episodes.csv, history.csv, model.pt" + ("" if interrupted else ", run.png")
    if (out / "checkpoint.pt").is_file():
        print(f"saved to {out}/ (checkpoint.pt, {files}); continue it with python -m dqnlab train --resume {out} "
              f"[--env-steps N | --minutes M]")
    else:
        print(f"saved to {out}/ ({files})")
    if not args.no_tensorboard:
        tensorboard = Path(sys.executable).parent / "tensorboard"  # the one installed beside this Python
        print(f"curves in TensorBoard: {tensorboard if tensorboard.exists() else 'tensorboard'} --logdir {out}")
