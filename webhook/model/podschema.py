"""A pod template's ``spec`` checked against the PodSpec schema, as AppWrapper checks it.

AppWrapper's webhook parses every podSet's ``spec`` with ``FromUnstructuredWithValidation``
and refuses unknown fields and values of the wrong type
(project-codeflare/appwrapper pkg/utils/utils.go:65, called for declared podSets from
internal/webhook/appwrapper_webhook.go:209 and for inferred ones from utils.go:577). The
schema is a snapshot of the kubernetes client's models (``podschema_data``); a field
Kubernetes added after the 1.32 API AppWrapper v1.2.1 is built with is a warning, since a
newer AppWrapper and cluster may know it.
"""

from __future__ import annotations

import difflib
import functools
from collections.abc import Mapping

from webhook.model import podschema_data, quantity
from webhook.model.fields import FieldPath, Violation, error, warning

_SCALARS = {
    "int": "an integer",
    "float": "a number",
    "str": "a string",
    "bool": "true or false",
    "quantity": "a quantity such as 2, 500m or 4Gi",
}


@functools.cache
def _models() -> dict[str, dict[str, str]]:
    models: dict[str, dict[str, str]] = {}
    for line in podschema_data.MODELS.strip().splitlines():
        name, *fields = line.split()
        models[name] = dict(f.split(":", 1) for f in fields)
    return models


@functools.cache
def _newer() -> dict[str, dict[str, str]]:
    newer: dict[str, dict[str, str]] = {}
    for line in podschema_data.NEWER.strip().splitlines():
        qualified, version = line.split()
        model, field = qualified.split(".", 1)
        newer.setdefault(model, {})[field] = version
    return newer


def check_spec(spec: object, path: FieldPath) -> list[Violation]:
    """Every unknown or mistyped field of a pod spec at ``path``, and fields newer than 1.32."""
    found: list[Violation] = []
    _walk(spec, podschema_data.ROOT, path, found)
    return found


def _walk(value: object, kind: str, path: FieldPath, found: list[Violation]) -> None:
    if value is None or kind == "object":
        return  # null is every field's zero value; "object" takes anything (IntOrString)
    if kind.startswith("["):
        if not isinstance(value, list):
            found.append(_mistyped(value, path, "a list"))
            return
        for i, item in enumerate(value):
            _walk(item, kind[1:-1], path.index(i), found)
        return
    if kind.startswith("{"):
        if not isinstance(value, Mapping):
            found.append(_mistyped(value, path, "a map"))
            return
        for key, item in value.items():
            _walk(item, kind[1:-1], path.key(str(key)), found)
        return
    if kind in _SCALARS:
        if not _scalar_ok(value, kind):
            found.append(_mistyped(value, path, _SCALARS[kind]))
        return
    _walk_model(value, kind, path, found)


def _walk_model(value: object, model: str, path: FieldPath, found: list[Violation]) -> None:
    if not isinstance(value, Mapping):
        found.append(_mistyped(value, path, f"a map (a {_display(model)})"))
        return
    fields = _models().get(model, {})
    newer = _newer().get(model, {})
    for key, item in value.items():
        name = str(key)
        if name in newer:
            found.append(
                warning(
                    path.child(name),
                    f"Kubernetes added {_display(model)}.{name} in {newer[name]}; AppWrapper "
                    f"built with the Kubernetes {podschema_data.BASELINE} API (v1.2.1) and clusters "
                    f"older than {newer[name]} refuse it, so remove it unless yours know it",
                )
            )
        elif name not in fields:
            found.append(error(path.child(name), _unknown(name, model, fields)))
        else:
            _walk(item, fields[name], path.child(name), found)


def _scalar_ok(value: object, kind: str) -> bool:
    if kind == "str":
        return isinstance(value, str)
    if kind == "bool":
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False
    if kind == "int":
        return isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if kind == "float":
        return isinstance(value, (int, float))
    return isinstance(value, (int, float, str)) and quantity.parse(value) is not None


def _unknown(name: str, model: str, fields: Mapping[str, str]) -> str:
    close = difflib.get_close_matches(name, list(fields), n=1)
    hint = f"did you mean {close[0]!r}? Otherwise remove it" if close else "remove it"
    return (
        f"unknown field {name!r} in {_display(model)}; AppWrapper and the API server refuse "
        f"unknown pod fields, so {hint}"
    )


def _mistyped(value: object, path: FieldPath, wanted: str) -> Violation:
    return error(path, f"{_show(value)} is not {wanted}; write it as {wanted}")


def _show(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Mapping):
        return "a map"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return repr(value)
    return str(value)


def _display(model: str) -> str:
    for prefix in ("CoreV1", "V1"):
        if model.startswith(prefix):
            return model[len(prefix) :]
    return model
