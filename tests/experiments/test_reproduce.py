"""python -m dqnlab reproduce: the command line writes the notebooks' figures; unknown names are refused."""

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # every notebook's figure, as the notebook tests
@pytest.mark.timeout(120)
def test_reproduce_smoke_writes_the_notebooks_figures(tmp_path):
    # Each notebook's last cell draws its figure with the same ex.<name>_data / ex.<name>_figure pair that
    # reproduce calls (test_executes_in_smoke_mode runs them all), so here the command line path is
    # run on two notebooks, by number and by name, rather than repeating every notebook's runs.
    import subprocess

    env = {**os.environ, "PYTHONPATH": str(ROOT), "DQNLAB_SMOKE": ""}
    out = tmp_path / "figures"
    proc = subprocess.run([sys.executable, "-m", "dqnlab", "reproduce", "--smoke", "--out", str(out),
                           "--only", "00,01_serial_why_so_slow"],
                          check=False, capture_output=True, text=True, timeout=110, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    expected = {"00_the_game", "01_serial_why_so_slow"}
    assert {p.stem for p in out.glob("*.png")} == expected
    for p in out.glob("*.png"):
        assert p.read_bytes()[:4] == b"\x89PNG" and p.stat().st_size > 10_000
    assert f"wrote {len(expected)} figure(s)" in proc.stdout


def test_a_cells_runs_show_a_progress_bar_that_the_runs_move(capsys):
    from dqnlab.experiments import SMOKE, compare_data, use

    with use(SMOKE):
        data = compare_data(schemes=["serial"], seconds=1.5)
    assert len(data["trials"]) == 1
    err = capsys.readouterr().err.replace("\r", "\n")
    lines = [line for line in err.splitlines() if "1 scheme" in line]
    assert "0/2 s of training" in lines[0] and "starting the worker processes" in lines[1]  # at once
    assert any("serial x1" in line and "2/2 s" in line for line in lines)  # moved by the run's reports
