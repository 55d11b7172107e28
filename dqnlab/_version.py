"""The package's version: pyproject.toml's, the one place it is written."""

from __future__ import annotations

import importlib.metadata
import tomllib
from pathlib import Path

__all__ = ["__version__", "package_version"]


def package_version() -> str:
    """dqnlab's version, e.g. ``"0.1.0"``: the ``pyproject.toml`` of the source tree this package is
    imported from (a checkout on ``PYTHONPATH``, an editable install), else the installed distribution's
    metadata (which setuptools took from that file), else ``"unknown"``."""
    pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
    try:
        project = tomllib.loads(pyproject.read_text()).get("project", {})
        if project.get("name") == "dqnlab" and isinstance(project.get("version"), str):
            return project["version"]
    except (OSError, ValueError):  # no source tree beside the package (an installed wheel), or not one's file
        pass
    try:
        return importlib.metadata.version("dqnlab")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


__version__ = package_version()
