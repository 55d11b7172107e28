import copy

import numpy as np
import pytest
import torch
from helpers import filled_buffer

from dqnlab import DQNAgent, MLPNetwork, TrainConfig, VecGame2048
from dqnlab.agent.dqn import EMBEDDING_MIN_BATCH, transform_rewards
from dqnlab.game import legal_actions_batch


@pytest.fixture
def config():
    return TrainConfig(hidden=(16,), batch_size=32, target_update=3, lr=1e-2)


def test_network_shapes():
    boards = torch.zeros((5, 4, 4), dtype=torch.uint8)
    assert MLPNetwork("onehot", (8, 8))(boards).shape == (5, 4)
    assert MLPNetwork("raw", (8,))(boards).shape == (5, 4)
    with pytest.raises(ValueError, match="encoding"):
        MLPNetwork("pixels")


def test_acting_picks_only_legal_moves(config):
    agent = DQNAgent(config, seed=0)
    env = VecGame2048(64, seed=1)
    masks = legal_actions_batch(env.boards)
    masks[:, 0] = False  # forbid "up" everywhere to make the test bite
    masks[np.arange(64), np.arange(64) % 4 | 1] = True
    for eps in (0.0, 0.5, 1.0):
        actions = agent.act(env.boards, masks, eps)
        assert masks[np.arange(64), actions].all()


def test_td_targets_are_double_dqn_over_legal_moves(config):
    agent = DQNAgent(config, seed=0)
    agent.target.mlp[-1].bias.data += torch.arange(4.0)  # make target and online nets differ
    batch = filled_buffer(256).sample(32)
    y = agent.td_targets(batch).numpy()
    with torch.no_grad():
        nb = torch.from_numpy(batch.next_boards)
        q_online, q_target = agent.online(nb).numpy(), agent.target(nb).numpy()
    best = np.where(batch.next_masks, q_online, -np.inf).argmax(1)
    v = q_target[np.arange(32), best]
    v[batch.dones | ~batch.next_masks.any(1)] = 0
    np.testing.assert_allclose(y, batch.rewards + config.gamma * v, rtol=1e-6)


def test_update_fits_a_fixed_batch_and_syncs_target(config):
    agent = DQNAgent(config, seed=0)
    batch = filled_buffer(256).sample(32)
    for i in range(1, 7):
        agent.update(batch)
        same = all(torch.equal(a, b) for a, b in zip(agent.online.parameters(), agent.target.parameters()))
        assert same == (i % config.target_update == 0), i
    assert agent.updates == 6
    fitter = DQNAgent(config.replace(target_update=1_000), seed=0)  # fixed target: plain regression
    before = fitter.loss(batch).item()
    for _ in range(30):
        fitter.update(batch)
    assert fitter.loss(batch).item() < 0.5 * before


# one-hot batches: dense first layer; dense for s but an embedding sum for [s; s'] (Double DQN); embedding sum
@pytest.mark.parametrize("encoding,batch_size", [("raw", 32), ("onehot", 32), ("onehot", EMBEDDING_MIN_BATCH // 2 + 8),
                                                 ("onehot", EMBEDDING_MIN_BATCH + 5)])
@pytest.mark.parametrize("loss", ["mse", "huber"])
@pytest.mark.parametrize("hidden,double_dqn", [((16,), True), ((24, 8, 12), True), ((24, 8, 12), False)])
@pytest.mark.parametrize("weighted", [False, True])
def test_hand_written_gradients_equal_autograd(encoding, batch_size, loss, hidden, double_dqn, weighted):
    config = TrainConfig(encoding=encoding, batch_size=batch_size, loss=loss, hidden=hidden, buffer_size=400,
                         reward_transform="none", double_dqn=double_dqn)
    agent = DQNAgent(config, seed=3)
    with torch.no_grad():
        agent.target.mlp[-1].bias.add_(torch.arange(4.0))  # targets far from Q: both Huber regimes occur
    batch = filled_buffer(400).sample(batch_size)
    if weighted:  # importance-sampling weights of a prioritized sample
        batch = batch._replace(weights=np.random.default_rng(1).random(batch_size, dtype=np.float32))
    reference = copy.deepcopy(agent)
    expected = reference.loss(batch)
    expected.backward()
    for p in agent.online.parameters():
        p.grad = torch.full_like(p, 7.0)  # replaced, not accumulated
    value = agent.compute_gradients(batch)
    assert value == pytest.approx(float(expected.detach()), rel=1e-6)
    for (name, p), q in zip(agent.online.named_parameters(), reference.online.parameters()):
        assert p.grad is not None and p.grad.shape == p.shape, name
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-6 * float(q.grad.abs().max())), name
    error = (reference.online(torch.from_numpy(batch.boards)).gather(1, torch.from_numpy(batch.actions)[:, None])
             .squeeze(1) - reference.td_targets(batch)).detach()
    np.testing.assert_allclose(agent.td_errors(), error.abs().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(agent.td_errors(batch), error.abs().numpy(), rtol=1e-5, atol=1e-6)
    if loss == "huber":
        assert (error.abs() > 1).any() and (error.abs() < 1).any()


@pytest.mark.parametrize("preset", ["ntuple-small", "cnn", "mlp-afterstate"])
def test_importance_weights_scale_each_transitions_loss(preset):
    config = TrainConfig.preset(preset, batch_size=48, buffer_size=400, double_dqn=False, augment_symmetry=False)
    agent = DQNAgent(config, seed=2)
    batch = filled_buffer(400).sample(48)
    w = np.random.default_rng(0).random(48, dtype=np.float32)
    plain = copy.deepcopy(agent).compute_gradients(batch)
    value = agent.compute_gradients(batch._replace(weights=w))
    errors = agent.td_errors()
    each = errors ** 2 if config.loss == "mse" else np.where(errors < 1, errors ** 2 / 2, errors - 0.5)
    assert plain == pytest.approx(each.mean(), rel=1e-4)
    assert value == pytest.approx((w * each).mean(), rel=1e-4)
    reference = copy.deepcopy(agent)
    reference.loss(batch._replace(weights=w)).backward()
    for p, q in zip(agent.online.parameters(), reference.online.parameters()):
        torch.testing.assert_close(p.grad.to_dense(), q.grad.to_dense(), rtol=1e-4, atol=1e-6)


def test_non_finite_loss_raises_and_keeps_weights(config):
    agent = DQNAgent(config, seed=0)
    batch = filled_buffer(256).sample(32)
    batch.rewards[0] = np.nan
    w = agent.get_weights()
    with pytest.raises(FloatingPointError, match="update 1"):
        agent.update(batch)
    assert all(np.array_equal(w[k], v) for k, v in agent.get_weights().items())


def test_weights_round_trip_and_shape_check(config):
    a, b = DQNAgent(config, seed=0), DQNAgent(config, seed=1)
    b.set_weights(a.get_weights(), target=True)
    boards = VecGame2048(8, seed=0).boards
    np.testing.assert_array_equal(a.q_values(boards), b.q_values(boards))
    with pytest.raises(ValueError, match="shapes"):
        DQNAgent(config.replace(hidden=(8,))).set_weights(a.get_weights())


def test_log_reward_transform():
    c = TrainConfig(reward_transform="log")
    np.testing.assert_allclose(transform_rewards(c, np.array([0, 4, 2048, -25])), [0, np.log2(5), np.log2(2049), -np.log2(26)],
                               rtol=1e-6)
    assert transform_rewards(TrainConfig(), np.array([4.0]))[0] == 4.0
