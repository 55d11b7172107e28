"""The ``evaluate`` and ``play`` commands: a trained run's (or a reference policy's) games, greedy or searching."""

from __future__ import annotations

import argparse
import json
import sys
import time

__all__ = ["GIF_MAX_FRAMES", "cmd_evaluate", "cmd_play"]

#: Frames of a ``play --gif`` without ``--every``: a GIF writer holds every frame in memory (see ``plots.animate``).
GIF_MAX_FRAMES = 500


def cmd_evaluate(args: argparse.Namespace) -> int:
    """``evaluate``: games of a run, greedy or searching ``--search`` plies (or of a reference policy), their
    summary and, with ``--plot``, their figure."""
    from ..evaluation import evaluate

    ev = evaluate(args.run, games=args.games, seed=args.seed, search=args.search, progress=not args.no_progress)
    if args.json:
        print(json.dumps(ev.summary(), indent=2))
    else:
        searching = f" searching {args.search} plies" if args.search > 1 else ""
        print(f"{args.run}: {len(ev.scores)} games{searching}: {ev.describe()}")
    if args.plot is not None:
        import matplotlib

        matplotlib.use("Agg")
        args.plot.parent.mkdir(parents=True, exist_ok=True)
        ev.plot().savefig(args.plot, dpi=100)
        print(f"wrote {args.plot}", file=sys.stderr if args.json else sys.stdout)
    return 0


def cmd_play(args: argparse.Namespace) -> int:
    """``play``: one game, greedy or searching ``--search`` plies, replayed as text or drawn into a GIF."""
    from ..evaluation import play

    if args.gif is None and args.fps is not None:
        raise ValueError("--fps applies only with --gif")
    if args.gif is not None and args.delay is not None:
        raise ValueError("--delay applies only to the text replay (without --gif)")
    if args.gif is not None and args.gif.suffix.lower() != ".gif":
        raise ValueError(f"--gif must name a .gif file, got {str(args.gif)!r}")
    if args.gif is not None and not args.gif.parent.is_dir():
        raise ValueError(f"--gif {str(args.gif)!r}: no folder {str(args.gif.parent)!r} to write it in")
    game = play(args.run, seed=args.seed, max_moves=args.max_moves, search=args.search,
                progress=args.gif is not None and not args.no_progress)
    end = (f"{game.moves:,} moves, score {game.score:,}, largest tile {game.max_tile:,}"
           + (" (stopped by --max-moves)" if game.truncated else "")
           + (f" (searching {args.search} plies)" if args.search > 1 else ""))
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
    from ..plots import animate, save_animation

    every, max_frames = args.every or 1, None if args.every else GIF_MAX_FRAMES
    shown = game.frames(every, max_frames)
    save_animation(animate(game, every, max_frames, interval_ms=1000.0 / (args.fps or 5.0)), args.gif, len(shown),
                   progress=not args.no_progress)
    print(f"wrote {args.gif}: {len(shown):,} frames of a game of {end}")
    if args.every is None and len(shown) < game.moves + 1:
        print(f"(a frame every {shown[1]:,} moves, to keep the GIF to {GIF_MAX_FRAMES} frames; --every 1 draws "
              f"all {game.moves + 1:,} boards)")
    return 0
