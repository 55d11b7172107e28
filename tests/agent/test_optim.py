"""TemporalCoherence, the torch side of temporal coherence learning: its sparse step is the compiled kernel's
on the gradient's entries in order, its dense step the same rule vectorised, its TD phase plain SGD. Training
and checkpointing leave PyTorch's compiler unloaded."""

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from dqnlab.agent.networks import NTupleNetwork
from dqnlab.agent.optim import TemporalCoherence
from dqnlab.core import ntuple


def sparse_step(outputs, lr=0.3, td_updates=0, steps=3):
    """An n-tuple network trained ``steps`` times by TemporalCoherence on the same minibatch's sparse gradient,
    and the kernel's result on the same entries."""
    net = NTupleNetwork("17x4", outputs)
    opt = TemporalCoherence(net.parameters(), lr, td_updates=td_updates, td_lr=0.1)
    rng = np.random.default_rng(outputs)
    boards = torch.from_numpy(rng.integers(0, 5, (24, 4, 4)).astype(np.uint8))
    grad = torch.from_numpy(rng.standard_normal((24, outputs)).astype(np.float32))
    w, sums = np.zeros(net.weight.numel(), np.float32), np.zeros((net.weight.numel(), 2), np.float32)
    for step in range(steps):
        inputs = []
        with torch.no_grad():
            net._forward(boards, inputs)
        net.backprop(boards, inputs, grad)
        entries = net.weight.grad.coalesce().indices()  # (only to check some rows repeat)
        assert entries.shape[1] < inputs[0].numel()
        flat = (inputs[0][:, :, None] * outputs + torch.arange(outputs)).reshape(-1) if outputs > 1 else \
            inputs[0].reshape(-1)
        values = net.weight.grad._values().reshape(-1)
        if step < td_updates:
            np.add.at(w, flat.numpy(), -0.1 * values.numpy())
        else:
            ntuple.tc_entries(w, sums, flat.numpy(), values.numpy().copy(), lr)
        opt.step()
    return net, opt, (w, sums[:, 0], sums[:, 1])


@pytest.mark.parametrize("outputs", [1, 4])
def test_the_sparse_step_is_the_kernels_on_the_gradients_entries(outputs):
    net, opt, (w, e, a) = sparse_step(outputs)
    st = opt.state[net.weight]
    np.testing.assert_allclose(net.weight.detach().numpy().reshape(-1), w, rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(st["sums"][..., 0].numpy().reshape(-1), e)
    np.testing.assert_array_equal(st["sums"][..., 1].numpy().reshape(-1), a)
    assert float(st["step"]) == 3 and (a > 0).any() and (np.abs(e) < a).any()  # some errors cancelled


def test_the_td_phase_is_plain_sgd_and_leaves_the_sums_at_zero():
    net, opt, (w, _, _) = sparse_step(1, td_updates=2, steps=2)
    st = opt.state[net.weight]
    np.testing.assert_allclose(net.weight.detach().numpy().reshape(-1), w, rtol=1e-6, atol=1e-7)
    assert not st["sums"].any()
    net, opt, (w, _, _) = sparse_step(1, td_updates=2, steps=4)  # then TC
    np.testing.assert_allclose(net.weight.detach().numpy().reshape(-1), w, rtol=1e-6, atol=1e-7)
    assert opt.state[net.weight]["sums"][..., 1].any()


def test_the_dense_step_is_the_same_rule():
    p = torch.nn.Parameter(torch.zeros(5))
    opt = TemporalCoherence([p], lr=0.5)
    grads = [torch.tensor([1.0, 1.0, -1.0, 0.0, 2.0]), torch.tensor([1.0, -1.0, -1.0, 0.0, -2.0])]
    w, sums = np.zeros(5, np.float32), np.zeros((5, 2), np.float32)
    for g in grads:
        p.grad = g.clone()
        opt.step()
        ntuple.tc_entries(w, sums, np.arange(5), g.numpy(), 0.5)
    np.testing.assert_allclose(p.detach().numpy(), w, rtol=1e-6)
    w = p.detach()
    assert float(w[0]) == pytest.approx(-1.0) and float(w[1]) == pytest.approx(0.0) and float(w[3]) == 0.0


def test_a_parameter_off_the_cpu_is_a_clear_error():
    with pytest.raises(ValueError, match="optimizer 'tc' runs on the CPU"):
        TemporalCoherence([torch.nn.Parameter(torch.zeros(3, device="meta"))], lr=0.1)


def test_loading_a_state_fills_the_sums_the_optimiser_already_holds():
    net, opt, _ = sparse_step(1, lr=0.5, steps=3)
    saved = {"state": {k: {n: t.clone() for n, t in v.items()} for k, v in opt.state_dict()["state"].items()},
             "param_groups": opt.state_dict()["param_groups"]}
    fresh = TemporalCoherence(net.parameters(), 0.5)
    held = fresh.state[net.weight]["sums"]
    fresh.load_state_dict(saved)
    assert fresh.state[net.weight]["sums"] is held  # the same tensor (the compiled learner's, shared's block)
    assert torch.equal(held, opt.state[net.weight]["sums"]) and held.any()
    assert float(fresh.state[net.weight]["step"]) == 3.0


_TRAIN_AND_CHECKPOINT = textwrap.dedent("""
    import sys
    import torch
    from dqnlab import DQNAgent, TrainConfig, train
    from dqnlab.agent.optim import compiler_left_unloaded
    for preset, steps in (("mlp", 600), ("ntuple-small", 2000), ("default", 300)):
        config = TrainConfig.preset(preset, total_env_steps=steps, n_envs=8, learning_starts=64, buffer_size=500,
                                    batch_size=16, seed=0, **({"ntuples": ((0, 1, 2, 3),)} if preset == "default" else {}))
        run = train("serial", config, progress=False)
        assert run.updates > 0, preset
        agent = DQNAgent(config, seed=0)
        agent.load_state_dict(agent.state_dict())
    assert "torch._dynamo" not in sys.modules, "imported"
    # the guard's cache is left empty: a call outside builds PyTorch's own guard
    assert not any(hasattr(getattr(torch.optim.Optimizer, n).__wrapped__, "__dynamo_disable")
                   for n in ("add_param_group", "state_dict", "load_state_dict", "zero_grad"))
    agent.optimizer.state_dict()
    assert "torch._dynamo" in sys.modules
    with compiler_left_unloaded():  # once imported, PyTorch's guards are used as they are
        assert hasattr(torch.optim.Optimizer.state_dict.__wrapped__, "__dynamo_disable")
        assert torch.optim.Optimizer.state_dict.__wrapped__.__dynamo_disable is not torch.optim.Optimizer.state_dict.__wrapped__
    print("ok")
""")


@pytest.mark.slow  # a new process trains three presets
def test_training_and_checkpoints_leave_pytorchs_compiler_unloaded():
    """A new process that trains an mlp, an n-tuple network (Adam's first step, SGD, TC) and saves and loads an
    agent's state never imports ``torch._dynamo`` (seconds of every worker's start)."""
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", _TRAIN_AND_CHECKPOINT], capture_output=True, text=True, cwd=root,
                          timeout=240, check=False)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]
