"""``python -m dqnlab bench learning``: how strong a player each configuration makes per minute.

Speed benchmarks say how many env steps a scheme takes per second; this one says what
those steps buy. Each configuration (a preset, a scheme, a worker count) trains for a
wall-clock budget in one run, its weights copied at several points of it and played
after the run (so the time spent evaluating is not training time): at each point,
1,000 greedy games with a fixed seed. The headline is **time to a player**: the minutes
of training until the greedy mean score reaches 10,000, and until the 2048 and the 4096
tile are made in half of the games. A results file (:func:`merge_results`) gathers
configurations measured by several commands into one table.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config import TrainConfig
from ..evaluation import evaluate
from .report import machine_info, md_machine, md_table

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["POINTS", "POINTS_BY", "learning_curve", "bench_learning", "time_to_player", "learning_markdown",
           "learning_figure", "parse_variant", "merge_results", "versus_serial", "versus_serial_markdown", "configuration"]

#: Fractions of the budget at which the weights are evaluated: about log-spaced, since on the compiled core
#: a player arrives in the first seconds (of 10 minutes: 12, 21, 30 and 45 s, 1, 1.5, 2, 3, 4, 5.5, 7, 8.5 and 10
#: minutes). A point costs only its evaluation (the run goes on), so they are close enough for a crossing
#: interpolated between two of them to be near the curve's.
POINTS = (0.02, 0.035, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.55, 0.7, 0.85, 1.0)
#: How a row's weights were taken at its point (its ``points_by``; a row without one: ``"resume"``): copied
#: during one continuous run, or (results files before 2026-12-05) the run checkpointed at the point and
#: resumed for the next, which restarts the scheme's workers at every point.
POINTS_BY = {"copy": "in one run, its weights copied at the first progress report past each point",
             "resume": "checkpointed at each point and resumed for the next, its workers started again there"}
#: "A player": the greedy mean score, and the share of games reaching a tile, that count as one.
PLAYER_SCORE, PLAYER_REACH = 10_000, 0.5
#: The tiles whose time to be made in half the games :func:`time_to_player` gives.
PLAYER_TILES = (2048, 4096)
#: :func:`time_to_player`'s marks: name -> (a point's key, the level that makes a player).
_MARKS = {"10000": ("score_mean", PLAYER_SCORE), **{f"{t}_in_half": (f"reach_{t}", PLAYER_REACH) for t in PLAYER_TILES}}


_ROW_KEYS = ("preset", "network", "variant", "scheme", "workers", "options", "status", "seed", "minutes", "env_steps",
             "updates", "score_mean", "score_median", "reach_1024", "reach_2048", "reach_4096", "reach_8192",
             "eval_s", "points_by")


def _options_text(options: dict[str, Any] | None) -> str:
    """``k=v, ...`` sorted, each value as the command line writes it (``stages=8192,16384``, ``lr=0.5``)."""
    def text(v: Any) -> str:
        if isinstance(v, (tuple, list)):
            return ",".join(map(text, v))
        return f"{v:g}" if isinstance(v, float) else str(v)

    return ", ".join(f"{k}={text(v)}" for k, v in sorted((options or {}).items()))


def parse_variant(text: str) -> dict[str, Any]:
    """A configuration variant: :class:`~dqnlab.TrainConfig` fields as ``FIELD=VALUE`` joined by ``+``
    (a bool field alone means True; ``plain`` or nothing: the preset as it is), e.g.
    ``prioritized+n_step=3`` -> ``{"prioritized": True, "n_step": 3}``.

    Raises
    ------
    ValueError
        For a name that is not a field, or a value the field does not take.
    """
    from ..options import specs

    declared = specs(TrainConfig)
    out: dict[str, Any] = {}
    for part in filter(None, text.strip().split("+")):
        if part == "plain":
            continue
        name, eq, value = part.partition("=")
        spec = declared.get(name)
        if spec is None or (not eq and spec.kind != "bool"):
            raise ValueError(f"variant {text!r}: each part must be FIELD=VALUE of a TrainConfig field (a bool field "
                             f"alone means True), or 'plain'; got {part!r}")
        try:
            out[name] = spec.from_text(value) if eq else True
        except ValueError as e:
            raise ValueError(f"variant {text!r}: {name}: {e}") from None
    return out


class _Points:
    """A :func:`learning_curve` run's callback: the snapshot of the run (a copy of its weights) at the first
    report at or past each of ``seconds`` (wall time), and every report passed on to ``then``. Between the
    points, without ``then``, the run makes no snapshot (:meth:`due`)."""

    def __init__(self, seconds: Sequence[float], then: Callable[[Any], Any] | None):
        self.seconds, self.then = list(seconds), then
        self.taken: list[Any] = []  # RunResults, one per point reached (a point the run passed unseen: none)
        self.next = 0  # the first point not taken yet

    def due(self, elapsed: float) -> bool:
        return self.then is not None or (self.next < len(self.seconds) and elapsed >= self.seconds[self.next])

    def __call__(self, snapshot: Any) -> Any:
        if self.next < len(self.seconds) and snapshot.wall_time_s >= self.seconds[self.next]:
            self.taken.append(snapshot)
            while self.next < len(self.seconds) and snapshot.wall_time_s >= self.seconds[self.next]:
                self.next += 1
        return None if self.then is None else self.then(snapshot)


def learning_curve(preset: str, scheme: str = "serial", workers: int = 1, minutes: float = 10.0,
                   points: Sequence[float] = POINTS, games: int = 1_000, seed: int = 0, eval_seed: int = 1,
                   options: dict[str, Any] | None = None, run_dir: str | Path | None = None,
                   progress: bool = False, overrides: dict[str, Any] | None = None,
                   variant: dict[str, Any] | None = None,
                   callback: Callable[[Any], Any] | None = None) -> list[dict[str, Any]]:
    """Train one configuration for ``minutes`` and evaluate it at each of ``points``.

    The configuration trains once, without a pause, for ``max(points) * minutes``; at the first progress
    report (about once a second) at or past each earlier point its weights are copied, and after the run
    every copy, and the weights it ends with, play the games. Evaluating is not training time, and the run
    is the one a user would make (nothing restarts it at the points).

    Parameters
    ----------
    preset : str
        A name in :data:`dqnlab.PRESETS`; its budget is replaced by ``minutes``.
    scheme, workers, options
        As in :func:`dqnlab.train`.
    minutes : float
        Wall-clock training budget (> 0), in minutes.
    points : sequence of float
        Increasing fractions of the budget in (0, 1] at which to evaluate.
    games, eval_seed : int
        Greedy games per evaluation and the seed of their tile spawns (the same games at
        every point and for every configuration).
    seed : int
        Training seed.
    run_dir : path, optional
        Where to keep the run (its checkpoint and result files at the end); none when None.
    overrides : dict, optional
        :class:`~dqnlab.TrainConfig` fields replacing the preset's.
    variant : dict, optional
        More fields replacing those (:func:`parse_variant`), named in the rows' ``variant``.
    callback : callable, optional
        Passed every snapshot, as :func:`dqnlab.train`'s (with it, the run makes one at every report).

    Returns
    -------
    list of dict
        One row per point: ``preset``, ``network``, ``variant`` (its fields, as text), ``scheme``, ``workers``, ``options``,
        ``status`` (the run's; a run that diverged or lost a worker ends its curve with
        ``"failed ..."`` and the reason, keeping the points before), ``seed``,
        ``minutes`` (training wall time when the weights were copied, a second or so past the point; a
        point the run passed before its first report, or after it stopped early, is left out),
        ``env_steps``, ``updates``, ``score_mean``, ``score_median``, ``reach_1024``, ``reach_2048``,
        ``reach_4096``, ``reach_8192`` (fractions of the games), ``eval_s`` (seconds the evaluation took) and
        ``points_by``: ``"copy"`` (rows of results files written before 2026-12-05 have none: those runs
        were checkpointed at each point and resumed, see :data:`POINTS_BY`).

    Notes
    -----
    A snapshot holds the weights the run's parent has at that moment: those of the learner (``serial``,
    ``actors``, ``averaged``, ``sharded``) or of the shared model (``shared``); for ``independent``, the
    combination of what each learner last posted at a check-in (at most ``sync_every`` updates old).

    Raises
    ------
    ValueError
        For a bad preset, budget or points (and whatever :func:`dqnlab.train` rejects).
    """
    from ..schemes import WorkerError, train

    if not (isinstance(minutes, (int, float)) and math.isfinite(minutes) and minutes > 0):
        raise ValueError(f"minutes must be a number > 0, got {minutes!r}")
    points = [float(p) for p in points]
    if not points or any(not 0 < p <= 1 for p in points) or points != sorted(set(points)):
        raise ValueError(f"points must be increasing fractions in (0, 1], got {points!r}")
    config = TrainConfig.preset(preset, **{**(overrides or {}), **(variant or {}), "seed": seed,
                                           "total_env_steps": None, "max_seconds": points[-1] * minutes * 60.0})
    base = {"preset": preset, "network": config.network, "variant": _options_text(variant), "scheme": scheme,
            "workers": workers, "options": _options_text(options), "seed": seed}
    at = _Points([p * minutes * 60.0 for p in points[:-1]], callback)
    failure = None
    try:
        end = train(scheme, config, workers=workers, progress=progress, run_dir=run_dir, callback=at,
                    **(options or {}))
        snapshots = at.taken + [end]
    except WorkerError as e:  # diverged or a worker died: keep the points so far, say why
        snapshots, failure = at.taken, e.message
    rows: list[dict[str, Any]] = []
    for k, run in enumerate(snapshots):
        t0 = time.perf_counter()
        ev = evaluate(run, games=games, seed=eval_seed)
        s = ev.summary()
        rows.append({**base, "status": run.status if run.status != "running" else "completed",
                     "minutes": run.wall_time_s / 60.0, "env_steps": run.env_steps,
                     "updates": run.updates, "score_mean": s["score_mean"], "score_median": s["score_median"],
                     "reach_1024": ev.reach(1024), "reach_2048": ev.reach(2048), "reach_4096": ev.reach(4096),
                     "reach_8192": ev.reach(8192), "eval_s": time.perf_counter() - t0, "points_by": "copy"})
        snapshots[k] = None  # (its weights: freed as soon as they have played)
    if failure is not None:
        if rows:
            rows[-1]["status"] = f"failed after this point: {failure}"
        else:
            rows.append({**dict.fromkeys(_ROW_KEYS), **base, "status": f"failed before the first point: {failure}"})
    return rows


def configuration(scheme: str, options: str, variant: str) -> str:
    """A configuration's name in the tables: ``scheme (options) (variant)``, each part only where it is set."""
    return scheme + "".join(f" ({x})" for x in (options, variant) if x)


def _key(r: dict[str, Any]) -> tuple:
    """A row's configuration and seed."""
    return r["preset"], r.get("variant", ""), r["scheme"], r["options"], r["workers"], r["seed"]


def time_to_player(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Minutes of training until each configuration first made a player.

    Returns one row per (preset, variant, scheme, options, workers, seed): ``minutes_to_10000`` (when the
    greedy mean reached 10,000), ``minutes_to_2048_in_half`` and ``minutes_to_4096_in_half`` (when that
    tile was made in half the games), None when the budget ran out first, and ``env_steps_to_...`` beside
    each (the env steps of all workers there, interpolated alike; None also for rows without env steps);
    ``budget_minutes``,
    ``env_steps`` and ``final_score_mean``, ``final_reach_2048``, ``final_reach_4096``,
    ``final_reach_8192`` at the last point; ``status``. Each time is where the curve crosses the mark,
    interpolated linearly between the evaluated points around the crossing (the first point, if it is
    already past the mark: an upper bound).
    """
    out: dict[tuple, dict[str, Any]] = {}
    last: dict[tuple, dict[str, Any]] = {}  # the configuration's previous point
    for r in rows:
        row = out.setdefault(_key(r), {
            "preset": r["preset"], "network": r["network"], "variant": r.get("variant", ""), "scheme": r["scheme"],
            "options": r["options"], "workers": r["workers"], "seed": r["seed"],
            **{f"{at}_to_{mark}": None for mark in _MARKS for at in ("minutes", "env_steps")},
            "budget_minutes": 0.0, "env_steps": None,
            "final_score_mean": math.nan, **{f"final_reach_{t}": math.nan for t in (2048, 4096, 8192)}})
        row["status"] = r.get("status", "completed")
        if r["minutes"] is None:  # failed before its first point
            continue
        before = last.get(_key(r))
        last[_key(r)] = r
        for mark, (key, level) in _MARKS.items():
            if row[f"minutes_to_{mark}"] is None and (r.get(key) or 0.0) >= level:
                for at in ("minutes", "env_steps"):
                    row[f"{at}_to_{mark}"] = _crossing(before, r, key, level, at)
        if r["minutes"] >= row["budget_minutes"]:
            row.update(budget_minutes=r["minutes"], env_steps=r.get("env_steps"), final_score_mean=r["score_mean"],
                       **{f"final_reach_{t}": r.get(f"reach_{t}", math.nan) for t in (2048, 4096, 8192)})
    return list(out.values())


def _crossing(before: dict[str, Any] | None, after: dict[str, Any], key: str, mark: float,
              at: str = "minutes") -> float | None:
    """The ``at`` (minutes, or env steps) at which ``key`` reached ``mark``, linear between the point ``before``
    (below it) and ``after`` (at or above it); ``after``'s without a point before; None where a point lacks ``at``."""
    if before is None or before.get(key) is None or before[key] >= mark:
        return after.get(at)
    if before.get(at) is None or after.get(at) is None:
        return None
    share = (mark - before[key]) / (after[key] - before[key])
    return before[at] + share * (after[at] - before[at])


def _runs(res: dict[str, Any]) -> list[dict[str, Any]]:
    """The commands behind a result, each with its commit, machine and ``keys``: the configurations and seeds it
    measured (:func:`_key` as lists)."""
    if res.get("runs"):
        return list(res["runs"])
    return [{"command": res.get("command"), "commit": res.get("commit"), "machine": res["machine"],
             "keys": sorted(list(k) for k in {_key(r) for r in res["rows"]})}]


def merge_results(old: dict[str, Any] | None, new: dict[str, Any]) -> dict[str, Any]:
    """:func:`bench_learning` results ``new`` added to ``old`` (a results file's; None: none yet): the rows of each
    configuration and seed in ``new`` replace ``old``'s, the time to a player is made again from them, and the
    commands and machines of both are kept, but for an old command whose every row was replaced.

    Raises
    ------
    ValueError
        If the two were measured on different budgets or numbers of games (their rows would not compare).
    """
    if old is None:
        return {**new, "time_to_player": time_to_player(new["rows"]), "runs": _runs(new)}
    if (old["minutes"], old["games"]) != (new["minutes"], new["games"]):
        raise ValueError(f"results of {new['minutes']:g} minutes and {new['games']} games cannot join a file of "
                         f"{old['minutes']:g} minutes and {old['games']} games")
    replaced = {_key(r) for r in new["rows"]}
    rows = [r for r in old["rows"] if _key(r) not in replaced] + list(new["rows"])
    kept = [run for run in _runs(old) if any(tuple(k) not in replaced for k in run["keys"])]
    return {**new, "rows": rows, "time_to_player": time_to_player(rows), "runs": kept + _runs(new)}


def bench_learning(presets: Sequence[str] = ("default", "cnn", "mlp-afterstate", "mlp"),
                   schemes: Sequence[str] = ("serial", "shared"),
                   workers: Sequence[int] = (1, 2), minutes: float = 10.0, points: Sequence[float] = POINTS,
                   games: int = 1_000, seeds: Sequence[int] = (0,), progress: bool = False,
                   variants: Sequence[str] = ("plain",), keep: str | Path | None = None) -> dict[str, Any]:
    """Learning curves of every preset x variant x scheme x worker count (x seed), and their time to a player.

    ``keep``: a folder to keep each configuration's run directory in (its last point's weights and checkpoint,
    for ``evaluate``, ``play`` or ``bench search``), named ``preset[-variant][-options]-scheme-xK-seedS``; None: each is
    removed after its curve.

    ``variants``: configuration variants of each preset (:func:`parse_variant`), e.g.
    ``("plain", "prioritized", "n_step=3", "prioritized+n_step=3")`` to see what prioritized
    replay and n-step returns do to the curve.

    ``schemes``: scheme specs, a name with its options (:func:`~dqnlab.schemes.parse_scheme_spec`:
    ``shared:lock=false``, ``independent:sync=final``). ``serial`` runs with 1 worker; every other scheme
    with each count in ``workers`` above 1 (one worker of a parallel scheme is serial plus overhead).

    Returns
    -------
    dict
        ``machine`` (:func:`dqnlab.bench.report.machine_info` at the start), ``minutes``,
        ``games``, ``rows`` (:func:`learning_curve` rows of every configuration) and
        ``time_to_player`` (:func:`time_to_player` of them).

    Raises
    ------
    ValueError
        Before anything trains: for no or unknown presets, a bad scheme spec, a parallel scheme
        left without a worker count above 1, no seeds, or a bad variant.
    """
    from ..config import PRESETS
    from ..schemes import parse_scheme_spec

    unknown = [p for p in presets if p not in PRESETS]
    if not presets or not schemes or not seeds or unknown:
        raise ValueError(f"presets and schemes must be non-empty lists, presets from {sorted(PRESETS)}, with at "
                         f"least one seed; got presets {list(presets)}, schemes {list(schemes)}, seeds {list(seeds)}")
    parsed = [parse_scheme_spec(spec) for spec in schemes]
    runs = [(scheme, opts, k) for scheme, opts in parsed
            for k in ([1] if scheme == "serial" else [k for k in workers if k > 1])]
    idle = sorted({scheme for scheme, _ in parsed} - {s for s, _, _ in runs})
    if idle:
        raise ValueError(f"workers {list(workers)} leave {idle} with nothing to run: a parallel scheme runs with "
                         f"each worker count above 1")
    chosen = [parse_variant(v) for v in variants] or [{}]
    for preset in presets:
        for extra in chosen:
            TrainConfig.preset(preset, **extra)  # a variant the preset cannot take: an error before anything trains
    machine = machine_info()
    rows: list[dict[str, Any]] = []
    for preset in presets:
        for extra in chosen:
            for scheme, opts, k in runs:
                for seed in seeds:
                    name = "-".join([preset] + [_options_text(o) for o in (extra, opts) if o] + [scheme, f"x{k}", f"seed{seed}"])
                    run_dir = None if keep is None else Path(keep) / re.sub(r"[^A-Za-z0-9.=+_-]+", "_", name)
                    rows += learning_curve(preset, scheme, k, minutes, points, games, seed=seed,
                                           options=opts or None, progress=progress, variant=extra, run_dir=run_dir)
    return {"machine": machine, "minutes": minutes, "games": games, "rows": rows,
            "time_to_player": time_to_player(rows)}


def _points_how(rows: Sequence[dict[str, Any]]) -> str:
    """How the rows' points were taken (:data:`POINTS_BY`), per scheme where they were taken two ways."""
    ways: dict[str, set[str]] = {}
    for r in rows:
        name = f"{r['scheme']} ({r['options']})" if r["options"] else r["scheme"]
        ways.setdefault(r.get("points_by") or "resume", set()).add(name)
    if len(ways) == 1:
        return POINTS_BY[next(iter(ways))]
    return "; ".join(f"{', '.join(sorted(names))}: {POINTS_BY[way]}" for way, names in sorted(ways.items()))


def learning_markdown(res: dict[str, Any], command: str = "python -m dqnlab bench learning",
                      figure: str | None = None) -> str:
    """The result of :func:`bench_learning` (or :func:`merge_results`) as markdown: time to a player, then every
    curve point; where the rows came from several commands, each is named with its machine."""

    def minutes(v: Any) -> str:
        return f"{v:.1f}" if v is not None else f"> {budget:g}"

    budget = res["minutes"]
    tiles = {f"to_{t}": f"minutes to {t} in 50%" for t in PLAYER_TILES}
    ttp = [{**r, "to_10000": minutes(r["minutes_to_10000"]),
            **{f"to_{t}": minutes(r.get(f"minutes_to_{t}_in_half")) for t in PLAYER_TILES}}
           for r in res["time_to_player"]]
    runs = res.get("runs") or [{"command": command, "machine": res["machine"]}]
    where = (md_machine(runs[0]["machine"], 1, runs[0]["command"] or command) if len(runs) == 1 else
             "The rows come from these commands: " + "; ".join(
                 md_machine(r["machine"], 1, r["command"] or command) for r in runs))
    how = _points_how(res["rows"])
    parts = [
        f"## Learning in {budget:g} minutes: time to a player", "",
        where, "",
        f"Each configuration trained for {budget:g} minutes of wall time: {how}. Evaluation time is not "
        f"training time. At each point its weights played "
        f"{res['games']:,} greedy games with spawn seed 1. *Minutes to a player*: when the greedy mean reached "
        f"{PLAYER_SCORE:,}, and when the 2048 (4096) tile was made in half the games, interpolated linearly "
        f"between the two points around the crossing.", "",
        md_table(ttp, {"preset": "preset", "variant": "variant", "scheme": "scheme", "options": "options",
                       "workers": "workers", "seed": "seed", "to_10000": f"minutes to mean {PLAYER_SCORE:,}",
                       **tiles, "final_score_mean": "mean score at the end", "final_reach_2048": "2048 at the end",
                       "final_reach_4096": "4096 at the end", "final_reach_8192": "8192 at the end",
                       "env_steps": "env steps", "status": "status"},
                 {"final_score_mean": "{:,.0f}", "final_reach_2048": "{:.0%}", "final_reach_4096": "{:.0%}",
                  "final_reach_8192": "{:.0%}", "env_steps": "{:,}"}), "",
    ]
    if figure:
        parts += [f"![learning curves]({figure})", ""]
    parts += ["Every point:", "",
              md_table(res["rows"], {"preset": "preset", "variant": "variant", "scheme": "scheme", "options": "options",
                                      "workers": "workers", "seed": "seed",
                                      "minutes": "minutes", "env_steps": "env steps", "updates": "updates",
                                      "score_mean": "mean score", "score_median": "median",
                                      "reach_1024": "1024", "reach_2048": "2048", "reach_4096": "4096",
                                      "reach_8192": "8192", "status": "status"},
                        {"minutes": "{:.2f}", "env_steps": "{:,}", "updates": "{:,}", "score_mean": "{:,.0f}",
                         "score_median": "{:,.0f}", "reach_1024": "{:.0%}", "reach_2048": "{:.0%}",
                         "reach_4096": "{:.0%}", "reach_8192": "{:.0%}"})]
    return "\n".join(parts)


def learning_figure(res: dict[str, Any], axes: Sequence[Any] | None = None, colour_each: bool = False) -> Any:
    """Minutes of training vs greedy mean score and the share of games reaching 2048, 4096 and 8192
    (one line per configuration, the minutes on a log scale) on four ``axes`` (new ones on a matplotlib Figure when None);
    returns the figure. A colour per preset and variant and a line style per scheme (and its options and
    workers); with one preset, a colour per configuration (variant, scheme, options, workers) and a line style
    per variant; with ``colour_each``, a colour per configuration whatever the presets. A marker per seed; the
    legend goes in the first axes for up to 3 short names, else
    under the axes (Axes made by the caller must belong to a figure with a constrained layout for that)."""
    if axes is None:
        from matplotlib.figure import Figure

        axes = Figure(figsize=(13, 3.4), layout="constrained").subplots(1, 4)
    curves: dict[tuple, list[dict[str, Any]]] = {}
    for r in (r for r in res["rows"] if r["minutes"] is not None):
        curves.setdefault((r["preset"], r.get("variant", ""), r["scheme"], r["options"], r["workers"], r["seed"]),
                          []).append(r)
    one = len({k[0] for k in curves}) == 1  # (one preset: a colour per configuration, a line style per variant)

    def coloured(k: tuple) -> tuple:  # what a colour tells apart
        return k[:5] if colour_each else k[1:5] if one else k[:2]

    colours = list(dict.fromkeys(map(coloured, curves)))
    styles = list(dict.fromkeys(k[1] if one else k[2:5] for k in curves))
    seeds = list(dict.fromkeys(k[5] for k in curves))
    cycle = [c["color"] for c in __import__("matplotlib").rcParams["axes.prop_cycle"]]
    for key, rows in curves.items():
        preset, variant, scheme, options, workers, seed = key
        label = (f"{preset}" + (f" [{variant}]" if variant else "") + f", {scheme}"
                 + (f" ({options})" if options else "") + f" x{workers}"
                 + (f", seed {seed}" if len(seeds) > 1 else ""))
        colour = colours.index(coloured(key))
        style = styles.index(variant if one else (scheme, options, workers))
        look = dict(color=cycle[colour % len(cycle)], ls=("-", "--", ":", "-.")[style % 4],
                    marker="os^vD"[seeds.index(seed) % 5], ms=3, label=label)
        x = [r["minutes"] for r in rows]
        for ax, key in zip(axes, ("score_mean", "reach_2048", "reach_4096", "reach_8192")):
            ax.plot(x, [r.get(key, math.nan) for r in rows], **look)
    titles = ("greedy mean score", "games reaching 2048", "games reaching 4096", "games reaching 8192")
    for ax, title in zip(axes, titles):
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("minutes of training (wall time, log scale)")
        ax.set_xscale("log")
        ax.grid(alpha=0.3)
    axes[0].axhline(PLAYER_SCORE, color="grey", lw=0.8, ls="--")
    for ax in axes[1:3]:
        ax.axhline(PLAYER_REACH, color="grey", lw=0.8, ls="--")
    for ax in axes[1:]:
        ax.set_ylim(-0.02, 1.02)
    fig = axes[0].figure
    handles, labels = axes[0].get_legend_handles_labels()
    if len(curves) <= 3 and max(map(len, labels), default=0) <= 40:
        axes[0].legend(fontsize=7)
    else:  # many curves, or long names: a legend of its own under the axes, not over the first one's curves
        ncol = min(2 if max(map(len, labels)) > 60 else 4, len(curves))
        fig.legend(handles, labels, loc="outside lower center", ncol=ncol, fontsize=7)
        fig.set_figheight(fig.get_figheight() + 0.18 * -(-len(curves) // ncol) + 0.3)
    return fig


def versus_serial(data: dict[str, Any]) -> pd.DataFrame:
    """Each configuration of a results file (:func:`merge_results`; or
    :func:`dqnlab.experiments.scheme_learning`'s part of one) against ``serial``, over its seeds: the minutes of its
    slowest seed to a greedy mean of 10,000 and to 2048 / 4096 in half the games (NaN where a seed never got
    there), each also as a ratio to serial's (below 1: sooner than serial, in every seed; serial's plain
    variant where it has several), the median mean score at the end, and the median env steps per second of
    training (all workers). One row per configuration (scheme, options, variant, workers), serial's first, the
    others in the file's order."""
    import pandas as pd

    table = pd.DataFrame(data["time_to_player"])
    if table.empty:
        return table
    table["env_steps_per_s"] = table["env_steps"] / (60.0 * table["budget_minutes"])
    times = {"minutes_to_10000": "to 10,000", "minutes_to_2048_in_half": "to 2048 in half",
             "minutes_to_4096_in_half": "to 4096 in half"}
    table = table.astype({c: float for c in times})

    def slowest(v: Any) -> float:
        return float(v.max()) if v.notna().all() else math.nan

    out = table.groupby(["scheme", "options", "variant", "workers"], sort=False).agg(
        seeds=("seed", "count"), **{f"min {name}": (c, slowest) for c, name in times.items()},
        mean_at_end=("final_score_mean", "median"), env_steps_per_s=("env_steps_per_s", "median")).reset_index()
    out = out.sort_values("scheme", key=lambda s: s != "serial", kind="stable").reset_index(drop=True)
    serial = out[(out["scheme"] == "serial") & (out["variant"] == "")]
    serial = serial if len(serial) else out[out["scheme"] == "serial"]
    for name in times.values():
        base = float(serial[f"min {name}"].iloc[0]) if len(serial) else math.nan
        out[f"x serial {name}"] = out[f"min {name}"] / base
    return out


def versus_serial_markdown(res: dict[str, Any]) -> str:
    """:func:`versus_serial` of ``res`` as a markdown table (minutes of the slowest seed; "> budget": a seed
    never got there), with how many commands made the rows."""
    budget = res["minutes"]
    table = versus_serial(res)
    rows = [{**r, "configuration": configuration(r["scheme"], r["options"], r["variant"])}
            for r in table.to_dict("records")]
    times = ("to 10,000", "to 2048 in half", "to 4096 in half")
    for r in rows:
        for name in times:
            r[f"min {name}"] = f"> {budget:g}" if math.isnan(r[f"min {name}"]) else f"{r[f'min {name}']:.1f}"
    runs = res.get("runs") or []
    seeds = max(r["seeds"] for r in rows) if rows else 0
    which = "one seed (its" if seeds == 1 else f"the slowest of {seeds} seeds (their median"
    return "\n".join([
        md_table(rows, {"configuration": "scheme", "workers": "workers", "seeds": "seeds",
                        **{f"min {n}": f"minutes {n}" for n in times},
                        "x serial to 4096 in half": "x serial to 4096 in half", "mean_at_end": f"mean at {budget:g} min",
                        "env_steps_per_s": "env steps/s"},
                 {"x serial to 4096 in half": "{:.2f}", "mean_at_end": "{:,.0f}", "env_steps_per_s": "{:,.0f}"}),
        "",
        f"{budget:g} minutes of training each, {res['games']:,} greedy games at every point. Minutes: {which} "
        f"mean score and env steps/s). From {len(runs) or 1} `bench learning` command(s).",
    ])
