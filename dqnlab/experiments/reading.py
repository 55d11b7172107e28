"""What a reader sees of a measurement: tables that fit the page, sentences computed from them, and a figure of
each scheme beside serial.

:func:`readable` formats any table (thousands separators, 2-3 significant decimals, no scientific notation);
:func:`versus_serial_table` is :func:`~dqnlab.bench.learning.versus_serial`'s table in the columns a notebook
shows; :func:`versus_serial_text` says the same numbers in sentences, read from that same table, so that the
prose and the table cannot disagree; :func:`versus_serial_figure` draws each configuration in a panel of its own,
with serial in grey in every panel.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Callable, Sequence
from typing import Any

import pandas as pd

from ..bench.learning import PLAYER_REACH, PLAYER_SCORE, configuration
from .trials import new_figure

__all__ = ["SUMMARY_COLUMNS", "fmt_number", "plain_log_ticks", "readable", "td_settings", "versus_serial_table", "versus_serial_text", "versus_serial_figure",
           "SCHEME_COLOURS"]

#: One colour per scheme in every figure of the notebooks; serial is grey.
SCHEME_COLOURS = {"serial": "0.55", "independent": "C0", "shared": "C2", "sharded": "C3", "averaged": "C4",
                  "actors": "C1"}

#: The columns :func:`versus_serial_table` keeps, and their names there.
_COLUMNS = {"min to 10,000": "min to 10,000", "min to 2048 in half": "min to 2048 in half",
            "min to 4096 in half": "min to 4096 in half", "x serial to 2048 in half": "x serial (2048)",
            "x serial to 4096 in half": "x serial (4096)",
            "mean_at_end": "mean at end", "env_steps_per_s": "env steps/s"}


def fmt_number(v: Any) -> str:
    """``v`` for a reader: integers and values of 100 or more with thousands separators and no decimals, smaller
    ones with 3 significant digits (trailing zeros dropped below 1), never in scientific notation; NaN and None as a dash."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, int) or abs(v) >= 100:
        return f"{v:,.0f}"
    if abs(v) < 5e-7:  # (0 at six decimals)
        return "0"
    decimals = min(6, max(0, 2 - math.floor(math.log10(abs(v)))))
    text = f"{v:,.{decimals}f}"
    return text.rstrip("0") if abs(v) < 1 else text  # 0.990 -> 0.99; 1.00 stays


def plain_log_ticks(ax, which: str = "x", ticks: Sequence[float] | None = None,
                    fmt: Callable[[float], str] | None = None) -> None:
    """Plain numbers on the log-scale ``which`` axis ("x" or "y") of ``ax`` (0.003, 4, 1,000; never ``4×10⁰``
    or ``2⁶``; ``fmt(v)`` if given): at ``ticks`` only where given, else matplotlib's log ticks over at least a
    decade (a narrower view has no decade ticks, and crowded minor ones)."""
    from matplotlib.ticker import NullLocator

    from ..plots import plain_log_labels, plain_number

    fmt = fmt or plain_number
    axis, lim, set_lim = (ax.xaxis, ax.get_xlim, ax.set_xlim) if which == "x" else (ax.yaxis, ax.get_ylim, ax.set_ylim)
    if ticks is not None:
        ticks = sorted(set(ticks))
        axis.set_ticks(ticks, [fmt(t) for t in ticks])
        axis.set_minor_locator(NullLocator())
        return
    lo, hi = lim()
    if 0 < lo and hi < 10 * lo:
        mid = math.sqrt(lo * hi)
        set_lim(mid / math.sqrt(10), mid * math.sqrt(10))
    plain_log_labels(axis, fmt)


#: The columns of :func:`~dqnlab.experiments.summary_table` that fit a notebook's page.
SUMMARY_COLUMNS = ("run", "env_steps/s", "updates/s", "acting %", "learning %", "communication %", "greedy score")


#: Short headers of columns :func:`readable` shows under another name (others: ``_`` as a space).
_HEADERS = {"final_score_mean": "mean score at end", "final_reach_2048": "2048 share at end",
            "minutes_to_10000": "min to 10,000", "minutes_to_2048_in_half": "min to 2048 in half",
            "minutes_to_4096_in_half": "min to 4096 in half"}


def readable(table: pd.DataFrame, columns: Sequence[str] | None = None, *, hide_index: bool = True):
    """``table`` (only ``columns``, those it has, if given) as a pandas Styler that a notebook shows without
    scientific notation or a wide page: every number through :func:`fmt_number`, short headers that wrap
    (:data:`_HEADERS`, else ``_`` as a space), text columns left-aligned, a blank ``variant`` as ``plain``, the
    index hidden, long text wrapped."""
    if columns is not None:
        table = table[[c for c in columns if c in table.columns]]
    if "variant" in table.columns:
        table = table.assign(variant=table["variant"].replace("", "plain"))
    table = table.rename(columns=lambda c: _HEADERS.get(c, c.replace("_", " ")) if isinstance(c, str) else c)
    styler = table.style.format(fmt_number)
    if hide_index:
        styler = styler.hide(axis="index")
    wrap = "white-space: normal; overflow-wrap: break-word;"
    styler.set_table_styles([{"selector": "th", "props": f"max-width: 9em; {wrap}"},
                             {"selector": "td", "props": f"max-width: 18em; {wrap}"}])
    text = [c for c in table.columns if table[c].map(lambda v: isinstance(v, str)).all()]
    left = [{"selector": "th", "props": "text-align: left;"}, {"selector": "td", "props": "text-align: left;"}]
    return styler.set_table_styles(dict.fromkeys(text, left), overwrite=False)


def versus_serial_table(table: pd.DataFrame) -> pd.DataFrame:
    """The columns of :func:`~dqnlab.bench.learning.versus_serial`'s ``table`` a notebook shows, a configuration
    named in one column: ``configuration``, ``seeds``, the minutes of the slowest seed to a greedy mean of 10,000 and
    to 2048 / 4096 in half the games, the ratio to serial's for 4096, the median mean score at the end and the
    median env steps per second (of all workers); a row per configuration, the schemes in :data:`_ORDER`
    (serial first). Show it with :func:`readable`."""
    table = _ordered(table)
    out = pd.DataFrame({"configuration": [_name(r) for r in table.to_dict("records")], "seeds": table["seeds"]})
    for column, name in _COLUMNS.items():
        out[name] = table[column]
    return out


#: Options a configuration runs with when its record names none: said, so that a row says what it ran.
_DEFAULTS = {"independent": ("sync=", "sync=periodic"), "shared": ("lock=", "lock=True")}
#: The order of the schemes in a figure.
_ORDER = ("serial", "shared", "independent", "sharded", "averaged", "actors")


def _name(row: dict[str, Any]) -> str:
    """``scheme (options) (variant) xK``, with the default sync schedule or lock said where the options omit it."""
    options = row["options"]
    key, default = _DEFAULTS.get(row["scheme"], (None, None))
    if key is not None and key not in options:
        options = ", ".join(o for o in (default, options) if o)
    name = configuration(row["scheme"], options, row.get("variant", ""))
    return name + (f" x{row['workers']}" if row["workers"] > 1 else "")


def _ordered(table: pd.DataFrame) -> pd.DataFrame:
    """``table``'s rows with the schemes in :data:`_ORDER` (a scheme's rows together, in their order)."""
    return table.sort_values("scheme", key=lambda s: s.map(lambda x: _ORDER.index(x) if x in _ORDER else len(_ORDER)),
                             kind="stable")


def _ratio(v: float) -> str:
    """A ratio as the table shows it (:func:`fmt_number`), with its ``x``."""
    return f"{fmt_number(float(v))}x"


def versus_serial_text(table: pd.DataFrame, scheme: str | None = None, tile: int = 4096) -> str:
    """Sentences, one per configuration of ``scheme`` (every one but serial for None), read from
    :func:`~dqnlab.bench.learning.versus_serial`'s ``table``: the ratio of its slowest seed's minutes to ``tile``
    (else 2048, where it did not make ``tile`` in every seed) in half the games to serial's (the table's ``x serial to ... in half``, as :func:`fmt_number` shows it), its median mean score
    at the end against serial's, and its env steps a second as a multiple of serial's."""
    rows = _ordered(table).to_dict("records")
    tiles = [t for t in (4096, 2048) if t <= tile]
    serial = next((r for r in rows if r["scheme"] == "serial" and r["variant"] == ""),
                  next((r for r in rows if r["scheme"] == "serial"), None))
    if serial is None:
        return "No serial run in this table: nothing to compare with."
    lines = []
    for r in rows:
        if r["scheme"] == "serial" or (scheme is not None and r["scheme"] != scheme):
            continue
        reached = next((f"reached {t} in half the games in {_ratio(r[f'x serial to {t} in half'])} serial's time"
                        for t in tiles if not math.isnan(r[f"x serial to {t} in half"])), "")
        if math.isnan(r[f"x serial to {tile} in half"]):
            reached += (", but " if reached else "") + f"did not reach {tile} in half the games in every seed"
        speed = r["env_steps_per_s"] / serial["env_steps_per_s"]
        lines.append(f"{_name(r)} {reached}; mean score at the end {r['mean_at_end']:,.0f} "
                     f"(serial {serial['mean_at_end']:,.0f}); env steps/s {_ratio(speed)} serial's.")
    return "\n".join(lines) if lines else f"No {scheme} run in this table."


def _curves(rows: Sequence[dict[str, Any]]) -> dict[tuple, dict[int, list[dict[str, Any]]]]:
    """The rows of each configuration (scheme, options, variant, workers), per seed, in order."""
    out: dict[tuple, dict[int, list[dict[str, Any]]]] = {}
    for r in rows:
        if r.get("minutes") is None:
            continue
        key = (r["scheme"], r["options"], r.get("variant", ""), r["workers"])
        out.setdefault(key, {}).setdefault(r["seed"], []).append(r)
    return out


def versus_serial_figure(data: dict[str, Any], metrics: Sequence[str] = ("score_mean", "reach_4096"),
                         columns: int = 4):
    """Small multiples of a learning record (:func:`~dqnlab.experiments.scheme_learning`): one panel per
    configuration and metric, serial's seeds in grey in each, the configuration's seeds in its scheme's colour
    (:data:`SCHEME_COLOURS`; a marker per seed); minutes on a log scale. At most 10 inches wide."""
    curves = _curves(data["rows"])
    serial_key = next((k for k in curves if k[0] == "serial" and k[2] == ""),
                      next((k for k in curves if k[0] == "serial"), None))
    others = [k for k in curves if k[0] != "serial"] or [k for k in curves if k != serial_key]
    others.sort(key=lambda k: _ORDER.index(k[0]) if k[0] in _ORDER else len(_ORDER))  # stable: a scheme's together
    cols = max(1, min(columns, len(others)))
    blocks = -(-len(others) // cols)
    rows = blocks * len(metrics)
    fig, axes = new_figure(rows, cols, figsize=(min(10.0, 2.6 * cols + 0.6), 2.3 * rows + 0.4),
                           squeeze=False, sharex=True, sharey="row")
    titles = {"score_mean": "greedy mean score", "reach_2048": "games reaching 2048",
              "reach_4096": "games reaching 4096", "reach_8192": "games reaching 8192"}
    for i, key in enumerate(others):
        block, col = divmod(i, cols)
        for m, metric in enumerate(metrics):
            ax = axes[block * len(metrics) + m, col]
            for mine, colour, k in ((False, SCHEME_COLOURS["serial"], serial_key),
                                    (True, SCHEME_COLOURS.get(key[0], "C0"), key)):
                if k is None or (not mine and k == key):
                    continue
                for s, (seed, points) in enumerate(sorted(curves[k].items())):
                    ax.plot([p["minutes"] for p in points], [p.get(metric, math.nan) for p in points],
                            color=colour, lw=1.6 if mine else 1.0, marker="os^vD"[s % 5], ms=3)
            ax.set_xscale("log")
            ax.grid(alpha=0.3)
            ax.axhline(PLAYER_SCORE if metric == "score_mean" else PLAYER_REACH, color="0.3", lw=0.6, ls="--")
            if metric != "score_mean":
                ax.set_ylim(-0.02, 1.02)
            name = textwrap.fill(_name(dict(zip(("scheme", "options", "variant", "workers"), key))), 34)
            ax.set_title(f"{name}\n{titles.get(metric, metric)}" if m == 0 else titles.get(metric, metric),
                         fontsize=8)
            ax.tick_params(labelsize=7)
            if block == blocks - 1 and m == len(metrics) - 1:
                ax.set_xlabel("minutes of training (log)", fontsize=8)
    for j in range(len(others), blocks * cols):
        for m in range(len(metrics)):
            axes[(j // cols) * len(metrics) + m, j % cols].set_visible(False)
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=SCHEME_COLOURS["serial"], lw=1.0), Line2D([], [], color="k", lw=1.6)]
    fig.legend(handles, ["serial (a marker per seed)", "the panel's configuration, in its scheme's colour"],
               loc="outside lower center", ncol=2, fontsize=7)
    return fig


def td_settings() -> pd.DataFrame:
    """The settings of the TD target a scheme notebook's runs train with: the ``default`` preset (the measured
    curves, and the panel's learner unless another is chosen) and :func:`~dqnlab.experiments.explore_config`
    (the small MLP of the ``ex.*_data()`` runs, full budget)."""
    from ..config import TrainConfig
    from .budgets import FULL, explore_config

    keys = ("network", "afterstate", "gamma", "n_step", "optimizer", "lr", "batch_size", "target_update",
            "double_dqn")
    rows = []
    for who, config in (("the curves and the panel (`default` preset)", TrainConfig.preset("default")),
                        ("the ex.*_data() runs (a small MLP)", explore_config(FULL))):
        d = config.to_dict()
        rows.append({"trains": who, **{k: d[k] for k in keys}})
    return pd.DataFrame(rows)
