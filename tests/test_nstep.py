"""n-step returns: the transitions NStepReturns makes and the targets the agent computes from them,
against a hand computation, across a game over and a truncation, for n = 1, 3 and 5."""

import numpy as np
import pytest
import torch

from dqnlab import DQNAgent, TrainConfig
from dqnlab.agent.dqn import transform_rewards
from dqnlab.game import VecGame2048, legal_actions_batch
from dqnlab.game.rules import move_batch_unchecked
from dqnlab.replay import Minibatch, NStepReturns
from dqnlab.runtime.learner import Learner, next_board_masks

GAMMA = 0.9


def _play(n_envs=3, steps=500, max_moves=120, seed=0):
    """Random legal play of ``n_envs`` boards (games end by game over, or truncation after
    ``max_moves``); each step's one-step columns and the per-board trajectories."""
    env = VecGame2048(n_envs, seed=seed, max_moves=max_moves)
    rng = np.random.default_rng(seed)
    boards = env.reset()
    masks = legal_actions_batch(boards)
    steps_out, episodes = [], [[] for _ in range(n_envs)]
    finished = []
    for _ in range(steps):
        actions = np.where(masks, rng.random((n_envs, 4)), -1).argmax(1)
        out = env.step(actions)
        ended = out.terminated | out.truncated
        step = dict(boards=boards, actions=actions, rewards=out.rewards.astype(np.float32),
                    next_boards=out.next_boards, dones=out.terminated, next_masks=next_board_masks(out, ended),
                    ended=ended)
        steps_out.append(step)
        for i in range(n_envs):
            episodes[i].append({k: v[i] for k, v in step.items()})
            if ended[i]:
                finished.append(episodes[i])
                episodes[i] = []
        boards, masks = out.boards, out.action_masks
    return steps_out, finished


def _by_hand(episode, n):
    """The n-step transitions of one finished game, written out from their definition."""
    out = []
    T = len(episode)
    for t in range(T):
        k = min(n, T - t)
        R = sum(GAMMA ** i * episode[t + i]["rewards"] for i in range(k))
        last = episode[t + k - 1]
        out.append((episode[t]["boards"].tobytes(), int(episode[t]["actions"]), np.float32(R),
                    last["next_boards"].tobytes(), bool(last["dones"]), last["next_masks"].tobytes(), k))
    return out


@pytest.mark.parametrize("n", [1, 3, 5])
def test_transitions_match_a_hand_computation(n):
    steps, finished = _play()
    assert any(e[-1]["dones"] for e in finished) and any(not e[-1]["dones"] for e in finished), \
        "the play must hold both a game over and a truncation"
    acc = NStepReturns(n, GAMMA, 3)
    made = []
    for s in steps:
        out = acc.push(**s)
        made += [(out["boards"][j].tobytes(), int(out["actions"][j]), np.float32(out["rewards"][j]),
                  out["next_boards"][j].tobytes(), bool(out["dones"][j]), out["next_masks"][j].tobytes(),
                  int(out["steps"][j])) for j in range(len(out["actions"]))]
    expected = [tr for e in finished for tr in _by_hand(e, n)]
    # every transition of a finished game is out, as written by hand (games still running hold back at most n - 1)
    key = lambda tr: (tr[0], tr[1], tr[3], tr[6])
    made_by_key = {key(tr): tr for tr in made}
    for tr in expected:
        got = made_by_key[key(tr)]
        assert got[2] == pytest.approx(tr[2], rel=1e-6) and got[4:6] == tr[4:6]
    # one transition per step, but the last n - 1 steps of each of the 3 boards, still pending
    total = sum(len(s["actions"]) for s in steps)
    assert total - 3 * (n - 1) <= len(made) <= total
    assert np.all(np.array([tr[6] for tr in made]) <= n)


def test_one_step_passes_transitions_through():
    steps, _ = _play(steps=10)
    acc = NStepReturns(1, GAMMA, 3)
    for s in steps:
        out = acc.push(**s)
        for name in ("boards", "rewards", "next_boards", "dones", "next_masks"):
            assert np.array_equal(out[name], s[name])
        assert np.all(out["steps"] == 1)


def _agent(**kw):
    c = TrainConfig(hidden=(16,), gamma=GAMMA, double_dqn=False, target_update=10, **kw)
    return DQNAgent(c, seed=0), c


def _batch(steps_list, rng):
    n = len(steps_list)
    boards = rng.integers(0, 5, (n, 4, 4)).astype(np.uint8)
    next_boards = rng.integers(0, 5, (n, 4, 4)).astype(np.uint8)
    masks = rng.random((n, 4)) < 0.8
    masks[:, 0] = True
    return Minibatch(boards, np.zeros(n, np.int64), rng.normal(size=n).astype(np.float32), next_boards,
                     np.array([i % 3 == 0 for i in range(n)]), masks, np.array(steps_list, np.uint8))


@pytest.mark.parametrize("n", [1, 3, 5])
def test_targets_bootstrap_with_gamma_to_the_steps(n):
    agent, _config = _agent(n_step=n)
    steps = [min(n, 1 + i % n) for i in range(12)]  # full n-step transitions and shorter ones (game ends)
    batch = _batch(steps, np.random.default_rng(n))
    with torch.no_grad():
        q_next = agent.target(torch.from_numpy(batch.next_boards)).numpy()
    v = np.where(batch.next_masks, q_next, -np.inf).max(1)
    y = batch.rewards + np.where(batch.dones, 0.0, GAMMA ** np.array(steps, float) * v)
    assert np.allclose(agent.td_targets(batch).numpy(), y, atol=1e-5)
    if n == 1:  # equal to the one-step targets (no steps column)
        assert torch.equal(agent.td_targets(batch), agent.td_targets(batch._replace(steps=None)))


@pytest.mark.parametrize("n", [1, 3, 5])
def test_afterstate_targets_subtract_the_moves_own_reward(n):
    agent, c = _agent(n_step=n, afterstate=True)
    steps, _ = _play(n_envs=4, steps=40, max_moves=6, seed=3)
    acc = NStepReturns(n, GAMMA, 4)
    cols = [acc.push(**{**s, "rewards": transform_rewards(c, s["rewards"])}) for s in steps]
    batch = Minibatch(*(np.concatenate([o[f] for o in cols]) for f in
                        ("boards", "actions", "rewards", "next_boards", "dones", "next_masks", "steps")))
    batch = batch._replace(actions=batch.actions.astype(np.int64))
    _, points, _ = move_batch_unchecked(batch.boards, batch.actions)
    first = transform_rewards(c, points)
    q_next = agent.q_values(batch.next_boards)  # r(s', a) + V(afterstate(s', a)), -inf where illegal
    alive = np.isfinite(q_next).any(1) & ~batch.dones
    v = np.where(alive, np.where(np.isfinite(q_next), q_next, -np.inf).max(1, initial=-np.inf), 0.0)
    y = batch.rewards - first + np.where(alive, GAMMA ** batch.steps.astype(float) * v, 0.0)
    assert np.allclose(agent.td_targets(batch).numpy(), y, atol=1e-4)


def test_learner_stores_n_step_transitions_and_resumes_them():
    c = TrainConfig(hidden=(16,), n_envs=4, n_step=3, max_moves=5, learning_starts=10_000, total_env_steps=400)
    a = Learner(c)
    for _ in range(20):
        a.act_step()
    b = Learner(c)
    b.load_state_dict(a.state_dict())
    for _ in range(10):
        a.act_step()
        b.act_step()
    assert np.array_equal(a.buffer.arrays["rewards"], b.buffer.arrays["rewards"])
    steps = a.buffer.arrays["steps"][: len(a.buffer)]
    assert set(np.unique(steps)) == {1, 2, 3}  # truncations every 5 moves cut returns short
