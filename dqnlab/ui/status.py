"""What a panel's status line says: a run's progress and summary, in the words of the panel's controls."""

from __future__ import annotations

import math
import re
from typing import Any

from ..runtime.results import RunResult

__all__ = ["IDLE_TEXT", "in_labels", "progress_text", "summary_text", "first_line", "ranking_text",
           "replay_ratio_text"]

#: The status line before a run.
IDLE_TEXT = '<span style="color:#666">set the controls and click Run</span>'


def in_labels(message: str, labels: dict[str, str]) -> str:
    """``message`` with the Python names of a panel's controls (``min_replay_ratio``,
    ``batch_size``, and ``max_seconds`` for the budget, with or without a ``TrainConfig.`` before
    them) replaced by the controls' ``labels`` (name -> label; ``budget_s`` labels the budget). Only
    names with an underscore: the others (``sync``, ``workers``) are words already."""
    words = {name: label for name, label in labels.items() if "_" in name}
    words["max_seconds"] = labels["budget_s"]
    names = "|".join(map(re.escape, words))
    return re.sub(rf"(?:TrainConfig\.)?\b({names})\b", lambda m: words[m[1]], message)


def _recent(run: RunResult, n: int = 20) -> str:
    """Mean score of the last ``n`` games, as text."""
    return f"{float(run.episodes['score'].tail(n).mean()):,.0f}" if len(run.episodes) else "(no game finished)"


def progress_text(scheme: str, run: RunResult, since_report_s: float = 0.0, quiet_s: float = 3.0) -> str:
    """The status line while ``run`` (a snapshot of ``scheme``, reported ``since_report_s`` seconds ago) goes on:
    its seconds counted on to now, and how long ago it reported once that is ``quiet_s`` seconds or more."""
    quiet = f" (last report {since_report_s:.0f} s ago)" if since_report_s >= quiet_s else ""
    return (f"running {scheme} x{run.workers}: {run.wall_time_s + since_report_s:.0f} s of "
            f"{run.config.max_seconds:.0f} s"
            f"{quiet}, {run.env_steps:,} env steps ({run.env_steps_per_s:,.0f}/s), {run.updates:,} updates "
            f"({run.updates_per_s:,.1f}/s), {len(run.episodes):,} games, "
            f"recent score {_recent(run)}")


def summary_text(run: RunResult, settings: dict[str, Any], labels: dict[str, str], prep_s: float) -> str:
    """The status line when ``run`` has ended: its ``settings`` (in ``labels``' words; an option left unset,
    None, as ``auto``), its network, speed, time split and recent score, and the ``prep_s`` seconds of start-up before its budget if they were noticeable."""
    s = run.summary()
    split = ", ".join(f"{k} {v:.0%}" for k, v in s["time_fraction"].items() if v is not None) or "none measured"
    opts = in_labels(", ".join(f"{k}={'auto' if v is None else v}" for k, v in settings.items()), labels)
    c = run.config
    learner = f"{c.network} network" + (" on afterstates" if c.afterstate else "")
    return (f"<b>{run.status}</b> ({opts}, batch {c.batch_size}, {learner}): {s['env_steps']:,} env steps, "
            f"{s['updates']:,} updates, {s['episodes']:,} games in {s['wall_time_s']:.1f} s &mdash; "
            f"{s['env_steps_per_s']:,.0f} env steps/s, {s['updates_per_s']:,.1f} updates/s; "
            f"time: {split}; recent score {_recent(run)}"
            + (f"; {ratio}" if (ratio := replay_ratio_text(run)) else "")
            + (f"; before the budget: {prep_s:.1f} s of start-up (compiling, starting workers)"
               if prep_s >= 0.5 else ""))


def replay_ratio_text(run: RunResult) -> str | None:
    """What the replay ratio of a run that throttles its actors (``actors``) means, in words, every ratio
    written with two decimals; None for a run without one. The ratio over the whole run counts the env steps
    before learning started, and the throttle lets the learner fall a slack of updates behind the floor: so a
    ratio just under the floor (3.95 for a floor of 4) is the throttle working, not a fault."""
    extra = run.extra or {}
    achieved, floor = extra.get("achieved_replay_ratio"), extra.get("min_replay_ratio")
    if achieved is None or floor is None:
        return None
    learning = extra.get("achieved_replay_ratio_learning")
    since = f", {learning:.2f} since learning started" if learning is not None else ""
    slack = extra.get("slack_updates")
    behind = f"more than {slack} updates" if slack else "too far"
    ceiling = extra.get("replay_ratio")
    top = f" and ceiling {ceiling:.2f}" if ceiling is not None else ""
    if floor <= 0:
        return (f"replay ratio: the learner trained {achieved:.2f} samples per env step over the run{since}; "
                f"floor 0.00: the actors never paused for it")
    return (f"replay ratio: the learner trained {achieved:.2f} samples per env step over the run{since}, against a "
            f"floor of {floor:.2f}{top}: the actors pause whenever the learner falls {behind} behind the floor, "
            f"so a ratio at or a little under the floor is the throttle holding it")


def first_line(scheme: str) -> str:
    """First sentence of the scheme module's docstring (what the scheme is)."""
    from ..schemes import SCHEMES

    doc = SCHEMES[scheme].__doc__ or ""
    line = doc.split("\n\n")[0].replace("\n", " ")
    return re.sub(r"^``\w+``:\s*", "", line).replace(" -- ", " \u2014 ")


def ranking_text(scores: dict[str, Any], what: str = "score") -> str:
    """Which run scored highest, said only where the runs can tell: ``scores`` maps each run's label to its
    games' scores. The highest mean is named only if it beats every other mean by more than twice the standard
    error of their difference (the spread of the games measured); otherwise the means are said to be within
    noise, with their range, and no run is named."""
    import numpy as np

    stats = {}
    for label, values in scores.items():
        v = np.asarray(values, float)
        v = v[np.isfinite(v)]
        if len(v):
            stats[label] = (float(v.mean()), float(v.std(ddof=1)) / np.sqrt(len(v)) if len(v) > 1 else math.inf)
    if not stats:
        return f"no finished game to compare the {what}s of"
    if len(stats) == 1:
        ((label, (mean, _)),) = stats.items()
        return f"{what} of {label}: {mean:,.0f} (one run: nothing to rank)"
    best = max(stats, key=lambda k: stats[k][0])
    mean, se = stats[best]
    clear = all(mean - m > 2 * math.hypot(se, s) for k, (m, s) in stats.items() if k != best)
    if clear:
        return (f"highest {what}: {best} ({mean:,.0f} &plusmn; {se:,.0f}), beyond the spread of its games "
                f"over the others'")
    means = [m for m, _ in stats.values()]
    spread = [s for _, s in stats.values() if math.isfinite(s)]
    within = f", each &plusmn; {max(spread):,.0f} or less" if spread else ""
    return (f"the {what}s are within noise of each other ({min(means):,.0f} to {max(means):,.0f}{within}): "
            f"these runs cannot rank the schemes")
