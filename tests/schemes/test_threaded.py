"""``sharded`` and ``averaged`` on threads of one process over the compiled core (:mod:`dqnlab.core.team`):
sharing each minibatch, the run is serial's update for update; averaging, each member steps its own table and
the averages make them equal."""

from __future__ import annotations

import numpy as np
import pytest

import dqnlab
from dqnlab import TrainConfig


def _config(**changes):
    return TrainConfig.preset("ntuple-small", **{"n_envs": 16, "buffer_size": 64, "batch_size": 13,
                                                 "learning_starts": 64, "total_env_steps": 6_400, "seed": 3, **changes})


@pytest.mark.parametrize("workers", [2, 3])
@pytest.mark.parametrize("changes", [{}, {"n_step": 1, "optimizer": "sgd", "lr": 0.01}, {"target_update": 50, "optimizer": "sgd", "lr": 0.005}],
                         ids=["tc-2step", "sgd-1step", "target"])
def test_threads_share_every_update_and_the_run_is_serials(workers, changes):
    """The helpers compute the rows and targets of their shares of each minibatch; the learner applies them
    as one step: the same weights, games and counters as serial's, whatever the number of threads."""
    config = _config(**changes)
    serial = dqnlab.train("serial", config, progress=False)
    sharded = dqnlab.train("sharded", config, workers=workers, progress=False)
    assert sharded.options["comm"] == "threads" and sharded.workers == workers
    assert sharded.updates == serial.updates > 50 and sharded.env_steps == serial.env_steps
    for name, w in serial.weights.items():
        np.testing.assert_array_equal(sharded.weights[name], w)
    np.testing.assert_array_equal(sharded.episodes["score"], serial.episodes["score"])


def test_auto_takes_threads_on_the_compiled_core_and_allreduce_elsewhere(cfg):
    from dqnlab.schemes import sharded

    assert sharded.Options().comm == "auto"
    with pytest.raises(ValueError, match="comm='threads' runs on the compiled core.*comm='allreduce'"):
        dqnlab.train("sharded", cfg, workers=2, progress=False, comm="threads")


def test_the_helpers_end_with_the_run():
    """A run stopped early (here by its callback) leaves no helper thread behind."""
    import threading

    config = _config(total_env_steps=None, max_seconds=60.0, optimizer="sgd", lr=0.005)
    run = dqnlab.train("sharded", config, workers=2, progress=False, callback=lambda r: r.env_steps > 2_000)
    assert run.status == "stopped" and run.updates > 0
    assert not [t for t in threading.enumerate() if t.name.startswith("dqnlab-sharded")]


def test_a_diverged_update_ends_the_team_as_serials_ends():
    """A non-finite loss: no step anywhere, the helpers released, the same error as serial's at the same
    update."""
    import threading

    from dqnlab.runtime.errors import DivergedError

    config = _config(optimizer="sgd", lr=50.0)
    with pytest.raises(DivergedError) as serial:
        dqnlab.train("serial", config, progress=False)
    with pytest.raises(DivergedError) as sharded:
        dqnlab.train("sharded", config, workers=2, progress=False)
    assert str(sharded.value).replace("sharded", "serial") == str(serial.value)
    assert sharded.value.partial.updates == serial.value.partial.updates
    assert not [t for t in threading.enumerate() if t.name.startswith("dqnlab-sharded")]


def test_averaged_threads_with_one_member_are_serial():
    config = _config()
    serial = dqnlab.train("serial", config, progress=False)
    one = dqnlab.train("averaged", config, workers=1, progress=False, comm="threads")
    for name, w in serial.weights.items():
        np.testing.assert_array_equal(one.weights[name], w)


@pytest.mark.parametrize("every", [1, 3])
def test_each_member_steps_its_own_table_and_every_average_makes_them_one(every):
    """Between averages the members' tables differ on the rows their own steps changed (logged), and only
    there; an average sets those rows to the members' mean; the run's model is that mean."""
    import threading

    from dqnlab.runtime.learner import Learner

    config = _config(total_env_steps=10**9)
    learner = Learner(config)
    native = learner.native
    helpers = [threading.Thread(target=body) for body in native.team_up(3, average_every=every)]
    for t in helpers:
        t.start()
    try:
        learner.run(30 * config.n_envs)
        for _ in range(100):  # until the updates stop between two averages (or at one, with every=1)
            if every == 1 or learner.agent.updates % every:
                break
            learner.run(config.n_envs)
    finally:
        native.disband()
        for t in helpers:
            t.join(30)
    tables, _, logs, logged, *_ = native.crew
    assert learner.agent.updates > 20 and native.averages == learner.agent.updates // every
    pending = np.unique(np.concatenate([logs[k, :logged[k]].ravel() for k in range(3)]))
    others = np.setdiff1d(np.arange(tables.shape[1]), pending)
    for k in (1, 2):
        np.testing.assert_array_equal(tables[k, others], tables[0, others])
    assert (len(pending) > 0) == (every > 1)
    if every > 1:
        assert not np.array_equal(tables[1, pending], tables[0, pending])
    assert np.shares_memory(learner.agent.online.weight.detach().numpy(), tables[0])  # the learner acts with member 0's
    model = native.team_weights(learner.agent.get_weights())["weight"].reshape(-1)
    np.testing.assert_allclose(model[pending], tables[:, pending].mean(axis=0), rtol=1e-6)
    np.testing.assert_array_equal(model[others], tables[0, others])



def test_members_averaging_every_update_read_the_learners_table_after_it_and_the_run_repeats():
    """Averaging every update, the members read the learner's table (every table equals it when an update
    opens) and the learner steps its own only once they all have: two runs give the same bits, and each member's
    table ends equal to the learner's."""
    config = _config(total_env_steps=12_800)
    runs = [dqnlab.train("averaged", config, workers=3, progress=False, comm="threads") for _ in range(2)]
    assert runs[0].extra["averages"] == runs[0].updates > 100
    for name, w in runs[0].weights.items():
        np.testing.assert_array_equal(runs[1].weights[name], w)



@pytest.mark.parametrize("scheme", ["sharded", "averaged"])
def test_a_fault_injected_into_a_team_of_threads_is_refused(scheme):
    """A team's members are threads, not worker tasks: an injected fault would never fire, so the run refuses."""
    from dqnlab.parallel.faults import inject

    with pytest.raises(ValueError, match="fault is injected into a worker task"), inject({"worker": 1}):
        dqnlab.train(scheme, _config(), workers=2, progress=False, comm="threads")


# ----------------------------------------------------------------------------- workers as threads or processes
@pytest.mark.parametrize("scheme", ["shared", "independent", "actors"])
def test_long_lived_workers_are_threads_on_the_compiled_core_and_processes_elsewhere(cfg, scheme):
    """``threads`` left out: the n-tuple presets' workers are threads of this process, a PyTorch network's are
    processes; given, it is obeyed. The run records which."""
    import os

    ntuple = _config(total_env_steps=3_200)
    for config, threads, expected in [(ntuple, None, True), (cfg, None, False), (ntuple, False, False)]:
        run = dqnlab.train(scheme, config, workers=2, progress=False, threads=threads)
        assert run.options["threads"] is expected and run.status == "completed"
        pids = {w["pid"] for w in run.extra["per_worker"]}
        assert (pids == {os.getpid()}) is expected, pids
        assert run.env_steps >= config.total_env_steps and run.updates > 0


@pytest.mark.parametrize("scheme", ["independent", "actors"])
def test_threads_are_refused_on_a_dask_cluster(cfg, scheme):
    pytest.importorskip("distributed")
    with pytest.raises(ValueError, match="threads=True runs the workers in this process"):
        dqnlab.train(scheme, _config(), workers=2, progress=False, backend="dask", threads=True)
