"""Every notebook executes headless in smoke mode (the cells that build or read its panel twice), shows its panel
and its figures; stored clean."""

import os
import sys
import time
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
#: The notebooks executed here; the others in test_notebooks_later.py (pytest-xdist's --dist loadfile gives each
#: file to one worker: two files let both workers run notebooks).
HALF = 5


def test_the_series_is_there():
    names = [p.stem for p in NOTEBOOKS]
    for prefix in ("00_", "01_", "07_"):
        assert any(n.startswith(prefix) for n in names), names
    from dqnlab.experiments import NOTEBOOKS as FIGURES

    # every notebook ends with the figure `python -m dqnlab reproduce` regenerates
    assert set(FIGURES) == set(names)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_stored_without_outputs(path):
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, f"{path.name}: outputs stored"
    first_code = next(c for c in nb.cells if c.cell_type == "code")
    assert "panels.setup()" in first_code.source  # reads the smoke flag first
    assert nb.cells[0].cell_type == "markdown"  # starts by saying what it tests


def _outputs(nb, mime):
    return [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if mime in o.get("data", {})]


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize("path", NOTEBOOKS[:HALF], ids=[p.stem for p in NOTEBOOKS[:HALF]])
def test_executes_in_smoke_mode(path, monkeypatch, tmp_path):
    check_executes(path, monkeypatch, tmp_path)


def check_executes(path, monkeypatch, tmp_path):
    """Run ``path`` headless in smoke mode, the cells that build or read its panel twice; check its panel and
    figures."""
    # The kernel inherits this environment; "python" in the kernelspec resolves to this interpreter.
    monkeypatch.setenv("DQNLAB_SMOKE", "1")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    monkeypatch.setenv("DQNLAB_RESULTS", str(ROOT / "docs" / "results"))  # the kernel runs in tmp_path
    nb = nbformat.read(path, as_version=4)
    # Every cell that builds or reads a panel runs twice in a row, as a reader re-running it would; the cell that
    # trains with it runs once (a second click's run is tests/ui/test_panels.py's).
    twice = []
    for cell in nb.cells:
        twice.append(cell)
        if cell.cell_type == "code" and "panel" in cell.source and ".run(" not in cell.source:
            twice.append(nbformat.v4.new_code_cell(cell.source))
    assert len(twice) > len(nb.cells) + 1, "no panel cell found"
    nb.cells = twice
    t0 = time.perf_counter()
    client = nbclient.NotebookClient(nb, timeout=180, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()  # raises CellExecutionError on any error
    seconds = time.perf_counter() - t0
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors
    assert _outputs(nb, WIDGET_MIME), "the control panel was not displayed"
    assert _outputs(nb, "image/png"), "no figure"
    last = [c for c in nb.cells if c.cell_type == "code"][-1]
    assert any("image/png" in o.get("data", {}) for o in last.outputs), "does not end with its figure"
    assert "Traceback" not in "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code"
                                      for o in c.outputs)
    print(f"{path.name}: {seconds:.1f} s", file=sys.stderr)
