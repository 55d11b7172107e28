"""The measuring tools: the warm-up says each step before it takes it."""

import time

from dqnlab.bench import timing


def test_warm_up_says_each_step_before_it_takes_it_and_each_worker_as_it_is_ready(monkeypatch):
    said = []
    monkeypatch.setattr(timing, "_import_dqnlab", lambda: time.sleep(0.3) or 1)
    seconds = timing.warm_up(2, native=True, report=lambda line: said.append((time.perf_counter(), line)))
    lines = [line for _, line in said]
    assert lines[0].startswith("compiling the native core") and lines[1].startswith("native core ready")
    assert lines[2] == "starting 2 worker processes (each imports PyTorch and dqnlab) ..."
    assert [line.split(" (")[0] for line in lines[3:]] == ["worker 1 of 2 ready", "worker 2 of 2 ready"]
    assert said[3][0] - said[2][0] >= 0.3 and seconds >= 0.3  # the start was said before the wait, not after
    assert timing.warm_up(1, report=said.append) < 1.0 and len(said) == 5  # nothing to start: nothing said
