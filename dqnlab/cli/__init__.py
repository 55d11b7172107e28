"""Command line: ``python -m dqnlab {train,evaluate,play,bench,reproduce} ...`` (``--help`` on each).

:mod:`~dqnlab.cli.parser` builds the parser, with one flag per declared option
(:mod:`~dqnlab.cli.flags`); each command runs in a module of its own: ``train``
(:mod:`~dqnlab.cli.train`, its settings read by :mod:`~dqnlab.cli.settings`), ``evaluate`` and
``play`` (:mod:`~dqnlab.cli.games`), ``bench`` (:mod:`~dqnlab.cli.bench`) and ``reproduce``
(:mod:`~dqnlab.cli.reproduce`). :func:`main` runs one and says any error in one line.
"""

from __future__ import annotations

import sys

from .bench import cmd_bench
from .flags import name_the_flag, scheme_flags
from .games import cmd_evaluate, cmd_play
from .parser import build_parser
from .reproduce import cmd_reproduce
from .settings import CONFIG_FILE_KEYS, read_config_file
from .train import cmd_train

__all__ = ["main", "read_config_file", "scheme_flags", "CONFIG_FILE_KEYS"]


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status (2 for bad input, no traceback)."""
    args = build_parser().parse_args(argv)
    try:
        return {"train": cmd_train, "evaluate": cmd_evaluate, "play": cmd_play, "bench": cmd_bench,
                "reproduce": cmd_reproduce}[args.command](args)
    except ValueError as e:
        message = name_the_flag(str(e)) if args.command == "train" else str(e)
        print(f"dqnlab: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # outside a run (a run ends cleanly on Ctrl-C and returns 130 itself)
        print("dqnlab: interrupted", file=sys.stderr)
        return 130
