"""Tables on huge pages: memory that only this process uses is kept out of forks."""

from __future__ import annotations

import mmap
import os
import sys

import numpy as np
import pytest

from dqnlab.core import memory
from dqnlab.parallel.shm import SharedArrays

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux") or not hasattr(mmap, "MADV_DONTFORK"),
                                reason="MADV_DONTFORK and /proc/self/maps are Linux's")


def _mapped_in_a_fork(array: np.ndarray) -> bool:
    """Whether a child forked now has the first byte of ``array`` in its address space."""
    address = array.__array_interface__["data"][0]
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # (the child reads its own maps and leaves at once, whatever happens)
        try:
            with open("/proc/self/maps") as maps:
                spans = (line.split()[0].split("-") for line in maps)
                found = any(int(lo, 16) <= address < int(hi, 16) for lo, hi in spans)
            os.write(w, b"1" if found else b"0")
        finally:
            os._exit(0)
    os.close(w)
    try:
        return os.read(r, 1) == b"1"
    finally:
        os.close(r)
        os.waitpid(pid, 0)


def test_a_table_kept_out_of_forks_is_not_mapped_in_a_child_and_others_are():
    size = 2 * memory.MIN_BYTES
    kept = memory.zeros((size // 4,), np.float32, inherit=False)
    inherited = memory.zeros((size // 4,), np.float32)
    kept[:] = 1.0
    inherited[:] = 1.0
    assert not _mapped_in_a_fork(kept)
    assert _mapped_in_a_fork(inherited)
    assert kept.sum() == size // 4  # (this process's copy is whole)


def test_the_private_block_of_threads_is_kept_out_of_forks_and_a_shared_one_is_not():
    spec = {"theta": ((memory.MIN_BYTES // 2,), "float32"), "counter": ((1,), "int64")}
    private, shared = SharedArrays.create(spec, private=True), SharedArrays.create(spec)
    try:
        assert not _mapped_in_a_fork(private["theta"])
        assert _mapped_in_a_fork(shared["theta"])  # (process workers attach it by name; forks may share it)
    finally:
        for block in (private, shared):
            block.close()
            block.unlink()
