"""The command line's parser: every command and its flags (``python -m dqnlab COMMAND --help``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from .._version import __version__
from ..player import MAX_SEARCH
from .flags import add_flags, nonneg_float, nonneg_int, positive_float, positive_int, run_or_policy, scheme_flags
from .games import GIF_MAX_FRAMES

__all__ = ["DESCRIPTION", "Parser", "build_parser"]

#: What ``python -m dqnlab --help`` says first.
DESCRIPTION = "Command line: ``python -m dqnlab {train,evaluate,play,bench,reproduce} ...`` (``--help`` on each)."


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors (``dqnlab: error: ...``, exit 2), like every other error here."""

    def error(self, message: str):  # type: ignore[override]
        """Exit 2 with ``message`` as one line, naming the command it is about."""
        where = self.prog.removeprefix("python -m dqnlab").strip()
        self.exit(2, f"dqnlab: error: {where + ': ' if where else ''}{message} (see --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``python -m dqnlab``: ``train``, ``evaluate``, ``play``, ``bench`` and ``reproduce``."""
    p = Parser(prog="python -m dqnlab", description=DESCRIPTION)
    p.add_argument("--version", action="version", version=f"dqnlab {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="{train,evaluate,play,bench,reproduce}")
    _add_train(sub)
    _add_evaluate_play(sub)
    _add_bench(sub)
    _add_reproduce(sub)
    return p


def _add_train(sub) -> None:
    """``train``: its own flags, then one per TrainConfig field and per scheme option."""
    from ..config import PRESETS, TrainConfig
    from ..options import specs
    from ..schemes import SCHEMES

    t = sub.add_parser("train", help="train an agent; writes DIR/summary.json, episodes.csv, weights, run.png",
                       description="Train an agent. Every TrainConfig field and every scheme option is a flag; "
                                   "--config FILE gives them from a file, and flags override it.")
    t.add_argument("--scheme", choices=sorted(SCHEMES), help="training scheme (default serial)")
    t.add_argument("--workers", type=positive_int, help="worker processes (default 1)")
    t.add_argument("--preset", choices=sorted(PRESETS), help="hyperparameter preset (default 'default'; with "
                   "--network and no preset: that family's preset, mlp-afterstate for --network mlp --afterstate)")
    t.add_argument("--config", type=Path, metavar="FILE",
                   help="take scheme, workers, preset, config (a table of TrainConfig fields) and options (a table "
                        "of the scheme's options) from FILE: TOML or JSON, or a finished run's summary.json (or its "
                        "directory) to rerun that configuration; flags given here override the file (a budget flag "
                        "replaces the file's budget; another --scheme leaves out the file's options)")
    t.add_argument("--minutes", type=positive_float,
                   help="wall-clock budget in minutes (--max-seconds in minutes)")
    t.add_argument("--backend", choices=["loky", "dask"],
                   help="where the workers run: loky (local processes, the default) or dask (a dask.distributed "
                        "cluster; needs the 'cluster' extra). Not for serial or shared")
    t.add_argument("--dask-scheduler", metavar="ADDR",
                   help="with --backend dask: address of a running scheduler, e.g. tcp://10.0.0.5:8786 "
                        "(default: start a local cluster of --workers processes for the run)")
    t.add_argument("--out", type=Path, help="run directory (default runs/SCHEME-TIME; with --resume: DIR); one that "
                                            "holds a run already is an error, unless --overwrite")
    t.add_argument("--overwrite", action="store_true",
                   help="replace the run in --out (its checkpoint, result files, run.png and tb/; other files stay)")
    t.add_argument("--checkpoint-every", type=nonneg_float, metavar="SECONDS",
                   help="seconds between checkpoints in the run directory (default 300; 0 = about every second; "
                        "a checkpoint is also written at the end, on Ctrl-C and on Stop)")
    t.add_argument("--resume", type=Path, metavar="DIR",
                   help="continue the run in DIR from its checkpoint (same scheme, workers, config and options); "
                        "with --env-steps N / --minutes M / --max-seconds S: N more env steps / M more minutes / "
                        "S more seconds, else the rest of its budget")
    t.add_argument("--eval-games", type=nonneg_int, default=100,
                   help="greedy games played after training for the summary (0 = none; default 100)")
    t.add_argument("--no-progress", action="store_true", help="no progress bar")
    t.add_argument("--no-tensorboard", action="store_true",
                   help="write no TensorBoard event files (default: DIR/tb/, about once a second; "
                        "watch with tensorboard --logdir runs/)")
    add_flags(t.add_argument_group("config (TrainConfig fields; default: the preset's, else TrainConfig's)"),
               specs(TrainConfig).values())
    for name, declared in scheme_flags().items():
        add_flags(t.add_argument_group(f"{name} options (only with --scheme {name})"), declared.values(),
                   defaults=True)


def _add_evaluate_play(sub) -> None:
    """``evaluate`` and ``play``: a trained run's games, greedy or searching (or a reference policy's)."""
    e = sub.add_parser("evaluate", help="games of a trained run, greedy or searching (or of a reference policy)")
    e.add_argument("run", type=run_or_policy, help="run directory, or 'random' / 'corner'")
    e.add_argument("--games", type=positive_int, default=200, help="games to play (default 200)")
    e.add_argument("--seed", type=nonneg_int, default=0, help="seed of the games (default 0)")
    e.add_argument("--search", type=int, choices=range(1, MAX_SEARCH + 1), default=1, metavar="PLIES",
                   help=f"plies of expectimax an n-tuple afterstate player searches over every spawn (1..{MAX_SEARCH}; "
                        f"default 1: greedy)")
    e.add_argument("--json", action="store_true", help="print JSON")
    e.add_argument("--no-progress", action="store_true", help="no progress bar")
    e.add_argument("--plot", type=Path, metavar="FILE",
                   help="also save the figure of the games there (largest-tile distribution and score histogram; "
                        "e.g. eval.png)")

    pl = sub.add_parser("play", help="watch a trained run (or a reference policy) play one game, greedy or "
                                     "searching: a GIF, or a text replay in the terminal")
    pl.add_argument("run", type=run_or_policy, help="run directory, or 'random' / 'corner'")
    pl.add_argument("--seed", type=nonneg_int, default=0,
                    help="seed of the tile spawns (default 0; the game is the first of evaluate --seed S)")
    pl.add_argument("--max-moves", type=positive_int, metavar="N",
                    help="stop after N moves (default: play to the end)")
    pl.add_argument("--search", type=int, choices=range(1, MAX_SEARCH + 1), default=1, metavar="PLIES",
                    help=f"plies of expectimax (1..{MAX_SEARCH}; default 1: greedy), as evaluate --search")
    pl.add_argument("--gif", type=Path, metavar="FILE.gif",
                    help="write the game as an animated GIF (the board, and the Q-values of the four moves beside it) "
                         "instead of the text replay")
    pl.add_argument("--every", type=positive_int, metavar="N",
                    help=f"one frame (GIF) or board (text) every N moves, the start and the end always included "
                         f"(default 1; a GIF of a game of more than {GIF_MAX_FRAMES - 1} moves: the smallest N that "
                         f"keeps it to {GIF_MAX_FRAMES} frames)")
    pl.add_argument("--fps", type=positive_float, help="GIF: frames per second (default 5)")
    pl.add_argument("--no-progress", action="store_true", help="GIF: no progress bars (moves played, frames drawn)")
    pl.add_argument("--delay", type=nonneg_float, metavar="SECONDS",
                    help="text replay: pause between moves (default 0.1 on a terminal, 0 otherwise)")


def _add_bench(sub) -> None:
    """``bench``: what to measure, and the flags of each measurement."""
    b = sub.add_parser("bench", help="measure speed (prints a table or JSON)")
    b.add_argument("what", choices=["game", "update", "scaling", "interrupt", "acting", "peers", "learner", "learning",
                                   "search", "readme"],
                   help="game: moves/s of the rules, the compiled core (1 and 2 threads) beside the NumPy rules; update: legacy vs batched; "
                        "scaling: env steps/s, updates/s and time split of schemes x worker counts; "
                        "interrupt: seconds from Ctrl-C to the prompt for a train run of each scheme; "
                        "acting: env steps/s of one process's acting at each --n-envs (vectorised acting); "
                        "peers: dqnlab beside Stable-Baselines3 and gymnasium-2048 (extra 'bench'); "
                        "learner: GFLOP/s of an update beside a large matrix product, before/after tuning; "
                        "learning: greedy score of 1,000 games at points of a training budget, and the minutes "
                        "to a player (mean 10,000; 2048 and 4096 in half the games); search: a trained n-tuple player's "
                        "moves/s and score at each depth of expectimax (--run, --depths, --games); readme: write the README's "
                        "results tables from the results store (--results DIR, --write README)")
    b.add_argument("--json", action="store_true", help="print JSON")
    b.add_argument("--schemes", help="scaling, interrupt, learning: comma-separated schemes (scaling: every scheme "
                                     "and its fastest and slowest variants; interrupt: every scheme; learning: "
                                     "serial,shared), each with optional "
                                     ":OPTION=VALUE scheme options, e.g. shared:lock=false, shared:threads=true, "
                                     "independent:sync=final, averaged:average_every=4, sharded:comm=joblib "
                                     "(sharded:joblib for short)")
    b.add_argument("--workers", help="scaling, learning: comma-separated worker counts (default 1,2); interrupt: "
                                     "one count (default 2)")
    b.add_argument("--presets", help="scaling, learning: comma-separated presets (scaling: default default; "
                                     "learning: default,cnn,mlp-afterstate,mlp)")
    b.add_argument("--minutes", type=positive_float, help="learning: training budget of each configuration "
                                                           "(default 10)")
    b.add_argument("--games", type=positive_int, help="learning: greedy games per evaluation (default 1000); "
                                                       "search: games at each depth (default 100)")
    b.add_argument("--run", type=Path, metavar="DIR", help="search: the run directory of the player")
    b.add_argument("--keep", type=Path, metavar="DIR", help="learning: keep each configuration's run directory "
                   "(its last weights and checkpoint) in DIR (default: removed after its curve)")
    b.add_argument("--depths", help=f"search: comma-separated plies, each 1..{MAX_SEARCH} (default 1,2)")
    b.add_argument("--seed", type=nonneg_int, help="search: seed of the games' tile spawns (default 1)")
    b.add_argument("--seeds", help="learning: comma-separated training seeds (default 0)")
    b.add_argument("--variants", help="learning: comma-separated config variants of each preset, each TrainConfig "
                                      "FIELD=VALUE joined by '+' (a bool field alone: True; plain: the preset), e.g. "
                                      "plain,prioritized,n_step=3,prioritized+n_step=3 (default plain)")
    b.add_argument("--figure", type=Path, metavar="PNG", help="learning: also save the curves there "
                                                              "(e.g. docs/results/learning-schemes.png)")
    b.add_argument("--redraw", action="store_true",
                   help="learning: train nothing; draw --figure from the --results record as it is")
    b.add_argument("--results", type=Path, metavar="PATH",
                   help="write the measurement to this record of the results store (e.g. docs/results/speed-game.json; "
                        "learning: the configurations measured now are added to, or replace, those it holds); "
                        "readme: the store's folder (default docs/results)")
    b.add_argument("--seconds", type=positive_float, help="scaling: seconds of each run (default 20); interrupt: "
                                                          "seconds from a run's start to its Ctrl-C (default 40)")
    b.add_argument("--eval-games", type=nonneg_int,
                   help="scaling: greedy games played with each run's final weights (default 0 = none)")
    b.add_argument("--n-envs", dest="bench_n_envs", metavar="N,N,...",
                   help="acting: comma-separated boards stepped at once (default 1,8,64)")
    b.add_argument("--write", type=Path, metavar="PATH", help="readme: the README to rewrite (default README.md)")
    b.add_argument("--threads", type=positive_int, default=1,
                   help="peers, learner: PyTorch threads of the measuring process (default 1)")
    b.add_argument("--quick", action="store_true", help="peers, learner: tiny budgets, for a first look")
    b.add_argument("--no-keras", action="store_true",
                   help="peers: leave out the legacy per-transition loop in Keras (slow)")
    b.add_argument("--compile", action="store_true",
                   help="learner: also time torch.compile-d networks (compiling takes tens of seconds)")
    b.add_argument("--devices",
                   help="learner: comma-separated learner devices whose updates/s to report (cpu, cuda, auto; "
                        "default cpu)")


def _add_reproduce(sub) -> None:
    """``reproduce``: every notebook's final figure."""
    r = sub.add_parser("reproduce", help="regenerate every notebook's final figure as OUT/<notebook>.png")
    r.add_argument("--out", type=Path, default=Path("figures"), help="directory of the PNGs (default figures/)")
    r.add_argument("--smoke", action="store_true",
                   help="tiny budgets (seconds per figure; also on when DQNLAB_SMOKE=1)")
    r.add_argument("--only", help="comma-separated notebooks, by name or number (e.g. 00,07_compare_schemes)")
