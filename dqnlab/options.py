"""Options declared once: a dataclass field that carries its doc, unit, allowed values and when it applies.

:class:`~dqnlab.config.TrainConfig` and every scheme's ``Options`` declare their fields
with :func:`option`. From those declarations come

* validation (:func:`check_fields`, run by the dataclasses' ``__post_init__``): a
  ``ValueError`` naming the field, what is allowed and what was given;
* the command line (:mod:`dqnlab.cli`): one flag per field, its doc and unit as help;
* the notebooks' controls (:mod:`dqnlab.ui.controls`): one control per scheme option, its
  doc as tooltip, hidden while the option does not apply.

Checks across fields (``batch_size <= buffer_size``, a budget present, an option
against the config) stay explicit code beside the declaration.

>>> from dataclasses import dataclass
>>> @dataclass(frozen=True)
... class Options(SchemeOptions):
...     every: int = option(10, "Updates between syncs.", unit="updates", low=1)
>>> Options(every=0)
Traceback (most recent call last):
ValueError: every must be an integer >= 1, got 0
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import numbers
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["option", "When", "when", "unless", "Spec", "specs", "check_fields", "check_names", "SchemeOptions"]

_SPEC = "dqnlab.option"  # the key of a declaration in a field's metadata


@dataclass(frozen=True)
class When:
    """The condition under which an option applies: another option of the same
    dataclass has one of ``values`` (with ``negate``: none of them).

    Build it with :func:`when` or :func:`unless`.
    """

    name: str
    values: tuple[Any, ...]
    negate: bool = False

    def holds(self, values: Mapping[str, Any]) -> bool:
        """Whether the option applies, given the other options' ``values`` (name -> value;
        a name that is missing counts as not matching)."""
        return (self.name in values and values[self.name] in self.values) != self.negate

    def text(self, name: Callable[[str], str] = str, value: Callable[[Any], str] = repr) -> str:
        """The condition in words, e.g. ``sync 'final'`` or ``sync other than 'none'``, with the
        option's ``name`` and each ``value`` written by the functions given (the command
        line passes its flags and plain values: ``--sync final``)."""
        return f"{name(self.name)} {'other than ' if self.negate else ''}{' or '.join(value(v) for v in self.values)}"


def when(name: str, *values: Any) -> When:
    """The option applies only while option ``name`` is one of ``values``."""
    return When(name, values)


def unless(name: str, *values: Any) -> When:
    """The option applies except while option ``name`` is one of ``values``."""
    return When(name, values, negate=True)


@dataclass(frozen=True)
class Spec:
    """One field's declaration, as :func:`specs` completes it from the field's type.

    Attributes
    ----------
    name : str
        The field's name.
    doc : str
        One line: what the field means.
    unit : str or None
        Unit of a number (``"updates"``, ``"points"``, ``"env steps"``, ...).
    kind : str
        From the field's type: ``"bool"``, ``"int"``, ``"float"``, ``"str"`` (``"choice"``
        with ``choices``), ``"ints"`` (a tuple of integers), ``"dict"`` or ``"custom"``
        (a union checked by ``check``, or by explicit code when ``check`` is None).
    nullable : bool
        None is allowed (the type includes None).
    default : Any
        The field's default (``dataclasses.MISSING`` for a default factory).
    choices : tuple
        Allowed strings (a ``"custom"`` field may take other values too, per ``check``).
    low, high : float or None
        Bounds of a number (of each integer of ``"ints"``); ``low_open``/``high_open``
        exclude them.
    applies : When or None
        When the option applies (None: always).
    parse : callable or None
        Text (command line, text box) -> value, for ``"custom"`` fields.
    check : callable or None
        ``"custom"`` fields: value -> the value normalised; raises ValueError or TypeError
        if not allowed.
    allowed_text : str or None
        What is allowed, in words, where the generated text would not say it.
    flag : str
        The command-line flag (``--name-with-dashes`` unless declared otherwise).
    tip : str or None
        The doc in plain words, for a panel's tooltip, where ``doc`` names code (None: ``doc``
        is plain already); see :attr:`tooltip`.
    """

    name: str
    doc: str
    unit: str | None
    kind: str
    nullable: bool
    default: Any
    choices: tuple[Any, ...]
    low: float | None
    high: float | None
    low_open: bool
    high_open: bool
    applies: When | None
    parse: Callable[[str], Any] | None
    check: Callable[[Any], Any] | None
    allowed_text: str | None
    flag: str
    tip: str | None = None

    @property
    def tooltip(self) -> str:
        """What a panel's control says of the field: :attr:`tip`, else :attr:`doc`."""
        return self.tip or self.doc

    @property
    def label(self) -> str:
        """The name in words, with its unit: ``sync every (updates)``."""
        return self.name.replace("_", " ") + (f" ({self.unit})" if self.unit else "")

    @property
    def allowed(self) -> str:
        """What the field takes, in words: ``an integer >= 1``, ``a number in (0, 1] or None``."""
        if self.allowed_text is not None:
            text = self.allowed_text
        elif self.kind == "bool":
            text = "True or False"
        elif self.choices:
            text = f"one of {list(self.choices)}"
        elif self.kind == "int":
            text = "an integer" + self._range()
        elif self.kind == "float":
            text = ("a number" + self._range()) if self._range() else "a finite number"
        elif self.kind == "ints":
            text = ("a tuple of integers" if self.default == () else "a non-empty tuple of integers") + self._range()
        elif self.kind == "dict":
            text = "a dict"
        else:
            text = "a string" if self.kind == "str" else "a value"
        return text + (" or None" if self.nullable else "")

    def _range(self) -> str:
        low, high = self.low, self.high
        if low is not None and high is not None:
            if self.kind in ("int", "ints"):
                return f" in {low}..{high}"
            return f" in {'(' if self.low_open else '['}{low:g}, {high:g}{')' if self.high_open else ']'}"
        if low is not None:
            return f" {'>' if self.low_open else '>='} {low:g}"
        if high is not None:
            return f" {'<' if self.high_open else '<='} {high:g}"
        return ""

    def _in_range(self, v: float) -> bool:
        return ((self.low is None or (v > self.low if self.low_open else v >= self.low))
                and (self.high is None or (v < self.high if self.high_open else v <= self.high)))

    def validate(self, value: Any, prefix: str = "") -> Any:
        """``value`` normalised (lists become tuples, numpy integers ints).

        Raises
        ------
        ValueError
            ``{prefix}{name} must be {allowed}, got {value!r}``.
        """
        try:
            return self._normalise(value)
        except (ValueError, TypeError):
            raise ValueError(f"{prefix}{self.name} must be {self.allowed}, got {value!r}") from None

    def _normalise(self, value: Any) -> Any:
        if value is None and self.nullable:
            return None
        if self.kind == "custom":
            return value if self.check is None else self.check(value)
        if self.kind == "bool":
            ok = isinstance(value, bool)
        elif self.kind == "int":
            ok = _is_int(value) and self._in_range(value)
            value = int(value) if ok else value
        elif self.kind == "float":
            ok = _is_number(value) and self._in_range(value)
        elif self.kind == "ints":
            ok = isinstance(value, (tuple, list)) and (len(value) >= 1 or self.default == ()) and all(
                _is_int(v) and self._in_range(v) for v in value)
            value = tuple(int(v) for v in value) if ok else value
        elif self.kind == "dict":
            ok = isinstance(value, dict)
        else:
            ok = isinstance(value, str) and (not self.choices or value in self.choices)
        if not ok:
            raise ValueError(value)
        return value

    def from_text(self, text: str) -> Any:
        """The value written as ``text`` (command line, text box): ``none`` for None,
        ``true``/``false`` (any case) for a bool, ``256,256`` for a tuple of integers, JSON for a dict, the declared parser for a
        custom field; checked like :meth:`validate`.

        Text for a field with choices is returned as it is (:meth:`validate` checks it).

        Raises
        ------
        ValueError
            ``expected {allowed}, got {text!r}``.
        """
        if self.choices and self.kind != "custom":
            return text
        try:
            if self.nullable and text.strip().lower() == "none":
                return None
            if self.kind == "int":
                value: Any = int(text)
            elif self.kind == "float":
                value = float(text)
            elif self.kind == "ints":  # ("" for the empty tuple, where the field takes it)
                value = tuple(int(x) for x in text.split(",")) if text.strip() else ()
            elif self.kind == "bool" and text.strip().lower() in ("true", "false"):
                value = text.strip().lower() == "true"
            elif self.kind == "dict":
                value = json.loads(text)
            elif self.kind == "custom" and self.parse is not None:
                value = self.parse(text)
            else:
                value = text
            return self._normalise(value)
        except (ValueError, TypeError):
            raise ValueError(f"expected {self.allowed}, got {text!r}") from None

    def to_text(self, value: Any) -> str:
        """``value`` as :meth:`from_text` reads it back (``none``, ``256,256``, ``0.1,0.2``)."""
        if value is None:
            return "none"
        if isinstance(value, (tuple, list)):
            return ",".join(map(str, value)) if all(not isinstance(v, (tuple, list)) for v in value) else \
                ";".join(",".join(map(str, t)) for t in value)
        if isinstance(value, dict):
            return json.dumps(value)
        return str(value)

    def flags(self, value: Any) -> list[str]:
        """The command-line flags that give ``value``: ``--lock`` / ``--no-lock`` for a bool, else
        ``--name TEXT`` (:meth:`to_text`)."""
        if self.kind == "bool" and isinstance(value, bool):
            return [self.flag if value else f"--no-{self.flag[2:]}"]
        return [self.flag, self.to_text(value)]


def _is_int(v: Any) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v)


def option(default: Any = dataclasses.MISSING, doc: str = "", *, unit: str | None = None,
           choices: tuple[Any, ...] = (), low: float | None = None, high: float | None = None,
           low_open: bool = False, high_open: bool = False, applies: When | None = None,
           parse: Callable[[str], Any] | None = None, check: Callable[[Any], Any] | None = None,
           allowed: str | None = None, flag: str | None = None, tip: str | None = None,
           default_factory: Callable[[], Any] | None = None, compare: bool = True) -> Any:
    """A dataclass field with its declaration (see :class:`Spec` for each argument).

    Parameters
    ----------
    default
        The field's default (or give ``default_factory``).
    doc : str
        One line: what the field means (shown as command-line help and as tooltip).
    unit, choices, low, high, low_open, high_open, applies, parse, check
        See :class:`Spec`.
    allowed : str, optional
        What is allowed, in words (default: generated from the type, choices and bounds).
    flag : str, optional
        Command-line flag without the dashes (default: the name with dashes).
    tip : str, optional
        The doc in plain words for a panel's tooltip, where ``doc`` names code or writes a formula (the
        command line's help keeps ``doc``).
    default_factory : callable, optional
        As in :func:`dataclasses.field`.
    compare : bool
        As in :func:`dataclasses.field`.

    Returns
    -------
    dataclasses.Field

    Raises
    ------
    ValueError
        Without a doc.
    """
    if not doc:
        raise ValueError("option() needs a one-line doc")
    meta = {_SPEC: dict(doc=doc, unit=unit, choices=tuple(choices), low=low, high=high, low_open=low_open,
                        high_open=high_open, applies=applies, parse=parse, check=check, allowed_text=allowed,
                        flag=flag, tip=tip)}
    if default_factory is not None:
        return dataclasses.field(default_factory=default_factory, metadata=meta, compare=compare,
                                 repr=compare)
    return dataclasses.field(default=default, metadata=meta, compare=compare)


def _kind(hint: Any) -> tuple[str, bool]:
    """(kind, nullable) of a resolved type hint."""
    args = typing.get_args(hint) if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union \
        else (hint,)
    nullable = type(None) in args
    args = tuple(a for a in args if a is not type(None))
    if len(args) != 1:
        return "custom", nullable
    (t,) = args
    origin = typing.get_origin(t)
    if t in (bool, int, float, str):
        return t.__name__, nullable
    if origin is tuple and typing.get_args(t)[-1:] == (Ellipsis,) and typing.get_args(t)[0] is int:
        return "ints", nullable
    if t is dict or origin is dict:
        return "dict", nullable
    return "custom", nullable


@functools.cache
def specs(cls: type) -> dict[str, Spec]:
    """The declarations of dataclass ``cls``'s fields, in field order.

    Raises
    ------
    TypeError
        If a field was not declared with :func:`option`.
    """
    hints = typing.get_type_hints(cls)
    out: dict[str, Spec] = {}
    for f in dataclasses.fields(cls):
        meta = f.metadata.get(_SPEC)
        if meta is None:
            raise TypeError(f"{cls.__name__}.{f.name} is not declared with dqnlab.options.option()")
        kind, nullable = _kind(hints[f.name])
        if kind == "str" and meta["choices"]:
            kind = "choice"
        flag = "--" + (meta["flag"] or f.name.replace("_", "-"))
        out[f.name] = Spec(name=f.name, kind=kind, nullable=nullable, default=f.default,
                           **{**meta, "flag": flag})
    return out


def check_fields(obj: Any, prefix: str = "") -> None:
    """Check every declared field of dataclass instance ``obj`` against its declaration,
    storing normalised values (frozen dataclasses too).

    Raises
    ------
    ValueError
        For the first field not allowed: ``{prefix}{name} must be {allowed}, got {value!r}``; or
        given a value other than its default where it does not apply: ``{prefix}{name} applies
        only with ...``.
    """
    declared = specs(type(obj))
    for name, spec in declared.items():
        value = getattr(obj, name)
        normal = spec.validate(value, prefix)
        if normal is not value:
            object.__setattr__(obj, name, normal)
    for name, spec in declared.items():
        if spec.applies is not None and not spec.applies.holds(vars(obj)) and getattr(obj, name) != spec.default:
            raise ValueError(f"{prefix}{name} applies only with {spec.applies.text()}, "
                             f"not {spec.applies.name}={getattr(obj, spec.applies.name)!r}")


def check_names(cls: type, names: Any, owner: str) -> None:
    """Raise ValueError unless every name in ``names`` is a field of ``cls``:
    ``{owner} does not take option(s) [...]; it takes [...]`` (or ``none``)."""
    known = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(names) - set(known))
    if unknown:
        raise ValueError(f"{owner} does not take option(s) {unknown}; it takes {sorted(known) or 'none'}")


@dataclass(frozen=True)
class SchemeOptions:
    """Base of every scheme's ``Options``: a frozen dataclass whose fields are declared with
    :func:`option`, checked when built.

    Raises
    ------
    ValueError
        If a field is not allowed (``sync_every must be an integer >= 1, got 0``), or is given a
        value other than its default where it does not apply (``final_fraction applies only with
        sync 'final', not sync='periodic'``).
    """

    def __post_init__(self) -> None:
        check_fields(self)

    def to_dict(self) -> dict[str, Any]:
        """The options as a dict, name -> value (as :attr:`dqnlab.RunResult.options` and
        checkpoints keep them)."""
        return dataclasses.asdict(self)
