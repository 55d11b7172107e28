"""What ``train`` runs: the ``--config`` file, the flags over it, ``--resume``'s checkpoint, the scheme's options."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .flags import flag_name, flags_given, scheme_flags

if TYPE_CHECKING:
    from ..options import Spec

__all__ = ["CONFIG_FILE_KEYS", "read_config_file", "config_from_args", "resume_config", "scheme_options"]

#: Top-level keys of a ``train --config`` file (a run's ``summary.json`` holds them among its results).
CONFIG_FILE_KEYS = ("scheme", "workers", "preset", "config", "options")


def read_config_file(path: str | os.PathLike) -> dict[str, Any]:
    """The run settings in a ``train --config`` file: its keys among :data:`CONFIG_FILE_KEYS`.

    ``path`` is a TOML (``.toml``) or JSON (``.json``) file, or a run directory (its
    ``summary.json``, whose other keys, the run's results, are left out). In a TOML
    file, ``"none"`` stands for None (TOML has no null).

    Raises
    ------
    ValueError
        For a missing or unreadable file, another suffix, an unknown key, or ``config``
        or ``options`` that are not tables.
    """
    from ..runtime.files import read_file

    p = Path(path)
    if p.is_dir():
        p = p / "summary.json"
    if not p.is_file():
        raise ValueError(f"--config: no file {str(p)!r}")
    if p.suffix not in (".toml", ".json"):
        raise ValueError(f"--config {str(p)!r}: expected a .toml or .json file, or a run directory")
    try:
        data = read_file(p, "config file")
    except ValueError as e:
        raise ValueError(f"--config {e}") from None
    if not isinstance(data, dict):
        raise ValueError(f"--config {str(p)!r}: expected a table of {list(CONFIG_FILE_KEYS)}")
    summary = "env_steps" in data and "status" in data  # a run's summary.json
    unknown = sorted(set(data) - set(CONFIG_FILE_KEYS))
    if unknown and not summary:
        raise ValueError(f"--config {str(p)!r}: unknown key(s) {unknown}; allowed: {list(CONFIG_FILE_KEYS)}")
    for key in ("config", "options"):
        if not isinstance(data.get(key, {}), dict):
            raise ValueError(f"--config {str(p)!r}: {key} must be a table of names and values")
    return {key: data[key] for key in CONFIG_FILE_KEYS if key in data}


def _from_file(values: dict[str, Any], declared: dict[str, Spec]) -> dict[str, Any]:
    """A file's values, with ``"none"`` read as None where a field takes None."""
    return {k: None if isinstance(v, str) and v.lower() == "none" and k in declared and declared[k].nullable
            else v for k, v in values.items()}


def config_from_args(args: argparse.Namespace, file: dict[str, Any] | None = None):
    """The TrainConfig of ``train``'s arguments: the preset, then the ``--config`` file's
    ``config`` (``file``: read already), then the flags; a budget given by flags
    (``--env-steps``, ``--max-seconds``, ``--minutes``) replaces the whole budget."""
    from ..config import TrainConfig, family_preset
    from ..options import specs

    if file is None:
        file = read_config_file(args.config) if args.config is not None else {}
    declared = specs(TrainConfig)
    flags = flags_given(args, declared.values())
    if args.minutes is not None:
        if "max_seconds" in flags:
            raise ValueError("--minutes and --max-seconds cannot be combined (both set the time budget)")
        flags["max_seconds"] = args.minutes * 60.0
    if {"total_env_steps", "max_seconds"} & set(flags):
        flags = {"total_env_steps": None, "max_seconds": None, **flags}
    values = {**_from_file(file.get("config", {}), declared), **flags}
    # --network without --preset: that family's preset (the default is the n-tuple network's)
    network = values.get("network")
    preset = args.preset or file.get("preset") or (family_preset(network, values.get("afterstate"))
                                                   if network else "default")
    try:
        return TrainConfig.preset(preset, **values)
    except ValueError as e:  # a value of the file's: say where it came from
        bad = [k for k in file.get("config", {}) if k not in flags and f".{k} " in f" {e} "]
        raise ValueError(f"--config {str(args.config)!r}: {e}" if bad else str(e)) from None


def resume_config(args: argparse.Namespace):
    """``train --resume DIR``: the checkpoint's config, with the budget extended by
    ``--env-steps N`` (N more), ``--minutes M`` (M more), ``--max-seconds S`` (S more);
    flags that would change the config are errors."""
    from ..config import TrainConfig
    from ..options import specs
    from ..runtime.checkpoint import load_checkpoint

    declared = specs(TrainConfig)
    flags = flags_given(args, declared.values())
    given = [flag for flag, value in (("--preset", args.preset), ("--config", args.config)) if value is not None]
    given += [flag_name(declared[name]) for name in flags if name not in ("total_env_steps", "max_seconds")]
    if given:
        raise ValueError(f"{', '.join(given)} cannot be combined with --resume: a resumed run keeps its config "
                         f"(only the budget may change: --env-steps N, --minutes M or --max-seconds S for more)")
    if args.minutes is not None and flags.get("max_seconds") is not None:
        raise ValueError("--minutes and --max-seconds cannot be combined (both set the time budget)")
    ck = load_checkpoint(args.resume)
    args.scheme = args.scheme or ck["scheme"]
    config = TrainConfig.from_dict(ck["config"])
    more_steps = flags.get("total_env_steps")
    more_s = flags.get("max_seconds") if args.minutes is None else 60.0 * args.minutes
    if more_steps is not None or more_s is not None:
        config = config.replace(
            total_env_steps=None if more_steps is None else int(ck["env_steps"]) + more_steps,
            max_seconds=None if more_s is None else float(ck["loop"]["elapsed"]) + more_s)
    return config


def scheme_options(args: argparse.Namespace, file_options: dict[str, Any]) -> dict[str, Any]:
    """The scheme options of ``--config``'s ``file_options`` and the flags (which win),
    checked against ``--scheme`` and against the values of the options they depend on
    (ValueError naming the flag)."""
    from ..options import specs
    from ..schemes import SCHEMES

    everything = [spec for declared in scheme_flags().values() for spec in declared.values()]
    given = flags_given(args, everything)
    takes = specs(SCHEMES[args.scheme].Options)
    wrong = [spec for spec in everything if spec.name in given and spec.name not in takes]
    if wrong:
        flags = ", ".join(flag_name(spec) for spec in wrong)
        allowed = ", ".join(flag_name(spec) for spec in takes.values()) or "none"
        verb = "does" if len(wrong) == 1 else "do"
        raise ValueError(f"{flags} {verb} not apply to --scheme {args.scheme} (its options: {allowed})")
    from_file = _from_file(file_options, takes)
    values = {name: spec.default for name, spec in takes.items()}
    values.update(from_file, **given)
    # a flag that does not apply is an error; so is a file's value that does not apply, unless it is the
    # default (a run's summary.json lists every option)
    for name in [*given, *(n for n in from_file if n not in given and n in takes)]:
        spec, applies = takes[name], takes[name].applies
        if applies is not None and not applies.holds(values) and (name in given or values[name] != spec.default):
            dep = takes[applies.name]
            where = flag_name(spec) if name in given else f"{name} = {values[name]!r} (from --config)"
            raise ValueError(f"{where} applies only with {applies.text(lambda n: dep.flag, str)}, "  # noqa: B023 - called in this iteration
                             f"not {dep.flag} {values[applies.name]}")
    return {**from_file, **given}
