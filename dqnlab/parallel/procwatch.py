"""Which worker process died first: the worker to name when a pool breaks.

When one loky worker process dies (killed, out of memory, a crash in native code),
loky marks the whole pool broken and kills the other workers at once, so afterwards
every worker is dead and the pool's error cannot say which one went first. A
:class:`DeathWatch` notices the first exit as it happens: one thread waits on a
Linux *pidfd* per worker process (``os.pidfd_open``, Linux 5.3+), which becomes
readable the moment that process exits, and records which worker it was and, for a
child process, how it ended (read with ``waitid(WNOWAIT)``, which leaves the process
for its owner to reap). Elsewhere (macOS, Windows, remote Dask workers) it records
nothing and the error names no worker.
"""

from __future__ import annotations

import os
import re
import select
import signal
import threading

__all__ = ["DeathWatch", "describe_exit"]


def describe_exit(code: int | None) -> str | None:
    """``"killed by SIGKILL"`` / ``"exited with status 3"`` for a multiprocessing-style
    exit code (negative: the signal), None if unknown."""
    if code is None:
        return None
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with status {code}"


def exit_from_pool_error(text: str) -> str | None:
    """The exit code that loky's ``TerminatedWorkerError`` reports, as words (or None)."""
    found = re.search(r"exit codes of the workers are \{[A-Z0-9]*\((-?\d+)\)", text)
    return describe_exit(int(found.group(1))) if found else None


class DeathWatch:
    """Records the first of the watched worker processes to exit.

    Attributes
    ----------
    first : tuple of (worker, pid, how) or None
        The worker index, its pid and how it ended (``describe_exit`` text, or None
        when it could not be read) of the first watched process seen to exit; None
        if none has, or if several were seen exiting at the same instant.
    """

    def __init__(self) -> None:
        self.first: tuple[int, int, str | None] | None = None
        self.supported = hasattr(os, "pidfd_open") and hasattr(select, "select")
        self._fds: dict[int, tuple[int, int]] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._wake: tuple[int, int] | None = None  # a pipe that wakes the thread (made with it, at the first add)

    def add(self, worker: int, pid: int) -> None:
        """Watch ``pid`` (worker ``worker``); ignored for this process itself or where unsupported."""
        if not self.supported or self._closed or pid == os.getpid():
            return
        try:
            fd = os.pidfd_open(pid)
        except OSError:  # gone already, or not ours to watch
            return
        with self._lock:
            self._fds[fd] = (worker, pid)
        if self._thread is None:
            self._wake = os.pipe()
            self._thread = threading.Thread(target=self._run, name="dqnlab-deathwatch", daemon=True)
            self._thread.start()
        else:
            os.write(self._wake[1], b"+")

    def _run(self) -> None:
        while not self._closed:
            with self._lock:
                fds = list(self._fds)
            try:
                ready, _, _ = select.select(fds + [self._wake[0]], [], [])
            except (OSError, ValueError):  # closed under us
                return
            if self._wake[0] in ready:
                os.read(self._wake[0], 64)
            dead = [fd for fd in ready if fd in self._fds]
            if dead and self.first is None and not self._closed:
                if len(dead) == 1:
                    worker, pid = self._fds[dead[0]]
                    self.first = (worker, pid, _how(dead[0]))
                else:
                    self.first = None
                    self._closed = True  # ambiguous: name nobody
            with self._lock:
                for fd in dead:
                    self._fds.pop(fd, None)
                    os.close(fd)
            if self.first is not None:
                return

    def close(self) -> None:
        """Stop watching and release the file descriptors."""
        self._closed = True
        if self._wake is None:
            return
        try:
            os.write(self._wake[1], b"x")
        except OSError:
            pass
        if self._thread is not None:
            self._thread.join(2.0)
        with self._lock:
            for fd in self._fds:
                os.close(fd)
            self._fds.clear()
        for fd in self._wake:
            os.close(fd)
        self._wake = None


def _how(pidfd: int) -> str | None:
    """How the (child) process behind ``pidfd`` ended, without reaping it."""
    if not hasattr(os, "P_PIDFD"):
        return None
    try:
        info = os.waitid(os.P_PIDFD, pidfd, os.WEXITED | os.WNOWAIT | os.WNOHANG)
    except (ChildProcessError, OSError):  # not our child, or already reaped by its owner
        return None
    if info is None:
        return None
    if info.si_code in (os.CLD_KILLED, os.CLD_DUMPED):
        return describe_exit(-info.si_status)
    return describe_exit(info.si_status)
