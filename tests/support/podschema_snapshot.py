"""Builds ``webhook/model/podschema_data.py``: the PodSpec schema as the kubernetes client's models
describe it (``openapi_types``/``attribute_map``), plus the fields Kubernetes added after the
1.32 API that AppWrapper's controller is built with (from kubernetes-validate's schemas).

The engine does no imports of the client (tests/test_layers.py), so it reads this snapshot;
``tests/rules/test_pod_schema.py`` fails when the snapshot and the installed client differ.
Regenerate with ``AUTOWRAP_UPDATE_PODSCHEMA=1 pytest tests/rules/test_pod_schema.py``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = "V1PodSpec"
BASELINE = "1.32"
# Quantity fields: the models type them as str, the API accepts numbers too.
QUANTITY_MAPS = {
    ("V1ResourceRequirements", "limits"),
    ("V1ResourceRequirements", "requests"),
    ("V1VolumeResourceRequirements", "limits"),
    ("V1VolumeResourceRequirements", "requests"),
    ("V1PodSpec", "overhead"),
}
QUANTITY_FIELDS = {("V1EmptyDirVolumeSource", "sizeLimit"), ("V1ResourceFieldSelector", "divisor")}

_LIST = re.compile(r"^List\[(.+)\]$")
_DICT = re.compile(r"^Dict\[str, (.+)\]$")


def _type(model: str, field: str, openapi: str, queue: list[str]) -> str:
    if (model, field) in QUANTITY_MAPS:
        return "{quantity}"
    if (model, field) in QUANTITY_FIELDS:
        return "quantity"
    if m := _LIST.match(openapi):
        return "[" + _type("", "", m.group(1), queue) + "]"
    if m := _DICT.match(openapi):
        return "{" + _type("", "", m.group(1), queue) + "}"
    if openapi in ("int", "str", "bool", "float", "object"):
        return openapi
    if openapi == "datetime":
        return "str"
    queue.append(openapi)
    return openapi


def client_models() -> dict[str, dict[str, str]]:
    from kubernetes.client import models

    out: dict[str, dict[str, str]] = {}
    queue = [ROOT]
    while queue:
        name = queue.pop()
        if name in out:
            continue
        cls = getattr(models, name)
        fields: dict[str, str] = {}
        for attr, openapi in cls.openapi_types.items():
            key = cls.attribute_map[attr]
            fields[key] = _type(name, key, openapi, queue)
        out[name] = fields
    return out


def _schema_dir() -> Path:
    import kubernetes_validate

    return Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema"


def _reachable(defs: dict[str, object], root: str) -> dict[str, set[str]]:
    seen: dict[str, set[str]] = {}
    stack = [root]
    while stack:
        name = stack.pop()
        if name in seen or name not in defs:
            continue
        schema = defs[name]
        assert isinstance(schema, dict)
        seen[name] = set(schema.get("properties", {}))
        text = json.dumps(schema)
        stack += [ref.rsplit("/", 1)[-1] for ref in re.findall(r'"\$ref": "([^"]+)"', text)]
    return seen


def newer_fields() -> dict[tuple[str, str], str]:
    """(client model name, field) -> the Kubernetes minor version that added it, after 1.32."""
    versions = sorted(
        (p.name[1:].rsplit(".", 1)[0].removesuffix(".0-local"), p)
        for p in _schema_dir().glob("v1.*.0-local")
        if not p.name.endswith("strict")
    )
    versions = [(v, p) for v, p in versions if tuple(map(int, v.split("."))) >= (1, 32)]
    versions.sort(key=lambda vp: tuple(map(int, vp[0].split("."))))
    known: dict[str, set[str]] = {}
    baseline: set[str] = set()
    added: dict[tuple[str, str], str] = {}
    for version, path in versions:
        defs = json.loads((path / "_definitions.json").read_text())["$defs"]
        for name, props in _reachable(defs, "io.k8s.api.core.v1.PodSpec").items():
            model = "V1" + name.rsplit(".", 1)[-1]
            if version != BASELINE and model in baseline:
                for field in props - known.get(model, set()):
                    added.setdefault((model, field), version)
            known.setdefault(model, set()).update(props)
            if version == BASELINE:
                baseline.add(model)
    return added


def render() -> str:
    models = client_models()
    newer = newer_fields()
    lines = [
        '"""The PodSpec schema, generated from the kubernetes client\'s models; do not edit.',
        "",
        "Regenerate with ``AUTOWRAP_UPDATE_PODSCHEMA=1 pytest tests/rules/test_pod_schema.py``",
        "(see tests/support/podschema_snapshot.py). One model per line: ``Model field:type …``;",
        "types are int, str, bool, float, object (anything), quantity, ``[T]`` (list) and",
        "``{T}`` (map of T). NEWER holds ``Model.field version`` for fields added after 1.32.",
        '"""',
        "",
        f'ROOT = "{ROOT}"',
        f'BASELINE = "{BASELINE}"',
        "",
        'MODELS = """',
    ]
    for name in sorted(models):
        fields = " ".join(f"{k}:{t}" for k, t in sorted(models[name].items()))
        lines.append(f"{name} {fields}".rstrip())
    lines += ['"""', "", 'NEWER = """']
    for (model, field), version in sorted(newer.items()):
        lines.append(f"{model}.{field} {version}")
    lines += ['"""', ""]
    return "\n".join(lines)
