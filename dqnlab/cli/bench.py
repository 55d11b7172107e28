"""The ``bench`` command: the speed measurements and ``bench learning``, printed as tables or JSON and, with
``--results PATH``, written to the results store (:mod:`dqnlab.bench.store`); ``bench readme`` draws the
README's tables from the store."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ..player import MAX_SEARCH
from .flags import csv_items, int_list

__all__ = ["cmd_bench"]

#: The flags each measurement takes besides --json (argparse dests; --results is every measurement's).
_TAKES: dict[str, set[str]] = {
    "game": {"results"},
    "update": {"results"},
    "acting": {"results", "bench_n_envs"},
    "scaling": {"results", "presets", "schemes", "workers", "seconds", "eval_games"},
    "interrupt": {"results", "schemes", "workers", "seconds"},
    "search": {"results", "run", "depths", "games", "seed"},
    "peers": {"results", "threads", "quick", "no_keras"},
    "learner": {"results", "threads", "quick", "compile", "devices"},
    "learning": {"results", "presets", "schemes", "workers", "minutes", "games", "seeds", "variants", "keep",
                 "figure", "redraw"},
    "readme": {"results", "write"},
}

#: What each measurement's record measures (:mod:`dqnlab.bench.store`), learning's aside.
_MEASURES = {
    "game": "Moves per second of the game's rules: the compiled core beside the NumPy rules, on 1 and 2 threads.",
    "update": "Seconds per env step of the user's per-transition loop beside the batched update (`seed` preset).",
    "acting": "Env steps per second of one process's vectorised acting at each number of boards.",
    "scaling": "Each scheme's env steps/s, updates/s and time split at each worker count, in one run.",
    "interrupt": "Seconds from Ctrl-C to the prompt for a `train` run of each scheme, and what the run kept.",
    "search": "A trained player's score and moves/s at each depth of expectimax, on the same games.",
    "peers": "dqnlab beside Stable-Baselines3's DQN, gymnasium-2048 and the user's per-transition loop.",
    "learner": "The neural networks' DQN update beside the machine's matrix-product speed.",
}


def _given(args: argparse.Namespace, dest: str) -> bool:
    value = getattr(args, dest)
    return value not in (None, False) and not (dest == "threads" and value == 1)


def cmd_bench(args: argparse.Namespace) -> int:
    """``bench WHAT``: run one measurement (its flags checked first), print it as a table or JSON, and with
    ``--results`` write its record to the results store."""
    others = sorted({d for ds in _TAKES.values() for d in ds} - _TAKES[args.what])
    given = ["--" + d.replace("bench_", "").replace("_", "-") for d in others if _given(args, d)]
    if given:
        takes = ", ".join("--" + d.replace("bench_", "").replace("_", "-") for d in sorted(_TAKES[args.what]))
        raise ValueError(f"'bench {args.what}' takes {takes} and --json, not {', '.join(given)}")
    command = "python -m dqnlab bench " + " ".join(sys.argv[2:] if sys.argv[1:2] == ["bench"] else [args.what])
    if args.what == "readme":
        return _cmd_bench_readme(args)
    if args.what == "learning":
        return _cmd_bench_learning(args, command)
    res, kind = _measure(args)
    if args.json:
        print(json.dumps(res, indent=2, default=str))
    if args.results is not None:
        from ..bench.store import save, stamp

        save(args.results, stamp(res if kind != "tables" else {"tables": {args.what: res}}, kind,
                                 _MEASURES[args.what], command))
        print(f"wrote {args.results}", file=sys.stderr)
    return 0


def _measure(args: argparse.Namespace) -> tuple[Any, str]:
    """Run ``bench WHAT`` (not learning), print its table unless ``--json``; return its result and record kind."""
    from .. import bench

    if args.what == "peers":
        quick = dict(presets=("seed",), seconds=3.0, scheme_seconds=6.0, keras=False, game_seconds=0.1,
                     update_min_time=0.05) if args.quick else {}
        res = bench.bench_peers(threads=args.threads, **{"keras": not args.no_keras, **quick})
        if not args.json:
            print(bench.peers_markdown(res))
        return res, "peers"
    if args.what == "learner":
        quick = dict(presets=("mlp",), rounds=3, min_time=0.05, matmul_n=1024) if args.quick else {}
        devices = tuple(d.strip() for d in (args.devices or "cpu").split(",") if d.strip())
        res = bench.bench_learner(threads=args.threads, compile=args.compile, devices=devices, **quick)
        if not args.json:
            print(bench.learner_markdown(res))
        return res, "learner"
    if args.what == "search":
        rows = _bench_search(args)
        note = (f"the same {rows[0]['games']} games at each depth, one process, one thread; depth 1 is the greedy "
                f"player, all its games' boards in one batch per move (its speed grows with --games)")
    elif args.what == "scaling":
        from ..bench.scaling import SCALING_SCHEMES, scaling_config

        workers = int_list(args.workers, "1,2", "--workers")
        seconds = args.seconds if args.seconds is not None else 20.0
        schemes = csv_items(args.schemes, ",".join(SCALING_SCHEMES))
        cols = ["spec", "workers", "env_steps_per_s", "updates_per_s", "acting", "learning", "communication",
                "speedup_vs_serial"] + (["greedy_score_mean"] if args.eval_games else [])
        rows = [{"preset": preset} | {c: r[c] for c in cols} | {"learning_starts": r["learning_starts"]}
                for preset in csv_items(args.presets, "default")
                for r in bench.bench_scaling(schemes, workers, seconds, scaling_config(preset),
                                             eval_games=args.eval_games or 0)]
        note = (f"each row: one run of {seconds:g} s; acting / learning / communication: fractions of the time "
                f"split, summed over workers; speedup: env steps/s over serial's of the same preset")
    elif args.what == "interrupt":
        from ..bench.interrupt import INTERRUPT_SCHEMES, bench_interrupt

        workers = int_list(args.workers, "2", "--workers")
        if len(workers) != 1:
            raise ValueError(f"--workers: bench interrupt takes one worker count, got {args.workers!r}")
        after = args.seconds if args.seconds is not None else 40.0
        rows = bench_interrupt(csv_items(args.schemes, ",".join(INTERRUPT_SCHEMES)), workers[0], after)
        note = (f"each row: `python -m dqnlab train` on the default preset, Ctrl-C (SIGINT to its process group) "
                f"{after:g} s after its start; exit status 130: interrupted, its data kept")
    elif args.what == "acting":
        rows = [{c: r[c] for c in ("n_envs", "env_steps_per_s", "us_per_env_step", "ms_per_step", "speedup")}
                for r in bench.bench_acting(int_list(args.bench_n_envs, "1,8,64", "--n-envs"))]
        note = ("acting of one process (1 PyTorch thread, greedy: every board through the network; no learning): "
                "one batched forward pass, one vectorised game step and the replay append per step")
    elif args.what == "game":
        rows, note = bench.bench_rules(), ""
    else:
        res = bench.bench_update()
        rows = res["rows"]
        note = (f"batched update is {res['ratio']:,.0f}x faster per env step than the per-transition loop in "
                f"PyTorch" + (f", {res['ratio_keras']:,.0f}x faster than the same loop in Keras"
                              if res["ratio_keras"] else " (Keras not installed)"))
    if not args.json:
        _print_table(rows)
        if note:
            print(note)
    return rows, "tables"


def _bench_search(args: argparse.Namespace) -> list[dict[str, Any]]:
    """``bench search``: a trained player's moves/s and score at each depth of expectimax."""
    from ..bench.search import bench_search

    if args.run is None:
        raise ValueError("bench search needs --run DIR: the run directory of a trained n-tuple afterstate player")
    depths = int_list(args.depths, "1,2", "--depths")
    if any(not 1 <= d <= MAX_SEARCH for d in depths):
        raise ValueError(f"--depths must be comma-separated plies, each in 1..{MAX_SEARCH}, got {args.depths!r}")
    return bench_search(str(args.run), depths, games=args.games or 100, seed=1 if args.seed is None else args.seed)


def _cmd_bench_readme(args: argparse.Namespace) -> int:
    """``bench readme``: rewrite the README's results tables (``--write``, default README.md) from the store
    (``--results``, default docs/results)."""
    from ..bench.store import update_readme

    readme = args.write or Path("README.md")
    store = args.results or Path("docs/results")
    if not store.is_dir():
        raise ValueError(f"--results must be the results store's folder, got {str(store)!r}")
    written = update_readme(readme, store)
    print(f"wrote {', '.join(written)} in {readme} from {store}", file=sys.stderr)
    return 0


def _cmd_bench_learning(args: argparse.Namespace, command: str) -> int:
    from ..bench.learning import bench_learning, learning_figure, merge_results
    from ..bench.store import commit, load, save
    from ..config import PRESETS

    trains = {"--presets": args.presets, "--schemes": args.schemes, "--workers": args.workers, "--minutes": args.minutes,
              "--games": args.games, "--seeds": args.seeds, "--variants": args.variants, "--keep": args.keep}
    if args.redraw and any(v is not None for v in trains.values()):
        raise ValueError(f"--redraw trains nothing: it takes --results and --figure, not "
                         f"{', '.join(k for k, v in trains.items() if v is not None)}")
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
        try:
            old = load(args.results)
        except ValueError as e:
            raise ValueError(f"--results {e} (a record that bench learning wrote)") from None
        if old["kind"] != "learning":
            raise ValueError(f"--results {args.results} holds a {old['kind']!r} record, not bench learning's")
        if not args.redraw and (old["minutes"], old["games"]) != (args.minutes or 10.0, args.games or 1_000):
            raise ValueError(f"--results {args.results} holds {old['minutes']:g}-minute runs of {old['games']} games: "
                             f"give the same --minutes and --games")
    if args.redraw:
        if old is None:
            raise ValueError("--redraw needs an existing --results record (it trains nothing)")
        res = old
    else:
        res = bench_learning(presets, schemes, int_list(args.workers, "1,2", "--workers"),
                             minutes=args.minutes or 10.0, games=args.games or 1_000, seeds=seeds,
                             progress=not args.json, variants=csv_items(args.variants, "plain"), keep=args.keep)
        res.update(command=command, commit=commit())
        res = merge_results(old, res)
        res = {"kind": "learning", "measures": old["measures"] if old else
               f"{', '.join(presets)}: {', '.join(schemes)} ({args.workers or '1,2'} workers), "
               f"{res['minutes']:g} minutes each, {res['games']:,} greedy games at every point, "
               f"seeds {', '.join(map(str, seeds))}.", **res}
        if args.results is not None:
            save(args.results, res)
    if args.figure is not None:
        import matplotlib

        matplotlib.use("Agg")
        args.figure.parent.mkdir(parents=True, exist_ok=True)
        learning_figure(res).savefig(args.figure, dpi=100)
    if args.json:
        print(json.dumps(res, indent=2))
    else:
        _print_table([{k: r[k] for k in ("preset", "variant", "scheme", "options", "workers", "seed", "minutes",
                                        "env_steps", "score_mean", "reach_1024", "reach_2048", "reach_4096")}
                      for r in res["rows"]])
        print()
        _print_table(res["time_to_player"])
    return 0


def _print_table(rows: list[dict[str, Any]]) -> None:
    """Print ``rows`` as a table, numbers rounded to what can be read at a glance."""
    import pandas as pd

    def fmt(x: float) -> str:
        return f"{x:,.0f}" if abs(x) >= 100 else f"{x:,.2f}" if abs(x) >= 1 else f"{x:.3g}"

    with pd.option_context("display.float_format", fmt, "display.width", 160):
        print(pd.DataFrame(rows).to_string(index=False))
