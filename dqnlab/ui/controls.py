"""The panels' controls, generated from the declarations of a scheme's options (:mod:`dqnlab.options`):
a dropdown of the choices, a checkbox, or a text box read by the declaration, each beside its label
with the declaration's doc as its tooltip (its ``tip``, the doc in plain words, where the doc names code)."""

from __future__ import annotations

import html
from typing import Any

import ipywidgets as W

from ..options import Spec, specs

__all__ = ["scheme_options", "labelled", "text_box", "checkbox", "dropdown", "option_widget", "parse_text"]


def scheme_options(scheme: str) -> dict[str, dict[str, Any]]:
    """The options of a scheme, as the panel shows them (from its ``Options`` declarations).

    Returns ``{name: {"default", "kind", "choices", "doc", "spec"}}``, in declaration
    order. ``kind`` is ``"choice"`` (a dropdown of ``choices``), ``"bool"``, ``"int"``,
    ``"float"``, ``"optional int"`` / ``"optional float"`` (None allowed: a text box,
    empty = None) or ``"text"`` (read by the declaration's parser); ``spec`` is the
    :class:`dqnlab.options.Spec`.

    Raises
    ------
    ValueError
        For an unknown scheme.
    """
    from ..schemes import SCHEMES

    if scheme not in SCHEMES:
        raise ValueError(f"scheme must be one of {sorted(SCHEMES)}, got {scheme!r}")
    out: dict[str, dict[str, Any]] = {}
    for name, spec in specs(SCHEMES[scheme].Options).items():
        if spec.choices:
            kind = "choice"
        elif spec.kind in ("bool", "int", "float"):
            kind = ("optional " if spec.nullable else "") + spec.kind
        else:
            kind = "text"
        out[name] = {"default": spec.default, "kind": kind, "choices": list(spec.choices), "doc": spec.doc,
                     "spec": spec}
    return out


def _label(label: str, doc: str) -> W.HTML:
    """A control's label, carrying ``doc`` as its tooltip. ipywidgets 8 shows a text box's or a dropdown's
    tooltip only where the control has no description of its own, and a checkbox's own label shows its
    text as the tooltip: so every control here is built without a description, beside this label."""
    return W.HTML(f'<span title="{html.escape(doc)}">{html.escape(label)}</span>',
                  layout=W.Layout(margin="0 6px 0 0"))


def labelled(control: W.Widget, label: str, doc: str, after: bool = False) -> W.HBox:
    """``control`` (its tooltip ``doc``, no description) beside its label (after it for a checkbox)."""
    control.description, control.tooltip = "", doc
    parts = [control, _label(label, doc)] if after else [_label(label, doc), control]
    return W.HBox(parts, layout=W.Layout(align_items="center", width="auto", margin="0 18px 2px 0"))


def text_box(spec: Spec, value: Any, width: str = "110px") -> W.Text:
    """A text box for a number or text read by ``spec`` (what is typed is checked, never bent to fit)."""
    text = "" if value is None else spec.to_text(value)
    return W.Text(value=text, placeholder="default" if spec.nullable else "", layout=W.Layout(width=width))


def checkbox(label: str, doc: str, value: bool) -> tuple[W.Checkbox, W.HBox]:
    """``(checkbox, what is shown)``: the checkbox beside its label."""
    box = W.Checkbox(value=bool(value), indent=False, layout=W.Layout(width="auto", margin="0 4px 0 0"))
    return box, labelled(box, label, doc, after=True)


def dropdown(options: Any, value: Any, width: str = "130px") -> W.Dropdown:
    """A dropdown of ``options`` showing ``value`` (no description: see :func:`labelled`)."""
    return W.Dropdown(options=options, value=value, layout=W.Layout(width=width))


def option_widget(spec: dict[str, Any], value: Any) -> tuple[W.Widget, W.Widget]:
    """``(control, what is shown)`` for one scheme option: a dropdown of its choices, a checkbox, or a
    text box read by its declaration."""
    decl = spec["spec"]
    if spec["kind"] == "choice":
        w = dropdown(spec["choices"], value)
    elif spec["kind"] == "bool":
        return checkbox(decl.label, decl.tooltip, value)
    else:
        w = text_box(decl, value, "160px" if spec["kind"] == "text" else "110px")
    return w, labelled(w, decl.label, decl.tooltip)


def parse_text(spec: Spec, text: Any, name: str) -> Any:
    """The value typed into a text box of ``spec``: empty (or ``none``) is None where allowed.

    Raises
    ------
    ValueError
        ``{name} must be {what is allowed}, got {text!r}``.
    """
    text = str(text).strip()
    if spec.nullable and (not text or text.lower() == "none"):
        return None
    try:
        return spec.from_text(text)
    except ValueError:
        allowed = spec.allowed.removesuffix(" or None") + (" or empty (the default)" if spec.nullable else "")
        raise ValueError(f"{name} must be {allowed}, got {text!r}") from None
