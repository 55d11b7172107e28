"""DQN diagnostics in the history, the run figure's diagnostics row, and the TensorBoard event files.

Budgets are in env steps and tiny; what is checked is correctness (the numbers are those of
the update, the tags are there and readable, steps increase, resume continues), not timing.
"""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
import torch
from helpers import filled_buffer
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import dqnlab
from dqnlab import DQNAgent, TrainConfig
from dqnlab.runtime.checkpoint import load_checkpoint, save_checkpoint
from dqnlab.runtime.loop import DIAGNOSTICS
from dqnlab.runtime.results import episodes_frame

#: Tags every run with updates writes (per worker ones come on top).
RUN_TAGS = {"rollout/ep_score_mean", "rollout/max_tile", "train/loss", "train/q_max_mean", "train/epsilon",
            "train/grad_norm", "time/env_steps_per_s", "time/updates_per_s", "time/replay_ratio",
            "time/acting_s", "time/learning_s", "time/communication_s"}
WORKER_TAGS = {"train/loss", "train/q_max_mean", "train/epsilon", "train/grad_norm", "time/replay_ratio"}


@pytest.fixture
def cfg() -> TrainConfig:
    return TrainConfig.preset("mlp", total_env_steps=3_000, n_envs=16, learning_starts=256, buffer_size=2_000,
                              batch_size=32, hidden=(32,), seed=0)


def _scalars(run_dir) -> dict[str, list]:
    """Every scalar series in ``run_dir/tb``: tag -> list of (step, value) events."""
    acc = EventAccumulator(str(run_dir / "tb"), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: acc.Scalars(tag) for tag in acc.Tags()["scalars"]}


def _assert_readable(scalars: dict[str, list], run) -> None:
    """Finite values, strictly increasing steps, none past the run's env steps."""
    for tag, events in scalars.items():
        steps = [e.step for e in events]
        assert all(math.isfinite(e.value) for e in events), tag
        assert steps == sorted(set(steps)) and 0 < steps[0] and steps[-1] <= run.env_steps, (tag, steps)


def _assert_diagnostics(history: pd.DataFrame, workers: list[str]) -> None:
    """The history has the diagnostics, finite in every row with updates, and each worker's
    (``workers``: their columns), finite at the end."""
    learned = history[history["updates"] > 0]
    assert len(learned) >= 1
    assert np.isfinite(learned[list(DIAGNOSTICS)].to_numpy()).all()
    assert np.isfinite(history[workers].iloc[-1].to_numpy()).all()
    assert history.loc[history["updates"] == 0, "loss"].isna().all()  # NaN before learning starts
    assert (learned["grad_norm"] > 0).all() and (learned["loss"] >= 0).all()
    assert ((0 <= learned["epsilon"]) & (learned["epsilon"] <= 1)).all()


# ----------------------------------------------------------------------------- the numbers
def test_agent_diagnostics_are_those_of_the_last_update():
    config = TrainConfig(n_envs=8, buffer_size=256, batch_size=64, learning_starts=0, hidden=(32,),
                         max_grad_norm=0.01, target_update=50, seed=0)  # a small max norm: the clip acts
    agent = DQNAgent(config, seed=0)
    assert all(math.isnan(v) for v in agent.diagnostics().values())
    batch = filled_buffer(256).sample(64)
    q_max = float(torch.from_numpy(agent.q_values(batch.boards)).amax(dim=1).mean())
    agent.compute_gradients(batch)
    unclipped = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in agent.online.parameters()]))
    loss = agent.update(batch)  # the same gradient again, then the clipped step
    d = agent.diagnostics()
    assert d["loss"] == loss
    assert d["q_max_mean"] == pytest.approx(q_max, rel=1e-5)
    assert d["grad_norm"] == pytest.approx(float(unclipped), rel=1e-5) and d["grad_norm"] > 10 * config.max_grad_norm
    assert agent.diagnostics() == d  # reading them changes nothing


def test_afterstate_and_sparse_n_tuple_diagnostics():
    """Afterstate networks report the mean trained V; an n-tuple table's sparse gradient norm counts rows once."""
    config = TrainConfig.preset("ntuple-small", n_envs=8, buffer_size=256, batch_size=64, learning_starts=0)
    agent = DQNAgent(config, seed=0)
    replay = filled_buffer(256)
    agent.update(replay.sample(64))  # the tables start at zero: one step makes the values differ
    batch = replay.sample(64)
    trained, _ = agent._trained(batch)
    with torch.no_grad():
        v_mean = float(agent.online(trained).mean())
    agent.update(batch)
    d = agent.diagnostics()
    dense = agent.online.weight.grad.to_dense()
    assert d["q_max_mean"] == pytest.approx(v_mean, rel=1e-5) and v_mean != 0
    assert d["grad_norm"] == pytest.approx(float(dense.norm()), rel=1e-5) and d["grad_norm"] > 0


# ----------------------------------------------------------------------------- history and TensorBoard
@pytest.mark.parametrize("scheme,workers,options", [
    ("serial", 1, {}),
    ("independent", 2, {"sync_every": 20}),
    ("shared", 2, {}),
    ("actors", 2, {}),
    ("sharded", 2, {}),
    ("averaged", 2, {}),
])
def test_every_scheme_records_diagnostics_and_tensorboard(cfg, tmp_path, scheme, workers, options):
    run = dqnlab.train(scheme, cfg, workers=workers, progress=False, run_dir=tmp_path, **options)
    apart = scheme in ("independent", "shared", "actors")  # workers that learn or act on their own
    per_worker = [f"worker{k}_{name}" for k in range(workers)
                  for name in (["epsilon"] if scheme == "actors" else DIAGNOSTICS)] if apart else []
    _assert_diagnostics(run.history, per_worker)
    assert not [c for c in run.history.columns if c.startswith("worker") and c not in per_worker]
    last = run.history.iloc[-1]
    # the final totals are recorded (actors: the learner may then catch up with its replay-ratio floor)
    assert last["env_steps"] == run.env_steps and last["updates"] <= run.updates
    samples = last["updates"] * cfg.batch_size * (workers if scheme == "averaged" else 1)
    assert last["replay_ratio"] == pytest.approx(samples / run.env_steps)
    on_disk = pd.read_csv(tmp_path / "history.csv")
    pd.testing.assert_frame_equal(on_disk, run.history, check_dtype=False)

    scalars = _scalars(tmp_path)
    tags = RUN_TAGS | {f"worker{k}/{t}" for k in range(workers)
                       for t in (["train/epsilon"] if scheme == "actors" else WORKER_TAGS)} if apart else RUN_TAGS
    assert set(scalars) == tags
    _assert_readable(scalars, run)
    # a point per report with new env steps: the last is the first history row at its step
    point = scalars["train/loss"][-1]
    assert point.value == pytest.approx(run.history.loc[run.history["env_steps"] == point.step, "loss"].iloc[0],
                                        rel=1e-6)
    # (acting time grows only with env steps, so the last point has the run's)
    assert scalars["time/acting_s"][-1].value == pytest.approx(run.time_split["acting"], rel=1e-6)


def test_resume_continues_the_tensorboard_steps_and_the_history(cfg, tmp_path):
    first = dqnlab.train("serial", cfg.replace(total_env_steps=1_504), progress=False, run_dir=tmp_path)
    before = _scalars(tmp_path)
    resumed = dqnlab.train("serial", cfg, progress=False, resume=tmp_path)
    after = _scalars(tmp_path)
    assert len(list((tmp_path / "tb").glob("events.out.tfevents.*"))) == 2  # one file per session, one directory
    _assert_readable(after, resumed)
    for tag in ("train/loss", "rollout/ep_score_mean"):
        steps = [e.step for e in after[tag]]
        assert [e.step for e in before[tag]] == [s for s in steps if s <= first.env_steps]  # the first session's
        assert steps[-1] == resumed.env_steps > first.env_steps
    history = resumed.history
    assert history.iloc[:len(first.history)].equals(first.history)  # the first session's rows, as they were
    _assert_diagnostics(history, [])


def test_a_checkpoint_without_the_diagnostics_resumes(cfg, tmp_path):
    """History rows written before the diagnostics existed have NaN there; the new rows have them."""
    dqnlab.train("serial", cfg.replace(total_env_steps=1_504), progress=False, run_dir=tmp_path, tensorboard=False)
    ck = load_checkpoint(tmp_path)
    old_rows = [{k: row[k] for k in ("wall_time_s", "env_steps", "updates")} for row in ck["loop"]["history"]]
    save_checkpoint(tmp_path, {**ck, "loop": {**ck["loop"], "history": old_rows}})
    run = dqnlab.train("serial", cfg, progress=False, resume=tmp_path)
    old, new = run.history.iloc[:len(old_rows)], run.history.iloc[len(old_rows):]
    assert old[list(DIAGNOSTICS)].isna().all().all() and np.isfinite(new[list(DIAGNOSTICS)].to_numpy()).all()
    assert run.env_steps >= cfg.total_env_steps


# ----------------------------------------------------------------------------- the run figure
def test_run_figure_has_a_diagnostics_row(cfg):
    nan = math.nan
    history = pd.DataFrame({
        "wall_time_s": [0.0, 1.0, 2.0], "env_steps": [0, 500, 1000], "updates": [0, 20, 60],
        "loss": [nan, 0.5, 0.2], "q_max_mean": [nan, 1.0, 2.0], "epsilon": [1.0, 0.9, 0.8],
        "replay_ratio": [nan, 1.3, 1.9], "grad_norm": [nan, 3.0, 2.0],
        **{f"worker{k}_{name}": [nan, 1.0 + k, 2.0 + k] for k in range(2) for name in DIAGNOSTICS}})
    games = [{"worker": k, "episode": 0, "env_steps": 400, "wall_time_s": 1.5, "score": 900, "max_tile": 128,
              "moves": 100, "epsilon": 0.9, "loss": 0.5} for k in range(2)]
    run = dqnlab.RunResult(scheme="independent", config=cfg, workers=2, episodes=episodes_frame(games),
                           env_steps=1000, updates=60, wall_time_s=2.0, time_split={}, weights={}, history=history)

    def panels(fig):
        plt.close(fig)
        return {ax.get_title(): ax for ax in fig.axes if ax.get_title() in ("TD loss", "mean max-Q", "exploration")}

    loss = panels(run.plot())["TD loss"]
    assert [line.get_label() for line in loss.lines] == ["worker 0", "worker 1", "mean of the workers"]
    assert np.allclose(loss.lines[2].get_ydata(), history["loss"], equal_nan=True)
    assert loss.get_yscale() == "log"
    bare = dqnlab.RunResult(**{**run.__dict__, "history": history[["wall_time_s", "env_steps", "updates"]]})
    found = panels(bare.plot())
    assert len(found) == 3 and all(not ax.lines and ax.texts[0].get_text() == "not recorded in this run"
                                   for ax in found.values())
