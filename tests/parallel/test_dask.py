"""The Dask backend: schemes on a real ``dask.distributed`` cluster (processes, 127.0.0.1 only).

One module-wide ``LocalCluster`` stands in for a cluster started outside dqnlab (its
address is passed as ``dask_scheduler``); one test lets dqnlab start and close its own.
Every process started here is stopped by the end of the module.
"""

from __future__ import annotations

import json
import logging
import time

import joblib
import pytest

import dqnlab
from dqnlab import TrainConfig
from dqnlab.cli import main
from dqnlab.parallel import dask as cluster
from dqnlab.schemes import WorkerError

distributed = pytest.importorskip("distributed")
psutil = pytest.importorskip("psutil")

# Two clusters at once both want the scheduler's HTTP port 8787; the second takes another (on 127.0.0.1).
pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore:Port 8787 is already in use:UserWarning")]


@pytest.fixture
def cfg() -> TrainConfig:
    return TrainConfig(total_env_steps=2_000, n_envs=8, buffer_size=2_000, batch_size=32, learning_starts=200,
                       replay_ratio=4.0, hidden=(32,), target_update=50, epsilon_decay_steps=1_000, seed=0,
                       max_moves=60)


def _children() -> set[int]:
    """Child processes, less multiprocessing's resource tracker (one per parent, for its lifetime)."""
    out = set()
    for p in psutil.Process().children(recursive=True):
        try:
            if "resource_tracker" not in " ".join(p.cmdline()):
                out.add(p.pid)
        except psutil.Error:  # it exited meanwhile
            pass
    return out


# ----------------------------------------------------------------------------- errors, no cluster needed
@pytest.mark.parametrize("scheme,kwargs,match", [
    ("shared", {"backend": "dask"}, "shared memory"),
    ("serial", {"backend": "dask"}, "no worker processes"),
    ("independent", {"backend": "ray"}, "backend must be one of"),
    ("independent", {"dask_scheduler": "tcp://127.0.0.1:8786"}, "only with backend='dask'"),
    ("independent", {"backend": "dask", "dask_scheduler": ""}, "dask_scheduler must be an address"),
])
def test_backend_errors_are_clear(cfg, scheme, kwargs, match):
    before = _children()
    with pytest.raises(ValueError, match=match):
        dqnlab.train(scheme, cfg, workers=2, progress=False, **kwargs)
    assert _children() <= before  # nothing was started


def test_unreachable_scheduler_is_a_clear_error(cfg, monkeypatch):
    monkeypatch.setattr(cluster, "CONNECT_TIMEOUT_S", 1.0)
    with pytest.raises(ValueError, match="cannot reach the Dask scheduler"):
        dqnlab.train("independent", cfg, workers=2, progress=False, backend="dask",
                     dask_scheduler="tcp://127.0.0.1:9")


# ----------------------------------------------------------------------------- a local cluster dqnlab starts
def test_independent_on_a_local_cluster_started_and_closed_by_dqnlab(cfg):
    before = _children()
    run = dqnlab.train("independent", cfg, workers=2, progress=False, backend="dask", sync_every=20)
    assert run.status == "completed" and run.env_steps >= cfg.total_env_steps
    assert set(run.episodes["worker"]) == {0, 1} and run.extra["syncs"] > 0
    deadline = time.monotonic() + 15
    while _children() - before and time.monotonic() < deadline:  # worker processes take a moment to exit
        time.sleep(0.2)
    assert not _children() - before


# ----------------------------------------------------------------------------- an existing scheduler
def test_actors_run_on_the_workers_of_an_existing_scheduler(cfg, dask_cluster):
    address, _, pids = dask_cluster
    run = dqnlab.train("actors", cfg, workers=2, progress=False, backend="dask", dask_scheduler=address,
                       weights_every=10)
    assert run.status == "completed" and run.env_steps >= cfg.total_env_steps
    assert {w["pid"] for w in run.extra["per_worker"]} == pids  # one actor on each Dask worker
    assert run.extra["actors_on_cluster"] and run.extra["weights_sent"] >= 2
    assert set(run.episodes["worker"]) == {0, 1} and run.updates > 0


# (the command line's path, here rather than in test_cli.py: it shares this module's cluster)
def test_cli_independent_on_an_existing_scheduler(dask_cluster, tmp_path, capsys):
    address, _, _ = dask_cluster
    out = tmp_path / "run"
    code = main(["train", "--scheme", "independent", "--workers", "2", "--backend", "dask", "--dask-scheduler",
                 address, "--preset", "seed", "--env-steps", "600", "--sync-every", "50",
                 "--eval-games", "0", "--no-progress", "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    s = json.loads((out / "summary.json").read_text())
    assert s["scheme"] == "independent" and s["workers"] == 2 and s["status"] == "completed"
    assert s["extra"]["syncs"] > 0 and s["updates"] > 0
    assert [w["env_steps"] for w in s["extra"]["per_worker"]] == [300, 300]


@pytest.mark.parametrize("comm", ["allreduce", "joblib"])
@pytest.mark.parametrize("scheme", ["sharded", "averaged"])
def test_synchronous_schemes_run_on_dask_workers_and_equal_loky(cfg, dask_cluster, scheme, comm):
    """Over all-reduce a Dask worker process is rank 1 of the gloo group (rendezvous at this
    process's store); either way the run is the one loky's workers give."""
    import numpy as np

    address, _, _ = dask_cluster
    config = cfg.replace(total_env_steps=600, learning_starts=400, replay_ratio=2.0)
    ref = dqnlab.train(scheme, config, workers=2, progress=False, backend="loky", comm=comm)
    run = dqnlab.train(scheme, config, workers=2, progress=False, backend="dask", dask_scheduler=address, comm=comm)
    assert run.status == "completed" and run.updates == ref.updates > 0 and run.extra["rounds"] == run.updates
    assert run.extra["comm"] == comm and all(w["communication_s"] > 0 for w in run.extra["per_worker"])
    for name in ref.weights:
        np.testing.assert_allclose(run.weights[name], ref.weights[name], rtol=0, atol=1e-6)


def test_joblib_dask_backend_chosen_by_the_user_is_used(cfg, dask_cluster):
    _, client, pids = dask_cluster
    with joblib.parallel_config(backend="dask", client=client):
        run = dqnlab.train("actors", cfg.replace(total_env_steps=800), workers=2, progress=False)
        with pytest.raises(ValueError, match="shared memory"):
            dqnlab.train("shared", cfg, workers=2, progress=False)
    assert {w["pid"] for w in run.extra["per_worker"]} == pids


def test_too_few_dask_workers_for_long_lived_tasks(cfg, dask_cluster, monkeypatch):
    monkeypatch.setattr(cluster, "CONNECT_TIMEOUT_S", 0.5)  # how long dqnlab waits for workers to arrive
    address, _, _ = dask_cluster
    with pytest.raises(ValueError, match="runs all 3 workers at once"):
        dqnlab.train("actors", cfg, workers=3, progress=False, backend="dask", dask_scheduler=address)


def test_sharded_on_a_worker_that_runs_tasks_as_threads_equals_loky(cfg):
    # A plain `dask worker ADDR` runs several tasks at once as threads of one process;
    # an in-process worker with two threads reproduces that without spawning anything.
    import numpy as np

    config = cfg.replace(total_env_steps=800, replay_ratio=4.0)
    ref = dqnlab.train("sharded", config, workers=2, progress=False, backend="loky")
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False, protocol="tcp://",
                                  host="127.0.0.1", dashboard_address=None, silence_logs=logging.ERROR) as lc:
        run = dqnlab.train("sharded", config, workers=2, progress=False, backend="dask",
                           dask_scheduler=lc.scheduler_address)
    assert run.updates == ref.updates > 0
    for name in ref.weights:
        np.testing.assert_array_equal(run.weights[name], ref.weights[name])


@pytest.mark.parametrize("scheme", ["independent", "actors"])
def test_ntuple_afterstate_learners_run_on_an_existing_scheduler(scheme, dask_cluster):
    address, _, _ = dask_cluster
    config = TrainConfig(network="ntuple", ntuples="17x4", afterstate=True, optimizer="sgd", max_grad_norm=None,
                         lr=0.01, loss="mse", gamma=1.0, target_update=1, reward_transform="none",
                         epsilon_start=0.0, epsilon_end=0.0, total_env_steps=1_200, n_envs=8, buffer_size=1_200,
                         batch_size=32, learning_starts=200, replay_ratio=2.0, seed=0)
    options = {"sync_every": 20} if scheme == "independent" else {"weights_every": 10}
    run = dqnlab.train(scheme, config, workers=2, progress=False, backend="dask", dask_scheduler=address, **options)
    assert run.status == "completed" and run.updates > 0 and abs(run.weights["weight"]).max() > 0


# ----------------------------------------------------------------------------- faults
def test_a_killed_dask_worker_ends_the_run_naming_it_even_though_dask_reruns_its_task(cfg):
    """Dask's nanny restarts a killed worker and Dask runs the lost task again, from scratch: the run must
    not take the fresh start for the learner's progress and end "completed"."""
    import os
    import signal

    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                  dashboard_address=None, silence_logs=logging.ERROR) as lc, \
            distributed.Client(lc, set_as_default=False) as client:
        workers = set(client.run(os.getpid).values())
        killed = []

        def kill_once(snapshot):
            # task 1's process, once the task has said hello: a process killed before that, while its task still
            # imports, has lost nothing, and Dask's start of the task elsewhere is the task's first
            victim = ([w.get("pid") for w in snapshot.extra.get("per_worker", [])] + [None, None])[1]
            if snapshot.env_steps > 0 and victim is not None and not killed:
                assert victim in workers  # a Dask worker's process, not this one
                os.kill(victim, signal.SIGKILL)  # as the OOM killer would
                killed.append((time.perf_counter(), victim))
            return False

        config = cfg.replace(total_env_steps=None, max_seconds=60.0)
        with pytest.raises(WorkerError) as raised:
            dqnlab.train("independent", config, workers=2, progress=False, backend="dask",
                         dask_scheduler=lc.scheduler_address, callback=kill_once)
        waited = time.perf_counter() - killed[0][0]  # (until the run ended, not the cluster's own shutdown)
    err, victim = raised.value, killed[0][1]
    assert waited < 15, waited  # not the budget's end, nor gloo's or any other 60 s
    assert f"pid {victim}" in err.message and ("died" in err.message or "started the task again" in err.message)
    assert err.partial is not None and err.partial.env_steps > 0  # what was gathered is kept
