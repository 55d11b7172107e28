"""The cluster path run as a cluster: two hosts (network namespaces, tests/twohosts.py), a Dask scheduler
and a worker on the first, a worker on the second, and ``python -m dqnlab train --backend dask`` on the
first. Every scheme that runs on a cluster trains with work on both hosts; a worker killed on the second
host, or cut off from it, ends the run within 15 s naming it and its host, with a checkpoint that
``--resume`` continues."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest
import twohosts

from dqnlab.runtime.checkpoint import load_checkpoint

_WHY = twohosts.unavailable()
pytestmark = [pytest.mark.slow, pytest.mark.skipif(_WHY is not None, reason=f"no two hosts here: {_WHY}")]

ARGS = ["--preset", "mlp", "--hidden", "16", "--n-envs", "8", "--batch-size", "32", "--learning-starts", "300",
        "--eval-games", "0", "--no-progress", "--no-tensorboard"]
#: The longest a lost worker may take to end the run (the issue's bound; detection takes 5-10 s).
ENDS_WITHIN_S = 15.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with twohosts.TwoHosts(tmp_path_factory.mktemp("hosts")) as h:
        yield h


@pytest.fixture
def hosts(cluster):
    """The cluster, its workers started afresh first if a fault test left them as Dask left them."""
    if cluster.faulted:
        cluster.restart_workers()
    return cluster


def _log(hosts, name: str) -> str:
    return (hosts.tmp / name).read_text()


# (independent and sharded train across both hosts in the fault tests below, until the fault)
@pytest.mark.parametrize(("scheme", "workers"), [("averaged", 3), ("actors", 2)])
def test_each_cluster_scheme_trains_with_work_on_both_hosts(hosts, tmp_path, scheme, workers):
    out = tmp_path / "run"
    proc = hosts.train("--scheme", scheme, "--workers", str(workers), "--env-steps", "2000", *ARGS, "--out", str(out),
                       log=f"{scheme}.log")
    code, _ = twohosts.wait(proc, 120)
    assert code == 0, _log(hosts, f"{scheme}.log")
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["env_steps"] >= 2000 and summary["updates"] > 0
    used = {w["host"] for w in summary["extra"]["per_worker"]}
    assert {hosts.names["b"]} <= used <= set(hosts.names.values()), used  # (sharded: rank 0 is the driver, on a)


def _start_long_run(hosts, out, scheme: str, workers: int, log: str):
    """A run with a checkpoint about every second, once it has trained a little, with work on both hosts."""
    proc = hosts.train("--scheme", scheme, "--workers", str(workers), "--env-steps", "100000000", *ARGS,
                       "--checkpoint-every", "1", "--out", str(out), log=log)
    end = time.monotonic() + 90
    # (checkpoint.pt is written first, then the result files: wait for the summary too)
    while not ((out / "checkpoint.pt").is_file() and load_checkpoint(out)["updates"] > 0
               and (out / "summary.json").is_file()):
        assert proc.poll() is None, _log(hosts, log)
        assert time.monotonic() < end, _log(hosts, log)
        time.sleep(0.5)
    used = {w["host"] for w in json.loads((out / "summary.json").read_text())["extra"]["per_worker"]}
    assert hosts.names["b"] in used, used
    return proc


def _ended_naming_host_b(hosts, proc, log: str, t0: float) -> str:
    code, _ = twohosts.wait(proc, 60)
    took = time.monotonic() - t0
    text = _log(hosts, log)
    assert code == 1, text
    (line,) = [line for line in text.splitlines() if line.startswith("dqnlab: error:")]
    assert f"on {hosts.names['b']}" in line, line
    assert took < ENDS_WITHIN_S, (took, line)
    return line


@pytest.fixture
def fresh_workers(hosts):
    """The cluster for a test that faults it: its workers are started afresh before the next test that uses
    the cluster (not after the last one), unless the test restarted them after its fault itself."""
    hosts.faulted = True
    return hosts


def test_a_rank_killed_on_the_second_host_ends_the_run_naming_it_and_resume_continues(fresh_workers, tmp_path):
    hosts, out = fresh_workers, tmp_path / "run"
    proc = _start_long_run(hosts, out, "sharded", 3, "kill.log")
    pids = hosts.worker_processes("b")
    assert pids
    t0 = time.monotonic()
    for pid in pids:
        os.kill(pid, signal.SIGKILL)  # the Dask nanny starts a new worker process, and Dask may run the task again
    line = _ended_naming_host_b(hosts, proc, "kill.log", t0)
    assert "failed" in line
    ck = load_checkpoint(out)  # written at the failure: this process holds the learner
    assert ck["status"] == "failed" and ck["updates"] > 0
    hosts.restart_workers()
    more = ck["env_steps"] + 2000
    resumed = hosts.train("--resume", str(out), "--env-steps", str(more), "--no-progress", log="resume.log")
    code, _ = twohosts.wait(resumed, 120)
    assert code == 0, _log(hosts, "resume.log")
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["env_steps"] >= more


@pytest.mark.parametrize(("scheme", "workers"), [("independent", 2), ("sharded", 3)])
def test_a_cut_link_ends_the_run_naming_the_unreachable_worker_with_a_checkpoint(fresh_workers, tmp_path, scheme,
                                                                                 workers):
    hosts, out = fresh_workers, tmp_path / "run"
    proc = _start_long_run(hosts, out, scheme, workers, f"cut-{scheme}.log")
    t0 = time.monotonic()
    hosts.link(up=False)
    try:
        line = _ended_naming_host_b(hosts, proc, f"cut-{scheme}.log", t0)
    finally:
        hosts.link(up=True)
    assert "cannot be reached" in line
    assert load_checkpoint(out)["updates"] > 0 and json.loads((out / "summary.json").read_text())["status"] == "failed"
