"""The later half of the notebooks executes headless in smoke mode (see test_notebooks.py)."""

import pytest
from test_notebooks import HALF, NOTEBOOKS, check_executes


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize("path", NOTEBOOKS[HALF:], ids=[p.stem for p in NOTEBOOKS[HALF:]])
def test_executes_in_smoke_mode(path, monkeypatch, tmp_path):
    check_executes(path, monkeypatch, tmp_path)
