"""A monotonic clock that compiled kernels can read (for their time split and episode times).

:func:`now` returns seconds on the clock of :func:`time.perf_counter`: the kernel reads the system's
monotonic clock (``clock_gettime(CLOCK_MONOTONIC)``, or ``QueryPerformanceCounter`` on Windows)
as an external C function, and adds the offset to ``perf_counter`` taken when this module is imported.
"""

from __future__ import annotations

import ctypes
import sys
import time

import numpy as np
from numba import njit, types

from .compile import kernel_cache

__all__ = ["now", "clock_buffer", "OFFSET"]

if sys.platform == "win32":  # pragma: no cover - exercised on Windows only
    _qpc = types.ExternalFunction("QueryPerformanceCounter", types.int32(types.intp))
    _freq = ctypes.c_int64()
    ctypes.windll.kernel32.QueryPerformanceFrequency(ctypes.byref(_freq))
    _TICK = 1.0 / _freq.value

    @njit(nogil=True, cache=kernel_cache())
    def _raw(buf: np.ndarray) -> float:
        _qpc(buf.ctypes.data)
        return buf[0] * _TICK
else:
    # an external symbol (libc's, already in the process) rather than a ctypes pointer: kernels that call
    # it can be cached on disk
    _gettime = types.ExternalFunction("clock_gettime", types.int32(types.int32, types.intp))
    _MONOTONIC = time.CLOCK_MONOTONIC

    @njit(nogil=True, cache=kernel_cache())
    def _raw(buf: np.ndarray) -> float:  # buf: struct timespec, seconds and nanoseconds
        _gettime(_MONOTONIC, buf.ctypes.data)
        return buf[0] + buf[1] * 1e-9

#: ``time.perf_counter() - _raw()``, measured at import (0 where both read the same clock, as on Linux).
_BUF = np.zeros(2, np.int64)
_raw(_BUF)  # (compiled or loaded first, so that the offset measures the clocks alone)
OFFSET = min((time.perf_counter() - _raw(_BUF) for _ in range(3)), key=abs)


def clock_buffer() -> np.ndarray:
    """The ``(2,)`` int64 scratch array :func:`now` reads the clock into (one per caller, made once: a
    kernel that reads the clock every step allocates nothing for it)."""
    return np.zeros(2, np.int64)


@njit(nogil=True, cache=kernel_cache())
def now(buf: np.ndarray) -> float:
    """Seconds on the clock of :func:`time.perf_counter`, from compiled code; ``buf``: a :func:`clock_buffer`."""
    return _raw(buf) + OFFSET
