"""Command line: ``python -m dqnlab {train,evaluate,bench} ...`` (``--help`` on each)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

__all__ = ["main"]


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {value}")
    return value


def _nonneg_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {value}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a finite number > 0, got {text}")
    return value


def _parser() -> argparse.ArgumentParser:
    from .config import PRESETS
    from .schemes import SCHEMES

    p = argparse.ArgumentParser(prog="python -m dqnlab", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True, metavar="{train,evaluate,bench}")

    t = sub.add_parser("train", help="train an agent; writes DIR/summary.json, episodes.csv, weights, run.png")
    t.add_argument("--scheme", default="serial", choices=sorted(SCHEMES), help="training scheme (default serial)")
    t.add_argument("--workers", type=_positive_int, default=1, help="worker processes (default 1)")
    t.add_argument("--preset", default="default", choices=sorted(PRESETS), help="hyperparameter preset")
    t.add_argument("--minutes", type=_positive_float, help="wall-clock budget in minutes")
    t.add_argument("--env-steps", type=_positive_int, help="budget in env steps (all boards and workers)")
    t.add_argument("--seed", type=_nonneg_int, default=0, help="random seed (default 0)")
    t.add_argument("--batch-size", type=_positive_int, help="minibatch size (transitions per update)")
    t.add_argument("--n-envs", type=_positive_int, help="boards stepped at once per process")
    t.add_argument("--out", type=Path, help="run directory (default runs/SCHEME-TIME)")
    t.add_argument("--eval-games", type=_nonneg_int, default=100,
                   help="greedy games played after training for the summary (0 = none; default 100)")
    t.add_argument("--no-progress", action="store_true", help="no progress bar")

    e = sub.add_parser("evaluate", help="greedy play of a trained run (or a reference policy)")
    e.add_argument("run", help="run directory, or 'random' / 'corner'")
    e.add_argument("--games", type=_positive_int, default=200, help="games to play (default 200)")
    e.add_argument("--seed", type=_nonneg_int, default=0, help="seed of the games (default 0)")
    e.add_argument("--json", action="store_true", help="print JSON")

    b = sub.add_parser("bench", help="measure speed (prints a table or JSON)")
    b.add_argument("what", choices=["env", "update"], help="env: moves/s of the game; update: legacy vs batched")
    b.add_argument("--json", action="store_true", help="print JSON")
    return p


def _config_from_args(args: argparse.Namespace):
    from .config import TrainConfig

    overrides: dict[str, Any] = {"seed": args.seed}
    if args.minutes is not None or args.env_steps is not None:
        overrides["max_seconds"] = None if args.minutes is None else args.minutes * 60.0
        overrides["total_env_steps"] = args.env_steps
    if args.batch_size is not None:
        overrides["batch_size"] = args.batch_size
    if args.n_envs is not None:
        overrides["n_envs"] = args.n_envs
    return TrainConfig.preset(args.preset, **overrides)


def _print_table(rows: list[dict[str, Any]]) -> None:
    import pandas as pd

    with pd.option_context("display.float_format", "{:,.6g}".format, "display.width", 120):
        print(pd.DataFrame(rows).to_string(index=False))


def _cmd_train(args: argparse.Namespace) -> int:
    import matplotlib

    matplotlib.use("Agg")
    from . import evaluate, train

    config = _config_from_args(args)
    out = args.out or Path("runs") / f"{args.scheme}-{time.strftime('%Y%m%d-%H%M%S')}"
    run = train(args.scheme, config, workers=args.workers, progress=not args.no_progress)
    run.save(out)
    fig = run.plot()
    fig.savefig(out / "run.png", dpi=100)
    s = run.summary()
    split = ", ".join(f"{k} {v:.1f} s" for k, v in s["time_split"].items())
    print(f"\n{run.scheme} x{run.workers} [{run.status}]: {s['env_steps']:,} env steps, {s['updates']:,} updates, "
          f"{s['episodes']:,} games in {s['wall_time_s']:.1f} s")
    print(f"speed: {s['env_steps_per_s']:,.0f} env steps/s, {s['updates_per_s']:,.1f} updates/s; time: {split}")
    if s["episodes"]:
        print(f"training games: mean score {s['score_mean']:,.0f}, last 100 {s['score_mean_last100']:,.0f}, "
              f"best {s['score_max']:,}, largest tile {s['max_tile_max']:,}")
    if args.eval_games:
        ev = evaluate(run, games=args.eval_games, seed=args.seed + 1).summary()
        ref = evaluate("random", games=args.eval_games, seed=args.seed + 1).summary()
        tiles = ", ".join(f"{t}: {c}" for t, c in ev["max_tile_counts"].items())
        print(f"greedy play, {ev['games']} games: mean score {ev['score_mean']:,.0f} "
              f"(random play {ref['score_mean']:,.0f}); largest tiles {{{tiles}}}")
    print(f"saved to {out}/ (summary.json, episodes.csv, weights.npz, run.png)")
    return 130 if run.status == "interrupted" else 0


def _cmd_evaluate(args: argparse.Namespace) -> int:
    from . import evaluate

    s = evaluate(args.run, games=args.games, seed=args.seed).summary()
    if args.json:
        print(json.dumps(s, indent=2))
    else:
        print(f"{args.run}: {s['games']} games, mean score {s['score_mean']:,.0f} (median {s['score_median']:,.0f}, "
              f"best {s['score_max']:,}); reached 512 / 1024 / 2048 in {s['reach_512']:.0%} / "
              f"{s['reach_1024']:.0%} / {s['reach_2048']:.0%}")
        print("largest tile: " + ", ".join(f"{t}: {c}" for t, c in s["max_tile_counts"].items()))
    return 0


def _cmd_bench(args: argparse.Namespace) -> int:
    from .bench import bench_env, bench_update

    if args.what == "env":
        rows = bench_env()
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


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status (2 for bad input, no traceback)."""
    args = _parser().parse_args(argv)
    try:
        return {"train": _cmd_train, "evaluate": _cmd_evaluate, "bench": _cmd_bench}[args.command](args)
    except ValueError as e:
        print(f"dqnlab: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
