"""Memory for large lookup tables: zeroed arrays on huge pages where the OS offers them.

An n-tuple network's tables are read at random (the 4x6 set: 268 MB), so nearly every lookup
misses the TLB on 4 KiB pages; on 2 MiB pages it hits. On Linux with transparent huge pages in
``madvise`` or ``always`` mode, :func:`zeros` maps private anonymous memory and asks for huge pages
(``madvise(MADV_HUGEPAGE)``); elsewhere it is ``numpy.zeros``.

A fork shares such memory with its child copy-on-write, and while the child lives, the first write to
each 2 MiB page of the parent's copies out 4 KiB of it and maps the rest as 4 KiB pages too (the kernel
splits a huge page it must copy): a table written while a forked process lives -- a
``multiprocessing.Manager``'s, which :class:`dqnlab.parallel.tasks.TaskGroup` forks -- leaves huge pages
as it learns. Memory that no child can use (``inherit=False``) is therefore kept out of forks
(``madvise(MADV_DONTFORK)``).
"""

from __future__ import annotations

import mmap

import numpy as np

__all__ = ["zeros"]

#: Arrays smaller than this take numpy.zeros (a huge page is 2 MiB).
MIN_BYTES = 8 << 20


def zeros(shape: tuple[int, ...], dtype: type = np.float32, inherit: bool = True) -> np.ndarray:
    """A zeroed, writeable, C-contiguous array of ``shape`` and ``dtype``, on huge pages where possible.

    ``inherit=False``: a process forked from this one does not get the array's memory at all (an array
    of at least :data:`MIN_BYTES`, where the OS can leave memory out of forks; reading it there is a
    segmentation fault), so that writing it here never copies it (see the module). For memory only this
    process uses, such as the tables its threads train."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape)) * dtype.itemsize
    advise = getattr(mmap, "MADV_HUGEPAGE", None)
    if nbytes < MIN_BYTES or advise is None or not hasattr(mmap, "MAP_PRIVATE"):
        return np.zeros(shape, dtype)
    buf = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    try:
        buf.madvise(advise)
    except OSError:  # pragma: no cover - a kernel without transparent huge pages
        pass
    if not inherit and hasattr(mmap, "MADV_DONTFORK"):
        buf.madvise(mmap.MADV_DONTFORK)
    return np.frombuffer(buf, dtype).reshape(shape)
