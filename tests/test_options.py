"""Options declared once (dqnlab.options): validation, text and conditions from the declaration."""

from dataclasses import dataclass, field

import numpy as np
import pytest

import dqnlab
from dqnlab.options import SchemeOptions, check_names, option, specs, unless, when


@dataclass(frozen=True)
class Knobs(SchemeOptions):
    mode: str = option("a", "Mode.", choices=("a", "b", "c"))
    every: int = option(10, "Updates between syncs.", unit="updates", low=1, applies=unless("mode", "a"))
    share: float = option(0.25, "Fraction shared.", low=0, high=1, low_open=True, applies=when("mode", "c"))
    cap: float | None = option(None, "A cap or None.", low=0)
    sizes: tuple[int, ...] = option((4, 4), "Layer sizes.", low=1)
    on: bool = option(True, "Switch.")


@pytest.mark.parametrize("name,value,message", [
    ("mode", "d", "mode must be one of ['a', 'b', 'c'], got 'd'"),
    ("every", 0, "every must be an integer >= 1, got 0"),
    ("every", 2.0, "every must be an integer >= 1, got 2.0"),
    ("share", 0.0, "share must be a number in (0, 1], got 0.0"),
    ("share", float("nan"), "share must be a number in (0, 1], got nan"),
    ("cap", -1, "cap must be a number >= 0 or None, got -1"),
    ("sizes", (4, 0), "sizes must be a non-empty tuple of integers >= 1, got (4, 0)"),
    ("on", 1, "on must be True or False, got 1"),
])
def test_validation_names_the_field_what_is_allowed_and_what_was_given(name, value, message):
    with pytest.raises(ValueError) as info:
        Knobs(**{name: value})
    assert str(info.value) == message


def test_values_are_normalised():
    k = Knobs(mode="b", every=np.int64(3), sizes=[8, 2], cap=None)
    assert type(k.every) is int and k.sizes == (8, 2) and k.to_dict()["sizes"] == (8, 2)


def test_text_round_trips_and_conditions():
    s = specs(Knobs)
    assert list(s) == ["mode", "every", "share", "cap", "sizes", "on"]
    assert (s["every"].label, s["every"].flag, s["cap"].kind, s["cap"].nullable) == ("every (updates)", "--every",
                                                                                    "float", True)
    assert s["sizes"].from_text(s["sizes"].to_text((3, 2))) == (3, 2)
    assert s["cap"].from_text("none") is None and s["cap"].from_text("2.5") == 2.5
    with pytest.raises(ValueError, match=r"expected a number >= 0 or None, got 'lots'"):
        s["cap"].from_text("lots")
    assert s["on"].from_text("false") is False and s["on"].from_text("True") is True
    with pytest.raises(ValueError, match="expected True or False, got 'maybe'"):
        s["on"].from_text("maybe")
    assert not s["every"].applies.holds({"mode": "a"}) and s["every"].applies.holds({"mode": "b"})
    assert s["share"].applies.holds({"mode": "c"}) and not s["share"].applies.holds({"mode": "b"})
    assert s["every"].applies.text() == "mode other than 'a'" and s["share"].applies.text() == "mode 'c'"


def test_undeclared_fields_and_unknown_names_are_errors():
    @dataclass(frozen=True)
    class Loose:
        x: int = field(default=1)

    with pytest.raises(TypeError, match="Loose.x is not declared"):
        specs(Loose)
    with pytest.raises(ValueError, match=r"thing does not take option\(s\) \['nope'\]; it takes \['cap', "):
        check_names(Knobs, ["nope", "cap"], "thing")
    with pytest.raises(ValueError, match="needs a one-line doc"):
        option(1)


def test_every_scheme_declares_options_with_docs():
    for name, module in dqnlab.SCHEMES.items():
        assert issubclass(module.Options, SchemeOptions), name
        for spec in specs(module.Options).values():
            assert spec.doc.endswith("."), (name, spec.name)
            if spec.applies is not None:
                assert spec.applies.name in specs(module.Options)
        module.Options()  # the defaults are allowed
    assert specs(dqnlab.SCHEMES["independent"].Options)["temperature"].applies == when("sync", "weighted")


def test_a_value_where_the_option_does_not_apply_is_an_error_unless_it_is_the_default(cfg):
    assert Knobs(mode="c", share=0.5).share == 0.5
    assert Knobs(mode="a", share=0.25, every=10).mode == "a"  # defaults: a run's summary lists every option
    with pytest.raises(ValueError, match="share applies only with mode 'c', not mode='b'"):
        Knobs(mode="b", share=0.5)
    with pytest.raises(ValueError, match="every applies only with mode other than 'a', not mode='a'"):
        Knobs(every=3)
    # from Python as from the command line: nothing starts
    with pytest.raises(ValueError, match="final_fraction applies only with sync 'final', not sync='periodic'"):
        dqnlab.train("independent", cfg, workers=2, sync="periodic", final_fraction=0.5, progress=False)
    with pytest.raises(ValueError, match="temperature applies only with sync 'weighted', not sync='none'"):
        dqnlab.train("independent", cfg, workers=2, sync="none", temperature=100.0, progress=False)
