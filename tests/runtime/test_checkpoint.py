"""Run directories, checkpoints and resume; divergence; clean interruption; bad input.

Budgets are in env steps, so a run and its resumed halves are deterministic: a
resumed run is compared exactly with one that did not stop.
"""

from __future__ import annotations

import inspect
import json
import math
import os
import re
import shutil
import signal

import numpy as np
import pandas as pd
import pytest
import torch

import dqnlab
from dqnlab import DQNAgent, TrainConfig
from dqnlab.runtime.checkpoint import CHECKPOINT_FILE, CHECKPOINT_VERSION, load_checkpoint, save_checkpoint
from dqnlab.schemes import SCHEMES, DivergedError, WorkerError

GAME_COLUMNS = ["worker", "episode", "env_steps", "score", "moves", "max_tile", "epsilon", "loss"]


@pytest.fixture
def cfg() -> TrainConfig:
    return TrainConfig(total_env_steps=2_000, n_envs=8, buffer_size=2_000, batch_size=32,
                       learning_starts=200, replay_ratio=8.0, hidden=(32,), target_update=50,
                       epsilon_decay_steps=1_000, seed=0)


def _games(run) -> pd.DataFrame:
    """The games of a run, in per-worker order (wall times differ between runs)."""
    return run.episodes.sort_values(["worker", "episode"])[GAME_COLUMNS].reset_index(drop=True)


def _assert_same_run(a, b) -> None:
    assert len(a.episodes) > 3
    pd.testing.assert_frame_equal(_games(a), _games(b))
    assert (a.env_steps, a.updates) == (b.env_steps, b.updates)
    assert all(np.array_equal(a.weights[k], b.weights[k]) for k in a.weights)


def _assert_table_continues(run) -> None:
    """Every worker's episodes are numbered 0..n-1 once each, and its env steps never go back."""
    for _, games in run.episodes.groupby("worker"):
        games = games.sort_values("episode")
        assert games["episode"].tolist() == list(range(len(games)))
        assert games["env_steps"].is_monotonic_increasing


# ----------------------------------------------------------------------------- exact resume
# (priority_beta 1: beta anneals over the budget, which the first half's differs from)
@pytest.mark.parametrize("changes", [{}, {"prioritized": True, "n_step": 3, "priority_beta": 1.0}])
def test_serial_resume_gives_the_same_run_as_not_stopping(cfg, tmp_path, changes):
    cfg = cfg.replace(**changes)
    whole = dqnlab.train("serial", cfg, progress=False)
    first = dqnlab.train("serial", cfg.replace(total_env_steps=1_000), progress=False, run_dir=tmp_path)
    ck = load_checkpoint(tmp_path)
    # what a checkpoint holds
    assert ck["version"] == CHECKPOINT_VERSION and ck["scheme"] == "serial" and ck["workers"] == 1
    assert ck["env_steps"] == 1_000 and ck["status"] == "completed" and ck["config"] == first.config.to_dict()
    learner = ck["state"]["learner"]
    assert set(learner["agent"]) == {"online", "target", "optimizer", "updates", "rng"}
    assert learner["agent"]["optimizer"]["state"]  # Adam moments
    size = learner["buffer"]["size"]  # (n-step: the last n - 1 steps of each board are still pending)
    assert 1_000 - (cfg.n_step - 1) * cfg.n_envs <= size <= 1_000 and learner["buffer"]["boards"].shape == (size, 4, 4)
    assert set(learner["env"]) >= {"boards", "scores", "moves", "rng"}
    assert len(ck["episodes"]["score"]) == len(first.episodes)
    assert torch.equal(learner["agent"]["online"]["mlp.0.weight"], torch.from_numpy(first.weights["mlp.0.weight"]))
    assert not list(tmp_path.glob("*.tmp"))
    if cfg.prioritized:  # the priorities and the n-step pending steps are in the checkpoint
        assert learner["buffer"]["priorities"].shape == (size,) and learner["nstep"]["n"] == 3

    resumed = dqnlab.train("serial", cfg, progress=False, resume=tmp_path)
    _assert_same_run(whole, resumed)
    assert resumed.extra["replay"] == whole.extra["replay"]
    _assert_table_continues(resumed)
    history = resumed.history
    assert history["env_steps"].is_monotonic_increasing and history["wall_time_s"].is_monotonic_increasing
    assert resumed.wall_time_s > first.wall_time_s and resumed.extra["checkpoint"]["resumed_from_env_steps"] == 1_000
    on_disk = pd.read_csv(tmp_path / "episodes.csv")
    assert len(on_disk) == len(whole.episodes) and not on_disk.duplicated(["worker", "episode"]).any()
    assert load_checkpoint(tmp_path)["env_steps"] == 2_000


@pytest.mark.parametrize("scheme,workers,options", [
    ("independent", 2, {"sync": "periodic", "sync_every": 10}),  # learners in worker processes
    ("averaged", 1, {}),  # the parent's learner, one in-process round per update
    ("shared", 1, {}),  # the model and replay in shared memory
    ("sharded", 2, {}),  # a gloo group: the parent (rank 0) and one worker rank, the same model
    # config fields among the options: prioritized replay (priorities set from both ranks' TD errors) and 3-step
    # returns; beta 1 throughout, as its annealing follows the budget, which the first half's differs from
    ("sharded", 2, {"prioritized": True, "n_step": 3, "priority_beta": 1.0}),
    ("shared", 1, {"prioritized": True, "n_step": 3, "priority_beta": 1.0}),  # the priority tree in the block
    ("averaged", 2, {"average_every": 3}),  # local SGD: the ranks' models differ between averages
    # an n-tuple network's local SGD: each rank's rows changed since the last average are in its state
    ("averaged", 2, {"average_every": 3, "network": "ntuple", "ntuples": ((0, 1, 2, 3), (4, 5, 6, 7)),
                     "optimizer": "sgd", "lr": 0.01, "max_grad_norm": None}),
    # threads on the compiled core: helpers sharing each minibatch; members with tables of their own, whose
    # changes since the last average are in the checkpoint
    ("sharded", 2, {"comm": "threads", "network": "ntuple", "ntuples": ((0, 1, 2, 3), (4, 5, 6, 7)),
                    "optimizer": "tc", "lr": 0.5, "target_update": 1, "max_grad_norm": None, "afterstate": True}),
    ("averaged", 3, {"comm": "threads", "average_every": 3, "network": "ntuple",
                     "ntuples": ((0, 1, 2, 3), (4, 5, 6, 7)), "optimizer": "tc", "lr": 0.5, "target_update": 1,
                     "max_grad_norm": None, "afterstate": True}),
])
def test_resume_gives_the_same_run_as_not_stopping(cfg, tmp_path, scheme, workers, options):
    changes = {k: v for k, v in options.items() if k in TrainConfig.__dataclass_fields__}
    options = {k: v for k, v in options.items() if k not in changes}
    config = (cfg.replace(replay_ratio=4.0) if scheme in ("sharded", "averaged") else cfg).replace(**changes)
    whole = dqnlab.train(scheme, config, workers=workers, progress=False, **options)
    # checkpoint_every=0: also checkpoints while running (the workers' barrier)
    dqnlab.train(scheme, config.replace(total_env_steps=1_000), workers=workers, progress=False,
                 run_dir=tmp_path, checkpoint_every=0, **options)
    resumed = dqnlab.train(scheme, config, progress=False, resume=tmp_path)  # workers, options: the checkpoint's
    _assert_same_run(whole, resumed)
    _assert_table_continues(resumed)
    if scheme == "independent":  # the sync rounds continue too
        assert [r["round"] for r in resumed.extra["divergence"]] == [r["round"] for r in whole.extra["divergence"]]
    if workers > 1 and scheme in ("sharded", "averaged"):  # over the same channel, and its counters continue
        assert resumed.options["comm"] == whole.options["comm"] == options.get("comm", "allreduce")
        assert resumed.extra.get("averages") == whole.extra.get("averages")
        assert resumed.extra["replay"] == whole.extra["replay"]
    if scheme == "shared":  # the buffer's figures (in the block) and the worker's counters (in its state) continue
        assert resumed.extra["replay"] == whole.extra["replay"]


def test_shared_two_workers_resume_continues_every_counter(cfg, tmp_path):
    first = dqnlab.train("shared", cfg.replace(total_env_steps=1_200), workers=2, progress=False, run_dir=tmp_path,
                         checkpoint_every=0)
    ck = load_checkpoint(tmp_path)
    assert ck["state"]["arrays"]["updates_total"][0] == first.extra["updates_counter"] == first.updates
    resumed = dqnlab.train("shared", cfg.replace(total_env_steps=2_400), progress=False, resume=tmp_path)
    assert resumed.status == "completed" and resumed.env_steps >= 2_400 and resumed.workers == 2
    assert resumed.extra["updates_counter"] == resumed.updates > first.updates  # the shared counter went on
    per = resumed.extra["per_worker"]
    assert all(w["env_steps"] >= 1_200 for w in per)
    _assert_table_continues(resumed)
    before, after = _games(first), _games(resumed)
    key = ["worker", "episode"]
    kept = after[after.set_index(key).index.isin(before.set_index(key).index)].reset_index(drop=True)
    pd.testing.assert_frame_equal(kept, before)  # the first session's games are kept as they were


def _copy_first_checkpoint_then_stop(run_dir, to):
    """A callback: once ``run_dir`` has a checkpoint written while running, after the first env steps (on a busy
    machine the first can come before any), copy it to ``to`` and stop the run."""
    def callback(snapshot):
        if (run_dir / CHECKPOINT_FILE).exists() and load_checkpoint(run_dir)["env_steps"] > 0:
            to.mkdir(exist_ok=True)
            shutil.copy(run_dir / CHECKPOINT_FILE, to / CHECKPOINT_FILE)
            return True
    return callback


@pytest.mark.slow  # three pairs of actors runs in lockstep
@pytest.mark.parametrize(("changes", "share"), [({}, False), ({}, True), ({"prioritized": True, "n_step": 3}, True)])
def test_actors_in_lockstep_resume_gives_the_same_run_as_not_stopping(cfg, tmp_path, changes, share):
    config = cfg.replace(total_env_steps=5_000, max_moves=60, **changes)
    options = dict(workers=1, progress=False, lockstep=True, share_weights=share,
                   learner_threads=torch.get_num_threads())
    whole = dqnlab.train("actors", config, **options)
    run_dir, mid = tmp_path / "run", tmp_path / "mid"
    first = dqnlab.train("actors", config, run_dir=run_dir, checkpoint_every=0,
                         callback=_copy_first_checkpoint_then_stop(run_dir, mid), **options)
    ck = load_checkpoint(mid)
    assert ck["scheme"] == "actors" and ck["status"] == "running" and 0 < ck["env_steps"] < first.env_steps
    assert first.status == "stopped" and load_checkpoint(run_dir)["env_steps"] == first.env_steps
    # lockstep: the actor's own copy, for an exact resume (none where it reads the learner's in shared memory)
    assert (ck["state"]["actors"][0]["weights"] is None) == share
    # from the checkpoint written mid-run (the actor's state taken at the barrier), and from the final one (Stop)
    for d in (mid, run_dir):
        resumed = dqnlab.train(resume=d, progress=False, learner_threads=torch.get_num_threads())
        _assert_same_run(whole, resumed)
        _assert_table_continues(resumed)
        assert resumed.extra["param_lag"]["max"] == 0  # every step still acted with the learner's current weights
        assert resumed.extra["replay"] == whole.extra["replay"]  # (prioritized: the same priorities' statistics)


def test_actors_two_workers_resume_a_mid_run_checkpoint(cfg, tmp_path):
    config = cfg.replace(total_env_steps=10**7, max_moves=60)
    run_dir, mid = tmp_path / "run", tmp_path / "mid"
    first = dqnlab.train("actors", config, workers=2, progress=False, weights_every=10, run_dir=run_dir,
                         checkpoint_every=0, callback=_copy_first_checkpoint_then_stop(run_dir, mid))
    assert first.status == "stopped"
    ck = load_checkpoint(mid)
    assert ck["status"] == "running" and ck["workers"] == 2
    learner, actors = ck["state"]["learner"], ck["state"]["actors"]
    # overlapped actors keep no copy of the weights: a resumed one starts from the learner's, as after a broadcast
    assert all(a["weights"] is None for a in actors)
    # one cut: the learner holds every transition the actors took, and every game they finished
    assert learner["steps"] == [a["st"]["env_steps"] for a in actors]
    assert sum(learner["steps"]) == learner["env_steps"] == ck["env_steps"] > 0
    assert learner["buffer"]["added"] == ck["env_steps"]
    capacity = learner["buffer"]["capacity"]  # (the actors' learner holds several messages of each actor)
    assert capacity == first.extra["buffer_size"] >= config.buffer_size
    assert learner["buffer"]["size"] == min(ck["env_steps"], capacity)
    rows = pd.DataFrame(ck["episodes"])
    assert [int((rows["worker"] == k).sum()) for k in range(2)] == [a["st"]["episodes"] for a in actors]

    more = 2_000
    resumed = dqnlab.train(config=config.replace(total_env_steps=ck["env_steps"] + more), resume=mid,
                           progress=False)
    assert resumed.status == "completed" and resumed.env_steps >= ck["env_steps"] + more
    assert resumed.updates > learner["agent"]["updates"]
    # each actor's count goes on from its restored one; which actor takes the new steps is up to timing
    # (one actor can finish the 2,000 steps while the other is still starting up)
    per_worker = [w["env_steps"] for w in resumed.extra["per_worker"]]
    assert all(w >= n for w, n in zip(per_worker, learner["steps"], strict=True))
    assert sum(per_worker) == resumed.env_steps
    _assert_table_continues(resumed)
    saved = rows.sort_values(["worker", "episode"])[GAME_COLUMNS].reset_index(drop=True)
    kept = _games(resumed).merge(saved[["worker", "episode"]], on=["worker", "episode"])
    pd.testing.assert_frame_equal(kept, saved, check_dtype=False)  # the checkpoint's games, as they were
    assert resumed.history["env_steps"].is_monotonic_increasing
    # the buffer's counters went on from the restored ones (not from zero)
    buffer = load_checkpoint(mid)["state"]["learner"]["buffer"]
    assert buffer["added"] == resumed.env_steps and buffer["size"] == min(resumed.env_steps, capacity)
    on_disk = pd.read_csv(mid / "episodes.csv")
    assert len(on_disk) == len(resumed.episodes) and not on_disk.duplicated(["worker", "episode"]).any()


# ----------------------------------------------------------------------------- periodic, stop, interrupt
def test_checkpoints_during_the_run_and_stop_keeps_a_resumable_run(cfg, tmp_path):
    seen = []

    def stop_once_written(snapshot):  # (a checkpoint is due a report interval after the last: timing decides when)
        path = tmp_path / CHECKPOINT_FILE
        seen.append((snapshot.env_steps, load_checkpoint(tmp_path)["env_steps"] if path.exists() else None))
        return seen[-1][1] is not None

    run = dqnlab.train("serial", cfg.replace(total_env_steps=10**7), progress=False, callback=stop_once_written,
                       run_dir=tmp_path, checkpoint_every=0)
    assert run.status == "stopped" and len(seen) >= 2
    assert seen[0][1] is None and seen[-1][1] in [steps for steps, _ in seen[:-1]]  # written at an earlier report
    ck = load_checkpoint(tmp_path)
    assert ck["status"] == "stopped" and ck["env_steps"] == run.env_steps
    assert json.loads((tmp_path / "summary.json").read_text())["status"] == "stopped"
    more = dqnlab.train("serial", cfg.replace(total_env_steps=run.env_steps + 400), progress=False, resume=tmp_path)
    assert more.env_steps == run.env_steps + 400 and len(more.episodes) >= len(run.episodes)


def test_ctrl_c_ends_the_run_cleanly_and_writes_the_final_checkpoint(cfg, tmp_path, python_sigint):
    def ctrl_c(snapshot):
        os.kill(os.getpid(), signal.SIGINT)  # as a terminal's Ctrl-C: the run stops at its next check

    run = dqnlab.train("serial", cfg.replace(total_env_steps=10**7), progress=False, callback=ctrl_c,
                       run_dir=tmp_path)
    assert run.status == "interrupted" and run.env_steps > 0
    ck = load_checkpoint(tmp_path)
    assert ck["status"] == "interrupted" and ck["env_steps"] == run.env_steps
    assert len(pd.read_csv(tmp_path / "episodes.csv")) == len(run.episodes) == len(ck["episodes"]["score"])
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # Python's handler is back


# ----------------------------------------------------------------------------- atomic writes
def test_a_crash_while_writing_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    save_checkpoint(tmp_path, {"format": "dqnlab-checkpoint", "version": CHECKPOINT_VERSION, "x": np.arange(3)})
    before = (tmp_path / CHECKPOINT_FILE).read_bytes()

    def crash_midway(obj, f):
        f.write(b"half a checkpoint")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", crash_midway)
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint(tmp_path, {"format": "dqnlab-checkpoint", "version": CHECKPOINT_VERSION, "x": np.arange(9)})
    assert (tmp_path / CHECKPOINT_FILE).read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [CHECKPOINT_FILE]  # no temporary file left
    np.testing.assert_array_equal(load_checkpoint(tmp_path)["x"], np.arange(3))


def test_large_mostly_zero_tables_are_stored_by_their_non_zero_entries_and_come_back_bit_exact(tmp_path):
    from dqnlab.runtime.compact import SPARSE_MIN_SIZE

    rng = np.random.default_rng(0)
    table = np.zeros(4 * SPARSE_MIN_SIZE, np.float32)  # an n-tuple table that has seen a few features
    seen = rng.choice(table.size, table.size // 20, replace=False)
    table[seen] = rng.normal(size=seen.size).astype(np.float32)
    table[seen[:3]] = [-0.0, np.nan, np.inf]  # every bit pattern comes back
    dense = rng.normal(size=SPARSE_MIN_SIZE).astype(np.float32)  # mostly non-zero: stays dense
    small = np.zeros(10, np.int64)
    payload = {"format": "dqnlab-checkpoint", "version": CHECKPOINT_VERSION, "table": table,
               "weight": torch.from_numpy(table.reshape(4, -1)), "dense": dense, "small": small}
    path = save_checkpoint(tmp_path, payload)
    assert path.stat().st_size < (table.nbytes + dense.nbytes) * 0.4  # the table at about 10% of its bytes
    ck = load_checkpoint(tmp_path)
    assert ck["table"].view(np.uint32).tolist() == table.view(np.uint32).tolist()
    assert isinstance(ck["weight"], torch.Tensor) and ck["weight"].shape == (4, SPARSE_MIN_SIZE)
    assert ck["weight"].numpy().view(np.uint32).tolist() == table.reshape(4, -1).view(np.uint32).tolist()
    np.testing.assert_array_equal(ck["dense"], dense)
    assert ck["small"].dtype == np.int64 and ck["table"].flags.writeable
    raw = torch.load(path, weights_only=True)  # still plain data
    assert "__sparse__" in raw["table"] and "__ndarray__" in raw["dense"]


def test_a_table_is_stored_by_its_entries_only_below_half_its_dense_bytes():
    from dqnlab.runtime.compact import SPARSE_MIN_SIZE, nonzero_entries

    n = SPARSE_MIN_SIZE  # float32: 4n bytes dense; an entry costs 4 + 4 bytes, a row of one 8 + 4
    for used, rows, sparse in [(n // 4 - 1, False, True), (n // 4, False, False),
                               (n // 6 - 1, True, True), (n // 6 + 1, True, False)]:
        a = np.zeros((n, 1), np.float32)
        a[np.arange(used) * 3 % n] = 1.0
        index = nonzero_entries(a, rows=rows)
        assert (index is not None) == sparse, (used, rows)
        if sparse:
            assert index.dtype == (np.int64 if rows else np.int32)
            assert index.tolist() == sorted(np.arange(used) * 3 % n)


# ----------------------------------------------------------------------------- divergence
def test_divergence_names_the_update_and_keeps_the_last_good_checkpoint(cfg, tmp_path, monkeypatch):
    first = dqnlab.train("serial", cfg.replace(total_env_steps=1_000), progress=False, run_dir=tmp_path)
    good = (tmp_path / CHECKPOINT_FILE).read_bytes()
    bad_update = first.updates + 7
    real_gradients = DQNAgent.compute_gradients

    def nan_from_update(self, batch, targets=None):
        loss = real_gradients(self, batch, targets)
        return loss * math.nan if self.updates + 1 >= bad_update else loss

    monkeypatch.setattr(DQNAgent, "compute_gradients", nan_from_update)
    with pytest.raises(DivergedError) as info:
        dqnlab.train("serial", cfg, progress=False, resume=tmp_path)
    err = info.value
    assert err.update == bad_update and f"at update {bad_update}" in str(err) and "diverged" in str(err)
    assert isinstance(err, FloatingPointError) and isinstance(err, WorkerError)
    assert err.partial.status == "failed" and err.partial.updates == bad_update - 1
    assert all(np.isfinite(w).all() for w in err.partial.weights.values())  # the bad step was not applied
    assert (tmp_path / CHECKPOINT_FILE).read_bytes() == good  # the last good checkpoint is kept
    summary = json.loads((tmp_path / "summary.json").read_text())  # and what was gathered is saved
    assert summary["status"] == "failed" and summary["env_steps"] == err.partial.env_steps > first.env_steps


def test_real_divergence_in_a_worker_scheme(cfg):
    exploding = cfg.replace(lr=1e12, loss="mse", max_grad_norm=None, encoding="raw", learning_starts=100)
    with pytest.raises(DivergedError) as info:
        dqnlab.train("averaged", exploding, workers=1, progress=False)
    assert info.value.update is not None and info.value.update <= info.value.partial.updates + 1
    assert "non-finite TD loss" in str(info.value) and info.value.partial.status == "failed"


# ----------------------------------------------------------------------------- bad input
def test_resume_rejects_what_it_cannot_continue(small_run, tmp_path, cfg):
    cases = [
        (dict(resume=tmp_path / "nowhere"), "is not a directory"),
        (dict(resume=tmp_path), "not a dqnlab run directory"),
        (dict(resume=small_run, scheme="independent"), "cannot be resumed as scheme 'independent'"),
        (dict(resume=small_run, workers=2), "workers=2"),
        (dict(resume=small_run, config=cfg.replace(lr=0.1)), "differs from the checkpoint's in ['lr']"),
        (dict(resume=small_run), "already used its budget"),
        (dict(resume=small_run, config=cfg.replace(total_env_steps=400)), "already used its budget"),
    ]
    for kwargs, match in cases:
        with pytest.raises(ValueError, match=re.escape(match)):
            dqnlab.train(progress=False, **kwargs)
    results_only = tmp_path / "results-only"
    dqnlab.RunResult.load(small_run).save(results_only)
    with pytest.raises(ValueError, match="without checkpoint.pt"):
        dqnlab.train(resume=results_only, progress=False)
    (small_run / CHECKPOINT_FILE).write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="not a readable dqnlab checkpoint"):
        dqnlab.train(resume=small_run, progress=False)


def test_resume_rejects_another_format_version_and_conflicting_options(small_run, tmp_path, cfg):
    ck = load_checkpoint(small_run)
    save_checkpoint(tmp_path / "old", {**ck, "version": CHECKPOINT_VERSION + 1})
    with pytest.raises(ValueError, match=f"format version {CHECKPOINT_VERSION + 1}"):
        dqnlab.train(resume=tmp_path / "old", progress=False)
    save_checkpoint(tmp_path / "indep", {**ck, "scheme": "independent", "options": {"sync": "periodic"}})
    with pytest.raises(ValueError, match="option.*sync='best' .saved 'periodic'"):
        dqnlab.train(resume=tmp_path / "indep", config=cfg.replace(total_env_steps=10**6), sync="best",
                     progress=False)


@pytest.mark.parametrize("kwargs,match", [
    (dict(checkpoint_every=-1.0, run_dir="x"), "checkpoint_every must be"),
    (dict(checkpoint_every="often", run_dir="x"), "checkpoint_every must be"),
    (dict(checkpoint_every=10.0), "needs a run directory"),
    (dict(callback="print"), "callback must be callable"),
    (dict(run_dir=3), "run_dir must be a path"),
    (dict(scheme=None), "scheme must be one of"),
])
def test_train_rejects_bad_run_arguments(kwargs, match, cfg):
    args = {"scheme": "serial", **kwargs}
    with pytest.raises(ValueError, match=match):
        dqnlab.train(args.pop("scheme"), cfg, progress=False, **args)


def test_every_scheme_checkpoints():
    # train() hands every scheme its checkpointer
    assert all("_checkpoint" in inspect.signature(module.run).parameters for module in SCHEMES.values())
