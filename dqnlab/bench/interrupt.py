"""``bench interrupt``: seconds from Ctrl-C to the prompt, for a ``train`` run of each scheme.

A terminal's Ctrl-C sends SIGINT to its whole foreground process group. Each run starts
``python -m dqnlab train`` in a session of its own (so the group is the command's, workers included),
sends SIGINT to that group ``after_s`` seconds after the start, and times until the command has exited;
then it reads what the run kept (its exit status, 130 for Ctrl-C, and ``summary.json``'s status and env
steps). The run directory is removed afterwards.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..options import specs
from ..schemes import SCHEMES, parse_scheme_spec

__all__ = ["INTERRUPT_SCHEMES", "bench_interrupt", "train_flags"]

#: Every scheme as ``python -m dqnlab train`` runs it by default (``independent`` with a periodic sync).
INTERRUPT_SCHEMES = ("serial", "independent:sync=periodic", "shared", "sharded", "averaged", "actors")

#: Seconds a run may take to exit after Ctrl-C before the bench kills it and fails.
EXIT_LIMIT_S = 300.0


def train_flags(spec: str) -> tuple[str, list[str]]:
    """A scheme spec's name and ``train``'s flags for its options (``shared:lock=false`` ->
    ``("shared", ["--no-lock"])``, each :meth:`dqnlab.options.Spec.flags`).

    Raises
    ------
    ValueError
        For a spec that :func:`~dqnlab.schemes.parse_scheme_spec` refuses.
    """
    name, options = parse_scheme_spec(spec)
    declared = specs(SCHEMES[name].Options)
    return name, [flag for key, value in options.items() for flag in declared[key].flags(value)]


def bench_interrupt(schemes: Sequence[str] = INTERRUPT_SCHEMES, workers: int = 2, after_s: float = 40.0,
                    preset: str = "default") -> list[dict[str, Any]]:
    """Ctrl-C each scheme's ``train`` run ``after_s`` seconds after its start; one row per scheme.

    Rows: ``spec``, ``workers`` (``serial``: 1), ``after_s``, ``seconds_to_exit`` (from the signal to the
    command's exit), ``exit_status``, and what ``summary.json`` kept: ``status`` and ``env_steps``.

    Raises
    ------
    ValueError
        For a scheme spec that :func:`~dqnlab.schemes.parse_scheme_spec` refuses.
    RuntimeError
        If a run ends before its Ctrl-C, takes more than :data:`EXIT_LIMIT_S` to exit after it (it is
        killed), or leaves no summary.
    """
    parsed = [(spec, *train_flags(spec)) for spec in schemes]  # (every spec checked before any run)
    rows = []
    for spec, name, flags in parsed:
        k = 1 if name == "serial" else workers
        with tempfile.TemporaryDirectory(prefix="dqnlab-interrupt-") as tmp:
            out = Path(tmp) / "run"
            command = [sys.executable, "-m", "dqnlab", "train", "--scheme", name, "--workers", str(k),
                       "--preset", preset, "--minutes", str(max(5.0, 2 * after_s / 60)), "--out", str(out),
                       "--no-progress", *flags]
            with open(Path(tmp) / "stderr.txt", "w") as err:
                proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                                        start_new_session=True)
                try:
                    time.sleep(after_s)
                    if proc.poll() is not None:
                        raise RuntimeError(f"{spec}: train exited ({proc.returncode}) before its Ctrl-C: "
                                           f"{(Path(tmp) / 'stderr.txt').read_text()[-500:]}")
                    t0 = time.perf_counter()
                    os.killpg(proc.pid, signal.SIGINT)
                    try:
                        code = proc.wait(EXIT_LIMIT_S)
                    except subprocess.TimeoutExpired:
                        raise RuntimeError(f"{spec}: train still ran {EXIT_LIMIT_S:g} s after Ctrl-C") from None
                    seconds = time.perf_counter() - t0
                finally:
                    if proc.poll() is None:
                        os.killpg(proc.pid, signal.SIGKILL)
                        proc.wait()
            try:
                summary = json.loads((out / "summary.json").read_text())
            except (OSError, ValueError):
                raise RuntimeError(f"{spec}: no summary.json after Ctrl-C (exit status {code})") from None
            rows.append({"spec": spec, "workers": k, "after_s": after_s, "seconds_to_exit": seconds,
                         "exit_status": code, "status": summary["status"], "env_steps": summary["env_steps"]})
    return rows
