"""The ``reproduce`` command: every notebook's final figure as a PNG (:mod:`dqnlab.experiments.reproduce`)."""

from __future__ import annotations

import argparse

from .flags import csv_items

__all__ = ["cmd_reproduce"]


def cmd_reproduce(args: argparse.Namespace) -> int:
    """``reproduce``: write the final figure of each notebook asked for (``--smoke``: with smoke mode's budgets)."""
    import matplotlib

    matplotlib.use("Agg")
    from ..experiments import NOTEBOOKS, SMOKE, reproduce

    names = None
    if args.only is not None:
        names = []
        for item in csv_items(args.only, ""):
            match = [n for n in NOTEBOOKS if n == item or n.split("_")[0] == item]
            if not match:
                raise ValueError(f"--only: no notebook {item!r}; choose from {list(NOTEBOOKS)}")
            names += match
    written = reproduce(args.out, SMOKE if args.smoke else None, names=names)
    done = [p for p in written.values() if p is not None]
    print(f"wrote {len(done)} figure(s) to {args.out}/" + (f"; skipped {len(written) - len(done)}"
                                                           if len(done) < len(written) else ""))
    return 0
