"""Compiling the core: the notice while a first call takes long, the on-disk cache, its refresh."""

import io
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dqnlab.core import compile as core_compile

ROOT = Path(__file__).resolve().parents[2]


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


def test_notice_ticks_the_time_so_far_while_it_compiles():
    out = io.StringIO()
    with core_compile.notice("test kernels (ticking)", stream=out, after_s=0.05):
        time.sleep(0.3)
    text = out.getvalue()
    said, ticked, done = (text.index(s) for s in ("compiling test kernels (ticking)", "dqnlab: compiling, 0:00 so far ...",
                                                   "compiled test kernels (ticking) in"))
    assert said < ticked < done


_READ_ONLY_PROBE = """
import json, os, warnings
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import dqnlab
    from dqnlab.core import bitboard, compile
import numpy as np
cells = np.zeros((4, 16), np.uint8); cells[:, 0] = 1
out = np.empty_like(cells); pts = np.empty(4, np.int64); ch = np.empty(4, bool)
bitboard.move_batch(cells, np.array([1, 1, 1, 1], np.int64), out, pts, ch)
print(json.dumps({"package": dqnlab.__file__, "cached": compile.kernel_cache(), "moved": int(out[0, 3]),
                  "cache_dir": os.environ.get("NUMBA_CACHE_DIR"), "said": [str(w.message) for w in caught]}))
"""


@pytest.mark.slow  # two processes compile the kernels they call, one without a cache
@pytest.mark.skipif(not hasattr(os, "geteuid"), reason="POSIX permissions")
@pytest.mark.parametrize("fallback_usable", [True, False])
def test_a_read_only_install_and_home_still_import_and_play(tmp_path, fallback_usable):
    """A container run as a user who can write neither the package nor the home folder (numba then finds no
    folder to cache in): the core caches in a private folder of the temporary folder, or, where that folder is
    not private (anyone may write it: it could be given code to load), compiles uncached; and says so once,
    naming NUMBA_CACHE_DIR."""
    command = [sys.executable, "-c", _READ_ONLY_PROBE]
    if os.geteuid() == 0:  # root writes through permission bits unless it gives up the capability to
        if shutil.which("setpriv") is None:
            pytest.skip("run as root without setpriv to drop CAP_DAC_OVERRIDE")
        command = ["setpriv", "--bounding-set=-dac_override", "--", *command]
    site, home, temp = tmp_path / "site", tmp_path / "home", tmp_path / "tmp"
    shutil.copytree(ROOT / "dqnlab", site / "dqnlab", ignore=shutil.ignore_patterns("__pycache__"))
    home.mkdir()
    temp.mkdir()
    folder = temp / f"dqnlab-numba-{os.getuid()}"
    if not fallback_usable:
        folder.mkdir()
        folder.chmod(0o777)
    for path in [*site.rglob("*"), site, home]:
        path.chmod(0o555 if path.is_dir() else 0o444)
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "XDG_CACHE_HOME")}
    env.update(HOME=str(home), TMPDIR=str(temp), PYTHONPATH=os.pathsep.join([str(site), str(ROOT)]))
    try:
        r = subprocess.run(command, check=False, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    finally:
        for path in [site, *site.rglob("*"), home]:
            path.chmod(0o755 if path.is_dir() else 0o644)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["package"].startswith(str(site)) and got["moved"] == 1
    (said,) = [text for text in got["said"] if "NUMBA_CACHE_DIR" in text]
    assert got["cached"] == fallback_usable
    if fallback_usable:
        assert got["cache_dir"] == str(folder) and f"caching it in {folder}" in said
        assert list(folder.rglob("bitboard.move_batch-*.nbi"))  # cached there
    else:
        assert got["cache_dir"] is None and "compiling it in every process" in said
        assert not list(folder.rglob("*"))
