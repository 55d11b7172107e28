"""Q- and value networks over 2048 boards: ``mlp``, ``cnn`` and ``ntuple`` (``TrainConfig.network``).

Every network maps a ``(N, 4, 4)`` uint8 tensor of board exponents to ``(N, outputs)``
float32: four action values (``outputs=4``, plain DQN) or one afterstate value
(``outputs=1``, ``TrainConfig.afterstate``).

References
----------
* MLP over one-hot cells: the usual DQN baseline (Mnih et al. 2015, *Nature* 518:529).
* CNN with parallel 1x2 and 2x1 convolutions on one-hot tile planes, two layers deep:
  the usual "deep" choice for 2048 (kernels that see exactly the pairs of cells a move can
  merge); convolutional value networks for 2048 trained by TD: Guei, Wei, Huang and Wu
  2016 (2x2 and 3x3 kernels).
* N-tuple network: Szubert and Jaskowski, "Temporal difference learning of N-tuple
  networks for the game 2048", IEEE CIG 2014; Jaskowski, "Mastering 2048 with delayed
  temporal coherence learning, multistage weight promotion, redundant encoding, and
  carousel shaping", IEEE TCIAIG 10(1), 2018; the 4x6-tuple set of Yeh, Wu et al.,
  "Multistage temporal difference learning for 2048-like games", IEEE TCIAIG 2017.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from ..config import resolve_tuples
from ..core import memory as core_memory
from ..core import ntuple as core_ntuple
from ..game.symmetry import ACTION_PERMUTATIONS, CELL_PERMUTATIONS

__all__ = ["MLPNetwork", "CNNetwork", "NTupleNetwork", "NETWORKS", "make_network",
           "N_EXPONENTS", "EMBEDDING_MIN_BATCH"]

N_EXPONENTS = 18  # board exponents 0..17
N_CELLS = 16

# Column of the one-hot input that cell c with exponent k switches on: c * 18 + k.
_ONEHOT_OFFSETS = torch.arange(N_CELLS, dtype=torch.int64) * N_EXPONENTS
# Row k is the one-hot code of exponent k.
_IDENTITY = torch.eye(N_EXPONENTS, dtype=torch.float32)
# Raw input value of exponent k: the tile value 2**k (0 for an empty cell); exact in float32.
_RAW_VALUES = torch.tensor([0.0] + [2.0 ** k for k in range(1, N_EXPONENTS)], dtype=torch.float32)
#: Batches of at least this many boards take the one-hot first layer as an embedding sum
#: (a gather of 16 weight columns per board) instead of a dense product with the one-hot
#: matrix; smaller batches (acting) take the dense product, which is faster there
#: (``python -m dqnlab bench learner`` times both).
EMBEDDING_MIN_BATCH = 128


def _one_hot_columns(boards: torch.Tensor) -> torch.Tensor:
    """``(N, 4, 4)`` uint8 exponents -> ``(N, 16)`` int64 columns ``cell * 18 + exponent``."""
    return boards.reshape(len(boards), N_CELLS).long() + _ONEHOT_OFFSETS.to(boards.device)


def _one_hot(boards: torch.Tensor) -> torch.Tensor:
    """``(N, 4, 4)`` uint8 exponents -> ``(N, 288)`` float32 one-hot rows (16 ones each):
    each cell's row of the 18 x 18 identity, gathered in one ``index_select``."""
    return _IDENTITY.to(boards.device).index_select(0, boards.reshape(-1).long()).reshape(len(boards),
                                                                                        N_CELLS * N_EXPONENTS)


def _raw(boards: torch.Tensor) -> torch.Tensor:
    """``(N, 4, 4)`` uint8 exponents -> ``(N, 16)`` float32 tile values (0 for empty)."""
    return torch.take(_RAW_VALUES.to(boards.device), boards.reshape(len(boards), N_CELLS).long())


class _OneHotLinear(torch.autograd.Function):
    """``one_hot(columns) @ weight.T + bias`` without building the one-hot matrix forward.

    Row ``i`` of the product is the sum of the 16 weight columns that board ``i``
    switches on, so the forward pass is an embedding sum (``embedding_bag``) over the
    transposed weight: 16 x H additions per board instead of 288 x H multiply-adds.
    The weight gradient ``grad.T @ one_hot`` is a dense product again (faster on CPU
    than scattering rows); the columns get no gradient. Same result as the dense
    layer up to float32 rounding (the sum is taken in a different order).
    """

    @staticmethod
    def forward(ctx: Any, columns: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(columns)
        ctx.n_inputs = weight.shape[1]
        # the rows of the embedding are the weight's columns; NumPy copies the transpose
        # faster than Tensor.contiguous() on CPU (see python -m dqnlab bench learner)
        # (on a GPU: Tensor.contiguous())
        rows = (torch.from_numpy(np.ascontiguousarray(weight.detach().numpy().T)) if weight.device.type == "cpu"
                else weight.detach().t().contiguous())
        return F.embedding_bag(columns, rows, mode="sum").add_(bias)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[None, torch.Tensor | None, torch.Tensor | None]:
        (columns,) = ctx.saved_tensors
        grad_weight = grad_bias = None
        if ctx.needs_input_grad[1]:
            one_hot = grad.new_zeros(len(columns), ctx.n_inputs).scatter_(1, columns, 1.0)
            grad_weight = grad.t().mm(one_hot)
        if ctx.needs_input_grad[2]:
            grad_bias = grad.sum(0)
        return None, grad_weight, grad_bias


_relu_backward = torch.ops.aten.threshold_backward  # grad where the ReLU's output > 0, else 0


class MLPNetwork(nn.Module):
    """Multi-layer perceptron (``TrainConfig.network = "mlp"``) mapping boards to action or afterstate values.

    Parameters
    ----------
    encoding : {"onehot", "raw"}
        ``"onehot"``: each of the 16 cells one-hot over exponents 0-17 (288 inputs);
        ``"raw"``: the 16 tile values as floats (the ``seed`` preset: the original trainer's input).
    hidden : tuple of int
        Units of each hidden ReLU layer.
    outputs : int
        4 (one Q-value per action) or 1 (an afterstate value).

    Notes
    -----
    ``forward`` takes a ``(N, 4, 4)`` uint8 tensor of exponents and returns ``(N, 4)``
    float32 Q-values, one per action (0 up, 1 right, 2 down, 3 left), or ``(N, 1)`` values.

    The parameters live in ``mlp`` (an ``nn.Sequential`` of ``Linear`` and ``ReLU``),
    but ``forward`` walks the ``Linear`` layers itself (one ``F.linear`` and an in-place
    ReLU per layer, no module-call overhead), and with the one-hot encoding and at
    least :data:`EMBEDDING_MIN_BATCH` boards it computes the first layer as an
    embedding sum. Both give the result of ``mlp(encode(boards))`` up to float32
    rounding; ``python -m dqnlab bench learner`` measures what each saves.
    """

    def __init__(self, encoding: str = "onehot", hidden: tuple[int, ...] = (256, 256), outputs: int = 4):
        super().__init__()
        if encoding not in ("onehot", "raw"):
            raise ValueError(f"encoding must be 'onehot' or 'raw', got {encoding!r}")
        self.encoding = encoding
        self._encode = _one_hot if encoding == "onehot" else _raw
        sizes = [N_CELLS * N_EXPONENTS if encoding == "onehot" else N_CELLS, *hidden]
        layers: list[nn.Module] = []
        for a, b in itertools.pairwise(sizes):
            layers += [nn.Linear(a, b), nn.ReLU()]
        layers.append(nn.Linear(sizes[-1], outputs))
        self.mlp = nn.Sequential(*layers)
        self._linears = tuple(m for m in self.mlp if isinstance(m, nn.Linear))

    def encode(self, boards: torch.Tensor) -> torch.Tensor:
        """The network's input: ``(N, 4, 4)`` uint8 -> ``(N, 288)`` one-hot or ``(N, 16)`` raw float32."""
        return self._encode(boards)

    def forward(self, boards: torch.Tensor) -> torch.Tensor:
        return self._forward(boards)

    def _forward(self, boards: torch.Tensor, inputs: list[torch.Tensor | None] | None = None) -> torch.Tensor:
        """``forward``; if ``inputs`` is a list, append each ``Linear`` layer's input to it
        (None for a one-hot first layer taken as an embedding sum), for :meth:`backprop`."""
        first, *rest = self._linears
        if self.encoding == "onehot" and len(boards) >= EMBEDDING_MIN_BATCH:
            x = _OneHotLinear.apply(_one_hot_columns(boards), first.weight, first.bias)
            encoded = None
        else:
            encoded = self._encode(boards)
            x = F.linear(encoded, first.weight, first.bias)
        if inputs is not None:
            inputs.append(encoded)
        for layer in rest:
            x = torch.relu_(x)
            if inputs is not None:
                inputs.append(x)
            x = F.linear(x, layer.weight, layer.bias)
        return x

    def backprop(self, boards: torch.Tensor, inputs: list[torch.Tensor | None], grad: torch.Tensor) -> None:
        """Set each parameter's ``.grad`` (replacing it) to the gradient of a loss whose
        gradient with respect to this network's output is ``grad``.

        Backpropagation written out for this MLP (Rumelhart, Hinton and Williams, 1986):
        per layer from the last, ``dW = grad.T @ input``, ``db = grad.sum(0)``, then
        ``grad = (grad @ W) * (input > 0)`` through the ReLU. No autograd graph is built:
        for the small matrices of DQN on a CPU that saves much of autograd's
        per-operation overhead (``bench learner`` times both), with
        the same gradient as ``loss.backward()`` up to float32 rounding.

        Parameters
        ----------
        boards : torch.Tensor
            ``(N, 4, 4)`` uint8, the boards of the forward pass.
        inputs : list
            Filled by ``_forward(boards, inputs)`` in that pass (under ``torch.no_grad``).
        grad : torch.Tensor
            ``(N, outputs)`` float32 gradient of the loss with respect to the output.
        """
        with torch.no_grad():
            for layer, x in zip(reversed(self._linears), reversed(inputs)):
                if x is None:  # the one-hot input, not built in the forward pass
                    x = _one_hot(boards)
                layer.weight.grad = grad.t().mm(x)
                layer.bias.grad = grad.sum(0)
                if layer is not self._linears[0]:
                    grad = _relu_backward(grad.mm(layer.weight), x, 0.0)



def _one_hot_planes(boards: torch.Tensor) -> torch.Tensor:
    """``(N, 4, 4)`` uint8 exponents -> ``(N, 18, 4, 4)`` float32 one-hot tile planes."""
    n = len(boards)
    return (_IDENTITY.to(boards.device).index_select(0, boards.reshape(-1).long())
            .reshape(n, 4, 4, N_EXPONENTS).permute(0, 3, 1, 2))


class CNNetwork(nn.Module):
    """Convolutional network (``TrainConfig.network = "cnn"``) on one-hot tile planes.

    Two layers of parallel 1x2 and 2x1 convolutions (``C`` channels each, ReLU): the
    first layer sees pairs of neighbouring cells in a row (``a``) or a column (``b``),
    the second applies both kernels again to each (``aa``, ``ab``, ``ba``, ``bb``), so
    the features describe the merges a move can make. All six feature maps are
    flattened and concatenated (``58 C`` features), then dense ReLU layers.

    Parameters
    ----------
    channels : int
        ``C``, channels of each convolution.
    hidden : tuple of int
        Units of each dense hidden layer.
    outputs : int
        4 (Q-values) or 1 (an afterstate value).

    Notes
    -----
    ``forward``: ``(N, 4, 4)`` uint8 exponents -> ``(N, outputs)`` float32. Trained by
    autograd (no written-out backward pass as :class:`MLPNetwork` has).
    """

    def __init__(self, channels: int = 64, hidden: tuple[int, ...] = (256,), outputs: int = 4):
        super().__init__()
        c = channels
        self.a, self.b = nn.Conv2d(N_EXPONENTS, c, (1, 2)), nn.Conv2d(N_EXPONENTS, c, (2, 1))
        self.aa, self.ab = nn.Conv2d(c, c, (1, 2)), nn.Conv2d(c, c, (2, 1))
        self.ba, self.bb = nn.Conv2d(c, c, (1, 2)), nn.Conv2d(c, c, (2, 1))
        sizes = [c * (12 + 12 + 8 + 9 + 9 + 8), *hidden]
        layers: list[nn.Module] = []
        for i, o in itertools.pairwise(sizes):
            layers += [nn.Linear(i, o), nn.ReLU()]
        layers.append(nn.Linear(sizes[-1], outputs))
        self.head = nn.Sequential(*layers)

    def forward(self, boards: torch.Tensor) -> torch.Tensor:
        """``(N, 4, 4)`` uint8 exponents -> ``(N, outputs)`` float32."""
        x = _one_hot_planes(boards)
        a, b = torch.relu(self.a(x)), torch.relu(self.b(x))
        second = (self.aa(a), self.ab(a), self.ba(b), self.bb(b))
        features = torch.cat([a.flatten(1), b.flatten(1)] + [torch.relu(m).flatten(1) for m in second], 1)
        return self.head(features)


#: Exponents above this share the entries of this one in n-tuple indices (tiles of
#: 32768 and up look alike to an n-tuple network: 4 bits a cell).
MAX_TUPLE_EXPONENT = 15
class NTupleNetwork(nn.Module):
    """N-tuple network (``TrainConfig.network = "ntuple"``): a sum of lookup-table entries.

    Tuple ``t`` is a fixed group of ``m_t`` cells with a table of ``16^m_t`` rows; a
    board selects, at each of its 8 symmetric placements ``g``, the row indexed by
    the exponents on the cells ``g(t)`` read as a base-16 number, and the network's
    output is the sum of the selected rows over tuples and placements (Szubert and
    Jaskowski 2014, "symmetric sampling": one table serves all 8 placements, so the
    value is invariant under the board's symmetries).

    Parameters
    ----------
    tuples : str or tuple of tuple of int
        A name in :data:`dqnlab.config.NTUPLE_SETS` or cell tuples (at most 6 cells each).
    outputs : int
        1: one afterstate value per board (the papers' network). 4: each row holds four
        action values; a placement's row is read in its own frame, so action ``a``
        takes column ``ACTION_PERMUTATIONS[g, a]`` and the Q-values are equivariant
        under the symmetries.
    initial_value : float
        Every board's value before training (``TrainConfig.initial_value``): each entry starts at
        ``initial_value / P``, ``P = 8 x tuples`` the entries a board reads (optimistic initialisation,
        Guei, Chen and Wu 2022).
    stages : tuple of int
        Tiles at which another set of tables takes over (``TrainConfig.stages``; Wu, Yeh et al. 2014): a
        board whose largest tile reaches ``stages[k]`` reads set ``k + 1``; the sets lie one after another
        in :attr:`weight`, :attr:`set_rows` rows each.

    Notes
    -----
    ``forward``: ``(N, 4, 4)`` uint8 exponents -> ``(N, outputs)`` float32. Indices
    are exact for exponents up to :data:`MAX_TUPLE_EXPONENT` (the tile 32768); larger
    exponents are read as 15. On the CPU the indices and (without a gradient) the values
    are the compiled core's (:mod:`dqnlab.core.ntuple`, from :attr:`placements`); on another
    device the index of a placement is one float32 product of the board's cells with a
    ``(16, P)`` matrix of powers of 16, exact because it stays below 2^24, and the values an
    ``embedding_bag`` sum (tested equal to the core's). The weights (one ``(S sum_t 16^m_t, outputs)`` parameter
    for ``S = len(stages) + 1`` stages) get **sparse** gradients: train them with plain SGD or temporal
    coherence (``TrainConfig.optimizer = "sgd"`` or ``"tc"``), which update only the rows a minibatch used.
    """

    def __init__(self, tuples: str | tuple[tuple[int, ...], ...] = "4x6", outputs: int = 1, initial_value: float = 0.0,
                 stages: tuple[int, ...] = ()):
        super().__init__()
        self.tuples = resolve_tuples(tuples)
        self.stages = tuple(stages)
        sizes = [16 ** len(t) for t in self.tuples]
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        n_place = len(self.tuples) * len(CELL_PERMUTATIONS)
        powers = np.zeros((16, n_place), dtype=np.float32)
        offsets = np.zeros(n_place, dtype=np.int64)
        columns = np.zeros((n_place, 4), dtype=np.int64)
        p = 0
        for t, cells in enumerate(self.tuples):
            for g, perm in enumerate(CELL_PERMUTATIONS):
                for k, cell in enumerate(cells):
                    powers[perm[cell], p] = 16.0 ** k
                offsets[p], columns[p] = starts[t], ACTION_PERMUTATIONS[g]
                p += 1
        # The same network for the compiled core (dqnlab.core.ntuple): the tuples as runs of cells, their tables' rows
        stage_exps = tuple(int(t).bit_length() - 1 for t in self.stages)
        self.placements = core_ntuple.layout(self.tuples, starts, stage_exps)
        self.placement_columns = columns.copy()
        self.register_buffer("powers", torch.from_numpy(powers), persistent=False)
        self.register_buffer("offsets", torch.from_numpy(offsets), persistent=False)
        self.register_buffer("columns", torch.from_numpy(columns), persistent=False)
        self.register_buffer("stage_exps", torch.tensor(stage_exps, dtype=torch.uint8), persistent=False)
        self.set_rows = int(sum(sizes))
        self.outputs = outputs
        # (on huge pages where the OS offers them: the tables are read at random, dqnlab.core.memory)
        table = core_memory.zeros((self.set_rows * (len(stage_exps) + 1), outputs))
        if initial_value:
            table.fill(np.float32(initial_value / n_place))
        self.weight = nn.Parameter(torch.from_numpy(table))

    def indices(self, boards: torch.Tensor) -> torch.Tensor:
        """``(N, 4, 4)`` uint8 -> ``(N, P)`` int64 rows of :attr:`weight`, ``P = 8 x tuples``: on the CPU by
        the compiled core's shifts and masks, on another device as a float32 product with powers of 16."""
        if boards.device.type == "cpu":
            out = np.empty((len(boards), core_ntuple.placements(self.placements)), np.int64)
            core_ntuple.feature_batch(boards.reshape(len(boards), 16).numpy(), self.placements, out)
            return torch.from_numpy(out)
        return self.tensor_indices(boards)

    def tensor_indices(self, boards: torch.Tensor) -> torch.Tensor:
        """:meth:`indices` in tensor operations, on any device (a GPU's path; tested equal to the core's)."""
        cells = boards.reshape(len(boards), 16).clamp(max=MAX_TUPLE_EXPONENT)
        idx = cells.float().mm(self.powers).long().add_(self.offsets)
        if len(self.stage_exps):  # each board in its stage's tables
            stage = (cells.amax(1, keepdim=True) >= self.stage_exps).sum(1, keepdim=True)
            idx.add_(stage * self.set_rows)
        return idx

    def forward(self, boards: torch.Tensor) -> torch.Tensor:
        """``(N, 4, 4)`` uint8 exponents -> ``(N, outputs)`` float32: the sum of the rows read."""
        return self._forward(boards)

    def _forward(self, boards: torch.Tensor, inputs: list[torch.Tensor] | None = None) -> torch.Tensor:
        """``forward``; if ``inputs`` is a list, append the ``(N, P)`` indices to it, for :meth:`backprop`.
        Without a gradient to build, on the CPU: the compiled core's features and sums."""
        needs_grad = torch.is_grad_enabled() and self.weight.requires_grad
        cpu = boards.device.type == "cpu"
        if cpu and not needs_grad and inputs is None:
            out = np.empty((len(boards), self.outputs), np.float32)
            core_ntuple.values(np.ascontiguousarray(boards.reshape(len(boards), 16).numpy()),
                               self.weight.detach().numpy(), self.placements, self.placement_columns, out)
            return torch.from_numpy(out)
        idx = self.indices(boards)
        if inputs is not None:
            inputs.append(idx)
        if cpu and not needs_grad:
            out = np.empty((len(boards), self.outputs), np.float32)
            core_ntuple.gather_batch(self.weight.detach().numpy(), idx.numpy(), self.placement_columns, out)
            return torch.from_numpy(out)
        if self.outputs == 1:
            return F.embedding_bag(idx, self.weight, mode="sum", sparse=True)
        rows = F.embedding(idx, self.weight, sparse=True)  # (N, P, 4), each in its placement's frame
        return rows.gather(2, self.columns.expand(len(idx), -1, -1)).sum(1)

    def backprop(self, boards: torch.Tensor, inputs: list[torch.Tensor], grad: torch.Tensor) -> None:
        """Set ``weight.grad`` (replacing it) to the sparse gradient of a loss whose gradient
        with respect to this network's output is ``grad`` ``(N, outputs)`` float32.

        Each row a board used gets the board's output gradient (read through the
        placement's action permutation when ``outputs == 4``): an uncoalesced sparse COO
        tensor of ``N x P`` rows, the same as autograd's (tested), without building a graph.
        ``inputs``: filled by ``_forward(boards, inputs)`` under ``torch.no_grad``.
        """
        (idx,) = inputs
        n, p = idx.shape
        if self.outputs == 1:
            values = grad.reshape(n, 1).expand(n, p).reshape(n * p, 1)
        else:  # row p's column columns[p, a] gets grad[:, a]
            values = grad.new_zeros(n, p, self.outputs).scatter_(2, self.columns.expand(n, -1, -1),
                                                                 grad[:, None, :].expand(n, p, self.outputs))
            values = values.reshape(n * p, self.outputs)
        self.weight.grad = torch.sparse_coo_tensor(idx.reshape(1, -1), values, self.weight.shape,
                                                   check_invariants=False)

    def _load_from_state_dict(self, state_dict: dict[str, Any], prefix: str, *args: Any, **kwargs: Any) -> None:
        """``load_state_dict`` also takes the table as a sparse tensor (a run directory's ``model.pt`` stores a
        young, mostly-zero table so: :func:`dqnlab.runtime.compact.saved_tensor`)."""
        key = prefix + "weight"
        if key in state_dict and state_dict[key].is_sparse:  # (load_state_dict passes its own copy of the dict)
            state_dict[key] = state_dict[key].to_dense()
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)


#: ``TrainConfig.network`` choices.
NETWORKS = ("mlp", "cnn", "ntuple")


def make_network(config: Any, outputs: int) -> nn.Module:
    """The network a :class:`~dqnlab.TrainConfig` asks for, with ``outputs`` values per board (4 or 1).

    Raises
    ------
    ValueError
        For an unknown ``config.network`` (a validated TrainConfig never has one).
    """
    if config.network == "mlp":
        return MLPNetwork(config.encoding, config.hidden, outputs)
    if config.network == "cnn":
        return CNNetwork(config.channels, config.hidden, outputs)
    if config.network == "ntuple":
        return NTupleNetwork(config.ntuples, outputs, config.initial_value, config.stages)
    raise ValueError(f"network must be one of {NETWORKS}, got {config.network!r}")
