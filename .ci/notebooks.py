"""Run every notebook of a clone in smoke mode against an installed dqnlab (.ci/install-check runs it).

Usage: python .ci/notebooks.py CLONE

Run with the interpreter of the environment dqnlab is installed in, from outside the clone, with no PYTHONPATH:
each notebook's kernel is that interpreter, its working directory the clone's notebooks/ folder. A cell put
before the notebook's own checks that the kernel runs that interpreter and imports ``dqnlab`` from the installed
package, not from the clone: a path the package makes from its own location (``Path(__file__).parents[2]``)
then points into the environment, not into the repository. Every notebook runs, and the script exits 1 if any
failed, naming each.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import nbclient
import nbformat

GUARD = """\
import sys as _sys
from pathlib import Path as _Path
import dqnlab as _dqnlab
assert _sys.prefix == {prefix!r}, f"the kernel runs {{_sys.executable}}, not the installed environment's Python"
assert not _Path(_dqnlab.__file__).resolve().is_relative_to({clone!r}), f"dqnlab imported from the clone: {{_dqnlab.__file__}}"
"""


def run(path: Path, clone: Path) -> float:
    """Execute ``path`` with the guard cell first; raise on any error. Returns the seconds it took."""
    nb = nbformat.read(path, as_version=4)
    guard = GUARD.format(prefix=sys.prefix, clone=str(clone))
    nb.cells = [nbformat.v4.new_code_cell(guard), *nb.cells]
    t0 = time.perf_counter()
    nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}}).execute()
    return time.perf_counter() - t0


def main() -> int:
    clone = Path(sys.argv[1]).resolve()
    os.environ["DQNLAB_SMOKE"] = "1"
    os.environ["MPLBACKEND"] = "module://matplotlib_inline.backend_inline"
    os.environ.pop("PYTHONPATH", None)
    notebooks = sorted((clone / "notebooks").glob("*.ipynb"))
    if not notebooks:
        print(f"no notebook in {clone / 'notebooks'}", file=sys.stderr)
        return 1
    failed = []
    for path in notebooks:
        try:
            print(f"{path.name}: {run(path, clone):.0f} s", flush=True)
        except Exception as e:  # noqa: BLE001 (every notebook runs; each failure is reported)
            failed.append(path.name)
            print(f"{path.name}: FAILED\n{e}", flush=True)
    print(f"notebooks: {len(notebooks) - len(failed)} passed, {len(failed)} failed", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
