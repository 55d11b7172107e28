"""Compiling the core: the notice while a first call takes long, the on-disk cache, its refresh."""

import io
import json
import os
import subprocess
import sys
import time

import pytest

from dqnlab.core import compile as core_compile


def test_notice_speaks_only_for_a_slow_first_call():
    out = io.StringIO()
    with core_compile.notice("test kernels (slow)", stream=out, after_s=0.05):
        time.sleep(0.3)
    text = out.getvalue()
    assert "compiling test kernels (slow)" in text and "compiled test kernels (slow) in" in text
    again = io.StringIO()
    with core_compile.notice("test kernels (slow)", stream=again, after_s=0.05):  # not the first call any more
        time.sleep(0.2)
    assert again.getvalue() == ""
    quick = io.StringIO()
    with core_compile.notice("test kernels (quick)", stream=quick, after_s=5.0):
        pass
    assert quick.getvalue() == ""


_PROBE = """
import json, numpy as np
from dqnlab.core import bitboard
cells = np.zeros((4, 16), np.uint8); cells[:, 0] = 1
out = np.empty_like(cells); pts = np.empty(4, np.int64); ch = np.empty(4, bool)
bitboard.move_batch(cells, np.array([1, 1, 1, 1], np.int64), out, pts, ch)
print(json.dumps({"hits": sum(bitboard.move_batch.stats.cache_hits.values()),
                  "misses": sum(bitboard.move_batch.stats.cache_misses.values()), "moved": int(out[0, 3])}))
"""


def _probe(cache_dir):
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache_dir)}
    r = subprocess.run([sys.executable, "-c", _PROBE], check=False, capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.slow  # the first process compiles the kernels into an empty cache
def test_a_second_process_loads_the_kernels_from_the_cache(tmp_path):
    """What every new process does (a run, loky and Dask workers): compile once, then load."""
    first = _probe(tmp_path)
    assert first["misses"] >= 1 and first["moved"] == 1
    second = _probe(tmp_path)
    assert second["hits"] >= 1 and second["misses"] == 0 and second["moved"] == 1


def test_the_cache_is_emptied_when_the_core_changes(tmp_path):
    stale = tmp_path / "core_0123" / "loops.run_chunk-1.py311.nbi"
    stale.parent.mkdir()
    stale.write_text("old")
    other = tmp_path / "core_0123" / "somebody_else.f-1.py311.nbi"
    other.write_text("keep")
    assert core_compile.refresh_cache(tmp_path)  # no mark of these sources yet: emptied
    assert not stale.exists() and other.exists()
    assert len(list(tmp_path.glob("dqnlab-core-*.mark"))) == 1
    stale.write_text("new")
    assert not core_compile.refresh_cache(tmp_path)  # marked: left alone
    assert stale.exists()
