"""Typed messages: each side handles the kinds it knows and raises on any other."""

from __future__ import annotations

import os
import queue

import numpy as np
import pytest

from dqnlab.parallel.messages import Checkpoint, Checkpointed, NewWeights, Report, Stop, Throttle, UnexpectedMessage
from dqnlab.parallel.tasks import Channel
from dqnlab.parallel.workers import LearnerCoordinator


def _channel(*orders) -> Channel:
    inbox, outbox = queue.Queue(), queue.Queue()
    for order in orders:
        outbox.put(order)
    return Channel(0, inbox, outbox)


def test_orders_come_in_order_a_stop_sets_stopped_and_a_late_confirmation_is_dropped():
    ch = _channel(NewWeights(None, 3), Checkpointed(1), Throttle(True), Stop(), Checkpoint(2))
    assert ch.orders() == [NewWeights(None, 3), Throttle(True), Checkpoint(2)]
    assert ch.stopped


def test_a_channel_raises_on_what_is_not_an_order():
    ch = _channel(("weights", None))  # the tuples of before: no longer understood, never dropped
    with pytest.raises(UnexpectedMessage, match="worker 0"):
        ch.orders()


def test_a_checkpoint_request_during_a_wait_is_answered_with_the_state():
    ch = _channel(Checkpoint(5), NewWeights({"w": None}))
    ch.state = lambda: {"x": 1}
    assert ch.wait() == NewWeights({"w": None})
    reply = ch.inbox.get_nowait()
    assert (reply.worker, reply.id, reply.state) == (0, 5, {"x": 1})


def test_serving_a_checkpoint_without_a_handler_raises_on_another_order():
    ch = _channel(Throttle(False))
    with pytest.raises(UnexpectedMessage, match="serving checkpoint 1"):
        ch.serve_checkpoint(1)


def test_the_parent_side_of_learners_takes_reports_and_raises_on_other_kinds():
    parent = LearnerCoordinator(2, batch_size=32, extra={"score": 0.0})
    parent.receive(Report(1, False, [{"worker": 1, "score": 4}], 80, 5, {"acting": 1.0, "learning": 2.0}, 0.5,
                          {"loss": 0.1}, {"score": 4.0}))
    assert parent.latest[1]["env_steps"] == 80 and parent.latest[1]["score"] == 4.0 and len(parent.rows) == 1
    assert parent.progress().env_steps == 80
    with pytest.raises(UnexpectedMessage):
        parent.receive(("progress", 1, {}))


def test_tensors_cross_a_process_as_numpy_arrays_and_come_back_as_tensors():
    import pickle

    import torch

    from dqnlab.parallel.messages import Report, StateReply
    from dqnlab.parallel.tasks import as_arrays, as_tensors

    weight = torch.arange(6, dtype=torch.float32).reshape(3, 2)
    state = {"agent": {"online": {"weight": weight}, "steps": [torch.tensor(3), 4]}, "boards": np.zeros(2, np.uint8),
             "half": torch.ones(2, dtype=torch.bfloat16)}
    msg = StateReply(1, 7, state)
    sent = as_arrays(msg)
    assert isinstance(sent, StateReply) and (sent.worker, sent.id) == (1, 7)
    tagged = sent.state["agent"]["online"]["weight"]
    assert not isinstance(tagged, torch.Tensor) and np.shares_memory(next(iter(tagged.values())), weight.numpy())
    assert isinstance(sent.state["half"], torch.Tensor)  # (NumPy has no bfloat16: it travels as it is)
    back = as_tensors(pickle.loads(pickle.dumps(sent)))
    w = back.state["agent"]["online"]["weight"]
    assert isinstance(w, torch.Tensor) and w.dtype == torch.float32 and torch.equal(w, weight)
    assert back.state["agent"]["steps"][0].item() == 3 and back.state["agent"]["steps"][1] == 4
    assert back.state["boards"].dtype == np.uint8
    frozen = np.arange(3, dtype=np.float32)
    frozen.flags.writeable = False  # (as joblib's memory-mapped arguments arrive)
    t = as_tensors({"__tensor__": frozen})
    t += 1  # a writable copy
    np.testing.assert_array_equal(frozen, [0, 1, 2])
    report = Report(0, True, [{"worker": 0}], 80, 5, {"acting": 1.0}, 0.5, {}, state={"w": weight})
    again = as_tensors(as_arrays(report))
    assert again.rows == report.rows and torch.equal(again.state["w"], weight)


def test_a_large_message_goes_by_a_file_of_the_spill_folder_and_comes_back_whole(tmp_path, monkeypatch):
    import torch

    from dqnlab.parallel import tasks
    from dqnlab.parallel.messages import Heartbeat, StateReply

    monkeypatch.setattr(tasks, "SPILL_BYTES", 1000)
    big = torch.arange(300, dtype=torch.float32)  # 1,200 bytes: over the limit
    ch = Channel(0, queue.Queue(), queue.Queue(), spill_dir=str(tmp_path))
    ch.send(StateReply(0, 3, {"learner": {"agent": {"w": big}}, "episodes": [{"score": 4}]}))
    ch.send(Heartbeat(0))  # (small: by the queue itself)
    spilled, beat = ch.inbox.get_nowait(), ch.inbox.get_nowait()
    assert isinstance(spilled, tasks.Spilled) and [p.name for p in tmp_path.iterdir()] == [spilled.path.rsplit("/")[-1]]
    assert beat == Heartbeat(0)
    back = tasks.unpack(spilled)
    assert isinstance(back, StateReply) and (back.worker, back.id) == (0, 3)
    w = back.state["learner"]["agent"]["w"]
    assert isinstance(w, torch.Tensor) and torch.equal(w, big) and back.state["episodes"] == [{"score": 4}]
    assert list(tmp_path.iterdir()) == []  # read once, then deleted
    # Orders too, and below the limit or without a folder (a cluster's queues) nothing is spilled.
    order = tasks.pack(NewWeights({"w": (np.arange(10), np.zeros(300, np.float32))}), str(tmp_path))
    assert isinstance(order, tasks.Spilled)
    ch.outbox.put(order)
    got = ch.orders()[0]
    assert isinstance(got, NewWeights) and got.weights["w"][1].shape == (300,)
    assert not isinstance(tasks.pack(StateReply(0, 1, {"w": torch.zeros(10)}), str(tmp_path)), tasks.Spilled)
    assert not isinstance(tasks.pack(StateReply(0, 1, {"w": big}), None), tasks.Spilled)


def test_a_spilled_mostly_zero_table_goes_as_its_non_zero_entries_and_comes_back_bit_exact(tmp_path, monkeypatch):
    import torch

    from dqnlab.parallel import tasks
    from dqnlab.parallel.messages import StateReply
    from dqnlab.runtime.compact import SPARSE_MIN_SIZE

    monkeypatch.setattr(tasks, "SPILL_BYTES", 1000)
    table = np.zeros((SPARSE_MIN_SIZE // 4, 4), np.float32)  # a young n-tuple table: 4 MB, a few entries set
    table[[3, 70, 9000], [0, 2, 3]] = [1.5, -0.0, np.float32("nan")]
    sums = torch.zeros(SPARSE_MIN_SIZE * 4)
    sums[-1] = 2.0
    dense = np.arange(SPARSE_MIN_SIZE, dtype=np.float32)  # no zeros: as it is
    spilled = tasks.pack(StateReply(0, 1, {"table": table, "sums": sums, "dense": dense}), str(tmp_path))
    assert isinstance(spilled, tasks.Spilled)
    assert os.path.getsize(spilled.path) < dense.nbytes + table.nbytes // 100  # the two tables: a few bytes each
    back = tasks.unpack(spilled).state
    assert back["table"].dtype == np.float32 and back["table"].tobytes() == table.tobytes()  # -0.0 and NaN too
    assert isinstance(back["sums"], torch.Tensor) and torch.equal(back["sums"], sums)
    assert np.array_equal(back["dense"], dense)


def test_one_order_to_several_workers_is_written_once_and_each_reads_its_own_link(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from dqnlab.parallel import tasks

    monkeypatch.setattr(tasks, "SPILL_BYTES", 1000)
    group = SimpleNamespace(outboxes=[queue.Queue() for _ in range(3)], spill_dir=str(tmp_path))
    weights = {"w": (np.arange(300), np.arange(300, dtype=np.float32))}
    tasks.TaskGroup.send_all(group, [0, 2], NewWeights(weights))
    first, last = group.outboxes[0].get_nowait(), group.outboxes[2].get_nowait()
    assert group.outboxes[1].empty() and isinstance(first, tasks.Spilled) and isinstance(last, tasks.Spilled)
    assert first.path != last.path and os.path.samefile(first.path, last.path)  # one file, two names
    assert len(list(tmp_path.iterdir())) == 2
    for msg in (first, last):
        got = tasks.unpack(msg)
        assert isinstance(got, NewWeights) and np.array_equal(got.weights["w"][1], weights["w"][1])
    assert list(tmp_path.iterdir()) == []  # each read deleted its own name
    tasks.TaskGroup.send_all(group, [], NewWeights(weights))  # nobody to tell: no file either
    assert list(tmp_path.iterdir()) == []
    tasks.TaskGroup.send_all(group, [1], NewWeights(None))  # small: by the queue itself
    assert group.outboxes[1].get_nowait() == NewWeights(None)


def test_the_parents_end_keeps_a_spilled_table_compact_and_the_checkpoint_writes_it_as_it_came(tmp_path, monkeypatch):
    """A worker's state at Ctrl-C goes to the checkpoint without being made whole and sparse again: the parent
    unpacks its tables as :class:`Entries`, ``checkpoint.pt`` stores them as they are, and reading it gives the
    arrays (and tensors) back bit-exact."""
    import torch

    from dqnlab.parallel import tasks
    from dqnlab.parallel.messages import StateReply
    from dqnlab.runtime import checkpoint
    from dqnlab.runtime.compact import SPARSE_MIN_SIZE, Entries, dense

    monkeypatch.setattr(tasks, "SPILL_BYTES", 1000)
    table = np.zeros(SPARSE_MIN_SIZE, np.float32)
    table[[5, 600]] = [2.5, -1.0]
    sums = torch.zeros(SPARSE_MIN_SIZE, 2)
    sums[7] = torch.tensor([1.0, 3.0])
    back = tasks.unpack(tasks.pack(StateReply(0, 1, {"table": table, "sums": sums}), str(tmp_path)),
                        compact=True).state
    assert isinstance(back["table"], Entries) and not back["table"].tensor
    assert isinstance(back["sums"], Entries) and back["sums"].tensor
    assert torch.equal(dense(back["sums"]), sums) and dense(back["table"]).tobytes() == table.tobytes()
    monkeypatch.setattr(checkpoint.Entries, "of", None)  # (it may not look for the non-zero entries again)
    checkpoint.save_checkpoint(tmp_path, {"format": checkpoint._FORMAT, "version": checkpoint.CHECKPOINT_VERSION,
                                          "state": back})
    read = checkpoint.load_checkpoint(tmp_path)["state"]
    assert read["table"].tobytes() == table.tobytes() and torch.equal(read["sums"], sums)
