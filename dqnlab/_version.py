"""The package's version: its installed distribution's (pyproject.toml's, the one place it is written)."""

from __future__ import annotations

import importlib.metadata

__all__ = ["__version__"]

try:
    __version__ = importlib.metadata.version("dqnlab")
except importlib.metadata.PackageNotFoundError:  # imported from a source tree that is not installed
    __version__ = "unknown"
