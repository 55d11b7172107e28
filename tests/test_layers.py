"""The package's layers: every import (function-level ones too) runs down, never back up.

A unit is a subpackage (``dqnlab/game/``) or a top-level module (``dqnlab/plots.py``).
The order is the README's layout, bottom first; a unit may import only units before it.
"""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "dqnlab"

LAYERS = ["core", "game", "options", "config", "replay", "agent", "plots", "runtime", "parallel", "schemes",
          "player", "evaluation", "bench", "experiments", "ui", "cli", "__init__", "__main__"]


def _unit(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _imports(path: Path) -> list[tuple[str, int]]:
    """``(imported dqnlab module, line)`` of every import in ``path``, resolved to absolute names."""
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    package = ".".join(parts) if path.name == "__init__.py" else ".".join(parts[:-1])
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target == "dqnlab":  # from dqnlab import x: x may be a unit or a name of the facade
                out += [(f"dqnlab.{a.name}" if (PACKAGE / a.name).exists() or (PACKAGE / f"{a.name}.py").exists()
                         else "dqnlab", node.lineno) for a in node.names]
            elif target.startswith("dqnlab."):
                out.append((target, node.lineno))
        elif isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names if a.name.startswith("dqnlab")]
    return out


MODULES = sorted(PACKAGE.rglob("*.py"))


def test_every_unit_has_a_layer():
    units = {p.relative_to(PACKAGE).parts[0].removesuffix(".py") for p in MODULES}
    assert units <= set(LAYERS), f"units without a layer: {sorted(units - set(LAYERS))}"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_run_down_the_layers(path):
    unit = path.relative_to(PACKAGE).parts[0].removesuffix(".py")
    upward = [f"line {line}: {target}" for target, line in _imports(path)
              if _unit(target) != unit and LAYERS.index(_unit(target)) > LAYERS.index(unit)]
    assert not upward, f"{path.relative_to(PACKAGE)} ({unit}) imports from a higher layer: {upward}"
