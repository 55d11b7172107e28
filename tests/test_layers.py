"""The package's layers: every import (function-level ones too) runs down, never back up.

A unit is a subpackage (``dqnlab/game/``) or a top-level module (``dqnlab/plots.py``).
The order is LAYERS below, bottom first; a unit may import only units before it.

Inside a unit, modules import one another without a cycle (no pair, no longer loop), counting
every import as above: function-level ones and those under ``if TYPE_CHECKING:`` too. An edge
runs from a module to each module it names (``from .loop import RunLoop`` -> ``loop``;
``from . import loop`` -> ``loop``; ``from .runtime import Name`` -> ``runtime/__init__.py``),
not to the packages above the named module that Python runs first.
"""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "dqnlab"

LAYERS = ["_version", "bars", "core", "game", "options", "config", "replay", "agent", "plots", "runtime", "parallel", "schemes",
          "player", "evaluation", "bench", "experiments", "ui", "cli", "__init__", "__main__"]


def _unit(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _module(path: Path) -> str:
    """The dotted name of the module at ``path`` (a package's ``__init__.py``: the package)."""
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(name: str) -> bool:
    """Whether the dotted ``name`` is a module or a package of ``dqnlab`` (not a name defined in one)."""
    base = PACKAGE.parent.joinpath(*name.split("."))
    return base.with_suffix(".py").exists() or (base / "__init__.py").exists()


def _imports(path: Path) -> list[tuple[str, int]]:
    """``(imported dqnlab module, line)`` of every import in ``path``, resolved to absolute names.

    ``from X import y`` gives ``X.y`` where that is a module (``from . import loop``), else ``X``.
    """
    module = _module(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target == "dqnlab" or target.startswith("dqnlab."):  # from X import y: y a module, or a name of X
                out += [(f"{target}.{a.name}" if _is_module(f"{target}.{a.name}") else target, node.lineno)
                        for a in node.names]
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


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles of ``graph`` (module -> modules it imports): each strongly connected
    component of two or more modules, or of one that imports itself (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while not component or component[-1] != v:
                component.append(stack.pop())
            if len(component) > 1 or v in graph[v]:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return cycles


def test_cycles_finds_pairs_and_longer_loops():
    graph = {"a": {"b"}, "b": {"a", "c"}, "c": {"d"}, "d": {"e"}, "e": {"c"}, "f": {"f"}, "g": {"a"}}
    assert sorted(_cycles(graph)) == [["a", "b"], ["c", "d", "e"], ["f"]]
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_no_import_cycles():
    first_line: dict[tuple[str, str], int] = {}  # (module, module it imports) -> line of the first such import
    for path in MODULES:
        for target, line in _imports(path):
            first_line.setdefault((_module(path), target), line)
    graph = {_module(p): set() for p in MODULES}
    for source, target in first_line:
        if target in graph:
            graph[source].add(target)
    found = ["; ".join(f"{m} imports {n} (line {first_line[m, n]})" for m in cycle for n in sorted(graph[m] & set(cycle)))
             for cycle in _cycles(graph)]
    assert not found, f"import cycles: {found}"
