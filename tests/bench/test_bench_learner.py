"""bench learner: the FLOP count, a well-formed result on a tiny budget (never timings), and that
each of the learner's speed-ups computes what the plain PyTorch code computes."""

import copy
import json

import numpy as np
import pytest
import torch
from helpers import filled_buffer
from torch import nn
from torch.nn import functional as F

from dqnlab import DQNAgent, MLPNetwork, TrainConfig, VecGame2048
from dqnlab.agent.dqn import EMBEDDING_MIN_BATCH
from dqnlab.agent.optim import adam as _adam
from dqnlab.agent.optim import clip_grad_norm as _clip_grad_norm
from dqnlab.agent.optim import optimizer_step as _optimizer_step
from dqnlab.bench.learner import PlainUpdate, bench_learner, learner_markdown, update_flops


def _boards(n, seed=0):
    env = VecGame2048(n, seed=seed)
    rng = np.random.default_rng(seed)
    for _ in range(40):
        env.step(rng.integers(0, 4, n))
    boards = env.boards.copy()
    boards[0, 0, 0] = 17  # the largest exponent reaches the last one-hot column
    return torch.from_numpy(boards)


# ------------------------------------------------------------------------------ FLOP count
def test_update_flops_matches_a_hand_count():
    # raw input (16) -> 2 -> 4, batch 3. Forward per row: (2*16*2 + 2) + (2*2*4 + 4) = 86.
    c = TrainConfig(encoding="raw", hidden=(2,), batch_size=3, double_dqn=False, max_grad_norm=None)
    f = update_flops(c)
    assert f["parameters"] == 16 * 2 + 2 + 2 * 4 + 4 == 46
    assert f["forward_online_s"] == f["forward_target_next"] == 3 * 86 == 258
    assert f["forward_online_next"] == 0 and f["clip"] == 0
    # backward: weight and bias gradients (86 per row) + the second layer's input gradient (2*2*4).
    assert f["backward"] == 3 * (86 + 16) == 306
    assert f["adam"] == 12 * 46
    assert f["total"] == 258 + 258 + 306 + 12 * 46 == 1374
    g = update_flops(c.replace(double_dqn=True, max_grad_norm=1.0), batch_size=1)
    assert g["forward_online_next"] == 86 and g["clip"] == 3 * 46
    assert g["total"] == 3 * 86 + (86 + 16) + 15 * 46
    onehot = update_flops(TrainConfig(hidden=(256, 256)))
    assert onehot["parameters"] == sum(p.numel() for p in MLPNetwork("onehot", (256, 256)).parameters())


# ------------------------------------------------------------- the learner computes the same
@pytest.mark.parametrize("rows", [1, 7, EMBEDDING_MIN_BATCH - 1, EMBEDDING_MIN_BATCH, 300])
def test_onehot_network_equals_dense_one_hot_product_forward_and_gradients(rows):
    torch.manual_seed(0)
    net = MLPNetwork("onehot", (32, 16))
    boards = _boards(rows)
    dense = F.one_hot(boards.reshape(rows, 16).long(), 18).reshape(rows, -1).float()
    assert torch.equal(net.encode(boards), dense)
    reference = copy.deepcopy(net.mlp)
    g = torch.randn(rows, 4)
    out = net(boards)
    ref = reference(dense)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    out.backward(g)
    ref.backward(g)
    for p, q in zip(net.parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-5)


def test_raw_encoding_is_exact_tile_values():
    boards = _boards(20)
    x = boards.reshape(20, 16).float()
    expected = torch.where(x > 0, torch.exp2(x), torch.zeros_like(x))
    assert torch.equal(MLPNetwork("raw", (8,)).encode(boards), expected)


def test_direct_fused_adam_step_is_bitwise_optimizer_step():
    torch.manual_seed(0)
    a = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    b = copy.deepcopy(a)
    opt_a, opt_b = _adam(a.parameters(), 1e-2), _adam(b.parameters(), 1e-2)
    for _ in range(5):
        x = torch.randn(8, 16)
        for net, opt, direct in ((a, opt_a, True), (b, opt_b, False)):
            opt.zero_grad()
            net(x).pow(2).mean().backward()
            _optimizer_step(opt) if direct else opt.step()
    for p, q in zip(a.parameters(), b.parameters()):
        assert torch.equal(p, q)
        assert all(torch.equal(opt_a.state[p][k], opt_b.state[q][k]) and opt_a.state[p][k].dtype == opt_b.state[q][k].dtype
                   for k in ("step", "exp_avg", "exp_avg_sq"))
    # another optimiser goes through its own step()
    sgd = torch.optim.SGD(a.parameters(), lr=0.1)
    before = [p.detach().clone() for p in a.parameters()]
    a(torch.randn(2, 16)).sum().backward()
    _optimizer_step(sgd)
    assert not torch.equal(before[0], next(a.parameters()))


def test_clip_grad_norm_is_bitwise_torch_clip():
    torch.manual_seed(0)
    ps = [nn.Parameter(torch.randn(5, 3)), nn.Parameter(torch.randn(7))]
    qs = [nn.Parameter(p.detach().clone()) for p in ps]
    for p, q in zip(ps, qs):
        p.grad = torch.randn_like(p) * 10
        q.grad = p.grad.clone()
    _clip_grad_norm(ps, 1.5)
    nn.utils.clip_grad_norm_(qs, 1.5)
    assert all(torch.equal(p.grad, q.grad) for p, q in zip(ps, qs))


@pytest.mark.parametrize("overrides", [
    dict(encoding="raw", loss="mse", double_dqn=False, mask_illegal=False, max_grad_norm=None, batch_size=32),
    dict(encoding="onehot", loss="huber", double_dqn=True, mask_illegal=True, max_grad_norm=1.0,
         batch_size=EMBEDDING_MIN_BATCH + 2),
    dict(encoding="onehot", double_dqn=False, mask_illegal=True, batch_size=16),
])
def test_agent_update_matches_the_update_as_first_written(overrides):
    config = TrainConfig(hidden=(32, 16), lr=1e-2, target_update=4, buffer_size=600, **overrides)
    buf = filled_buffer(600)
    agent = DQNAgent(config, seed=0)
    plain = PlainUpdate(agent)
    for i in range(8):
        batch = buf.sample(config.batch_size)
        assert agent.update(batch) == pytest.approx(plain.update(batch), rel=1e-4, abs=1e-5)
        if (i + 1) % config.target_update == 0:
            plain.target.load_state_dict(plain.online.state_dict())
    for p, q in zip(agent.online.mlp.parameters(), plain.online.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5)


def test_replay_sample_is_the_fancy_index_gather():
    buf = filled_buffer(300, seed=3)
    twin = copy.deepcopy(buf)
    mb = buf.sample(50)
    idx = twin.rng.integers(0, twin.size, size=50)
    a = twin.arrays
    expected = (a["boards"][idx], a["actions"][idx].astype(np.int64), a["rewards"][idx], a["next_boards"][idx],
                a["dones"][idx], a["next_masks"][idx])
    for got, want in zip(mb, expected):
        assert got.dtype == want.dtype and np.array_equal(got, want)


# ------------------------------------------------------------------- well-formed results
def test_bench_learner_rows_on_a_tiny_budget():
    res = bench_learner(presets=("seed",), rounds=1, min_time=0.001, matmul_n=64, trained_updates=20)
    assert res["matmul_gflops"] > 0 and res["threads"] == 1
    (p,) = res["presets"]
    assert p["preset"] == "seed" and p["flops"]["total"] == update_flops(TrainConfig.preset("seed"))["total"]
    assert [r["method"] for r in p["rows"]][:2] == ["before: the update as first written", "after: DQNAgent.update"]
    for r in p["rows"]:
        assert r["ms_per_update"] > 0 and r["gflops"] > 0 and r["fraction_of_matmul"] > 0
    assert p["parts"] and all(r["before_us"] > 0 and r["after_us"] > 0 for r in p["parts"])
    text = learner_markdown(res)
    assert "of matmul" in text and "GFLOP/s" in text
    json.dumps(res)


def test_update_flushes_denormals_only_while_it_runs_and_changes_no_weight(tiny_config):
    import dqnlab.agent.optim as agent_module
    from dqnlab.runtime.learner import Learner

    assert not agent_module._flushing_denormals()
    config = tiny_config.replace(hidden=(64,), learning_starts=64)
    runs = []
    for flush in (True, False):
        old = agent_module._FLUSH_DENORMAL
        agent_module._FLUSH_DENORMAL = flush
        try:
            learner = Learner(config)
            learner.run(1_000)
        finally:
            agent_module._FLUSH_DENORMAL = old
        assert not agent_module._flushing_denormals()  # restored after every update
        runs.append(learner.agent.get_weights())
    assert all(np.array_equal(runs[0][k], runs[1][k]) for k in runs[0])
    if agent_module._FLUSH_DENORMAL:  # a mode set by the caller is kept
        torch.set_flush_denormal(True)
        try:
            DQNAgent(config).update(filled_buffer(64).sample(32))
            assert agent_module._flushing_denormals()
        finally:
            torch.set_flush_denormal(False)
