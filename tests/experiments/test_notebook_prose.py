"""The notebooks' prose: short, no measured figure typed into a markdown cell (a code cell prints each one from
the table the notebook shows), and the printed comparisons equal that table's."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")

from dqnlab import experiments as ex

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
RESULTS = ROOT / "docs" / "results"
SCHEME_NOTEBOOKS = {"02": "independent", "03": "shared", "04": "sharded", "05": "averaged", "06": "actors"}
#: Words of prose (markdown outside fenced code blocks) a notebook may have: about 700 for a scheme's, 1,000 else.
MAX_WORDS = {**dict.fromkeys(SCHEME_NOTEBOOKS, 750), "00": 1_050, "01": 1_050, "07": 1_050, "08": 1_050}
#: Numbers with thousands separators that are settings, not measurements: the games of an evaluation, the player
#: mark (a greedy mean of 10,000), warm-up steps, the seconds of a day, an optimistic initial value.
SETTINGS = {"1,000", "5,000", "10,000", "50,000", "86,400", "320,000"}
#: What a measured figure looks like: a ratio ("1.41x"), a percentage, a time in micro- or milliseconds or with
#: decimals in minutes or seconds, and (below) a number with thousands separators that is not a setting.
MEASURED = re.compile(r"\b\d+(?:\.\d+)?x\b|\b\d+(?:\.\d+)?\s?%|\b\d+(?:\.\d+)?\s?(?:µs|us|ms)\b"
                      r"|\b\d+\.\d+\s?(?:minutes?|min|seconds?|s)\b")
THOUSANDS = re.compile(r"(?<![\d,.])\d{1,3}(?:,\d{3})+(?![\d,])")
FENCED = re.compile(r"```.*?```", re.DOTALL)


def _prose(path: Path) -> list[str]:
    """The markdown cells of a notebook, fenced code blocks removed."""
    nb = nbformat.read(path, as_version=4)
    return [FENCED.sub(" ", c.source) for c in nb.cells if c.cell_type == "markdown"]


def typed_figures(text: str) -> list[str]:
    """The measured-looking figures in ``text``."""
    found = [m.group(0) for m in MEASURED.finditer(text)]
    return found + [m.group(0) for m in THOUSANDS.finditer(text) if m.group(0) not in SETTINGS]


def test_the_detector():
    assert typed_figures("periodic reached it in 1.17x and 1.56x serial's time") == ["1.17x", "1.56x"]
    assert typed_figures("98,300 against 111,286; 3% of serial's; 160 µs an update; after 2.5 minutes") == [
        "3%", "160 µs", "2.5 minutes", "98,300", "111,286"]
    assert typed_figures("the 4x6-tuple network, 1,000 greedy games, a mean of 10,000, 2048 and 4096, gamma 0.99, "
                         "K x B, `shared` x2, 10 minutes") == []


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_no_measured_figure_typed(path):
    typed = [f for cell in _prose(path) for f in typed_figures(cell)]
    assert not typed, f"{path.name}: figures typed in markdown (print them from the table): {typed}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_short(path):
    text = " ".join(_prose(path))
    words = len(text.split())
    assert words <= MAX_WORDS[path.name[:2]], f"{path.name}: {words} words of prose"
    # short sentences: fewer than 20 words on average (headings, lists and formulas are not sentences)
    sentences = [s for s in re.split(r"(?<=[.!?])\s+|\n\s*[*#-]", text) if len(s.split()) > 3]
    mean = sum(len(s.split()) for s in sentences) / max(len(sentences), 1)
    assert mean < 20, f"{path.name}: {mean:.1f} words a sentence"


@pytest.mark.parametrize("prefix", sorted(SCHEME_NOTEBOOKS))
def test_a_scheme_notebook_opens_with_its_algorithm_and_prints_its_ratios(prefix):
    path = next(p for p in NOTEBOOKS if p.name.startswith(prefix))
    nb = nbformat.read(path, as_version=4)
    first = nb.cells[0].source
    assert "```" in first and "gamma" in first, f"{path.name}: the update is not in the first cell"
    sources = [c.source for c in nb.cells]
    panel = next(i for i, s in enumerate(sources) if "control_panel(" in s)
    curve = next(i for i, s in enumerate(sources) if "versus_serial_figure(" in s)
    assert panel < curve
    code = "\n".join(s for c, s in zip(nb.cells, sources) if c.cell_type == "code")
    # the sentences are read from the table the notebook shows
    assert "versus_serial_text(table" in code and "versus_serial_table(table)" in code


def _ratios(text: str) -> list[tuple[str, str]]:
    return re.findall(r"reached (\d+) in half the games in ([\d.]+)x serial's time", text)


@pytest.mark.parametrize("scheme", [*SCHEME_NOTEBOOKS.values(), None])
def test_printed_ratios_are_the_tables(scheme):
    table = ex.versus_serial(ex.scheme_learning(scheme, RESULTS / "learning-schemes.json"))
    shown = ex.versus_serial_table(table)
    text = ex.versus_serial_text(table, scheme)
    others = shown[~shown["configuration"].str.startswith("serial")]
    expected = []
    for r in others.to_dict("records"):
        expected += [(t, ex.fmt_number(r[f"x serial ({t})"])) for t in ("4096", "2048")
                     if r[f"x serial ({t})"] == r[f"x serial ({t})"]][:1]
    assert _ratios(text) == expected and expected
    for line, name in zip(text.splitlines(), others["configuration"]):
        assert line.startswith(name)
