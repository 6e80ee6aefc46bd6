"""Policy file mistakes in the words manifests get: the field, what is wrong, how to fix it.

Pydantic validates the policy models; its own messages ("Extra inputs are not permitted",
"Input should be 'OptIn' or 'Always'") name neither the fix nor the field a typo was meant to
be. Each error is said here the way ``webhook.model.podschema`` speaks of a manifest: an unknown
field with the closest known one, a value with the ones allowed.
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel
from pydantic_core import ErrorDetails

from webhook.model.yamltext import shown

_WHAT = {
    "int": "a whole number",
    "float": "a number",
    "string": "a string",
    "bool": "true or false",
    "list": "a list",
    "tuple": "a list",
    "dict": "a mapping",
    "model": "a mapping",
}


class AtKey(ValueError):
    """A bad value of one key of a map field (``faultTolerance.defaults``): said at the key's
    path, ``spec.faultTolerance.defaults.warmupGracePeriodDuration``, not the map's."""

    def __init__(self, key: str, detail: str) -> None:
        super().__init__(f"{key}: {detail}")
        self.key = key
        self.detail = detail


def field_path(loc: Sequence[int | str]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "<document>"


def describe_all(model: type[BaseModel], errors: Sequence[ErrorDetails]) -> str:
    """Every error of one document, ``; ``-joined, each as :func:`describe` says it. A list that
    is too short only because its items failed (pydantic counts the items that validated) is
    not said: its items' own errors are."""
    failed_below = [tuple(e["loc"]) for e in errors]
    kept = [
        e
        for e in errors
        if e["type"] != "too_short"
        or not any(
            len(o) > len(e["loc"]) and o[: len(e["loc"])] == tuple(e["loc"]) for o in failed_below
        )  # fmt: skip
    ]
    return "; ".join(describe(model, e) for e in kept)


def describe(model: type[BaseModel], error: ErrorDetails) -> str:
    """``PATH: what is wrong; how to fix it`` for one pydantic error of ``model``, in words a
    YAML author reads: values as YAML writes them, never Python's or pydantic's spelling."""
    loc = tuple(error["loc"])
    kind = error["type"]
    value = error.get("input")
    ctx = error.get("ctx") or {}
    if kind == "extra_forbidden" and loc:
        return f"{field_path(loc)}: {_unknown(model, loc)}"
    path = field_path(loc)
    if kind == "missing":
        return f"{path}: required; add it"
    if kind in ("literal_error", "enum"):
        allowed = _allowed(error)
        hint = _closest(value, allowed) if len(allowed) > 1 else ""
        if len(allowed) > 2:
            listed = "one of " + ", ".join(repr(a) for a in allowed)
        else:
            listed = " or ".join(repr(a) for a in allowed) or "an allowed value"
        return f"{path}: {shown(value)}{_boolean(value)} is not allowed; use {listed}{hint}"
    if kind == "value_error":
        cause = ctx.get("error")
        if isinstance(cause, AtKey):
            return f"{field_path((*loc, cause.key))}: {cause.detail}"
        return f"{path}: {error['msg'].removeprefix('Value error, ')}"
    type_name = kind.split("_")[0]
    if kind.endswith(("_type", "_parsing")) and type_name in _WHAT:
        what = _WHAT[type_name]
        return f"{path}: {shown(value)}{_boolean(value)} is not {what}; write {what} here"
    if kind in ("too_short", "string_too_short"):
        least = ctx.get("min_length", 1)
        if least == 1:
            return f"{path}: is empty; " + ("give at least one" if kind == "too_short" else
                                            "write it")  # fmt: skip
        unit = "items" if kind == "too_short" else "characters"
        return f"{path}: needs at least {least} {unit}; add more"
    if kind == "int_from_float":
        return f"{path}: {shown(value)} is not a whole number; write a whole number here"
    if kind in ("too_long", "string_too_long"):
        most = ctx.get("max_length")
        unit = "item" if kind == "too_long" else "character"
        return f"{path}: {shown(value)} has more than {most} {unit}s; shorten it"
    for bound, words in _BOUNDS.items():
        if kind == bound:
            limit = next(iter(ctx.values()), "")
            return f"{path}: {shown(value)} must be {words} {limit}; change it"
    return f"{path}: {shown(value)} is not valid here; see docs/policies.md for what it takes"


_BOUNDS = {
    "greater_than_equal": "at least",
    "greater_than": "more than",
    "less_than_equal": "at most",
    "less_than": "less than",
}


def _boolean(value: object) -> str:
    """Where YAML read a bare word as true or false (``wrap: yes``), say so."""
    return " (YAML reads an unquoted true, false, yes or no as a boolean; quote a word)" if (
        isinstance(value, bool)
    ) else ""  # fmt: skip


def _unknown(model: type[BaseModel], loc: tuple[int | str, ...]) -> str:
    name = str(loc[-1])
    known = _keys_at(model, loc[:-1])
    close = difflib.get_close_matches(name, known, n=1)
    hint = f"did you mean {close[0]!r}? Otherwise remove it" if close else "remove it"
    where = f" in {field_path(loc[:-1])}" if loc[:-1] else ""
    listed = f" (known: {', '.join(sorted(known))})" if known and not close else ""
    return f"unknown field {name!r}{where}{listed}; {hint}"


def unknown_key(name: str, known: Sequence[str]) -> str:
    """An unknown key of a map whose keys are fixed (fault-tolerance settings)."""
    close = difflib.get_close_matches(name, list(known), n=1)
    if close:
        return f"unknown key {name!r}; did you mean {close[0]!r}? Otherwise remove it"
    return f"unknown key {name!r}; use one of {', '.join(known)}"


def _allowed(error: ErrorDetails) -> list[str]:
    expected = str((error.get("ctx") or {}).get("expected", ""))
    return [part.strip(" '") for part in expected.replace(" or ", ",").split(",") if part.strip()]


def _closest(value: object, allowed: list[str]) -> str:
    if not isinstance(value, str):
        return ""
    lowered = {a.lower(): a for a in allowed}
    if value.lower() in lowered:
        return f" (did you mean {lowered[value.lower()]!r}? Values are case-sensitive)"
    close = difflib.get_close_matches(value, allowed, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _keys_at(model: type[BaseModel], loc: tuple[int | str, ...]) -> list[str]:
    """The field names (as written in YAML: aliases) of the model found at ``loc``."""
    current: Any = model
    for part in loc:
        current = _model_of(current)
        if current is None:
            return []
        if isinstance(part, int):
            continue
        fields = current.model_fields
        field = next(
            (f for n, f in fields.items() if part in (n, f.alias)),
            None,
        )
        if field is None:
            return []
        current = field.annotation
    found = _model_of(current)
    if found is None:
        return []
    return [f.alias or n for n, f in found.model_fields.items() if not f.exclude]


def _model_of(annotation: Any) -> type[BaseModel] | None:
    """The model an annotation holds: itself, or inside ``X | None`` and ``tuple[X, ...]``."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType, tuple, list):
        for arg in typing.get_args(annotation):
            found = _model_of(arg)
            if found is not None:
                return found
    return None
