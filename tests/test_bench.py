"""bench peers / bench learner: well-formed results on tiny budgets (never timings), the FLOP
count, and that the learner's speed-ups compute what the plain PyTorch code computes."""

import copy
import json

import numpy as np
import pytest
import torch
from torch import nn
from torch.nn import functional as F

from dqnlab import DQNAgent, QNetwork, TrainConfig, VecGame2048
from dqnlab.bench import core as bench
from dqnlab.agent.dqn import EMBEDDING_MIN_BATCH, _adam, _clip_grad_norm, _optimizer_step
from helpers import filled_buffer


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
    f = bench.update_flops(c)
    assert f["parameters"] == 16 * 2 + 2 + 2 * 4 + 4 == 46
    assert f["forward_online_s"] == f["forward_target_next"] == 3 * 86 == 258
    assert f["forward_online_next"] == 0 and f["clip"] == 0
    # backward: weight and bias gradients (86 per row) + the second layer's input gradient (2*2*4).
    assert f["backward"] == 3 * (86 + 16) == 306
    assert f["adam"] == 12 * 46
    assert f["total"] == 258 + 258 + 306 + 12 * 46 == 1374
    g = bench.update_flops(c.replace(double_dqn=True, max_grad_norm=1.0), batch_size=1)
    assert g["forward_online_next"] == 86 and g["clip"] == 3 * 46
    assert g["total"] == 3 * 86 + (86 + 16) + 15 * 46
    onehot = bench.update_flops(TrainConfig(hidden=(256, 256)))
    assert onehot["parameters"] == sum(p.numel() for p in QNetwork("onehot", (256, 256)).parameters())


# ------------------------------------------------------------- the learner computes the same
@pytest.mark.parametrize("rows", [1, 7, EMBEDDING_MIN_BATCH - 1, EMBEDDING_MIN_BATCH, 300])
def test_onehot_network_equals_dense_one_hot_product_forward_and_gradients(rows):
    torch.manual_seed(0)
    net = QNetwork("onehot", (32, 16))
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
    assert torch.equal(QNetwork("raw", (8,)).encode(boards), expected)


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
        assert all(torch.equal(opt_a.state[p][k], opt_b.state[q][k]) for k in ("step", "exp_avg", "exp_avg_sq"))
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
    plain = bench.PlainUpdate(agent)
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
    res = bench.bench_learner(presets=("seed",), rounds=1, min_time=0.001, matmul_n=64, trained_updates=20)
    assert res["matmul_gflops"] > 0 and res["threads"] == 1
    (p,) = res["presets"]
    assert p["preset"] == "seed" and p["flops"]["total"] == bench.update_flops(TrainConfig.preset("seed"))["total"]
    assert [r["method"] for r in p["rows"]][:2] == ["before: the update as first written", "after: DQNAgent.update"]
    for r in p["rows"]:
        assert r["ms_per_update"] > 0 and r["gflops"] > 0 and r["fraction_of_matmul"] > 0
    assert p["parts"] and all(r["before_us"] > 0 and r["after_us"] > 0 for r in p["parts"])
    text = bench.learner_markdown(res)
    assert "of matmul" in text and "GFLOP/s" in text
    json.dumps(res)


def test_bench_game_rows():
    res = bench.bench_game(seconds=0.02, repeats=1, boards=8, check_moves=50)
    assert {"package", "what", "boards", "env_steps_per_s"} <= set(res["rows"][0])
    assert [r["boards"] for r in res["rows"][:3]] == [1, 8, 8]
    assert all(r["env_steps_per_s"] > 0 for r in res["rows"])
    info = res["gymnasium_2048"]
    if info["version"] is None:
        assert res["ratio_step"] is None and len(res["rows"]) == 3
    else:
        assert info["moves_checked"] == 50 and 0 <= info["scores_agree"] <= 50 and res["ratio_step"] > 0


def test_gymnasium_2048_scores_agree_with_dqnlab():
    envs = pytest.importorskip("gymnasium_2048.envs")
    moves, agree = bench._check_g2048_scores(envs.TwentyFortyEightEnv(), 500, seed=1)
    assert agree == moves == 500  # 0.1.x (NumPy-2-safe); 0.0.x scores merges into 256+ as 0


@pytest.mark.parametrize("preset", ["seed", "mlp"])
def test_sb3_settings_map_the_replay_ratio_and_list_every_field(preset):
    config = TrainConfig.preset(preset)
    kwargs, mapping = bench.sb3_dqn_settings(config, total_env_steps=20_000)
    updates_per_env_step = kwargs["gradient_steps"] / (kwargs["train_freq"] * config.n_envs)
    assert updates_per_env_step == pytest.approx(config.updates_per_env_step)
    assert kwargs["batch_size"] == config.batch_size and kwargs["buffer_size"] == config.buffer_size
    assert kwargs["policy_kwargs"]["net_arch"] == list(config.hidden) and kwargs["tau"] == 1.0
    assert 0 < kwargs["exploration_fraction"] <= 1
    assert {"field", "dqnlab", "sb3", "same", "note"} == set(mapping[0])
    different = {r["field"] for r in mapping if not r["same"]}
    assert all(r["note"] for r in mapping if not r["same"])
    if preset == "seed":
        assert different == {"target_update", "epsilon", "loss", "max_grad_norm"}
    else:
        assert different == {"double_dqn", "mask_illegal"}
    with pytest.raises(ValueError, match="whole number"):
        bench.sb3_dqn_settings(config.replace(n_envs=3, batch_size=64, replay_ratio=2.0), 1_000)


def test_observation_wrappers_give_the_network_input():
    from dqnlab import Game2048

    env = bench.OneHotObservation(Game2048())
    obs, _ = env.reset(seed=0)
    board = torch.from_numpy(env.unwrapped._board[None].copy())
    assert obs.shape == (288,) and obs.dtype == np.uint8
    assert np.array_equal(obs, QNetwork("onehot", (4,)).encode(board)[0].numpy())
    raw = bench.RawObservation(Game2048())
    obs, _ = raw.reset(seed=0)
    assert np.array_equal(obs, QNetwork("raw", (4,)).encode(torch.from_numpy(raw.unwrapped._board[None].copy()))[0])


def test_compare_sb3_rows_on_a_tiny_budget():
    pytest.importorskip("stable_baselines3")
    res = bench.compare_sb3("seed", seconds=0.3, warmup=80, chunk_s=0.05)
    ours, theirs = res["rows"]
    assert ours["name"] == "dqnlab serial" and theirs["name"].startswith("SB3")
    for r in res["rows"]:
        assert r["env_steps"] > 0 and r["env_steps_per_s"] > 0
        assert r["updates_per_1000_steps"] == pytest.approx(1000.0, rel=0.05)  # one update per move
    assert res["ratio"] > 0 and res["ratio_turns"] > 0 and res["threads"] == 1
    assert torch.get_num_threads() == 1  # restored (conftest pins 1)


def test_bench_peers_and_markdown_section(tmp_path):
    pytest.importorskip("stable_baselines3")
    res = bench.bench_peers(presets=("seed",), seconds=0.3, schemes=("serial",), workers=1, scheme_seconds=1.0,
                            keras=False, game_seconds=0.02, update_min_time=0.01, warmup=64)
    (s,) = res["sb3"]
    (row,) = s["schemes"]
    assert row["name"] == "dqnlab serial x1" and row["status"] == "completed"
    assert set(res) >= {"machine", "threads", "game", "update", "sb3"}
    text = bench.peers_markdown(res)
    assert "× SB3" in text and "Hyperparameter mapping" in text and res["machine"]["cpu"] in text
    doc = tmp_path / "docs" / "benchmarks.md"
    bench.write_section(doc, "peers", text)
    bench.write_section(doc, "learner", "## learner v1")
    bench.write_section(doc, "peers", "## peers v2")
    out = doc.read_text()
    assert out.startswith("# Benchmarks") and "## peers v2" in out and "## learner v1" in out
    assert "× SB3" not in out and out.count("<!-- bench peers -->") == 1


def test_cli_rejects_options_of_other_bench_commands(capsys):
    from dqnlab.cli import main

    assert main(["bench", "env", "--write", "x.md"]) == 2
    assert "apply only to 'bench peers' and 'bench learner'" in capsys.readouterr().err
    assert main(["bench", "peers", "--compile"]) == 2
    assert "--compile applies only to 'bench learner'" in capsys.readouterr().err


def test_update_flushes_denormals_only_while_it_runs_and_changes_no_weight(tiny_config):
    import dqnlab.agent.dqn as agent_module
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


def test_a_failing_scheme_gives_a_failed_row_not_a_lost_run(monkeypatch):
    pytest.importorskip("stable_baselines3")
    fake = {"rows": [{"env_steps_per_s": 10.0}, {"env_steps_per_s": 5.0}]}
    monkeypatch.setattr(bench, "compare_sb3", lambda *a, **k: dict(fake))

    def boom(*args, **kwargs):
        raise RuntimeError("worker 0 failed: boom\ntraceback ...")

    monkeypatch.setattr(bench, "scheme_rate", boom)
    res = bench.bench_peers(presets=("seed",), schemes=("actors",), keras=False, game_seconds=0.01,
                            update_min_time=0.005)
    (row,) = res["sb3"][0]["schemes"]
    assert row["status"] == "failed" and row["window"] == "failed: worker 0 failed: boom"
    assert np.isnan(row["ratio"])


def test_replay_ratio_check_of_parallel_rows():
    serial = {"updates_per_1000_steps": 1000.0}
    assert bench._same_replay_ratio({"updates_per_1000_steps": 1020.0, "window": "after warm-up"}, serial)
    assert bench._same_replay_ratio({"updates_per_1000_steps": 501.0, "window": "after warm-up"}, serial) is False
    assert bench._same_replay_ratio({"updates_per_1000_steps": 800.0, "window": "whole run"}, serial) is None
    assert bench._same_replay_ratio({"updates_per_1000_steps": float("nan")}, serial) is None


# ----------------------------------------------------------------------------- bench learning
def test_learning_curve_evaluates_at_each_point_of_the_budget(tmp_path):
    from dqnlab.bench.learning import learning_curve, learning_figure, learning_markdown, time_to_player

    small = dict(ntuples="17x4", lr=0.01, n_envs=16, buffer_size=2_000, batch_size=32, learning_starts=256)
    rows = learning_curve("ntuple", "serial", 1, minutes=0.06, points=(0.5, 1.0), games=20, overrides=small,
                          run_dir=tmp_path / "run")
    assert [r["preset"] for r in rows] == ["ntuple"] * len(rows) and 1 <= len(rows) <= 2
    assert rows[-1]["minutes"] >= 0.06 * 0.99 and rows[-1]["env_steps"] > 0
    assert all(0 <= r["reach_2048"] <= r["reach_1024"] <= 1 for r in rows)
    assert (tmp_path / "run" / "checkpoint.pt").exists()  # the run is kept where asked
    res = {"machine": bench.machine_info(), "minutes": 0.06, "games": 20, "rows": rows,
           "time_to_player": time_to_player(rows)}
    md = learning_markdown(res, "python -m dqnlab bench learning", "learning.png")
    assert "minutes to mean 10,000" in md and "![learning curves](learning.png)" in md
    assert len(learning_figure(res).axes) == 4


def test_time_to_player_is_the_first_point_that_makes_one():
    from dqnlab.bench.learning import time_to_player

    base = {"preset": "p", "network": "ntuple", "scheme": "serial", "options": "", "workers": 1, "seed": 0}
    rows = [{**base, "minutes": m, "score_mean": s, "reach_2048": r}
            for m, s, r in [(1, 5_000, 0.0), (2, 12_000, 0.3), (3, 20_000, 0.6), (4, 25_000, 0.7)]]
    (row,) = time_to_player(rows)
    assert (row["minutes_to_10000"], row["minutes_to_2048_in_half"]) == (2, 3)
    assert row["final_score_mean"] == 25_000
    (never,) = time_to_player(rows[:1])
    assert never["minutes_to_10000"] is None and never["minutes_to_2048_in_half"] is None


@pytest.mark.parametrize("argv,match", [
    (["bench", "learning", "--presets", "best"], "--presets must name presets"),
    (["bench", "learning", "--seconds", "3"], "bench learning takes"),
    (["bench", "learning", "--schemes", "serial", "--no-lock"], "--lock/--no-lock applies only"),
    (["bench", "env", "--minutes", "3"], "apply only to 'bench learning'"),
])
def test_bench_learning_flag_errors_are_one_line(argv, match, capsys):
    from dqnlab.cli import main

    assert main(argv) == 2
    err = capsys.readouterr().err
    assert match in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("kw,match", [
    (dict(schemes=("serial", "shraed")), "schemes must be"),
    (dict(presets=()), "presets and schemes must be non-empty"),
    (dict(schemes=("shared",), workers=(1,)), "leave \\['shared'\\] with nothing to run"),
])
def test_bench_learning_checks_everything_before_training(kw, match):
    from dqnlab.bench.learning import bench_learning

    with pytest.raises(ValueError, match=match):
        bench_learning(**{"minutes": 0.01, **kw})


@pytest.mark.parametrize("preset", ["default", "mlp-afterstate"])
def test_mlp_update_benchmarks_refuse_other_networks(preset):
    with pytest.raises(ValueError, match="MLP Q-network"):
        bench.bench_learner(presets=(preset,), rounds=1)
    with pytest.raises(ValueError, match="MLP Q-network"):
        bench.compare_sb3(preset, seconds=0.1)


def test_a_configuration_that_diverges_is_reported_and_the_bench_goes_on():
    from dqnlab.bench.learning import learning_curve, time_to_player

    wild = dict(ntuples="17x4", lr=1e12, n_envs=16, buffer_size=2_000, batch_size=32, learning_starts=64)
    rows = learning_curve("ntuple", "serial", 1, minutes=0.05, points=(0.5, 1.0), games=10, overrides=wild)
    assert rows[-1]["status"].startswith("failed") and "non-finite TD loss" in rows[-1]["status"]
    (ttp,) = time_to_player(rows)
    assert ttp["status"].startswith("failed") and ttp["minutes_to_10000"] is None
