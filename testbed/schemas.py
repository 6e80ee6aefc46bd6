"""Validation against the real upstream CRD schemas in ``../shared/crds`` (never copied here).

The openAPIV3Schema of a CRD is JSON Schema plus Kubernetes extensions. ``nullable`` becomes a
``null`` type; every other ``x-kubernetes-*`` key is dropped, except that an
``x-kubernetes-embedded-resource`` (an AppWrapper component's ``template``) is validated on its
own against the schema of its kind, where the repository has one.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import jsonschema
import yaml

from testbed import prerequisites
from testbed.prerequisites import CRD_DIR

APPWRAPPER_CRD = "workload.codeflare.dev_appwrappers.yaml"
VOLCANO_JOB_CRD = "batch.volcano.sh_jobs.yaml"

# apiVersion, kind -> CRD file, for embedded resources that have a schema here.
EMBEDDED = {("batch.volcano.sh/v1alpha1", "Job"): VOLCANO_JOB_CRD}


def _require_crds() -> None:
    """In a test, a skip with the reason, or a failure in CI (testbed/prerequisites.py)."""
    prerequisites.crds()


def _plain(schema: Any) -> Any:
    """JSON Schema without the Kubernetes extensions."""
    if isinstance(schema, list):
        return [_plain(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _plain(v) for k, v in schema.items() if not k.startswith("x-kubernetes-")}
    if schema.get("nullable") is True and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
    out.pop("nullable", None)
    return out


@functools.cache
def _crd_schema(file: str, version: str) -> dict[str, Any]:
    crd = yaml.safe_load((CRD_DIR / file).read_text())
    for served in crd["spec"]["versions"]:
        if served["name"] == version:
            schema: dict[str, Any] = served["schema"]["openAPIV3Schema"]
            return schema
    raise LookupError(f"{file} has no version {version}")


@functools.cache
def _validator(file: str, version: str) -> jsonschema.protocols.Validator:
    schema = _plain(_crd_schema(file, version))
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft7Validator)
    cls.check_schema(schema)
    return cls(schema)


def load(file: str, version: str) -> None:
    """Read and compile a CRD's schema now (about a second for the larger CRDs), so that the
    first write to check does not pay for it inside a timed request."""
    _validator(file, version)


def _embedded_paths(schema: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Schema paths of embedded resources, with "*" for array items."""
    if not isinstance(schema, dict):
        return []
    found = [path] if schema.get("x-kubernetes-embedded-resource") else []
    for key, sub in (schema.get("properties") or {}).items():
        found += _embedded_paths(sub, (*path, key))
    if isinstance(schema.get("items"), dict):
        found += _embedded_paths(schema["items"], (*path, "*"))
    return found


def _values_at(obj: Any, path: tuple[Any, ...]) -> list[tuple[str, Any]]:
    if not path:
        return [("", obj)]
    head, rest = path[0], path[1:]
    if head == "*":
        items = obj if isinstance(obj, list) else []
        return [
            (f"[{i}]{sub}", value)
            for i, item in enumerate(items)
            for sub, value in _values_at(item, rest)
        ]
    if isinstance(obj, Mapping) and head in obj:
        return [(f".{head}{sub}", value) for sub, value in _values_at(obj[head], rest)]
    return []


def errors(obj: Mapping[str, Any], file: str, version: str) -> list[str]:
    """Every schema violation of ``obj``, embedded resources included, as ``path: message``."""
    _require_crds()
    validator = _validator(file, version)
    found = [
        f"{'.'.join(str(p) for p in e.absolute_path) or '<root>'}: {e.message}"
        for e in validator.iter_errors(obj)
    ]
    for path in _embedded_paths(_crd_schema(file, version)):
        for where, embedded in _values_at(obj, path):
            if not isinstance(embedded, Mapping):
                found.append(f"{where}: an embedded resource must be an object")
                continue
            if not embedded.get("apiVersion") or not embedded.get("kind"):
                found.append(f"{where}: an embedded resource needs apiVersion and kind")
                continue
            inner = EMBEDDED.get((embedded["apiVersion"], embedded["kind"]))
            if inner is not None:
                group_version = embedded["apiVersion"].rpartition("/")[2]
                found += [f"{where}.{e}" for e in errors(embedded, inner, group_version)]
    return found


def assert_valid_appwrapper(obj: Mapping[str, Any]) -> None:
    assert obj.get("kind") == "AppWrapper", obj.get("kind")
    problems = errors(obj, APPWRAPPER_CRD, "v1beta2")
    assert problems == [], "\n".join(problems)


def assert_valid_volcano_job(obj: Mapping[str, Any]) -> None:
    problems = errors(obj, VOLCANO_JOB_CRD, "v1alpha1")
    assert problems == [], "\n".join(problems)
