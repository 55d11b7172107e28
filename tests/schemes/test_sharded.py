"""``sharded`` on threads: helper threads share every update, and the learner's run is serial's, update for
update."""

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
