"""The results store: one JSON record per measurement, in a folder, named by what it measures.

A record is a dict with

* ``kind``: ``"learning"`` (``bench learning``: ``minutes``, ``games``, ``rows``, ``time_to_player``, ``runs``),
  ``"peers"`` or ``"learner"`` (those commands' own results), or ``"tables"`` (``tables``: title -> list of row
  dicts, and optional ``notes``: paragraphs that say how to read them);
* ``measures``: what it measures, in one sentence;
* ``command``, ``commit`` (``git describe`` of the code measured, or the package version outside a checkout)
  and ``machine`` (:func:`dqnlab.bench.report.machine_info`: CPU, cores, load average, versions, UTC date).
  A learning record appends runs: each of its ``runs`` has its own command, commit and machine.

The bench commands write records (``--results PATH``); the documentation site, the README's tables
(:func:`update_readme`) and the notebooks draw on them. A new measurement of the same thing replaces the record.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..runtime.files import atomic_write, read_file
from .report import machine_info, md_table

__all__ = ["KINDS", "commit", "stamp", "load", "save", "names", "markdown", "provenance", "readme_blocks",
           "update_readme"]

#: The kinds of record and the keys each must hold besides ``kind``, ``measures`` and ``machine``.
KINDS: dict[str, tuple[str, ...]] = {"learning": ("minutes", "games", "rows", "time_to_player"),
                                     "tables": ("tables",), "peers": ("sb3",), "learner": ("presets",)}


def commit() -> str:
    """The code being measured: ``git describe --always --dirty`` of the package's checkout, or
    ``dqnlab X.Y.Z`` (the installed version) where the package is not in a git checkout."""
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(["git", "describe", "--always", "--dirty", "--abbrev=10"], cwd=here,
                             capture_output=True, text=True, timeout=10, check=True).stdout.strip()
        top = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=here, capture_output=True, text=True,
                             timeout=10, check=True).stdout.strip()
        if out and (Path(top) / "dqnlab").resolve() == here.parent:
            return out
    except (OSError, subprocess.SubprocessError):
        pass
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"dqnlab {version('dqnlab')}"
    except PackageNotFoundError:
        return "dqnlab (unknown version)"


def stamp(record: dict[str, Any], kind: str, measures: str, command: str) -> dict[str, Any]:
    """``record`` with ``kind``, ``measures``, ``command``, :func:`commit` and, unless it has one,
    :func:`~dqnlab.bench.report.machine_info`."""
    return {"kind": kind, "measures": measures, "command": command, "commit": commit(),
            "machine": record.get("machine") or machine_info(), **{k: v for k, v in record.items() if k != "machine"}}


def load(path: str | os.PathLike) -> dict[str, Any]:
    """The record in the JSON file ``path``.

    Raises
    ------
    FileNotFoundError
        If there is no such file.
    ValueError
        If the file is not a record of this store (unreadable, cut short, or missing its ``kind``'s keys),
        in one line naming the file (:func:`dqnlab.runtime.files.read_file`).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no results record {path}")
    record = read_file(path, "results record")
    kind = record.get("kind") if isinstance(record, dict) else None
    missing = [k for k in ("measures", "machine", *KINDS.get(kind, ())) if k not in record] if kind in KINDS else None
    if missing is None or missing:
        raise ValueError(f"{str(path)!r} is not a results record (kind must be one of {sorted(KINDS)}"
                         + (f"; missing {', '.join(missing)})" if missing else ")"))
    return record


def save(path: str | os.PathLike, record: Mapping[str, Any]) -> None:
    """Write ``record`` to ``path`` as indented JSON, whole or not at all (a temporary file renamed over it)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda f: f.write((json.dumps(record, indent=1) + "\n").encode()))


def names(store: str | os.PathLike) -> list[str]:
    """The records in the folder ``store``: their file names without ``.json``, sorted."""
    return sorted(p.stem for p in Path(store).glob("*.json"))


def provenance(record: Mapping[str, Any]) -> str:
    """One line per run that made ``record``: its command, the code's commit, the machine and its load, and
    the UTC date."""
    runs = record.get("runs") or [record]
    lines = []
    for run in runs:
        m = run.get("machine") or record["machine"]
        load_avg = ", ".join(map(str, m.get("load_average_1_5_15min") or [])) or "unknown"
        lines.append(f"`{run.get('command') or record.get('command')}` at `{run.get('commit') or record.get('commit')}`"
                     f", {m.get('date_utc', 'date unknown')}, on {m.get('cpu', 'an unknown CPU')}, "
                     f"{m.get('logical_cores', '?')} logical cores (load average {load_avg} at the start)")
    return "\n".join(f"- {line}" for line in lines)


def markdown(record: str | os.PathLike | Mapping[str, Any], scheme: str | None = None, points: bool = False) -> str:
    """A record (or the path of one) as markdown: what it measures, its tables, then how it was measured.

    For a learning record: each configuration against serial (:func:`dqnlab.bench.learning.versus_serial`),
    only ``scheme``'s and serial's rows and runs when ``scheme`` is given, and with ``points`` every curve point
    too.

    Raises
    ------
    FileNotFoundError, ValueError
        As :func:`load`; ValueError also for ``scheme`` on a record that is not a learning record.
    """
    rec = load(record) if isinstance(record, (str, os.PathLike)) else record
    if scheme is not None and rec["kind"] != "learning":
        raise ValueError(f"scheme applies only to learning records, not to a {rec['kind']!r} record")
    parts = [f"*{rec['measures']}*", ""]
    if rec["kind"] == "learning":
        from .learning import learning_markdown, time_to_player, versus_serial_markdown

        if scheme is not None:
            rows = [r for r in rec["rows"] if r["scheme"] in (scheme, "serial")]
            runs = [run for run in rec.get("runs", []) if any(k[2] in (scheme, "serial") for k in run["keys"])]
            rec = {**rec, "rows": rows, "time_to_player": time_to_player(rows), "runs": runs}
        parts.append(versus_serial_markdown(rec))
        if points:
            parts += ["", learning_markdown(rec).split("Every point:", 1)[1].strip()]
    elif rec["kind"] == "tables":
        for title, rows in rec["tables"].items():
            parts += [f"**{title}**", "", md_table(rows, {k: k for k in rows[0]} if rows else {}), ""]
        parts += [*rec.get("notes", [])]
    elif rec["kind"] == "peers":
        from .peers import peers_markdown

        parts.append(peers_markdown(rec, rec["command"]).split("\n", 1)[1])
    else:
        from .learner import learner_markdown

        parts.append(learner_markdown(rec, rec["command"]).split("\n", 1)[1])
    parts += ["", "Measured by:", "", provenance(rec)]
    return "\n".join(parts).rstrip() + "\n"


def readme_blocks(store: str | os.PathLike) -> dict[str, str]:
    """The README's generated tables, by marker name, from the records in the folder ``store``:

    * ``schemes`` (``learning-schemes``): each scheme, what it is (its module's first line) and its best measured
      2-worker configuration (soonest to 4096 in half the games) against serial: env steps/s and minutes to
      4096 in half the games as ratios to serial's, and the greedy mean at the end;
    * ``serial`` (``learning-threads``): what one core learns in 1, 3 and 10 minutes (the median of the seeds);
    * ``headline`` (``learning-hour``): the players of an hour, strongest first;
    * ``speed`` (``speed-scaling``): each scheme's env steps/s with 2 workers against serial's, measured in one
      run, and the share of its time in communication.
    """
    import pandas as pd

    from ..schemes import SCHEMES
    from .learning import configuration, versus_serial

    store = Path(store)
    rec = load(store / "learning-schemes.json")
    table = versus_serial(rec)
    serial = table.iloc[0]
    rows = []
    for name, module in SCHEMES.items():
        mine = table[table["scheme"] == name].sort_values(["min to 4096 in half", "mean_at_end"],
                                                          ascending=[True, False], na_position="last")
        if mine.empty:
            continue
        best = mine.iloc[0]
        what = (module.__doc__ or "").split("\n\n")[0].replace("\n", " ").split(": ", 1)[-1]
        rows.append({"scheme": f"[`{name}`](docs/schemes/{name}.md)", "what": what.replace(" -- ", " — "),
                     "configuration": "" if name == "serial" else
                     f"`{'; '.join(x for x in (best['options'], best['variant']) if x) or 'defaults'}`",
                     "speed": best["env_steps_per_s"] / serial["env_steps_per_s"],
                     "time": best["x serial to 4096 in half"], "mean": best["mean_at_end"]})
    blocks = {"schemes": md_table(
        [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()} for r in rows],
        {"scheme": "scheme", "what": "what it is", "configuration": "best measured options (2 workers)",
         "speed": "env steps/s, x serial", "time": "minutes to 4096 in half the games, x serial",
         "mean": f"greedy mean at {rec['minutes']:g} min"},
        {"speed": "{:.2f}", "time": "{:.2f}", "mean": "{:,.0f}"})}
    points = pd.DataFrame([r for r in load(store / "learning-threads.json")["rows"] if r["scheme"] == "serial"])
    rows = []
    for minutes in (1, 3, 10):
        near = points.loc[(points["minutes"] - minutes).abs().groupby(points["seed"]).idxmin()]  # each seed's
        rows.append({"minutes": minutes, "score_mean": near["score_mean"].median(),
                     **{f"reach_{t}": near[f"reach_{t}"].median() for t in (2048, 4096, 8192)}})
    blocks["serial"] = md_table(rows, {"minutes": "minutes on one core", "score_mean": "greedy mean",
                                       "reach_2048": "2048", "reach_4096": "4096", "reach_8192": "8192"},
                                {"score_mean": "{:,.0f}", "reach_2048": "{:.0%}", "reach_4096": "{:.0%}",
                                 "reach_8192": "{:.0%}"})
    hour = load(store / "learning-hour.json")
    best = sorted(hour["time_to_player"], key=lambda r: -r["final_score_mean"])
    blocks["headline"] = md_table(
        [{"budget": f"{r['budget_minutes']:.0f} min", "configuration":
          f"`{configuration(r['scheme'], r['options'], r['variant'])}` x{r['workers']}", **r} for r in best],
        {"configuration": "configuration", "budget": "training", "final_score_mean": "greedy mean",
         "final_reach_2048": "2048", "final_reach_4096": "4096", "final_reach_8192": "8192"},
        {"final_score_mean": "{:,.0f}", "final_reach_2048": "{:.0%}", "final_reach_4096": "{:.0%}",
         "final_reach_8192": "{:.0%}"})
    scaling = load(store / "speed-scaling.json")
    blocks["speed"] = md_table(
        [{**r, "spec": f"`{r['spec']}`"} for r in scaling["tables"]["scaling"]
         if r["workers"] == 2 or r["spec"] == "serial"],
        {"spec": "scheme (2 workers; serial 1)", "env_steps_per_s": "env steps/s", "speedup_vs_serial": "x serial",
         "communication": "time communicating"},
        {"env_steps_per_s": "{:,.0f}", "speedup_vs_serial": "{:.2f}", "communication": "{:.0%}"})
    return blocks


def update_readme(readme: str | os.PathLike, store: str | os.PathLike) -> list[str]:
    """Rewrite the blocks between ``<!-- results NAME -->`` and ``<!-- /results NAME -->`` in ``readme`` from
    :func:`readme_blocks`; returns the names written.

    Raises
    ------
    ValueError
        If ``readme`` has a marker with no block of that name, or none at all.
    """
    path = Path(readme)
    text = path.read_text()
    blocks = readme_blocks(store)
    written = []
    for name, body in blocks.items():
        start, end = f"<!-- results {name} -->", f"<!-- /results {name} -->"
        if start in text and end in text:
            text = text[: text.index(start) + len(start)] + "\n" + body + "\n" + text[text.index(end):]
            written.append(name)
    if not written:
        raise ValueError(f"{path} has no <!-- results NAME --> markers (names: {', '.join(blocks)})")
    path.write_text(text)
    return written
