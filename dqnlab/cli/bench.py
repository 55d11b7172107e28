"""The ``bench`` command: the speed measurements and ``bench learning``, printed as tables or JSON."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from ..player import MAX_SEARCH
from .flags import csv_items, int_list

__all__ = ["cmd_bench"]


def cmd_bench(args: argparse.Namespace) -> int:
    """``bench WHAT``: run one measurement (its flags checked first) and print it as a table or JSON."""
    from ..bench import bench_rules, bench_scaling, bench_update

    if args.what != "search" and any(v is not None for v in (args.run, args.depths, args.seed)):
        raise ValueError("--run, --depths and --seed apply only to 'bench search'")
    if args.what != "learner" and args.devices is not None:
        raise ValueError("--devices applies only to 'bench learner'")
    if args.what == "learning":
        return _cmd_bench_learning(args)
    if args.what == "search":
        return _cmd_bench_search(args)
    if any(v is not None for v in (args.presets, args.minutes, args.games, args.seeds, args.variants, args.figure,
                                   args.results, args.keep, args.summary, args.sittings)) or args.redraw:
        raise ValueError("--presets, --minutes, --games, --seeds, --variants, --figure, --results, --redraw, --summary, "
                         "--sittings and --keep "
                         "apply only to 'bench learning' (--games also to 'bench search')")
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
        workers = int_list(args.workers, "1,2", "--workers")
        seconds = args.seconds if args.seconds is not None else 20.0
        rows = bench_scaling(csv_items(args.schemes, "serial,independent,shared,sharded,averaged"), workers, seconds,
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
        from ..bench import bench_acting

        sizes = int_list(args.bench_n_envs, "1,8,64", "--n-envs")
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


def _cmd_bench_search(args: argparse.Namespace) -> int:
    """``bench search``: a trained player's moves/s and score at each depth of expectimax."""
    from ..bench.search import bench_search

    others = {"--presets": args.presets, "--minutes": args.minutes, "--seeds": args.seeds, "--figure": args.figure,
              "--results": args.results, "--summary": args.summary, "--schemes": args.schemes,
              "--workers": args.workers, "--seconds": args.seconds, "--eval-games": args.eval_games,
              "--n-envs": args.bench_n_envs, "--write": args.write, "--variants": args.variants}
    given = [flag for flag, value in others.items() if value is not None]
    if given or args.quick or args.no_keras or args.compile or args.threads != 1:
        raise ValueError(f"'bench search' takes --run, --depths, --games, --seed and --json only (got "
                         f"{', '.join(given) or 'a peers/learner flag'})")
    if args.run is None:
        raise ValueError("bench search needs --run DIR: the run directory of a trained n-tuple afterstate player")
    depths = int_list(args.depths, "1,2", "--depths")
    if any(not 1 <= d <= MAX_SEARCH for d in depths):
        raise ValueError(f"--depths must be comma-separated plies, each in 1..{MAX_SEARCH}, got {args.depths!r}")
    seed = 1 if args.seed is None else args.seed
    rows = bench_search(str(args.run), depths, games=args.games or 100, seed=seed)
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        _print_table(rows)
        print(f"the same {rows[0]['games']} games (spawn seed {seed}) at each depth, one process, one thread; "
              f"depth 1 is the greedy player, all its games' boards in one batch per move (its speed grows with "
              f"--games)")
    return 0


def _cmd_bench_learning(args: argparse.Namespace) -> int:
    from ..bench import write_section
    from ..bench.learning import (
        bench_learning,
        learning_figure,
        learning_markdown,
        merge_results,
        versus_serial_markdown,
    )

    if args.seconds is not None or args.eval_games is not None or args.bench_n_envs is not None or args.quick \
            or args.no_keras or args.compile or args.threads != 1:
        raise ValueError("bench learning takes --presets, --variants, --schemes, --workers, --minutes, --games, "
                         "--seeds, --keep, --results, --redraw, --sittings, --write, --summary, --figure and --json")
    if args.sittings is not None:
        return _cmd_bench_sittings(args)
    trains = {"--presets": args.presets, "--schemes": args.schemes, "--workers": args.workers, "--minutes": args.minutes,
              "--games": args.games, "--seeds": args.seeds, "--variants": args.variants, "--keep": args.keep}
    if args.redraw and any(v is not None for v in trains.values()):
        raise ValueError(f"--redraw trains nothing: it takes --results, --write, --summary and --figure, not "
                         f"{', '.join(k for k, v in trains.items() if v is not None)}")
    from ..config import PRESETS

    presets = csv_items(args.presets, "default,cnn,mlp-afterstate,mlp")
    unknown = [p for p in presets if p not in PRESETS]
    if unknown or not presets:
        raise ValueError(f"--presets must name presets among {sorted(PRESETS)}, got {args.presets!r}")
    seeds = [int(x) for x in csv_items(args.seeds, "0") if x.isdigit()]
    if len(seeds) != len(csv_items(args.seeds, "0")):
        raise ValueError(f"--seeds must be comma-separated integers >= 0, got {args.seeds!r}")
    schemes = csv_items(args.schemes, "serial,shared")
    old = None
    if args.results is not None and args.results.exists():
        old = _read_results(args.results, "--results")
        if not args.redraw and (old["minutes"], old["games"]) != (args.minutes or 10.0, args.games or 1_000):
            raise ValueError(f"--results {args.results} holds {old['minutes']:g}-minute runs of {old['games']} games: "
                             f"give the same --minutes and --games")
    command = "python -m dqnlab bench " + " ".join(sys.argv[2:] if sys.argv[1:2] == ["bench"] else ["learning"])
    if args.redraw:
        if old is None:
            raise ValueError("--redraw needs an existing --results file (it trains nothing)")
        res = merge_results(None, old)
    else:
        res = bench_learning(presets, schemes, int_list(args.workers, "1,2", "--workers"),
                             minutes=args.minutes or 10.0, games=args.games or 1_000, seeds=seeds,
                             progress=not args.json, variants=csv_items(args.variants, "plain"), keep=args.keep)
        res["command"] = command
    if args.results is not None and not args.redraw:
        res = merge_results(old, res)
        args.results.parent.mkdir(parents=True, exist_ok=True)
        args.results.write_text(json.dumps(res, indent=1) + "\n")
    if args.figure is not None:
        import matplotlib

        matplotlib.use("Agg")
        args.figure.parent.mkdir(parents=True, exist_ok=True)
        learning_figure(res).savefig(args.figure, dpi=100)
    if args.write is not None:
        figure = None if args.figure is None else os.path.relpath(args.figure, args.write.parent)
        variants = "" if csv_items(args.variants, "plain") == ["plain"] else " (variants)"
        which = f" ({args.results.stem})" if args.results is not None else variants
        write_section(args.write, f"learning {res['minutes']:g} min{which}", learning_markdown(res, command, figure))
    if args.summary is not None:
        which = f" ({args.results.stem})" if args.results is not None else ""
        write_section(args.summary, f"learning {res['minutes']:g} min{which} versus serial",
                      versus_serial_markdown(res))
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


def _read_results(path: Path, flag: str) -> dict[str, Any]:
    """A results file of ``bench learning`` (``flag`` names where it was given, for the error)."""
    from ..runtime.files import read_file

    try:
        res = read_file(path, "results file of bench learning")
    except ValueError as e:
        raise ValueError(f"{flag} {e}") from None
    if not isinstance(res, dict) or not {"minutes", "games", "rows", "machine"} <= set(res):
        raise ValueError(f"{flag} {path}: not a results file of bench learning")
    return res


def _cmd_bench_sittings(args: argparse.Namespace) -> int:
    """``bench learning --sittings A,B,...``: the results files side by side, each seed against serial's."""
    from ..bench import write_section
    from ..bench.learning import sittings, sittings_markdown

    others = {"--presets": args.presets, "--schemes": args.schemes, "--workers": args.workers,
              "--minutes": args.minutes, "--games": args.games, "--seeds": args.seeds, "--variants": args.variants,
              "--keep": args.keep, "--results": args.results, "--write": args.write, "--figure": args.figure}
    given = [flag for flag, v in others.items() if v is not None] + (["--redraw"] if args.redraw else [])
    if given:
        raise ValueError(f"--sittings trains nothing and writes only --summary: it does not take {', '.join(given)}")
    paths = [Path(p) for p in csv_items(args.sittings, "")]
    if len(paths) < 1:
        raise ValueError(f"--sittings must be comma-separated results files of bench learning, got {args.sittings!r}")
    results = [(p.stem, _read_results(p, "--sittings")) for p in paths]
    table = sittings(results)
    if args.summary is not None:
        # (named after the first file, as --summary names a results file's section: one table a set of sittings)
        write_section(args.summary, f"learning {results[0][1]['minutes']:g} min sittings ({results[0][0]}) versus "
                      f"serial", sittings_markdown(results))
    if args.json:
        print(table.to_json(orient="records", indent=2))
    else:
        _print_table(table.to_dict("records"))
    return 0


def _cmd_bench_peers_learner(args: argparse.Namespace) -> int:
    from .. import bench

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
        devices = tuple(d.strip() for d in (args.devices or "cpu").split(",") if d.strip())
        res = bench.bench_learner(threads=args.threads, compile=args.compile, devices=devices, **quick)
        text = bench.learner_markdown(res, command)
    print(json.dumps(res, indent=2, default=str) if args.json else text)
    if args.write is not None:
        bench.write_section(args.write, args.what, text)
        print(f"wrote the '{args.what}' section of {args.write}", file=sys.stderr)
    return 0


def _print_table(rows: list[dict[str, Any]]) -> None:
    """Print ``rows`` as a table, numbers rounded to what can be read at a glance."""
    import pandas as pd

    def fmt(x: float) -> str:
        return f"{x:,.0f}" if abs(x) >= 100 else f"{x:,.2f}" if abs(x) >= 1 else f"{x:.3g}"

    with pd.option_context("display.float_format", fmt, "display.width", 160):
        print(pd.DataFrame(rows).to_string(index=False))
