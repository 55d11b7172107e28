"""The command line's flags: argparse types, and one flag per declared option (TrainConfig fields, scheme
options), built from the declarations, read back from the arguments and named in error messages."""

from __future__ import annotations

import argparse
import dataclasses
import math
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..options import Spec

__all__ = ["positive_int", "nonneg_int", "positive_float", "nonneg_float", "run_or_policy", "csv_items",
           "int_list", "flag_name", "add_flags", "scheme_flags", "flags_given", "name_the_flag"]


def _number(cast, allowed: str, ok):
    """An argparse type: ``cast(text)`` satisfying ``ok``, else an error saying ``allowed``."""

    def parse(text: str):
        try:
            value = cast(text)
        except ValueError:
            value = None
        if value is None or not ok(value):
            raise argparse.ArgumentTypeError(f"expected {allowed}, got {text!r}")
        return value

    return parse


positive_int = _number(int, "an integer >= 1", lambda v: v >= 1)
nonneg_int = _number(int, "an integer >= 0", lambda v: v >= 0)
positive_float = _number(float, "a finite number > 0", lambda v: 0 < v < math.inf)
nonneg_float = _number(float, "a finite number >= 0", lambda v: 0 <= v < math.inf)


def run_or_policy(text: str) -> str:
    """A run directory (written by ``train --out``) or a reference policy name, for argparse."""
    if text in ("random", "corner") or Path(text).is_dir():
        return text
    raise argparse.ArgumentTypeError(f"no run directory {text!r} (give a directory written by train --out, "
                                     f"or 'random' / 'corner')")


def csv_items(text: str | None, default: str) -> list[str]:
    """The comma-separated items of ``text`` (``default`` when it is None or empty), stripped."""
    return [x.strip() for x in (text or default).split(",") if x.strip()]


def int_list(text: str | None, default: str, flag: str) -> list[int]:
    """Comma-separated integers >= 1 (``default`` when ``text`` is None); ValueError naming ``flag``."""
    items = csv_items(text, default)
    if not items or not all(x.isdigit() and int(x) >= 1 for x in items):
        raise ValueError(f"{flag} must be comma-separated integers >= 1, got {text!r}")
    return [int(x) for x in items]


def flag_name(spec: Spec) -> str:
    """The flag as errors name it: ``--sync-every``, ``--lock/--no-lock``."""
    return f"{spec.flag}/--no-{spec.flag[2:]}" if spec.kind == "bool" else spec.flag


def name_the_flag(message: str) -> str:
    """``message`` with the flag in front when it begins with the name of an option or a
    config field (``actor_epsilon must be ...`` -> ``--actor-epsilon: actor_epsilon must be ...``),
    as the checks made while a run starts word them."""
    from ..config import TrainConfig
    from ..options import specs

    declared = {**specs(TrainConfig), **{n: s for d in scheme_flags().values() for n, s in d.items()}}
    name, _, rest = message.removeprefix("TrainConfig.").partition(" ")
    spec = declared.get(name)
    if spec is not None and spec.applies is not None and rest.startswith("applies only with"):
        # (TrainConfig.)priority_alpha applies only with prioritized True ... -> in flags
        dep = declared[spec.applies.name]
        cond = " or ".join(" ".join(dep.flags(v)) for v in spec.applies.values)
        return f"{flag_name(spec)} applies only with {'a value other than ' if spec.applies.negate else ''}{cond}"
    return f"{flag_name(spec)}: {message}" if spec is not None and not message.startswith("TrainConfig.") \
        else message


def _flag_type(spec: Spec):
    """An argparse type reading ``spec``'s value from text (see :meth:`dqnlab.options.Spec.from_text`)."""

    def parse(text: str):
        try:
            return spec.from_text(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    return parse


def add_flags(group, declared: Iterable[Spec], defaults: bool = False) -> None:
    """One flag per declaration in ``declared`` (dest: the field's name; not given: no attribute, so that
    ``none`` is a value):
    ``--name VALUE``, or ``--name/--no-name`` for a bool; help: the doc, unit, when it
    applies and, with ``defaults``, the default."""
    for spec in declared:
        notes = [spec.unit] if spec.unit else []
        if spec.kind != "bool" and not spec.choices:
            notes.append(spec.allowed)
        if spec.applies is not None:
            notes.append(f"only with {spec.applies.text(lambda n: '--' + n.replace('_', '-'), str)}")
        if defaults and spec.default is not dataclasses.MISSING:
            notes.append(f"default {spec.to_text(spec.default)}")
        if spec.flag != "--" + spec.name.replace("_", "-"):  # a file's key is the field's name
            notes.append(f"the field {spec.name}")
        text = (spec.doc + (f" ({'; '.join(notes)})" if notes else "")).replace("%", "%%")
        if spec.kind == "bool":
            group.add_argument(spec.flag, dest=spec.name, action=argparse.BooleanOptionalAction,
                               default=argparse.SUPPRESS, help=text)
            continue
        if spec.choices:
            metavar = "{" + ",".join(map(str, spec.choices)) + (",E1,E2,..." if spec.kind == "custom" else "") + "}"
        else:
            metavar = {"int": "N", "float": "X", "ints": "N,N,...", "dict": "JSON"}.get(spec.kind, spec.name.upper())
        group.add_argument(spec.flag, dest=spec.name, type=_flag_type(spec), default=argparse.SUPPRESS, help=text,
                           metavar=metavar + ("|none" if spec.nullable else ""))


def scheme_flags() -> dict[str, dict[str, Spec]]:
    """Each scheme with options -> the declarations of its options (their flags are
    ``train``'s scheme options).

    Raises
    ------
    TypeError
        If two schemes declare one option name differently, or an option is named like
        a TrainConfig field (one flag each).
    """
    from ..config import TrainConfig
    from ..options import specs
    from ..schemes import SCHEMES

    seen: dict[str, Spec] = dict(specs(TrainConfig))
    out: dict[str, dict[str, Spec]] = {}
    for name, module in SCHEMES.items():
        declared = specs(module.Options)
        for option, spec in declared.items():
            if seen.setdefault(option, spec) != spec:
                raise TypeError(f"option {option!r} of scheme {name!r} is declared differently elsewhere")
        fresh = {option: spec for option, spec in declared.items() if all(
            option not in specs(SCHEMES[other].Options) for other in out)}
        if fresh:
            out[name] = fresh
    return out


def flags_given(args: argparse.Namespace, declared: Iterable[Spec]) -> dict[str, Any]:
    """The values of ``declared``'s flags given on the command line, checked (a choice is
    checked here rather than by argparse, so that the error is main's one line, exit 2).

    Raises
    ------
    ValueError
        ``--flag: name must be ..., got ...``.
    """
    out = {}
    for spec in declared:
        if spec.name in vars(args):
            try:
                out[spec.name] = spec.validate(getattr(args, spec.name))
            except ValueError as e:
                raise ValueError(f"{flag_name(spec)}: {e}") from None
    return out
