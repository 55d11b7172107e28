"""``bench interrupt``: the flags of a scheme spec, and specs checked before any run."""

from __future__ import annotations

import pytest

from dqnlab.bench.interrupt import INTERRUPT_SCHEMES, bench_interrupt, train_flags
from dqnlab.cli import main
from dqnlab.schemes import SCHEMES


def test_a_specs_options_become_the_train_commands_flags():
    assert train_flags("shared:lock=false:threads=true") == ("shared", ["--no-lock", "--threads"])
    assert train_flags("independent:sync=periodic:sync_every=20000") == (
        "independent", ["--sync", "periodic", "--sync-every", "20000"])
    assert {train_flags(s)[0] for s in INTERRUPT_SCHEMES} == set(SCHEMES)
    # the flags are train's: its parser reads them back as the spec's options
    from dqnlab.cli.parser import build_parser

    args = build_parser().parse_args(["train", *train_flags("shared:lock=false:threads=true")[1]])
    assert (args.lock, args.threads) == (False, True)


def test_a_bad_spec_is_refused_before_any_run_starts():
    with pytest.raises(ValueError, match="takes options"):
        bench_interrupt(["serial", "shared:speed=fast"], after_s=600)  # (no run: it would take ten minutes)


def test_the_command_takes_one_worker_count_and_its_own_flags(capsys):
    assert main(["bench", "interrupt", "--workers", "1,2"]) == 2
    assert "--workers: bench interrupt takes one worker count" in capsys.readouterr().err
    assert main(["bench", "interrupt", "--minutes", "3"]) == 2
    assert "takes --results, --schemes, --seconds, --workers and --json, not --minutes" in capsys.readouterr().err
