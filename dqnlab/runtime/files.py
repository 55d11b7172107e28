"""The package's files on disk: each written whole or not at all, each read with one clear error.

:func:`atomic_write` writes every file of a run directory (and the results files of the bench);
:func:`read_file` reads every file the package reads back -- a run directory's ``checkpoint.pt``,
``model.pt``, ``summary.json``, ``episodes.csv`` and ``history.csv``, a results file, a ``--config``
file -- so that a file cut short (a full disk, an interrupted copy) or of another format is a
one-line :class:`ValueError` naming it, whichever file it is and whoever reads it.
"""

from __future__ import annotations

import io
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import torch

__all__ = ["atomic_write", "read_file"]


def atomic_write(path: Path, write, fsync: bool = False) -> None:
    """Write a file through ``write(binary_file)`` to a temporary name, then rename it.

    A crash mid-write leaves the previous file intact; the file gets the usual
    permissions (0666 less the umask). ``fsync`` forces the data to disk before the rename.
    """
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)
        with os.fdopen(fd, "wb") as f:
            write(f)
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _csv(path: Path) -> pd.DataFrame:
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):  # every table written ends its last row
        raise ValueError("it ends in the middle of a row")
    return pd.read_csv(io.BytesIO(data))


def _toml(path: Path) -> dict[str, Any]:
    import tomllib

    return tomllib.loads(path.read_text())


#: How each kind of file is parsed, by suffix.
_PARSERS: dict[str, Callable[[Path], Any]] = {
    ".json": lambda p: json.loads(p.read_bytes()),
    ".toml": _toml,
    ".csv": _csv,
    ".pt": lambda p: torch.load(p, map_location="cpu", weights_only=True),
}


def read_file(path: str | os.PathLike, what: str) -> Any:
    """The contents of a file, parsed by its suffix: ``.json`` (the JSON value), ``.toml`` (a dict), ``.csv``
    (a pandas DataFrame), ``.pt`` (:func:`torch.load` with ``weights_only=True``, onto the CPU: no code of
    the file runs).

    Parameters
    ----------
    path : path
    what : str
        What the file should be, for the error (``"dqnlab checkpoint"``).

    Raises
    ------
    ValueError
        If the file is missing, cannot be read, or does not parse (cut short, or not of its format): one line
        naming it and what is wrong, ``'PATH' is not a readable WHAT (reason)``; also for a suffix not above.
    """
    p = Path(path)
    if p.suffix not in _PARSERS:
        raise ValueError(f"{str(p)!r}: expected a {', '.join(_PARSERS)} file")
    try:
        return _PARSERS[p.suffix](p)
    except Exception as e:  # noqa: BLE001 - whatever the parser raises for a damaged file
        lines = str(e).strip().splitlines()
        reason = e.strerror if isinstance(e, OSError) and e.strerror else \
            f"{type(e).__name__}: {lines[0]}" if lines else type(e).__name__
        raise ValueError(f"{str(p)!r} is not a readable {what} ({reason})") from None
