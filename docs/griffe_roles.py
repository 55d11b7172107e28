"""A griffe extension for the API reference: the package's docstrings write cross-references as Sphinx
roles (``:class:`~dqnlab.RunResult```), which mkdocstrings would show as they are written; each becomes
inline code of the name as Sphinx would print it (``RunResult``; the full path without ``~``)."""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:py:)?(?:class|func|meth|attr|data|mod|obj|exc|const):`(~?)([^`]+)`")


def _plain(match: re.Match[str]) -> str:
    short, target = match.groups()
    return f"`{target.rsplit('.', 1)[-1] if short else target}`"


class SphinxRoles(griffe.Extension):
    """Rewrite the roles in every docstring as it is loaded."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = _ROLE.sub(_plain, obj.docstring.value)
