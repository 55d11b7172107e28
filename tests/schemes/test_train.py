import json
import math
import time

import numpy as np
import pandas as pd
import pytest

import dqnlab
from dqnlab import RunResult, TrainConfig, evaluate, train
from dqnlab.runtime.results import EPISODE_COLUMNS


def test_serial_run_accounts_for_every_step_and_update(tiny_config):
    run = train("serial", tiny_config, progress=False)
    c = tiny_config
    assert run.status == "completed"
    assert run.env_steps == c.total_env_steps  # 2000 is a multiple of n_envs
    expected_updates = (run.env_steps - c.learning_starts) * c.replay_ratio / c.batch_size
    assert abs(run.updates - expected_updates) <= c.n_envs * c.updates_per_env_step + 1
    assert list(run.episodes.columns) == list(EPISODE_COLUMNS)
    assert len(run.episodes) > 0
    assert (run.episodes["score"] >= 0).all() and run.episodes["wall_time_s"].is_monotonic_increasing
    assert run.episodes["env_steps"].max() <= run.env_steps
    assert set(run.time_split) == {"acting", "learning", "communication"}
    assert 0 < run.time_split["acting"] + run.time_split["learning"] <= run.wall_time_s * 1.05
    assert run.history["env_steps"].is_monotonic_increasing and run.history["env_steps"].iloc[-1] == run.env_steps
    # max_tile is a tile value, consistent with the score
    assert set(np.log2(run.episodes["max_tile"])) <= set(range(1, 18))


@pytest.mark.parametrize("scheme,workers,options", [("serial", 1, {}), ("shared", 2, {"threads": True})])
def test_a_finished_run_frees_its_networks_at_once(scheme, workers, options, monkeypatch):
    """The tables of a run that has returned are freed then, not at the cycle collector's next full pass (the
    learner, its loop and the loop's snapshot closure refer to each other): with automatic collection off, no
    network the run made is alive after train() returns."""
    import gc
    import weakref

    import dqnlab.agent.dqn as dqn_module

    made = []
    real = dqn_module.make_network

    def recorded(*a, **k):
        net = real(*a, **k)
        made.append(weakref.ref(net))
        return net

    monkeypatch.setattr(dqn_module, "make_network", recorded)  # (every agent's networks are made there)
    config = TrainConfig.preset("ntuple-small", total_env_steps=600, n_envs=8, buffer_size=500, batch_size=16,
                                learning_starts=64)
    gc.collect()
    gc.disable()
    try:
        run = train(scheme, config, workers=workers, progress=False, **options)
        assert made and run.updates > 0
        assert [ref for ref in made if ref() is not None] == []
    finally:
        gc.enable()


def test_serial_is_deterministic_for_a_seed(tiny_config):
    a = train("serial", tiny_config, progress=False)
    b = train("serial", tiny_config, progress=False)
    c = train("serial", tiny_config.replace(seed=1), progress=False)
    assert a.episodes["score"].tolist() == b.episodes["score"].tolist()
    assert all(np.array_equal(a.weights[k], b.weights[k]) for k in a.weights)
    assert a.episodes["score"].tolist() != c.episodes["score"].tolist()


def test_time_budget_ends_the_run(tiny_config):
    run = train("serial", tiny_config.replace(total_env_steps=None, max_seconds=1.0), progress=False)
    assert run.status == "completed" and 0.9 < run.wall_time_s < 3.0


def test_callback_stops_and_keeps_data(tiny_config):
    seen = []

    def cb(snapshot):
        seen.append(snapshot.env_steps)
        return True

    run = train("serial", tiny_config.replace(total_env_steps=10**7), progress=False, callback=cb)
    assert run.status == "stopped" and len(seen) == 1 and run.env_steps >= seen[0] > 0


def test_a_callback_with_due_is_called_and_given_a_snapshot_only_when_due(tiny_config):
    asked, seen = [], []

    class Late:
        def due(self, elapsed_s):
            asked.append(elapsed_s)
            return elapsed_s >= 1.5

        def __call__(self, snapshot):
            seen.append(snapshot.wall_time_s)

    run = train("serial", tiny_config.replace(total_env_steps=None, max_seconds=3.5), progress=False, callback=Late())
    assert run.status == "completed" and len(asked) >= 3 and asked == sorted(asked)
    assert seen and all(t >= 1.5 for t in seen) and len(seen) == sum(t >= 1.5 for t in asked)


def test_keyboard_interrupt_keeps_what_was_gathered(tiny_config):
    def cb(snapshot):
        if snapshot.env_steps > 0:
            raise KeyboardInterrupt

    run = train("serial", tiny_config.replace(total_env_steps=10**7), progress=False, callback=cb)
    assert run.status == "interrupted" and run.env_steps > 0 and run.weights


@pytest.mark.parametrize("kwargs,match", [
    (dict(scheme="tabular"), "scheme must be one of"),
    (dict(workers=0), "workers must be an integer >= 1"),
    (dict(sync="periodic"), "does not take option"),
    (dict(config={"batch_size": 3}), "config must be a TrainConfig"),
])
def test_train_rejects_bad_input(kwargs, match, tiny_config):
    args = {"scheme": "serial", "config": tiny_config, **kwargs}
    with pytest.raises(ValueError, match=match):
        train(args.pop("scheme"), args.pop("config"), progress=False, **args)


def test_save_load_round_trip(tmp_path, tiny_config):
    run = train("serial", tiny_config, progress=False)
    run.save(tmp_path / "r")
    back = RunResult.load(tmp_path / "r")
    assert back.config == run.config and back.env_steps == run.env_steps and back.status == run.status
    pd.testing.assert_frame_equal(back.episodes, run.episodes, check_dtype=False)
    assert all(np.array_equal(back.weights[k], run.weights[k]) for k in run.weights)
    s = json.loads((tmp_path / "r" / "summary.json").read_text())
    for key in ("scheme", "workers", "env_steps", "updates", "episodes", "wall_time_s", "env_steps_per_s",
                "updates_per_s", "time_split", "score_mean", "score_max"):
        assert key in s
    assert not list((tmp_path / "r").glob("*.tmp"))
    fig = back.plot()
    assert len(fig.axes) >= 3


def test_load_rejects_what_is_not_a_run(tmp_path, tiny_config):
    with pytest.raises(ValueError, match="not a dqnlab run"):
        RunResult.load(tmp_path)
    run = train("serial", tiny_config.replace(total_env_steps=200), progress=False)
    run.save(tmp_path / "r")
    s = json.loads((tmp_path / "r" / "summary.json").read_text())
    s["format_version"] = 999
    (tmp_path / "r" / "summary.json").write_text(json.dumps(s))
    with pytest.raises(ValueError, match="format_version"):
        RunResult.load(tmp_path / "r")


def test_reference_policies_rank_as_published():
    random = evaluate("random", games=150, seed=0).summary()
    corner = evaluate("corner", games=150, seed=0).summary()
    assert 800 < random["score_mean"] < 1500  # about 1,100 in public results
    assert corner["score_mean"] > 1.5 * random["score_mean"]  # about 2,500
    assert sum(random["max_tile_counts"].values()) == 150
    assert random["reach_2048"] == 0.0


def test_evaluate_greedy_agent_is_reproducible(tiny_config):
    run = train("serial", tiny_config.replace(total_env_steps=400), progress=False)
    a, b = evaluate(run, games=20, seed=3), evaluate(run.weights, games=20, seed=3, config=run.config)
    assert np.array_equal(a.scores, b.scores) and len(a.scores) == 20
    s = a.summary()
    assert s["reach_2048"] <= s["reach_1024"] <= s["reach_512"]
    with pytest.raises(ValueError, match="games must be"):
        evaluate("random", games=0)
    with pytest.raises(ValueError, match="policy must be one of"):
        evaluate("greedy-ish")


def test_public_api_is_documented():
    for name in dqnlab.__all__:
        obj = getattr(dqnlab, name)
        if callable(obj):
            assert obj.__doc__ and len(obj.__doc__) > 40, name
    assert math.isfinite(TrainConfig().updates_per_env_step)


def test_episode_table_has_its_dtypes_even_when_empty(tiny_config):
    run = train("serial", tiny_config.replace(total_env_steps=8), progress=False)  # one move: no game ends
    assert len(run.episodes) == 0
    assert run.episodes["score"].dtype == np.int64 and run.episodes["loss"].dtype == np.float64


def test_stored_next_masks_are_the_legal_moves_of_next_boards(tiny_config):
    from dqnlab.game import legal_actions_batch
    from dqnlab.runtime.learner import Learner

    learner = Learner(tiny_config.replace(max_moves=20))  # truncations as well as game overs
    for _ in range(200):
        learner.act_step()
    a = learner.buffer.arrays
    n = len(learner.buffer)
    assert np.array_equal(a["next_masks"][:n], legal_actions_batch(a["next_boards"][:n]))
    assert a["dones"][:n].any() or len(learner.episodes) > 0


def test_a_learner_state_copies_the_agent_unless_it_is_serialised_at_once(tiny_config):
    from dqnlab.runtime.learner import Learner

    learner = Learner(tiny_config)
    live = dict(learner.agent.online.named_parameters())
    for copy_agent, shared in ((True, False), (False, True)):
        online = learner.state_dict(copy_agent=copy_agent)["agent"]["online"]
        assert all((online[n].data_ptr() == p.data_ptr()) is shared for n, p in live.items())


def test_a_learner_on_the_compiled_core_sees_ctrl_c_within_a_slice(monkeypatch):
    """Ctrl-C pressed in a run: :meth:`Learner.run` returns after the call of the compiled core under way, which
    lasts :data:`~dqnlab.runtime.learner.SLICE_S` at most, rather than at the run's next report."""
    from dqnlab.runtime import learner as learner_module
    from dqnlab.runtime.learner import Learner

    config = TrainConfig.preset("ntuple-small", n_envs=16, learning_starts=0, total_env_steps=10**9)
    learner = Learner(config)
    assert learner.native is not None
    pressed = [False]
    monkeypatch.setattr(learner_module, "ctrl_c_pressed", lambda: pressed[0])
    calls = []
    advance = learner.advance

    def one_slice(env_steps, deadline=None, update_limit=None):
        calls.append(deadline - time.perf_counter())
        pressed[0] = True  # (pressed while this call runs)
        return advance(env_steps, deadline, update_limit)

    monkeypatch.setattr(learner, "advance", one_slice)
    learner.run(10**9)  # no deadline: only Ctrl-C ends it
    assert len(calls) == 1 and 0 < calls[0] <= learner_module.SLICE_S and learner.env_steps > 0
