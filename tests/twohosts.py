"""Two hosts on one machine, for the cluster tests: network namespaces joined by a veth pair.

Host ``a`` (10.200.0.1) runs a Dask scheduler and one worker, host ``b`` (10.200.0.2) one worker; each
process runs in its host's namespace, which holds only the veth's address and loopback, with a host
name of its own (a UTS namespace: ``socket.gethostname()`` tells the hosts apart, as on real machines,
and resolves to 127.0.0.1 there as on many). Needs root and ``ip netns``; :func:`unavailable` says why not.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Self

ADDRESSES = {"a": "10.200.0.1", "b": "10.200.0.2"}
PORT = 8786
SCHEDULER = f"tcp://{ADDRESSES['a']}:{PORT}"
ROOT = Path(__file__).resolve().parents[1]


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def unavailable() -> str | None:
    """Why two hosts cannot be made here (None: they can)."""
    if not sys.platform.startswith("linux"):
        return "network namespaces are Linux's"
    if os.geteuid() != 0:
        return "making network namespaces needs root"
    if shutil.which("ip") is None or shutil.which("unshare") is None:
        return "needs iproute2's ip and util-linux's unshare"
    probe = f"dqprobe{os.getpid() % 100000}"
    made = _ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"'ip netns add' is not allowed here: {made.stderr.strip()}"
    _ip("netns", "delete", probe, check=False)
    return None


class TwoHosts:
    """The two hosts, their Dask scheduler and workers (a context manager: everything removed at the end)."""

    def __init__(self, tmp: Path):
        tag = os.getpid() % 100000
        self.ns = {h: f"dq{tag}{h}" for h in ADDRESSES}
        self.veth = {h: f"dqv{tag}{h}" for h in ADDRESSES}
        self.names = {h: f"dqhost-{h}" for h in ADDRESSES}
        self.tmp = tmp
        self.procs: list[subprocess.Popen] = []
        self.nannies: dict[str, subprocess.Popen] = {}
        #: Whether the workers may be as a fault left them (see :meth:`restart_workers`).
        self.faulted = False
        self.bin = Path(sys.executable).parent

    # ------------------------------------------------------------------ the network
    def __enter__(self) -> Self:
        try:
            for h in ADDRESSES:
                _ip("netns", "add", self.ns[h])
            _ip("link", "add", self.veth["a"], "type", "veth", "peer", "name", self.veth["b"])
            for h, address in ADDRESSES.items():
                _ip("link", "set", self.veth[h], "netns", self.ns[h])
                _ip("-n", self.ns[h], "addr", "add", f"{address}/24", "dev", self.veth[h])
                _ip("-n", self.ns[h], "link", "set", self.veth[h], "up")
                _ip("-n", self.ns[h], "link", "set", "lo", "up")
            self.start_dask()
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        for p in self.procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(10)
        for h in ADDRESSES:
            _ip("netns", "delete", self.ns[h], check=False)  # (its end of the veth pair goes with it)

    def link(self, up: bool) -> None:
        """Connect or cut host b's link."""
        _ip("-n", self.ns["b"], "link", "set", self.veth["b"], "up" if up else "down")

    # ------------------------------------------------------------------ processes
    def command(self, host: str, *argv: str) -> list[str]:
        """``argv`` to run on ``host``: in its namespace, under its host name."""
        return ["ip", "netns", "exec", self.ns[host], "unshare", "--uts", "sh", "-c",
                f'hostname {self.names[host]} && exec "$@"', "sh", *argv]

    def start(self, host: str, *argv: str, log: str) -> subprocess.Popen:
        """Start ``argv`` on ``host`` in a session of its own, its output to ``tmp/log``."""
        env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
        with open(self.tmp / log, "w") as out:
            p = subprocess.Popen(self.command(host, *argv), stdout=out, stderr=subprocess.STDOUT, env=env,
                                 start_new_session=True)
        self.procs.append(p)
        return p

    def start_dask(self) -> None:
        self.start("a", str(self.bin / "dask"), "scheduler", "--host", ADDRESSES["a"], "--port", str(PORT),
                   "--no-dashboard", log="scheduler.log")
        self.start_workers()

    def start_workers(self) -> None:
        """One Dask worker (a nanny and its worker process, one thread) on each host; wait for both."""
        for h, address in ADDRESSES.items():
            self.nannies[h] = self.start(h, str(self.bin / "dask"), "worker", SCHEDULER, "--host", address,
                                         "--nthreads", "1", "--nworkers", "1", "--no-dashboard",
                                         "--name", self.names[h], log=f"worker-{h}.log")
        self.wait_for_workers(2)

    def restart_workers(self) -> None:
        """Fresh workers after a fault: Dask may have started a lost task again on the restarted worker, and
        such a task (its run over) holds the worker's one thread until it gives up."""
        for nanny in self.nannies.values():
            os.killpg(nanny.pid, signal.SIGKILL)
            nanny.wait(10)
        self.procs = [p for p in self.procs if p.poll() is None]
        self.start_workers()
        self.faulted = False

    def wait_for_workers(self, n: int, timeout: float = 60.0) -> None:
        """Wait until the scheduler has ``n`` workers."""
        code = ("import sys, distributed; c = distributed.Client(sys.argv[1], timeout=30); "
                "c.wait_for_workers(int(sys.argv[2]), timeout=float(sys.argv[3])); c.close()")
        done = subprocess.run(self.command("a", sys.executable, "-c", code, SCHEDULER, str(n), str(timeout)),
                              check=False, capture_output=True, text=True, timeout=timeout + 30)
        if done.returncode != 0:
            logs = {p.name: p.read_text()[-2000:] for p in self.tmp.glob("*.log")}
            raise RuntimeError(f"the Dask cluster did not get {n} workers: {done.stderr[-2000:]}\n{logs}")

    def worker_processes(self, host: str) -> list[int]:
        """The pids of host ``host``'s Dask worker processes: the nanny's children that multiprocessing spawned
        (``ip netns exec``, ``unshare`` and ``sh -c 'exec ...'`` each exec, so the nanny has the started pid)."""
        nanny = self.nannies[host].pid
        return [pid for pid in _all_pids() if _ppid(pid) == nanny and "multiprocessing.spawn" in _cmdline(pid)]

    def train(self, *args: str, log: str = "train.log") -> subprocess.Popen:
        """``python -m dqnlab train --backend dask --dask-scheduler ... ARGS`` on host a."""
        return self.start("a", sys.executable, "-m", "dqnlab", "train", "--backend", "dask",
                          "--dask-scheduler", SCHEDULER, *args, log=log)


def _all_pids() -> list[int]:
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]


def _ppid(pid: int) -> int | None:
    try:
        return int((Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _cmdline(pid: int) -> str:
    try:
        return (Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def wait(proc: subprocess.Popen, timeout: float) -> tuple[int, float]:
    """Wait for ``proc`` to end: (exit status, seconds waited)."""
    t0 = time.monotonic()
    code = proc.wait(timeout)
    return code, time.monotonic() - t0
