"""mkdocs-macros: the parts of the site generated from the package.

* ``options_table(name)``: a scheme's options (or ``"TrainConfig"``'s fields) from their
  declarations (:func:`dqnlab.options.specs`);
* ``results(name, **filters)``: the record ``docs/results/NAME.json`` as markdown, through
  :func:`dqnlab.bench.store.markdown` (``scheme=``: that scheme's rows and serial's), and its figure
  ``NAME.png`` where there is one; a missing record fails the build; ``other_results()``: every record
  the page has not shown (so that a new record appears on the results page);
* ``presets_table()``: :data:`dqnlab.PRESETS`, each against ``TrainConfig``'s defaults.
"""

from __future__ import annotations

import dataclasses
import html
import os
import re
from pathlib import Path


def _escape(text: str) -> str:
    """Plain text safe in a markdown table cell."""
    return re.sub(r"([\\`*_{}\[\]|])", r"\\\1", html.escape(text, quote=False))


def _code(value: object) -> str:
    return "`" + repr(value).replace("|", "\\|") + "`"


def _default(field: dataclasses.Field) -> object:
    return field.default_factory() if field.default is dataclasses.MISSING else field.default


def _declared(name: str) -> type:
    from dqnlab.config import TrainConfig
    from dqnlab.schemes import SCHEMES

    if name == "TrainConfig":
        return TrainConfig
    if name not in SCHEMES:
        raise ValueError(f"options_table: {name!r} is neither a scheme ({sorted(SCHEMES)}) nor 'TrainConfig'")
    return SCHEMES[name].Options


def options_table(name: str) -> str:
    """The declared options of scheme ``name`` (or TrainConfig's fields) as a markdown table."""
    from dqnlab.options import specs

    cls = _declared(name)
    declared = specs(cls)
    if not declared:
        return f"`{name}` takes no options: it is configured by `TrainConfig` alone."
    defaults = {f.name: _default(f) for f in dataclasses.fields(cls)}
    rows = ["| option | default | allowed | unit | applies when | what it is |", "|---|---|---|---|---|---|"]
    for field, spec in declared.items():
        applies = ""
        if spec.applies is not None:
            sign = "≠" if spec.applies.negate else "="
            applies = f"`{spec.applies.name}` {sign} " + " or ".join(_code(v) for v in spec.applies.values)
        rows.append(f"| `{field}`<br>`{spec.flag}` | {_code(defaults[field])} | {_escape(spec.allowed)} "
                    f"| {_escape(spec.unit or '')} | {applies} | {_escape(spec.doc)} |")
    return "\n".join(rows)


def presets_table() -> str:
    """Each preset of ``dqnlab.PRESETS``: the fields it sets, with their values."""
    from dqnlab.config import PRESETS

    rows = ["| preset | fields it sets (the others: `TrainConfig`'s defaults) |", "|---|---|"]
    for name, fields in PRESETS.items():
        rows.append(f"| `{name}` | " + ", ".join(f"`{k}={v!r}`" for k, v in fields.items()).replace("|", "\\|")
                    + " |")
    return "\n".join(rows)


def define_env(env) -> None:
    """Register the macros (mkdocs-macros calls this once per build)."""
    store_dir = Path(env.conf["docs_dir"]) / "results"

    shown: dict[str, set[str]] = {}  # page -> the records it has shown so far

    def results(name: str, **filters: object) -> str:
        """The record ``docs/results/NAME.json`` as markdown (tables, command, commit, date, machine)."""
        from dqnlab.bench import store

        shown.setdefault(env.page.file.src_uri, set()).add(name)
        path = store_dir / f"{name}.json"
        if not path.is_file():
            raise FileNotFoundError(f"results({name!r}): no record {path} (have: {store.names(store_dir)})")
        text, _, how = store.markdown(path, **filters).partition("\nMeasured by:\n")
        figure = path.with_suffix(".png")
        if figure.is_file():  # the record's figure, linked from the page that shows it
            here = Path(env.page.file.src_uri).parent
            text += f"\n![{name}]({Path(os.path.relpath(figure, store_dir.parent / here)).as_posix()})\n"
        if how.strip():  # the runs' commands, commits, dates and machines, folded
            text += f'\n??? note "How it was measured: {name}.json"\n' + "".join(
                f"    {line}\n" for line in how.strip().splitlines())
        return text

    def other_results() -> str:
        """A section of every record in the store that this page has not shown yet, each under its name."""
        from dqnlab.bench import store

        rest = [n for n in store.names(store_dir) if n not in shown.get(env.page.file.src_uri, set())]
        return "\n".join(["## Other records", "", *(f"### {n}\n\n{results(n)}" for n in rest)]) if rest else ""

    env.macro(options_table)
    env.macro(presets_table)
    env.macro(results)
    env.macro(other_results)
