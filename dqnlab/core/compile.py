"""Compiling the kernels: once per install, cached on disk, and said aloud while it takes long.

numba compiles a kernel the first time it runs and writes the machine code to its cache
(``cache=True``): ``NUMBA_CACHE_DIR`` when set, else the package's ``__pycache__`` folders where they
are writable, else numba's per-user cache folder. Later processes -- a new run, loky and Dask workers on
the machine -- load it in well under a second. A new install (or a new numba or Python) compiles again,
for tens of seconds; :func:`notice` says so while it happens, and how long it took. Where none of those
folders can be written, :func:`kernel_cache` finds another, or compiles without a cache.
"""

from __future__ import annotations

import functools
import hashlib
import os
import stat
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

import numba

from ..bars import clock, progress_bar

__all__ = ["notice", "NOTICE_AFTER_S", "refresh_cache", "kernel_cache", "fallback_cache_dir"]

_CORE = Path(__file__).resolve().parent

#: Seconds a first call may take before :func:`notice` says that it is compiling: past what loading the
#: learner's kernels from the cache takes, far below what compiling them takes.
NOTICE_AFTER_S = 3.0

_seen: set[str] = set()
_lock = threading.Lock()


@contextmanager
def notice(what: str, stream: TextIO | None = None, after_s: float = NOTICE_AFTER_S) -> Iterator[None]:
    """Around the first call of the kernels ``what`` (once per process and name): if the block is still
    running after ``after_s`` seconds, print that the kernels are being compiled (once per install), then a
    line ticking the time so far (:func:`~dqnlab.bars.progress_bar`), and at its end how long it took, to
    ``stream`` (default ``sys.stderr``). Later uses do nothing."""
    with _lock:
        first = what not in _seen
        _seen.add(what)
    if not first:
        yield
        return
    out = sys.stderr if stream is None else stream
    t0 = time.perf_counter()
    said, done = threading.Event(), threading.Event()

    def say() -> None:
        if done.wait(after_s):
            return
        said.set()
        when = "once per install, then cached" if kernel_cache() else "in every process: no folder to cache it in"
        print(f"dqnlab: compiling {what} (numba; {when}) ...", file=out, flush=True)
        # its length is unknown: a line that ticks the time so far, redrawn at the bar's interval

        def so_far() -> str:
            return f"dqnlab: compiling, {clock(time.perf_counter() - t0)} so far ..."

        with progress_bar(desc=so_far(), bar_format="{desc}", file=out, leave=False) as bar:
            while not done.wait(bar.mininterval):
                bar.set_description_str(so_far())

    ticker = threading.Thread(target=say, name="dqnlab-compile-notice", daemon=True)
    ticker.start()
    try:
        yield
    finally:
        done.set()
        ticker.join()
        if said.is_set():
            print(f"dqnlab: compiled {what} in {time.perf_counter() - t0:.1f} s", file=out, flush=True)


def refresh_cache(folder: Path | None = None) -> bool:
    """Drop the core's cached machine code when any of its sources changed since it was compiled.

    numba checks a cached kernel against its own source file only, not against the files of the kernels
    it calls and inlines, so an upgrade that changes a helper in one module could leave a caller in
    another running the old helper. The cache (``folder``, default: the core's ``__pycache__``, or
    ``NUMBA_CACHE_DIR`` when set) is therefore marked with a hash of all the core's sources, and
    emptied of the core's ``.nbi``/``.nbc`` files when the mark differs. Returns whether it was
    emptied; a folder that cannot be written is left as it is.
    """
    digest = hashlib.sha1()
    for source in sorted(_CORE.glob("*.py")):
        digest.update(source.read_bytes())
    if folder is None:
        folder = Path(os.environ["NUMBA_CACHE_DIR"]) if os.environ.get("NUMBA_CACHE_DIR") else _CORE / "__pycache__"
    mark = folder / f"dqnlab-core-{digest.hexdigest()[:16]}.mark"
    if mark.exists():
        return False
    try:
        folder.mkdir(parents=True, exist_ok=True)
        modules = {p.stem for p in _CORE.glob("*.py")}
        # (in NUMBA_CACHE_DIR, numba keeps this folder's kernels in a subfolder named after it: core_<hash>)
        for place in [folder, *folder.glob(f"{_CORE.name}_*")]:
            for old in [*place.glob("*.nbi"), *place.glob("*.nbc")]:
                if old.name.split(".")[0] in modules:
                    old.unlink(missing_ok=True)
        for stale in folder.glob("dqnlab-core-*.mark"):
            stale.unlink(missing_ok=True)
        mark.touch()
    except OSError:  # a read-only install: numba caches in its per-user folder instead
        return False
    return True


def fallback_cache_dir() -> Path:
    """Where :func:`kernel_cache` caches the kernels when numba finds no writable folder: ``dqnlab-numba-<uid>``
    in the system's temporary folder (:func:`tempfile.gettempdir`, ``TMPDIR``)."""
    user = os.getuid() if hasattr(os, "getuid") else os.environ.get("USERNAME", "user")
    return Path(tempfile.gettempdir()) / f"dqnlab-numba-{user}"


def _probe() -> None:  # (a function of this folder: numba looks for its cache where it would for the kernels')
    pass


def _cacheable() -> bool:
    """Whether numba has a folder to cache this folder's kernels in (``cache=True`` raises RuntimeError where
    it has none)."""
    try:
        numba.njit(cache=True)(_probe)
    except RuntimeError:
        return False
    return True


def _private_folder(folder: Path) -> bool:
    """Make ``folder`` (mode 0700); whether it is a folder of this user's that no one else can write (the cache
    holds code that numba loads)."""
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
        st = folder.lstat()
    except OSError:
        return False
    mine = not hasattr(os, "getuid") or (st.st_uid == os.getuid() and not st.st_mode & 0o022)
    return stat.S_ISDIR(st.st_mode) and mine


@functools.cache
def kernel_cache() -> bool:
    """Whether the core's kernels are cached on disk (their ``cache=``), decided once per process when
    :mod:`dqnlab.core` is imported.

    True where numba finds a writable folder (see the module's text). Where it finds none (a read-only install
    run by a user whose home is read-only too, as in a container run as a non-root user), the cache goes to
    :func:`fallback_cache_dir`: ``NUMBA_CACHE_DIR`` is set to it, for this process and the worker processes it
    starts. Where that folder cannot be had either, the kernels compile without a cache, in every process
    (False). Either way a warning (:class:`RuntimeWarning`) says so, and how to choose the folder.
    """
    if _cacheable():
        return True
    how = "set NUMBA_CACHE_DIR to a writable folder of yours to keep the compiled core between runs"
    folder = fallback_cache_dir()
    if _private_folder(folder):
        os.environ["NUMBA_CACHE_DIR"] = str(folder)
        numba.core.config.reload_config()  # (numba reads its environment at import)
        if _cacheable():
            warnings.warn(f"dqnlab: numba has no writable folder to cache the compiled core in (the package's "
                          f"__pycache__, the user's cache folder); caching it in {folder}; {how}",
                          RuntimeWarning, stacklevel=2)
            return True
        del os.environ["NUMBA_CACHE_DIR"]
        numba.core.config.reload_config()
    warnings.warn(f"dqnlab: numba has no writable folder to cache the compiled core in (the package's "
                  f"__pycache__, the user's cache folder, {folder}); compiling it in every process, tens of "
                  f"seconds each; {how}", RuntimeWarning, stacklevel=2)
    return False
