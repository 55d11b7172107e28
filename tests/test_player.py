"""Watching a player (play, animate, the GIF, `python -m dqnlab play`), loading a trained one (load_player,
model.pt), and the figure of an evaluation."""

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from dqnlab import (
    DQNAgent,
    Player,
    RecordedGame,
    RunResult,
    TrainConfig,
    VecGame2048,
    evaluate,
    is_game_over,
    load_player,
    move,
    play,
)
from dqnlab.agent.networks import make_network
from dqnlab.game import legal_actions_batch
from dqnlab.plots import animate
from dqnlab.runtime.results import episodes_frame

ROOT = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------------------------------ play
def test_a_recorded_game_replays_through_the_rules(trained):
    game = play(trained[1], seed=3)
    assert isinstance(game, RecordedGame)
    n = game.moves
    assert game.boards.shape == (n + 1, 4, 4) and game.boards.dtype == np.uint8
    assert game.actions.shape == game.rewards.shape == (n,) and game.actions.dtype == game.rewards.dtype == np.int64
    assert game.q_values.shape == (n, 4) and game.q_values.dtype == np.float32
    for t in range(n):
        after, points, changed = move(game.boards[t], game.actions[t])
        assert changed and points == game.rewards[t]
        spawned = game.boards[t + 1] != after  # one new 2 or 4 on an empty cell
        assert spawned.sum() == 1 and after[spawned][0] == 0 and game.boards[t + 1][spawned][0] in (1, 2)
    assert is_game_over(game.boards[-1]) and not game.truncated
    assert game.score == game.scores[-1] == game.rewards.sum() > 0
    assert game.max_tile == 2 ** int(game.boards[-1].max())
    # greedy over legal moves: NaN exactly for the illegal ones, the largest Q played
    np.testing.assert_array_equal(np.isfinite(game.q_values), legal_actions_batch(game.boards[:-1]))
    np.testing.assert_array_equal(np.nanargmax(game.q_values, axis=1), game.actions)
    # the same spawns: the moves played again in the seeded game give the same boards
    env = VecGame2048(1, seed=game.seed)
    boards = [env.reset()[0]] + [env.step([a]).next_boards[0] for a in game.actions]
    np.testing.assert_array_equal(np.stack(boards), game.boards)


@pytest.mark.parametrize("which", ["run", "random", "corner"])
def test_play_is_the_first_game_of_evaluate(trained, which):
    policy = trained[1] if which == "run" else which
    game = play(policy, seed=5)
    ev = evaluate(policy, games=1, seed=5)
    assert (game.score, game.moves, game.max_tile) == (ev.scores[0], ev.moves[0], ev.max_tiles[0])
    assert np.isnan(game.q_values).all() == (which != "run")


def test_max_moves_stops_the_game_and_text_shows_each_board():
    game = play("corner", seed=0, max_moves=7)
    assert game.moves == 7 and game.truncated
    assert game.text(0).startswith("start, score 0")
    assert game.text(7).startswith(f"move 7/7: {('up', 'right', 'down', 'left')[game.actions[6]]} +")
    assert game.text(7).splitlines()[0].endswith("stopped (max_moves)") and len(game.text(7).splitlines()) == 5
    with pytest.raises(IndexError):
        game.text(8)
    with pytest.raises(ValueError, match="max_moves must be"):
        play("corner", max_moves=0)
    with pytest.raises(ValueError, match="seed must be an integer >= 0"):
        play("corner", seed=-1)


def test_frames_subsample_a_long_game():
    game = play("corner", seed=0, max_moves=12)
    assert game.frames().tolist() == list(range(13))
    assert game.frames(5).tolist() == [0, 5, 10, 12]
    for cap in (2, 3, 4, 12):
        shown = game.frames(max_frames=cap)
        assert len(shown) <= cap and shown[0] == 0 and shown[-1] == 12
    with pytest.raises(ValueError, match="every must be an integer >= 1"):
        game.frames(0)
    with pytest.raises(ValueError, match="max_frames must be an integer >= 2"):
        game.frames(max_frames=1)


# ------------------------------------------------------------------------------------------ the player
def test_load_player_plays_the_runs_greedy_moves(trained):
    directory, run = trained
    player = load_player(directory)
    game = play(run, seed=2)  # the run's own weights, greedy, as evaluate plays them
    boards = game.boards[:-1]
    np.testing.assert_array_equal(player.act(boards), game.actions)
    agent = DQNAgent(run.config)
    agent.set_weights(run.weights)
    greedy = np.where(legal_actions_batch(boards), agent.q_values(boards), -np.inf).argmax(axis=1)
    np.testing.assert_array_equal(greedy, game.actions)
    np.testing.assert_array_equal(evaluate(player, games=8, seed=1).scores, evaluate(run, games=8, seed=1).scores)
    assert load_player(player) is player and isinstance(load_player(run), Player)


def test_q_values_and_predict_take_the_usual_observations(trained):
    player = load_player(trained[0])
    boards = play("random", seed=4, max_moves=30).boards
    q = player.q_values(boards)
    assert q.shape == (len(boards), 4) and q.dtype == np.float32
    np.testing.assert_array_equal(np.isfinite(q), legal_actions_batch(boards))
    actions = player.act(boards)
    assert actions.shape == (len(boards),) and actions.dtype == np.int64
    one, state = player.predict(boards[0], deterministic=True)
    assert state is None and np.shape(one) == () and one == actions[0]
    np.testing.assert_array_equal(player.predict(boards, deterministic=True)[0], actions)
    one_hot = np.eye(16, dtype=np.uint8)[boards]  # gymnasium-2048's (4, 4, 16) observation
    np.testing.assert_array_equal(player.predict(one_hot, deterministic=True)[0], actions)
    assert player.predict(one_hot[0], deterministic=True)[0] == actions[0]


def test_predict_explores_among_legal_moves_like_sb3(trained):
    run = trained[1]
    agent = DQNAgent(run.config.replace(epsilon_end=1.0))
    agent.set_weights(run.weights)
    boards = play("random", seed=4, max_moves=60).boards
    explored, _ = Player(agent, seed=0).predict(boards)  # SB3's default: deterministic=False
    assert legal_actions_batch(boards)[np.arange(len(boards)), explored].all()
    assert (explored != Player(agent).act(boards)).any()


def test_bad_boards_and_sources_are_clear_errors(trained, tmp_path):
    player = load_player(trained[0])
    with pytest.raises(ValueError, match=r"boards must have shape \(N, 4, 4\)"):
        player.act(np.zeros((4, 4), np.uint8))
    with pytest.raises(ValueError, match="observation must be"):
        player.predict(np.zeros((3, 3), np.uint8))
    with pytest.raises(ValueError, match="one-hot"):
        player.predict(np.ones((4, 4, 16), np.uint8))
    with pytest.raises(ValueError, match="no directory"):
        load_player(tmp_path / "nope")
    with pytest.raises(ValueError, match="not a dqnlab run directory"):
        load_player(tmp_path)
    with pytest.raises(ValueError, match="cannot load a player from a float"):
        load_player(3.5)


# ------------------------------------------------------------------------------------------ model.pt
def test_model_pt_loads_weights_only_and_gives_the_same_q_values(trained):
    directory, run = trained
    net = make_network(run.config, 4)
    net.load_state_dict(torch.load(directory / "model.pt", weights_only=True))
    boards = play("random", seed=1, max_moves=20).boards
    with torch.no_grad():
        q = net(torch.from_numpy(boards)).numpy()
    np.testing.assert_array_equal(np.where(legal_actions_batch(boards), q, np.nan),
                                  load_player(directory).q_values(boards))


def test_model_pt_is_the_one_copy_of_the_weights(trained, tmp_path):
    run = trained[1]
    dataclasses.replace(run, status="running").save(tmp_path)  # a periodic checkpoint's files
    assert (tmp_path / "model.pt").is_file() and not (tmp_path / "weights.npz").exists()


def test_a_young_n_tuple_table_is_stored_by_its_non_zero_rows_and_loads_as_a_state_dict(tmp_path):
    from dqnlab.runtime.compact import SPARSE_MIN_SIZE

    config = TrainConfig.preset("ntuple-small")
    net = make_network(config, 1)
    assert net.weight.numel() >= SPARSE_MIN_SIZE
    rng = np.random.default_rng(0)
    rows = rng.choice(len(net.weight), 1000, replace=False)
    with torch.no_grad():
        net.weight[rows] = torch.from_numpy(rng.normal(size=(1000, 1)).astype(np.float32))
    run = RunResult(scheme="serial", config=config, workers=1, episodes=episodes_frame([]), env_steps=0,
                    updates=0, wall_time_s=0.0, time_split={}, weights={"weight": net.weight.detach().numpy()})
    run.save(tmp_path)
    assert (tmp_path / "model.pt").stat().st_size < net.weight.numel() * 4 / 100
    saved = torch.load(tmp_path / "model.pt", weights_only=True)
    assert saved["weight"].is_sparse
    fresh = make_network(config, 1)
    fresh.load_state_dict(saved)
    assert torch.equal(fresh.weight, net.weight)
    assert np.array_equal(RunResult.load(tmp_path).weights["weight"], net.weight.detach().numpy())


# ------------------------------------------------------------------------------------------ a player that searches
def test_a_searching_player_plays_the_expectimax_move_and_one_ply_is_greedy(ntuple_agent):
    from dqnlab.core import search

    greedy = Player(ntuple_agent)
    env = VecGame2048(32, seed=3)
    boards = env.reset()
    for _ in range(30):  # into the games a little
        boards = env.step(greedy.act(boards)).boards
    assert np.array_equal(Player(ntuple_agent, search=1).act(boards), greedy.act(boards))
    two = load_player(greedy, search=2)
    assert two is not greedy and two.search == 2 and load_player(two, search=2) is two
    actions, q = two.moves(boards, legal_actions_batch(boards))
    expected, values = np.empty(32, np.int64), np.empty((32, 4))
    search.expectimax(boards.reshape(32, 16), 2, ntuple_agent.online.weight.detach().numpy().reshape(-1),
                      ntuple_agent.online.placements, False, ntuple_agent.config.gamma,
                      search.transposition_table(12), 1, expected, values)
    assert np.array_equal(actions, expected)
    masks = legal_actions_batch(boards)
    assert np.array_equal(np.isnan(q), ~masks) and np.allclose(q[masks], values[masks].astype(np.float32))
    assert not np.array_equal(actions, greedy.act(boards))  # the lookahead changed some move


def test_a_searching_player_keeps_its_search_unless_told_otherwise(ntuple_agent):
    two = load_player(ntuple_agent, search=np.int64(2))
    assert two.search == 2 and load_player(two) is two and load_player(two, search=1).search == 1
    searched = evaluate(ntuple_agent, games=2, seed=1, max_moves=60, search=2)
    assert np.array_equal(evaluate(two, games=2, seed=1, max_moves=60).scores, searched.scores)
    assert np.array_equal(play(two, seed=1, max_moves=30).actions, play(ntuple_agent, seed=1, max_moves=30,
                                                                         search=2).actions)
    greedy = evaluate(two, games=2, seed=1, max_moves=60, search=1)
    assert np.array_equal(greedy.scores, evaluate(ntuple_agent, games=2, seed=1, max_moves=60).scores)
    assert not np.array_equal(greedy.scores, searched.scores)


def test_evaluate_and_play_take_search(ntuple_agent):
    ev = evaluate(ntuple_agent, games=3, seed=0, search=2)
    assert len(ev.scores) == 3 and (ev.scores > 0).all()
    game = play(ntuple_agent, seed=0, search=2, max_moves=40)
    legal = ~np.isnan(game.q_values)
    assert game.moves == 40 and legal.any(axis=1).all() and np.isfinite(game.q_values[legal]).all()
    assert np.array_equal(game.actions, np.nanargmax(game.q_values, axis=1))


@pytest.mark.parametrize("search", [0, 4, "2", 2.0, True])
def test_a_bad_search_is_named(ntuple_agent, search):
    with pytest.raises(ValueError, match=r"search must be an integer in 1\.\.3"):
        Player(ntuple_agent, search=search)
    with pytest.raises(ValueError, match=r"search must be an integer in 1\.\.3"):
        evaluate("random", games=1, search=search)


def test_search_needs_an_n_tuple_afterstate_network(trained):
    with pytest.raises(ValueError, match="search=2 needs a player of an n-tuple network of afterstate values"):
        load_player(trained[0], search=2)
    with pytest.raises(ValueError, match="search=2 needs .* this one has no network"):
        evaluate("corner", games=1, search=2)


# ------------------------------------------------------------------------------------------ animation and GIF
def test_the_gif_has_one_frame_per_move_plus_the_start(trained, tmp_path):
    game = play(trained[1], seed=0, max_moves=12)
    animate(game).save(tmp_path / "game.gif", writer="pillow")
    with Image.open(tmp_path / "game.gif") as gif:
        assert gif.n_frames == game.moves + 1 == 13
    animate(game, every=5).save(tmp_path / "every5.gif", writer="pillow")
    with Image.open(tmp_path / "every5.gif") as gif:
        assert gif.n_frames == 4


def test_the_animation_shows_in_a_notebook(capsys):
    from dqnlab.plots import animation_html

    game = play("corner", seed=0, max_moves=3)  # no Q-values: the bars stay empty, with a note
    html = animation_html(game)
    assert html.count("data:image/png;base64") == 4 == animate(game).to_jshtml().count("data:image/png;base64")
    assert "drawing frames" in capsys.readouterr().err  # a progress bar while the frames are drawn


# ------------------------------------------------------------------------------------------ command line


def test_cli_play_error_has_no_traceback():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-m", "dqnlab", "play", "no-such-dir"], check=False, capture_output=True,
                       text=True, timeout=120, env=env)
    assert r.returncode == 2 and "no run directory" in r.stderr and "Traceback" not in r.stderr


# ------------------------------------------------------------------------------------------ evaluation figure
