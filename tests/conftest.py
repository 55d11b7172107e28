"""Shared fixtures: tiny configs so every test runs in seconds."""

import gc
import logging
import os
import signal
from pathlib import Path

import matplotlib
import numpy as np
import pytest
import torch

matplotlib.use("Agg")
# Tests run beside other work on 2 cores; one intra-op thread avoids OpenMP spin contention.
torch.set_num_threads(1)

from dqnlab import DQNAgent, TrainConfig, train

#: The test files that take longest (on the 2-core CI machine, -n 2), longest first; every other file follows them
#: in pytest's order. pytest-xdist's ``--dist loadfile`` hands whole files to its workers in the order collected
#: (``pytest_configure`` turns off its own reordering, which puts the files of many tests first and so left these,
#: which have few, to the end): the long files start first and the short ones fill in at the end, rather than one
#: worker starting a long file as the other runs out of files. The notebooks' two files are apart, so that
#: the workers do not both start with notebooks (each starts a kernel and two worker processes).
SLOW_FILES_FIRST = (
    "experiments/test_notebooks.py",
    "parallel/test_cluster.py",
    "experiments/test_notebooks_later.py",
    "test_learning.py",
    "runtime/test_checkpoint.py",
    "test_cli.py",
    "parallel/test_dask.py",
    "schemes/test_schemes.py",
    "ui/test_panels.py",
    "parallel/test_faults.py",
    "schemes/test_actors.py",
    "parallel/test_allreduce.py",
    "experiments/test_reproduce.py",
    "runtime/test_tensorboard.py",
    "schemes/test_shared_prioritized.py",
    "schemes/test_train.py",
    "test_prioritized.py",
    "schemes/test_independent.py",
    "parallel/test_rounds.py",
    "bench/test_bench_learning.py",
)
_TESTS = Path(__file__).resolve().parent


def pytest_configure(config):
    if hasattr(config.option, "loadscopereorder"):  # pytest-xdist: keep the order of pytest_collection_modifyitems
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(session, config, items):
    rank = {name: i for i, name in enumerate(SLOW_FILES_FIRST)}

    def file_rank(item):
        try:
            return rank.get(item.path.resolve().relative_to(_TESTS).as_posix(), len(rank))
        except ValueError:  # a test outside tests/
            return len(rank)

    items.sort(key=file_rank)  # (stable: the order within a file and among the other files is pytest's)


@pytest.fixture(autouse=True)
def _long_lived_objects_frozen():
    """Every object alive as a test starts (the modules the suite has imported, module fixtures) goes to the
    garbage collector's permanent generation, after a collection of what the tests before left.

    ``dqnlab.train`` ends with a full ``gc.collect()`` (a run's reference cycles, its tables among them, are freed
    at once), and a full collection walks every object the process tracks and has not frozen: in a test process,
    which has imported every module the suite uses, that walk costs every run far more than the run's own
    objects do.
    What a test makes is not frozen, so its runs' cycles are freed as before (tests/schemes/test_train.py checks
    it); what it leaves alive stays frozen (a little memory, should it later become garbage in a cycle).
    """
    gc.collect()
    gc.freeze()
    yield


@pytest.fixture
def python_sigint():
    """Python's own Ctrl-C handler (KeyboardInterrupt) for the test, restored after.

    A test that presses Ctrl-C needs it: a background job of a non-interactive shell
    (``pytest ... &``) starts with SIGINT ignored, and dqnlab rightly leaves an ignored
    SIGINT ignored.
    """
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.fixture
def tiny_config() -> TrainConfig:
    """A config that trains a small network for a few thousand env steps."""
    return TrainConfig(total_env_steps=2_000, n_envs=8, buffer_size=2_000, batch_size=32,
                       learning_starts=200, replay_ratio=8.0, hidden=(32,), target_update=50,
                       epsilon_decay_steps=1_000, seed=0)


@pytest.fixture
def cfg() -> TrainConfig:
    """The parallel schemes' tests' config: 3,000 env steps of a 32-unit network."""
    return TrainConfig(total_env_steps=3_000, n_envs=8, buffer_size=2_000, batch_size=32,
                       learning_starts=200, replay_ratio=8.0, hidden=(32,), target_update=50,
                       epsilon_decay_steps=1_000, seed=0)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """``(run directory, RunResult)`` of a short mlp run."""
    config = TrainConfig.preset("mlp", total_env_steps=2_000, n_envs=16, learning_starts=256, buffer_size=2_000,
                                batch_size=32, seed=0)
    run = train("serial", config, progress=False)
    return run.save(tmp_path_factory.mktemp("run")), run


@pytest.fixture(scope="module")
def ntuple_agent():
    """An n-tuple afterstate agent (``ntuple-small``, 17x4 tuples) with random weights in [-1, 1): a player
    whose moves search can change."""
    agent = DQNAgent(TrainConfig.preset("ntuple-small", seed=0), seed=0)
    w = agent.online.weight.detach().numpy()
    w[:] = np.random.default_rng(0).uniform(-1, 1, w.shape).astype(np.float32)
    return agent


@pytest.fixture
def small_run(cfg, tmp_path):
    train("serial", cfg.replace(total_env_steps=400), progress=False, run_dir=tmp_path / "run")
    return tmp_path / "run"


@pytest.fixture(scope="module")
def dask_cluster():
    """A running scheduler with two one-thread worker processes, and their pids (skipped without dask)."""
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                  dashboard_address=None, silence_logs=logging.ERROR) as lc, \
            distributed.Client(lc, set_as_default=False) as client:
        pids = set(client.run(os.getpid).values())
        yield lc.scheduler_address, client, pids
