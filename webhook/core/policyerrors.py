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


def describe(model: type[BaseModel], error: ErrorDetails) -> str:
    """``PATH: what is wrong; how to fix it`` for one pydantic error of ``model``."""
    loc = tuple(error["loc"])
    kind = error["type"]
    value = error.get("input")
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
        return f"{path}: {value!r} is not allowed; use {listed}{hint}"
    if kind == "value_error":
        cause = (error.get("ctx") or {}).get("error")
        if isinstance(cause, AtKey):
            return f"{field_path((*loc, cause.key))}: {cause.detail}"
        return f"{path}: {error['msg'].removeprefix('Value error, ')}"
    type_name = kind.split("_")[0]
    if kind.endswith(("_type", "_parsing")) and type_name in _WHAT:
        return f"{path}: {value!r} is not {_WHAT[type_name]}; write {_WHAT[type_name]} here"
    text = error["msg"].removeprefix("Input should be ").removeprefix("Value error, ")
    return f"{path}: must be {text}, got {value!r}"


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
