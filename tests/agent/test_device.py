"""The learner's device (TrainConfig.device): resolution, clear errors without a GPU, the CPU
acting copy. The device-independent code paths run on the CPU here; the GPU ones where there is one."""

import copy

import numpy as np
import pytest
import torch

import dqnlab
from dqnlab import DQNAgent, TrainConfig
from dqnlab.agent.dqn import resolve_device
from dqnlab.bench.learner import device_updates
from dqnlab.bench.update import agent_and_buffer
from dqnlab.runtime.learner import Learner

NO_GPU = not torch.cuda.is_available()


def test_resolve_device(monkeypatch):
    assert resolve_device("cpu") == torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == torch.device("cpu")
    with pytest.raises(ValueError, match="device 'cuda'.*no CUDA GPU.*'auto'"):
        resolve_device("cuda")
    with pytest.raises(ValueError, match=r"device must be one of \['cpu', 'cuda', 'auto'\], got 'gpu'"):
        resolve_device("gpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device("auto") == torch.device("cuda") == resolve_device("cuda")


def test_config_names_the_field():
    with pytest.raises(ValueError, match="TrainConfig.device must be one of"):
        TrainConfig(device="tpu")


@pytest.mark.skipif(not NO_GPU, reason="this machine has a GPU")
@pytest.mark.parametrize("scheme", ["serial", "independent", "actors"])
def test_cuda_without_a_gpu_is_a_clear_error_before_anything_starts(scheme):
    with pytest.raises(ValueError, match="no CUDA GPU"):
        dqnlab.train(scheme, TrainConfig(device="cuda", total_env_steps=100), progress=False)


@pytest.mark.parametrize("scheme", ["shared", "sharded", "averaged"])
def test_cuda_for_a_cpu_scheme_is_a_clear_error(scheme):
    with pytest.raises(ValueError, match=f"device 'cuda' is for the schemes .*; {scheme} keeps its model on the CPU"):
        dqnlab.train(scheme, TrainConfig(device="cuda", total_env_steps=100), progress=False)


@pytest.mark.skipif(not NO_GPU, reason="this machine has a GPU")
def test_auto_falls_back_to_the_cpu():
    config = TrainConfig(hidden=(16,), n_envs=4, total_env_steps=600, learning_starts=100, batch_size=16)
    auto = dqnlab.train("serial", config.replace(device="auto"), progress=False)
    cpu = dqnlab.train("serial", config, progress=False)
    assert auto.updates == cpu.updates > 0
    for name in cpu.weights:
        np.testing.assert_array_equal(auto.weights[name], cpu.weights[name])


def test_acting_copy_follows_the_online_network_on_the_schemes_schedule():
    """The bookkeeping of a learner on another device, on the CPU: a separate acting network
    is refreshed after each act step's updates, and by set_weights and load_state_dict."""
    config = TrainConfig(hidden=(16,), n_envs=4, total_env_steps=2_000, learning_starts=40, batch_size=16)
    learner = Learner(config)
    agent = learner.agent
    agent.acting = copy.deepcopy(agent.online).requires_grad_(False)
    for _ in range(30):
        learner.act_step()
        learner.learn()
    assert agent.updates > 0
    for a, b in zip(agent.acting.parameters(), agent.online.parameters()):
        assert torch.equal(a, b)
    agent.update(learner.buffer.sample(16))  # an update outside the schedule: acting lags until the next refresh
    assert not all(torch.equal(a, b) for a, b in zip(agent.acting.parameters(), agent.online.parameters()))
    boards = learner.boards
    stale = agent.q_values(boards)
    agent.refresh_acting()
    assert not np.allclose(stale, agent.q_values(boards))
    with torch.no_grad():
        np.testing.assert_allclose(agent.q_values(boards), agent.online(torch.from_numpy(boards)).numpy(), rtol=1e-6)
    other = DQNAgent(config, seed=5)
    agent.set_weights(other.get_weights())
    np.testing.assert_array_equal(agent.q_values(boards), other.q_values(boards))


def test_device_updates_rows():
    config = TrainConfig.preset("mlp", hidden=(32,), buffer_size=2_000, batch_size=64)
    _, buffer = agent_and_buffer(config, 0)
    rows = device_updates(config, buffer, ("cpu", "auto"), rounds=1, min_time=0.01)
    expected = {"cpu"} if NO_GPU else {"cpu", "cuda:0"}
    assert {r["device"] for r in rows} == expected
    assert all(r["updates_per_s"] > 0 and r["ms_per_update"] == pytest.approx(1e3 / r["updates_per_s"]) for r in rows)


@pytest.mark.skipif(NO_GPU, reason="needs a CUDA GPU")
@pytest.mark.parametrize("preset", ["mlp", "mlp-afterstate", "ntuple-small"])
def test_a_cuda_update_equals_the_cpu_update(preset):
    config = TrainConfig.preset(preset, buffer_size=2_000, batch_size=64, prioritized=True, n_step=3)
    cpu, buffer = agent_and_buffer(config, 0)
    gpu = DQNAgent(config, seed=0, device="cuda")
    rng = np.random.default_rng(0)
    batch = buffer.sample(64)._replace(weights=rng.random(64, dtype=np.float32),
                                       steps=rng.integers(1, 4, 64).astype(np.uint8))
    assert cpu.update(batch) == pytest.approx(gpu.update(batch), rel=1e-4)
    np.testing.assert_allclose(gpu.td_errors(), cpu.td_errors(), rtol=1e-3, atol=1e-5)
    for name, w in cpu.get_weights().items():
        np.testing.assert_allclose(gpu.get_weights()[name], w, rtol=1e-4, atol=1e-6)


@pytest.mark.skipif(NO_GPU, reason="needs a CUDA GPU")
@pytest.mark.parametrize("scheme", ["serial", "actors"])
def test_short_runs_with_the_learner_on_the_gpu(scheme):
    config = TrainConfig(hidden=(32,), n_envs=8, total_env_steps=3_000, learning_starts=500, batch_size=32,
                         device="cuda", prioritized=True)
    run = dqnlab.train(scheme, config, workers=1 if scheme == "serial" else 2, progress=False)
    assert run.status == "completed" and run.updates > 0
