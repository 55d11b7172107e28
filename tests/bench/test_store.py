"""The results store: records written whole, read back or refused with one line, drawn as markdown, and the
README's generated tables equal to what the repository's store gives."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dqnlab.bench import store

REPO = Path(__file__).resolve().parents[2]
STORE = REPO / "docs" / "results"


def test_a_record_is_saved_whole_and_read_back(tmp_path):
    rec = store.stamp({"tables": {"t": [{"a": 1, "b": "x"}]}}, "tables", "what it measures", "python -m dqnlab bench x")
    assert rec["commit"] and rec["machine"]["date_utc"] and rec["command"] == "python -m dqnlab bench x"
    path = tmp_path / "deep" / "r.json"
    store.save(path, rec)
    assert store.load(path) == rec and [p.name for p in path.parent.iterdir()] == ["r.json"]  # no temporary left
    assert store.names(path.parent) == ["r"]
    text = store.markdown(path)
    assert text.startswith("*what it measures*") and "| a | b |" in text and "| 1 | x |" in text
    assert f"`python -m dqnlab bench x` at `{rec['commit']}`" in text
    with pytest.raises(ValueError, match="scheme applies only to learning records"):
        store.markdown(path, scheme="shared")


@pytest.mark.parametrize("text,match", [
    ('{"kind": "tables", "meas', r"is not a readable results record \(JSONDecodeError"),
    ("[1]", r"not a results record \(kind must be one of"),
    ('{"kind": "learning", "measures": "m", "machine": {}, "rows": []}', "missing minutes, games, time_to_player"),
])
def test_a_torn_or_foreign_file_is_refused_in_one_line_naming_it(tmp_path, text, match):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=match) as e:
        store.load(path)
    assert str(path) in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(FileNotFoundError, match="no results record"):
        store.load(tmp_path / "none.json")


def test_every_record_in_the_repositorys_store_loads_and_draws():
    names = store.names(STORE)
    assert {"learning-schemes", "learning-hour", "speed-game", "search"} <= set(names)
    for name in names:
        rec = store.load(STORE / f"{name}.json")
        text = store.markdown(rec)
        assert rec["measures"] in text and "Measured by:" in text
        runs = rec.get("runs") or [rec]
        assert all(run.get("command") and run.get("commit") for run in runs), name


def test_a_learning_records_markdown_keeps_only_the_scheme_asked_and_serial():
    text = store.markdown(STORE / "learning-schemes.json", scheme="sharded")
    lines = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| scheme")]
    assert [line.split("|")[1].split()[0] for line in lines] == ["serial", "sharded"]
    runs = text.split("Measured by:")[1]
    assert "--schemes sharded" in runs and "--schemes actors" not in runs


def test_the_readmes_tables_are_the_stores():
    readme = (REPO / "README.md").read_text()
    for name, body in store.readme_blocks(STORE).items():
        assert f"<!-- results {name} -->\n{body}\n<!-- /results {name} -->" in readme, name


def test_update_readme_rewrites_only_between_its_markers(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("top\n<!-- results headline -->\nstale\n<!-- /results headline -->\nbottom\n")
    assert store.update_readme(readme, STORE) == ["headline"]
    text = readme.read_text()
    assert text.startswith("top\n") and text.endswith("bottom\n") and "stale" not in text
    best = max(json.loads((STORE / "learning-hour.json").read_text())["time_to_player"],
               key=lambda r: r["final_score_mean"])
    assert f"{best['final_score_mean']:,.0f}" in text
    readme.write_text("no markers\n")
    with pytest.raises(ValueError, match="has no <!-- results NAME --> markers"):
        store.update_readme(readme, STORE)
