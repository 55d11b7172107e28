"""Tests of dqnlab.core.ntuple: the compiled n-tuple features and values equal the torch network's
reference computations (float32 products with powers of 16, embedding_bag), are invariant under the
board's symmetries, read exponents above 15 as 15; sparse SGD and the sparse gradient's norm."""

import numpy as np
import pytest
import torch
from torch.nn import functional as F

from dqnlab.agent.networks import NTupleNetwork
from dqnlab.config import NTUPLE_SETS
from dqnlab.core import ntuple
from dqnlab.game.rules import move_batch
from dqnlab.game.symmetry import ACTION_PERMUTATIONS, N_SYMMETRIES, transform_boards

SETS = ("4x6", "17x4", "2x4+2x6")
TOL = dict(rtol=1e-5, atol=1e-5)


@pytest.fixture(scope="module", params=[(name, outputs) for name in SETS for outputs in (1, 4)],
                ids=lambda p: f"{p[0]}-outputs{p[1]}")
def net(request):
    """An NTupleNetwork of a tuple set whose weight holds random float32 values in [-0.5, 0.5)."""
    name, outputs = request.param
    net = NTupleNetwork(name, outputs)
    w = net.weight.detach().numpy()
    assert w.flags.c_contiguous and w.dtype == np.float32 and w.shape[1] == outputs
    np.random.default_rng(len(name) + outputs).random(out=w, dtype=np.float32)
    w -= np.float32(0.5)
    return net


def random_boards(n, seed, high=15):
    """``(n, 4, 4)`` uint8 boards with exponents 0..high, about a third of the cells empty."""
    rng = np.random.default_rng(seed)
    boards = rng.integers(1, high + 1, (n, 4, 4)).astype(np.uint8)
    boards[rng.random(boards.shape) < 0.35] = 0
    return boards


def reference_indices(net, boards):
    """The torch network's indices: the cells (16 and 17 read as 15) times powers of 16, plus the offsets."""
    b = torch.from_numpy(boards)
    return b.reshape(len(b), 16).clamp(max=15).float().mm(net.powers).long() + net.offsets


def reference_values(net, idx):
    if net.outputs == 1:
        return F.embedding_bag(idx, net.weight, mode="sum")
    rows = F.embedding(idx, net.weight)  # (N, P, 4), each row in its placement's frame
    return rows.gather(2, net.columns.expand(len(idx), -1, -1)).sum(1)


def core_features(net, boards):
    out = np.empty((len(boards), 8 * len(net.tuples)), np.int64)
    ntuple.feature_batch(np.ascontiguousarray(boards.reshape(len(boards), 16)), net.placements, out)
    return out


def test_the_network_has_the_sets_tuples(net):
    name = next(n for n in SETS if NTUPLE_SETS[n] == net.tuples)
    _, n_runs, offsets, stage_exps = net.placements
    assert offsets.shape == (1, len(NTUPLE_SETS[name])) and (n_runs >= 1).all() and len(stage_exps) == 0


@pytest.mark.parametrize("high", [15, 17])
def test_features_equal_the_torch_indices(net, high):
    boards = random_boards(300, high, high)
    expected = reference_indices(net, boards)
    np.testing.assert_array_equal(core_features(net, boards), expected.numpy())
    np.testing.assert_array_equal(net.indices(torch.from_numpy(boards)).numpy(), expected.numpy())
    np.testing.assert_array_equal(net.tensor_indices(torch.from_numpy(boards)).numpy(), expected.numpy())


def test_values_equal_embedding_bag(net):
    boards = random_boards(300, 1, 17)
    with torch.no_grad():
        expected = reference_values(net, reference_indices(net, boards))
        got = net(torch.from_numpy(boards))  # the core's values on the CPU
    assert got.dtype == torch.float32 and got.shape == (300, net.outputs)
    np.testing.assert_allclose(got.numpy(), expected.numpy(), **TOL)
    out = np.empty((300, net.outputs), np.float32)
    ntuple.values(boards.reshape(300, 16), net.weight.detach().numpy(), net.placements, net.placement_columns, out)
    np.testing.assert_array_equal(out, got.numpy())
    with_grad = net(torch.from_numpy(boards))  # the torch path (a gradient is wanted)
    assert with_grad.requires_grad
    np.testing.assert_allclose(with_grad.detach().numpy(), expected.numpy(), **TOL)


def test_values_are_invariant_under_the_symmetries(net):
    boards = random_boards(100, 2, 17)
    with torch.no_grad():
        base = net(torch.from_numpy(boards)).numpy()
        for g in range(N_SYMMETRIES):
            moved = net(torch.from_numpy(transform_boards(boards, np.full(len(boards), g)))).numpy()
            if net.outputs == 1:
                np.testing.assert_allclose(moved, base, **TOL)
            else:  # equivariant: action a of the board is action ACTION_PERMUTATIONS[g, a] of its image
                np.testing.assert_allclose(moved[:, ACTION_PERMUTATIONS[g]], base, **TOL)


def test_exponents_16_and_17_read_as_15(net):
    boards = random_boards(200, 3, 15)
    boards[:, 0, 0] = 16
    boards[::2, 3, 2] = 17
    boards[1::3, 1, 1] = 15
    clamped = np.minimum(boards, 15)
    np.testing.assert_array_equal(core_features(net, boards), core_features(net, clamped))
    with torch.no_grad():
        np.testing.assert_array_equal(net(torch.from_numpy(boards)).numpy(), net(torch.from_numpy(clamped)).numpy())


def test_sgd_rows_equals_add_at():
    net = NTupleNetwork("17x4", 1)
    rng = np.random.default_rng(4)
    weights = rng.random(len(net.weight), dtype=np.float32) - np.float32(0.5)
    boards = random_boards(64, 4, 6)
    boards[32:] = boards[:32]  # rows used by several samples, as well as within a sample (its symmetries)
    rows = core_features(net, boards)
    assert len(np.unique(rows)) < rows.size
    slopes = rng.standard_normal(64).astype(np.float32)
    expected = weights.copy()
    np.add.at(expected, rows.reshape(-1), np.repeat(np.float32(-0.05) * slopes, rows.shape[1]))
    ntuple.sgd_rows(weights, rows, slopes, 0.05)
    np.testing.assert_allclose(weights, expected, rtol=1e-6, atol=1e-7)
    # many collisions: 2,000 steps on 10 rows
    weights, expected = np.zeros(10, np.float32), np.zeros(10, np.float32)
    rows = rng.integers(0, 10, (50, 40))
    slopes = rng.standard_normal(50).astype(np.float32)
    np.add.at(expected, rows.reshape(-1), np.repeat(np.float32(-0.3) * slopes, 40))
    ntuple.sgd_rows(weights, rows, slopes, 0.3)
    np.testing.assert_allclose(weights, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("seed", range(3))
def test_sparse_grad_norm_equals_the_coalesced_torch_gradient(seed):
    net = NTupleNetwork("17x4", 1)
    rng = np.random.default_rng(seed)
    boards = random_boards(48, seed, 4 + seed)
    boards[24:] = boards[:24][rng.permutation(24)]
    rows = core_features(net, boards)
    slopes = rng.standard_normal(48).astype(np.float32)
    p = rows.shape[1]
    grad = torch.sparse_coo_tensor(torch.from_numpy(rows.reshape(1, -1)), torch.from_numpy(np.repeat(slopes, p)),
                                   (len(net.weight),), check_invariants=True).coalesce()
    expected = float(grad.values().norm())
    assert ntuple.sparse_grad_norm(rows, slopes) == pytest.approx(expected, rel=1e-5)
    # the network's own sparse gradient (NTupleNetwork.backprop) has the same norm
    net.backprop(torch.from_numpy(boards), [torch.from_numpy(rows)], torch.from_numpy(slopes).reshape(-1, 1))
    assert float(net.weight.grad.coalesce().values().norm()) == pytest.approx(expected, rel=1e-5)


@pytest.mark.parametrize("log_rewards", [False, True])
def test_afterstate_values_are_reward_plus_the_afterstates_value(log_rewards):
    net = NTupleNetwork("17x4", 1)
    rng = np.random.default_rng(5)
    w = net.weight.detach().numpy()
    w[:] = rng.random(w.shape, dtype=np.float32)
    boards = random_boards(100, 5, 17)
    boards[:10] = np.minimum(boards[:10], 15)
    boards[:10, 0, :2] = 15  # 32768 + 32768: the exact path
    after, points, changed = move_batch(np.repeat(boards, 4, axis=0), np.tile(np.arange(4), len(boards)))
    with torch.no_grad():
        v = net(torch.from_numpy(after)).numpy().reshape(-1, 4)
    r = np.log2(1 + points.astype(np.float32)) if log_rewards else points.astype(np.float32)
    expected = np.where(changed.reshape(-1, 4), v + r.reshape(-1, 4), -np.inf)
    q = np.empty(4, np.float32)
    scratch = np.empty(16, np.uint8)
    for i, board in enumerate(boards):
        any_legal = ntuple.afterstate_values(board.reshape(16), w.reshape(-1), net.placements, log_rewards, scratch, q)
        assert any_legal == changed.reshape(-1, 4)[i].any()
        np.testing.assert_allclose(q, expected[i], **TOL)


# --------------------------------------------------------------------------- the field's learning methods
def test_the_8x6_set_reads_the_rows_of_its_tuples():
    """The 8x6 set (tuples of three runs: the general feature path) reads the rows the powers of 16 give;
    its tables are 537 MB (zeros, never touched here)."""
    net = NTupleNetwork("8x6", 1)
    assert net.weight.numel() * 4 == 8 * 16 ** 6 * 4 == 536_870_912
    boards = random_boards(200, 7, 15)
    np.testing.assert_array_equal(core_features(net, boards), reference_indices(net, boards).numpy())


@pytest.mark.parametrize("cells, stage", [((1, 2, 3), 0), ((5,), 0), ((6,), 1), ((6, 9), 1), ((10,), 2),
                                          ((14, 15), 2), ((16, 17), 2)])
def test_a_board_reads_the_tables_of_its_stage(cells, stage):
    """stages=(64, 1024): a board whose largest tile is below 64 reads set 0, 64..512 set 1, 1024 and up set 2
    (exponents above 15 read as 15), on the core and on the torch path."""
    plain, staged = NTupleNetwork("17x4", 1), NTupleNetwork("17x4", 1, stages=(64, 1024))
    assert staged.weight.shape[0] == 3 * plain.weight.shape[0] == 3 * staged.set_rows
    board = np.zeros((1, 4, 4), np.uint8)
    board.reshape(16)[[0, 5, 10][:len(cells)]] = cells
    expected = core_features(plain, board) + stage * staged.set_rows
    np.testing.assert_array_equal(core_features(staged, board), expected)
    np.testing.assert_array_equal(staged.tensor_indices(torch.from_numpy(board)).numpy(), expected)  # (a GPU's path)


def test_a_staged_networks_values_equal_embedding_bag_over_its_stages_rows():
    net = NTupleNetwork("17x4", 1, stages=(256,))
    w = net.weight.detach().numpy()
    np.random.default_rng(8).random(out=w, dtype=np.float32)
    boards = random_boards(300, 8, 10)
    rows = torch.from_numpy(core_features(net, boards))
    assert (rows >= net.set_rows).any() and (rows < net.set_rows).any()
    with torch.no_grad():
        np.testing.assert_allclose(net(torch.from_numpy(boards)).numpy(), F.embedding_bag(rows, net.weight,
                                                                                            mode="sum").numpy(), **TOL)


@pytest.mark.parametrize("stages", [(), (128,)])
def test_optimistic_tables_give_every_board_the_initial_value(stages):
    net = NTupleNetwork("2x4+2x6", 1, initial_value=320_000.0, stages=stages)
    boards = random_boards(50, 9, 12)
    boards[0] = 0  # the empty board too
    with torch.no_grad():
        np.testing.assert_allclose(net(torch.from_numpy(boards)).numpy(), 320_000.0, rtol=1e-5)
    assert net.weight[0, 0] == np.float32(320_000.0 / 32)


def tc_reference(weights, errors, abs_errors, entries, grads, lr):
    """Temporal coherence by hand, in plain Python floats: rate |E| / A (1 while A is 0), then E += g, A += |g|."""
    w, e, a = weights.astype(float), errors.astype(float), abs_errors.astype(float)
    for r, g in zip(entries, grads):
        rate = abs(e[r]) / a[r] if a[r] > 0 else 1.0
        w[r] -= lr * rate * g
        e[r] += g
        a[r] += abs(g)
    return w, e, a


def test_tc_rows_is_temporal_coherence_by_hand():
    """Four weights: one whose errors keep their sign (its rate stays 1), one whose errors cancel (its rate falls
    to 0), one read twice a sample; in float32 against a float64 hand computation and against numbers by hand."""
    weights, sums = np.zeros(4, np.float32), np.zeros((4, 2), np.float32)
    rows = np.array([[0, 1, 2, 2], [0, 3, 2, 2], [0, 1, 2, 2]], np.int64)
    slopes = np.array([1.0, -1.0, 1.0], np.float32)
    expected = tc_reference(weights, sums[:, 0], sums[:, 1], rows.reshape(-1), np.repeat(slopes, 4), 0.1)
    ntuple.tc_rows(weights, sums, rows, slopes, 0.1)
    errors, abs_errors = sums[:, 0], sums[:, 1]
    for got, want in zip((weights, errors, abs_errors), expected):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    # weight 0: g = 1, -1, 1 at rates 1, 1, |0|/2: -0.1 + 0.1 - 0 = 0; weight 1: g = 1, 1 at rates 1, 1
    assert weights[0] == pytest.approx(0.0, abs=1e-7) and weights[1] == pytest.approx(-0.2)
    assert weights[3] == pytest.approx(0.1)
    # weight 2: g = 1, 1, -1, -1, 1, 1 at rates 1, 1, 1, 1/3, 0, 1/5
    assert weights[2] == pytest.approx(-0.1 - 0.1 + 0.1 + 0.1 / 3 - 0.0 - 0.1 / 5, rel=1e-5)
    assert (errors[2], abs_errors[2]) == (2.0, 6.0)


def test_tc_entries_is_tc_rows_on_flat_entries():
    rng = np.random.default_rng(10)
    rows = rng.integers(0, 20, (30, 8))
    slopes = rng.standard_normal(30).astype(np.float32)
    a = [np.zeros(20, np.float32), np.zeros((20, 2), np.float32)]
    b = [np.zeros(20, np.float32), np.zeros((20, 2), np.float32)]
    ntuple.tc_rows(*a, rows, slopes, 0.3)
    ntuple.tc_entries(*b, rows.reshape(-1), np.repeat(slopes, 8), 0.3)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    expected = tc_reference(*[np.zeros(20, np.float32) for _ in range(3)], rows.reshape(-1), np.repeat(slopes, 8), 0.3)
    for x, want in zip((a[0], a[1][:, 0], a[1][:, 1]), expected):
        np.testing.assert_allclose(x, want, rtol=1e-4, atol=1e-5)


def test_prefetch_compiles_to_a_hint_that_changes_nothing():
    from numba import njit
    from numba.core.errors import TypingError

    @njit
    def prefetched_sum(table, rows):
        for r in rows:
            ntuple.prefetch(table, 2 * r)
        return table[rows].sum()

    table = np.arange(40, dtype=np.float32).reshape(20, 2)
    before = table.copy()
    rows = np.array([0, 3, 19], np.int64)
    assert prefetched_sum(table, rows) == before[rows].sum()
    assert np.array_equal(table, before)
    with pytest.raises(TypingError):  # (a strided array: no flat element index to take the address of)
        prefetched_sum(table[:, 0], rows)
