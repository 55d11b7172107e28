import dataclasses
import re
import tomllib
from pathlib import Path

import pytest
import yaml

from dqnlab import TrainConfig
from dqnlab.agent.dqn import epsilon_at
from dqnlab.options import specs

ROOT = Path(__file__).resolve().parents[1]


def test_every_field_has_a_doc_stating_its_meaning():
    declared = specs(TrainConfig)  # every field is declared with option(): a TypeError otherwise
    assert list(declared) == [f.name for f in dataclasses.fields(TrainConfig)]
    for name, spec in declared.items():
        assert spec.doc.strip() and "\n" not in spec.doc and spec.doc.endswith("."), f"{name} lacks a one-line doc"


@pytest.mark.parametrize("field,value", [
    ("batch_size", 0), ("batch_size", 10**9), ("gamma", 1.5), ("lr", 0.0), ("n_envs", 0),
    ("encoding", "image"), ("loss", "l1"), ("total_env_steps", -5), ("max_seconds", float("nan")),
    ("epsilon_end", 2.0), ("epsilon_decay_rate", 0.0), ("hidden", (0,)), ("replay_ratio", -1.0),
    ("target_update", -1), ("max_moves", 0), ("seed", -1), ("double_dqn", "yes"),
])
def test_invalid_values_name_the_field(field, value):
    with pytest.raises(ValueError, match=rf"TrainConfig\.{field}\b"):
        TrainConfig(**{field: value})


def test_needs_a_budget_and_rejects_unknown_fields():
    with pytest.raises(ValueError, match="budget"):
        TrainConfig(total_env_steps=None, max_seconds=None)
    with pytest.raises(ValueError, match="unknown TrainConfig field"):
        TrainConfig.preset("default", batchsize=3)
    with pytest.raises(ValueError, match="preset must be one of"):
        TrainConfig.preset("fast")


def test_seed_preset_is_the_users_trainer():
    c = TrainConfig.preset("seed")
    assert (c.encoding, c.hidden, c.lr, c.loss, c.gamma) == ("raw", (256, 256), 1e-3, "mse", 0.99)
    assert (c.buffer_size, c.batch_size, c.n_envs, c.target_update) == (2_000, 64, 1, 0)
    assert c.updates_per_env_step == 1.0  # one replay step of 64 after every move
    assert (c.epsilon_start, c.epsilon_end, c.epsilon_decay_rate) == (0.9, 0.01, 0.995)
    assert (c.max_moves, c.invalid_move_reward, c.mask_illegal) == (1_000, -25.0, False)


def test_default_preset_is_the_ntuple_learner_with_temporal_coherence_on_two_step_returns():
    default, plain = TrainConfig.preset("default"), TrainConfig.preset("ntuple")
    assert (default.network, default.ntuples, default.optimizer, default.lr, default.n_step) == (
        "ntuple", "4x6", "tc", 1.0, 2)
    assert (plain.optimizer, plain.lr, plain.n_step) == ("sgd", 0.2, 1)  # plain TD(0), the baseline of the methods
    assert default.replace(optimizer="sgd", lr=0.2, n_step=1) == plain


def test_round_trip_and_replace():
    c = TrainConfig.preset("default", seed=3)
    assert TrainConfig.from_dict(c.to_dict()) == c
    assert c.replace(batch_size=64).batch_size == 64
    with pytest.raises(ValueError, match="batch_size"):
        c.replace(batch_size=c.buffer_size + 1)


def test_prioritized_replay_needs_more_transitions_than_a_minibatch():
    online = TrainConfig.preset("default")  # buffer_size = batch_size: online TD, the whole buffer every update
    assert online.buffer_size == online.batch_size
    with pytest.raises(ValueError, match=r"TrainConfig\.buffer_size\b.*larger than batch_size \(64\)"):
        online.replace(prioritized=True)
    wider = online.replace(buffer_size=online.batch_size + 1, prioritized=True)
    assert wider.prioritized and wider.buffer_size == 65


def test_epsilon_schedules():
    lin = TrainConfig(epsilon_start=1.0, epsilon_end=0.1, epsilon_decay_steps=100)
    assert epsilon_at(lin, 0, 0) == 1.0
    assert epsilon_at(lin, 50, 0) == pytest.approx(0.55)
    assert epsilon_at(lin, 10_000, 0) == pytest.approx(0.1)
    exp = TrainConfig.preset("seed")
    assert epsilon_at(exp, 0, 1) == pytest.approx(0.9 * 0.995)
    assert epsilon_at(exp, 0, 10_000) == 0.01


def _names(requirements):
    return {re.split(r"[<>=\[ ;]", r.strip(), maxsplit=1)[0].lower() for r in requirements}


def test_environment_yml_agrees_with_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    conda = [d for d in env["dependencies"] if isinstance(d, str)]
    conda_names = {{"pytorch": "torch"}.get(n, n) for n in _names(conda)} - {"python", "pip"}
    assert conda_names == _names(project["dependencies"])
    assert "python=3.11" in conda
    pip_section = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    assert any(line.startswith("-e .") for line in pip_section)


def test_citation_agrees_with_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    citation = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert str(citation["version"]) == project["version"]
    assert citation["license"] == project["license"] == "MIT"
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")
