"""Afterstates, the board's symmetries and the three network families (issue: learning 2048)."""

import numpy as np
import pytest
import torch
from helpers import filled_buffer
from hypothesis import given, settings
from hypothesis import strategies as st

import dqnlab
from dqnlab import DQNAgent, TrainConfig
from dqnlab.agent.networks import CNNetwork, MLPNetwork, NTupleNetwork, make_network
from dqnlab.config import NTUPLE_SETS
from dqnlab.game import legal_actions_batch, move_batch
from dqnlab.game.symmetry import ACTION_PERMUTATIONS, CELL_PERMUTATIONS, transform_boards
from dqnlab.replay import Minibatch

boards_strategy = st.lists(st.integers(0, 11), min_size=16, max_size=16).map(
    lambda cells: np.array(cells, dtype=np.uint8).reshape(4, 4))


def _ntuple_config(**kw):
    base = dict(network="ntuple", ntuples="17x4", afterstate=True, optimizer="sgd", max_grad_norm=None, lr=0.1,
                loss="mse", gamma=1.0, target_update=1, reward_transform="none", double_dqn=False)
    return TrainConfig(**{**base, **kw})


# ----------------------------------------------------------------------------- symmetries
def test_augmented_minibatch_is_a_transition_the_game_could_produce():
    config = TrainConfig(hidden=(8,), batch_size=64, augment_symmetry=True)
    agent = DQNAgent(config, seed=0)
    batch = filled_buffer(512).sample(256)
    aug = agent.augment(batch)
    np.testing.assert_array_equal(aug.next_masks, legal_actions_batch(aug.next_boards))
    np.testing.assert_array_equal(aug.rewards, batch.rewards)
    # the move taken on the transformed board gives the transformed afterstate
    before, _, _ = move_batch(batch.boards, batch.actions)
    after, _, _ = move_batch(aug.boards, aug.actions)
    assert not np.array_equal(aug.boards, batch.boards)
    sym = [next(g for g in range(8) if np.array_equal(transform_boards(batch.boards[i:i + 1], np.array([g])),
                                                       aug.boards[i:i + 1])
                and np.array_equal(transform_boards(before[i:i + 1], np.array([g])), after[i:i + 1]))
           for i in range(len(aug.actions))]
    assert len(sym) == len(aug.actions)
    assert DQNAgent(config.replace(augment_symmetry=False), seed=0).augment(batch) is batch


# ----------------------------------------------------------------------------- n-tuple network
def _reference_ntuple_value(net: NTupleNetwork, board: np.ndarray) -> np.ndarray:
    """Plain Python: sum over tuples and the 8 placements of the table row indexed by the cells in base 16."""
    table = net.weight.detach().numpy()
    starts = np.concatenate([[0], np.cumsum([16 ** len(t) for t in net.tuples])[:-1]])
    flat = [min(int(e), 15) for e in board.reshape(16)]
    total = np.zeros(net.outputs)
    for t, cells in enumerate(net.tuples):
        for g, perm in enumerate(CELL_PERMUTATIONS):
            index = sum(flat[perm[c]] * 16 ** k for k, c in enumerate(cells))
            row = table[starts[t] + index]
            if net.outputs == 1:
                total += row
            else:  # action a reads column pi_g(a) of the placement's row
                total += row[ACTION_PERMUTATIONS[g]]
    return total


@pytest.mark.parametrize("tuples,outputs", [("17x4", 1), ("17x4", 4), (((0, 1, 2, 4, 5, 6), (3, 7)), 1)])
def test_ntuple_values_match_a_plain_python_reference(tuples, outputs):
    torch.manual_seed(0)
    net = NTupleNetwork(tuples, outputs)
    with torch.no_grad():
        net.weight.normal_()
    rng = np.random.default_rng(1)
    boards = rng.integers(0, 18, size=(20, 4, 4)).astype(np.uint8)  # exponents above 15 read as 15
    out = net(torch.from_numpy(boards)).detach().numpy()
    for b, row in zip(boards, out):
        np.testing.assert_allclose(row, _reference_ntuple_value(net, b), rtol=1e-5, atol=1e-4)


def test_ntuple_indices_are_exact_for_six_tuples_with_tile_32768():
    net = NTupleNetwork("4x6", 1)
    board = np.full((1, 4, 4), 15, np.uint8)
    idx = net.indices(torch.from_numpy(board))
    starts = np.concatenate([[0], np.cumsum([16 ** 6] * 4)[:-1]])
    np.testing.assert_array_equal(idx.numpy().reshape(4, 8), (starts + 16 ** 6 - 1)[:, None].repeat(8, 1))


@settings(max_examples=30, deadline=None)
@given(board=boards_strategy)
def test_ntuple_value_is_invariant_and_q_values_equivariant_under_symmetries(board):
    torch.manual_seed(0)
    v, q = NTupleNetwork("2x4+2x6", 1), NTupleNetwork("17x4", 4)
    with torch.no_grad():
        for net in (v, q):
            rows = torch.unique(net.indices(torch.from_numpy(board[None])))
            net.weight[rows] = torch.randn(len(rows), net.outputs)
    boards = transform_boards(np.repeat(board[None], 8, axis=0), np.arange(8))
    with torch.no_grad():
        values = v(torch.from_numpy(boards)).numpy()[:, 0]
        qs = q(torch.from_numpy(boards)).numpy()
    np.testing.assert_allclose(values, values[0], rtol=1e-5, atol=1e-5)
    for g in range(8):  # Q(g(b), pi_g(a)) == Q(b, a)
        np.testing.assert_allclose(qs[g][ACTION_PERMUTATIONS[g]], qs[0], rtol=1e-5, atol=1e-5)


def test_ntuple_gradient_is_sparse_and_sgd_moves_only_the_rows_used():
    config = _ntuple_config(batch_size=16)
    agent = DQNAgent(config, seed=0)
    batch = filled_buffer(256).sample(16)
    before = agent.online.weight.detach().clone()
    agent.update(batch)
    assert agent.online.weight.grad.is_sparse
    changed = torch.nonzero((agent.online.weight.detach() != before).any(1)).flatten()
    after, _, _ = move_batch(batch.boards, batch.actions)
    used = torch.unique(agent.online.indices(torch.from_numpy(after)))
    assert len(changed) > 0 and set(changed.tolist()) <= set(used.tolist())


@pytest.mark.parametrize("tuples", [(), ((0, 1, 2, 3, 4, 5, 6),), ((0, 0),), ((16,),), "5x5"])
def test_bad_tuple_sets_are_clear_errors(tuples):
    with pytest.raises(ValueError, match="TrainConfig.ntuples"):
        _ntuple_config(ntuples=tuples)


@pytest.mark.parametrize("kw,match", [
    (dict(network="ntuple", optimizer="adam"), "optimizer"),
    (dict(network="ntuple", optimizer="sgd", max_grad_norm=10.0), "max_grad_norm"),
    (dict(network="ntuple", optimizer="sgd", max_grad_norm=None, augment_symmetry=True), "augment_symmetry"),
    (dict(afterstate=True, mask_illegal=False), "mask_illegal"),
    (dict(network="transformer"), "network"),
    (dict(channels=0), "channels"),
    (dict(optimizer="rmsprop"), "optimizer"),
    (dict(optimizer="tc"), "optimizer"),  # (temporal coherence learns lookup tables)
    (dict(initial_value=100.0), "initial_value"),
    (dict(stages=(2048,)), "stages"),
    (dict(network="ntuple", optimizer="sgd", max_grad_norm=None, stages=(2048, 1024)), "stages"),
    (dict(network="ntuple", optimizer="sgd", max_grad_norm=None, stages=(3000,)), "stages"),
    (dict(network="ntuple", optimizer="sgd", max_grad_norm=None, stages=(65536,)), "stages"),
    (dict(network="ntuple", optimizer="sgd", max_grad_norm=None, stages=(2,)), "stages"),
    (dict(network="ntuple", optimizer="tc", max_grad_norm=None, tc_start=-1), "tc_start"),
])
def test_config_rejects_combinations_that_cannot_train(kw, match):
    with pytest.raises(ValueError, match=f"TrainConfig.{match}"):
        TrainConfig(**kw)


def test_config_with_custom_tuples_round_trips_through_a_dict():
    c = _ntuple_config(ntuples=[[0, 1, 2, 3], [4, 5, 6, 7]])
    assert c.ntuples == ((0, 1, 2, 3), (4, 5, 6, 7))
    assert TrainConfig.from_dict(c.to_dict()) == c


# ----------------------------------------------------------------------------- afterstate targets
def _batch(boards, actions, next_boards, dones, rewards=None):
    boards, next_boards = (np.array(b, np.uint8).reshape(-1, 4, 4) for b in (boards, next_boards))
    n = len(boards)
    return Minibatch(boards, np.array(actions, np.int64), np.zeros(n, np.float32) if rewards is None
                     else np.array(rewards, np.float32), next_boards, np.array(dones, bool),
                     legal_actions_batch(next_boards))


def test_afterstate_targets_on_hand_made_boards():
    config = _ntuple_config(ntuples=((0, 1, 2, 3),), gamma=0.5)
    agent = DQNAgent(config, seed=0)
    net = agent.online
    with torch.no_grad():  # V(board) = 8 x (number of placements reading a given row pattern): make it simple
        net.weight.fill_(1.0)  # every afterstate is worth 8 (one tuple, 8 placements)
    start = [1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
    # next board: a row [1, 1, 0, 0] -> merging left or right scores 4 points; up/down change nothing... (legal: L, R)
    merge = [1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
    game_over = [1, 2, 1, 2, 2, 1, 2, 1, 1, 2, 1, 2, 2, 1, 2, 1]
    batch = _batch([start, start, start], [2, 2, 2], [merge, game_over, merge], [False, True, False],
                   rewards=[99, 99, 99])
    y = agent.td_targets(batch).numpy()
    # merge: best move scores 4 points, afterstate worth 8 -> gamma (4 + 8); the stored reward 99 is not used
    assert y[0] == pytest.approx(0.5 * (4 + 8))
    assert y[1] == 0.0  # game over: no bootstrap
    # a truncated game (done False although the episode was cut) bootstraps like any other state
    assert y[2] == y[0]
    # the trained value is V(afterstate(s, a)), not V(s)
    boards, columns = agent._trained(batch)
    np.testing.assert_array_equal(boards.numpy(), move_batch(batch.boards, batch.actions)[0])
    assert columns.eq(0).all()


def test_afterstate_targets_take_legal_moves_from_the_next_boards_not_the_stored_masks():
    """A torn read of the shared replay can pair a next board with another transition's mask."""
    agent = DQNAgent(_ntuple_config(ntuples=((0, 1, 2, 3),)), seed=0)
    with torch.no_grad():
        agent.online.weight.fill_(1.0)
    start = [1] + [0] * 15
    next_board = [1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]  # "up" changes nothing
    batch = _batch([start], [2], [next_board], [False])
    wrong = Minibatch(*batch[:5], np.ones((1, 4), bool))  # a mask that says every move is legal
    y = agent.td_targets(wrong).numpy()
    assert np.isfinite(y).all() and y[0] == pytest.approx(agent.td_targets(batch).numpy()[0])


def test_afterstate_q_values_are_reward_plus_afterstate_value():
    config = TrainConfig(hidden=(16,), afterstate=True, reward_transform="log")
    agent = DQNAgent(config, seed=0)
    boards = filled_buffer(64).sample(16).boards
    q = agent.q_values(boards)
    for a in range(4):
        after, points, legal = move_batch(boards, np.full(16, a))
        with torch.no_grad():
            v = agent.online(torch.from_numpy(after)).numpy()[:, 0]
        np.testing.assert_allclose(q[legal, a], (np.log2(1 + points) + v)[legal], rtol=1e-5, atol=1e-5)
        assert np.isneginf(q[~legal, a]).all()  # a move that changes nothing has no afterstate
    assert (~np.isneginf(q)).any(axis=1).all()


@pytest.mark.parametrize("loss", ["huber", "mse"])
def test_mlp_afterstate_backprop_equals_autograd(loss):
    config = TrainConfig(hidden=(32, 16), afterstate=True, batch_size=200, loss=loss, target_update=5)
    fast, slow = DQNAgent(config, seed=0), DQNAgent(config, seed=0)
    batch = filled_buffer(512).sample(200)
    value = fast.compute_gradients(batch)
    slow.online.zero_grad()
    ref = slow.loss(batch)
    ref.backward()
    assert value == pytest.approx(ref.item(), rel=1e-5)
    for p, q in zip(fast.online.parameters(), slow.online.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-6)


def test_target_update_one_makes_the_target_the_online_network():
    agent = DQNAgent(TrainConfig(hidden=(8,), target_update=1), seed=0)
    assert agent.target is agent.online
    agent.sync_target()  # nothing to copy
    separate = DQNAgent(TrainConfig(hidden=(8,), target_update=2), seed=0)
    assert separate.target is not separate.online and separate.state_dict()["target"] is not None
    assert agent.state_dict()["target"] is None  # stored once in checkpoints


# ----------------------------------------------------------------------------- networks
@pytest.mark.parametrize("network", ["mlp", "cnn", "ntuple"])
@pytest.mark.parametrize("outputs", [1, 4])
def test_every_network_maps_boards_to_values(network, outputs):
    kw = dict(network=network, hidden=(16,), channels=4, ntuples="17x4")
    if network == "ntuple":
        kw.update(optimizer="sgd", max_grad_norm=None)
    net = make_network(TrainConfig(**kw), outputs)
    assert isinstance(net, {"mlp": MLPNetwork, "cnn": CNNetwork, "ntuple": NTupleNetwork}[network])
    out = net(torch.zeros((3, 4, 4), dtype=torch.uint8))
    assert out.shape == (3, outputs) and out.dtype == torch.float32


def test_named_tuple_sets_have_the_documented_sizes():
    assert [len(t) for t in NTUPLE_SETS["4x6"]] == [6] * 4
    assert [len(t) for t in NTUPLE_SETS["2x4+2x6"]] == [4, 4, 6, 6]
    assert len(NTUPLE_SETS["17x4"]) == 17 and NTupleNetwork("17x4").weight.numel() * 4 == 17 * 65536 * 4


# ----------------------------------------------------------------------------- learning, briefly
FAMILIES = {
    # (the mlp learns slowest: at 4,000 env steps it is only about 1.3-1.5x random play, at 8,000 1.6-2.4x)
    "mlp": dict(network="mlp", hidden=(64,), afterstate=True, lr=1e-3, augment_symmetry=True, total_env_steps=8_000),
    "cnn": dict(network="cnn", channels=8, hidden=(32,), afterstate=True, lr=1e-3),
    "ntuple": dict(network="ntuple", ntuples="17x4", afterstate=True, optimizer="sgd", max_grad_norm=None, lr=0.01,
                   loss="mse", gamma=1.0, target_update=1, reward_transform="none"),
}


@pytest.mark.slow  # a training run per family and scheme: minutes in all
@pytest.mark.parametrize("scheme", ["serial", "independent", "actors"])
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_each_network_family_beats_random_play_after_a_short_run(family, scheme):
    config = TrainConfig(**{"total_env_steps": 4_000, "n_envs": 16, "buffer_size": 4_000, "batch_size": 32,
                            "learning_starts": 256, "replay_ratio": 8.0, "epsilon_start": 0.1, "epsilon_end": 0.0,
                            "epsilon_decay_steps": 1_000, "seed": 0, **FAMILIES[family]})
    run = dqnlab.train(scheme, config, workers=1 if scheme == "serial" else 2, progress=False)
    assert run.updates > 0 and np.isfinite(run.episodes["loss"].dropna()).all()
    trained = dqnlab.evaluate(run, games=100, seed=1).summary()["score_mean"]
    random = dqnlab.evaluate("random", games=100, seed=1).summary()["score_mean"]
    assert trained > 1.3 * random


@pytest.mark.parametrize("outputs", [1, 4])
def test_ntuple_backprop_and_sparse_sgd_step_equal_autograd_and_torch_sgd(outputs):
    from dqnlab.agent.optim import optimizer_step as _optimizer_step

    torch.manual_seed(0)
    fast, slow = NTupleNetwork("17x4", outputs), NTupleNetwork("17x4", outputs)
    with torch.no_grad():
        fast.weight.normal_()
        slow.weight.copy_(fast.weight)
    boards = torch.from_numpy(filled_buffer(256).sample(64).boards)
    grad_out = torch.randn(64, outputs)
    inputs: list = []
    with torch.no_grad():
        out = fast._forward(boards, inputs)
    fast.backprop(boards, inputs, grad_out)
    ref = slow(boards)
    torch.testing.assert_close(out, ref.detach())
    (ref * grad_out).sum().backward()
    torch.testing.assert_close(fast.weight.grad.to_dense(), slow.weight.grad.to_dense())
    opt_fast, opt_slow = torch.optim.SGD(fast.parameters(), lr=0.3), torch.optim.SGD(slow.parameters(), lr=0.3)
    _optimizer_step(opt_fast)
    opt_slow.step()
    torch.testing.assert_close(fast.weight, slow.weight)
    assert not torch.equal(fast.weight, NTupleNetwork("17x4", outputs).weight)


# ----------------------------------------------------------------------------- n-tuple in every scheme
def _small_ntuple(**kw) -> TrainConfig:
    return TrainConfig(**{**FAMILIES["ntuple"], "total_env_steps": 2_000, "n_envs": 16, "buffer_size": 2_000,
                          "batch_size": 32, "learning_starts": 256, "replay_ratio": 2.0, "epsilon_start": 0.0,
                          "epsilon_end": 0.0, "seed": 0, **kw})


@pytest.mark.slow  # a 12,000-step run in each scheme
@pytest.mark.parametrize("scheme,workers,options", [
    ("serial", 1, {}), ("independent", 2, {"sync": "periodic", "sync_every": 50}),
    ("shared", 2, {"lock": False}), ("shared", 2, {"lock": True}), ("shared", 2, {"lock": True, "threads": True}),
    ("shared", 2, {"lock": False, "threads": True}), ("actors", 2, {}), ("sharded", 2, {}), ("averaged", 2, {})])
def test_ntuple_trains_in_every_scheme_and_beats_random_play(scheme, workers, options):
    """Every scheme trains the n-tuple network (on the compiled core where the scheme's learner runs a
    Learner: serial, independent, shared) into a player better than random moves on the same games."""
    config = _small_ntuple(total_env_steps=12_000, replay_ratio=1.0, lr=0.05)
    run = dqnlab.train(scheme, config, workers=workers, progress=False, **options)
    assert run.updates > 0 and np.abs(run.weights["weight"]).max() > 0  # the zero-initialised tables moved
    assert run.extra.get("optimizer", "sgd") == "sgd"
    player = dqnlab.evaluate(run, games=60, seed=3).scores.mean()
    assert player > 1.5 * dqnlab.evaluate("random", games=60, seed=3).scores.mean()


@pytest.mark.slow  # a run in each scheme
@pytest.mark.parametrize("scheme,workers,options", [
    ("serial", 1, {}), ("independent", 2, {"sync": "periodic", "sync_every": 50}), ("shared", 2, {"lock": False}),
    ("actors", 2, {}), ("sharded", 2, {}), ("averaged", 2, {})])
def test_the_fields_learning_methods_train_in_every_scheme(scheme, workers, options):
    """Temporal coherence after a TD phase, optimistic tables and two stages, together, in every scheme (the
    compiled core's loop in serial, independent and shared; the torch path's TemporalCoherence in the others)."""
    config = _small_ntuple(total_env_steps=12_000, replay_ratio=1.0, lr=0.1, optimizer="tc", tc_start=20,
                           tc_td_lr=0.02, initial_value=500.0, stages=(128,))
    run = dqnlab.train(scheme, config, workers=workers, progress=False, **options)
    w = run.weights["weight"]
    assert run.updates > 20 and w.shape[0] == 2 * 17 * 65536
    assert (w != np.float32(500.0 / (8 * 17))).any()  # the optimistic tables moved
    player = dqnlab.evaluate(run, games=60, seed=3).scores.mean()
    assert player > 1.5 * dqnlab.evaluate("random", games=60, seed=3).scores.mean()


def test_shared_threads_resume_restores_the_block(tmp_path):
    config = _small_ntuple(total_env_steps=1_600)
    first = dqnlab.train("shared", config.replace(total_env_steps=800), workers=2, progress=False, lock=False,
                         threads=True, run_dir=tmp_path)
    resumed = dqnlab.train(resume=tmp_path, config=config, progress=False)
    assert resumed.env_steps >= 1_600 and resumed.options["threads"] is True
    assert [w["env_steps"] for w in resumed.extra["per_worker"]] == [800, 800]  # each worker went on from its own
    assert resumed.updates > first.updates
    assert not np.array_equal(first.weights["weight"], resumed.weights["weight"])


def test_ntuple_independent_resume_gives_the_same_run_as_not_stopping(tmp_path):
    """The compiled loop stops at each sync round (update_limit), so a chunked run syncs where a stepped one does."""
    config = _small_ntuple(total_env_steps=3_200)
    kw = dict(workers=2, progress=False, sync="periodic", sync_every=10)
    whole = dqnlab.train("independent", config, **kw)
    dqnlab.train("independent", config.replace(total_env_steps=1_600), run_dir=tmp_path, **kw)
    resumed = dqnlab.train(resume=tmp_path, config=config, progress=False)
    assert (whole.env_steps, whole.updates) == (resumed.env_steps, resumed.updates)
    assert np.array_equal(whole.weights["weight"], resumed.weights["weight"])


#: Temporal coherence (its sums are optimiser state, checkpointed) after a TD phase, with two stages.
_METHODS = dict(optimizer="tc", lr=0.1, tc_start=20, tc_td_lr=0.02, initial_value=500.0, stages=(64,))


@pytest.mark.parametrize("methods", [{}, _METHODS], ids=["plain", "tc, stages"])
def test_ntuple_serial_resume_gives_the_same_run_as_not_stopping(tmp_path, methods):
    config = _small_ntuple(total_env_steps=1_600, **methods)
    whole = dqnlab.train("serial", config, progress=False)
    dqnlab.train("serial", config.replace(total_env_steps=800), progress=False, run_dir=tmp_path)
    resumed = dqnlab.train("serial", config, progress=False, resume=tmp_path)
    assert (whole.env_steps, whole.updates) == (resumed.env_steps, resumed.updates)
    assert np.array_equal(whole.weights["weight"], resumed.weights["weight"])
    assert whole.episodes["score"].tolist() == resumed.episodes.sort_values(["worker", "episode"])["score"].tolist()


@pytest.mark.parametrize("methods", [{}, _METHODS], ids=["plain", "tc, stages"])
def test_ntuple_shared_resume_gives_the_same_run_as_not_stopping(tmp_path, methods):
    """The shared block without target and optimiser arrays (target_update 1, plain SGD), or with temporal
    coherence's sums, checkpoints and resumes."""
    config = _small_ntuple(total_env_steps=1_600, **methods)
    whole = dqnlab.train("shared", config, workers=1, progress=False, lock=False)
    dqnlab.train("shared", config.replace(total_env_steps=800), workers=1, progress=False, lock=False,
                 run_dir=tmp_path)
    resumed = dqnlab.train(resume=tmp_path, config=config, progress=False)
    assert (whole.env_steps, whole.updates) == (resumed.env_steps, resumed.updates)
    assert np.array_equal(whole.weights["weight"], resumed.weights["weight"])


def test_a_non_finite_afterstate_value_is_reported_not_masked():
    agent = DQNAgent(_ntuple_config(ntuples=((0, 1, 2, 3),)), seed=0)
    with torch.no_grad():
        agent.online.weight.fill_(float("nan"))
    batch = filled_buffer(256).sample(32)
    assert not np.isfinite(agent.td_targets(batch).numpy()[~batch.dones]).any()
    with pytest.raises(FloatingPointError, match="non-finite TD loss"):
        agent.update(batch)
