"""The three PATCH bodies kube-apiserver accepts besides apply, as pure functions.

* RFC 6902 JSON patch (``application/json-patch+json``), applied with ``jsonpatch``;
* RFC 7386 JSON merge patch (``application/merge-patch+json``);
* strategic merge patch (``application/strategic-merge-patch+json``), built-in types only:
  lists merge by the ``patchMergeKey`` of their Go field, or are replaced whole (atomic) when
  the field has no ``patchStrategy:"merge"`` tag. The keys below are those tags in
  k8s.io/api core/v1/types.go @10b39a39 and k8s.io/apimachinery meta/v1/types.go @eed236ce.
  Directives follow k8s.io/apimachinery pkg/util/strategicpatch/patch.go:41-50
  (``$patch``, ``$retainKeys``, ``$deleteFromPrimitiveList/``, ``$setElementOrder/``).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import jsonpatch
import jsonpointer

JsonDict = dict[str, Any]

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
PATCH_TYPES = (JSON_PATCH, MERGE_PATCH, STRATEGIC_MERGE_PATCH, APPLY_PATCH)
# apiextensions-apiserver customresource_handler.go: supportedTypes lacks strategic merge.
CUSTOM_PATCH_TYPES = (JSON_PATCH, MERGE_PATCH, APPLY_PATCH)

# field name -> patchMergeKey ("" = list of primitives merged as a set)
MERGE_KEYS: dict[str, str] = {
    "containers": "name",  # core/v1/types.go:4393
    "initContainers": "name",  # :4384
    "ephemeralContainers": "name",  # :4403
    "env": "name",  # :3192
    "volumes": "name",  # :4366 (merge,retainKeys)
    "volumeMounts": "mountPath",  # :3243
    "ports": "containerPort",  # :3175 (ServicePort: "port", :6273)
    "schedulingGates": "name",  # :4651
    "imagePullSecrets": "name",  # :4493
    "hostAliases": "ip",  # :4521
    "conditions": "type",  # PodCondition :5617, NamespaceCondition :7445
    "ownerReferences": "uid",  # meta/v1/types.go:271
    "finalizers": "",  # meta/v1/types.go:289 (patchStrategy merge, primitives)
}
SERVICE_PORT_KEY = "port"


class PatchError(ValueError):
    """The patch could not be decoded or applied; ``code`` is the HTTP status to answer."""

    def __init__(self, message: str, code: int = 422) -> None:
        super().__init__(message)
        self.code = code


def json_patch(original: JsonDict, operations: Any) -> JsonDict:
    if not isinstance(operations, list):
        raise PatchError(
            "json: cannot unmarshal object into Go value of type jsonpatch.Patch", code=400
        )
    try:
        patched = jsonpatch.JsonPatch(operations).apply(copy.deepcopy(original))
    except jsonpatch.JsonPatchTestFailed as exc:
        # The wording of the json-patch library kube-apiserver applies patches with
        # (evanphx/json-patch ErrTestFailed), answered 422 by k8s.io/apiserver patch.go.
        path = next((o.get("path") for o in operations if isinstance(o, dict)
                     and o.get("op") == "test" and str(o.get("path")) in str(exc)), "")  # fmt: skip
        raise PatchError(f"testing value {path} failed: test failed") from exc
    except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException) as exc:
        raise PatchError(str(exc)) from exc
    except (KeyError, TypeError, IndexError, ValueError, AttributeError) as exc:
        raise PatchError(f"{type(exc).__name__}: {exc}") from exc
    if not isinstance(patched, dict):
        raise PatchError("the patched object is not a JSON object")
    return patched


def merge_patch(original: Any, patch: Any) -> Any:
    """RFC 7386: objects merge key by key, ``null`` deletes, anything else replaces."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    out = dict(copy.deepcopy(original)) if isinstance(original, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def _merge_key(field: str, kind: str) -> str | None:
    if field == "ports" and kind == "Service":
        return SERVICE_PORT_KEY
    return MERGE_KEYS.get(field)


def _strip_directives(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {
            k: _strip_directives(v)
            for k, v in value.items()
            if not k.startswith("$") and v is not None
        }
    if isinstance(value, list):
        return [_strip_directives(v) for v in value]
    return value


_DELETE = object()


def strategic_merge_patch(original: JsonDict, patch: Any, kind: str) -> JsonDict:
    """Apply a strategic merge patch to a built-in object of ``kind``."""
    if not isinstance(patch, Mapping):
        raise PatchError("the body of the request was in an unknown format", code=400)
    merged = _smp_map(original, patch, kind)
    if merged is _DELETE or not isinstance(merged, dict):
        raise PatchError("the patch deletes the whole object")
    return merged


def _smp_map(original: Any, patch: Mapping[str, Any], kind: str) -> Any:
    directive = patch.get("$patch")
    if directive == "delete":
        return _DELETE
    if directive == "replace":
        return _strip_directives({k: v for k, v in patch.items() if k != "$patch"})
    out: JsonDict = dict(copy.deepcopy(original)) if isinstance(original, Mapping) else {}
    retain = patch.get("$retainKeys")
    for key, value in patch.items():
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            drop = set(map(_hashable, value or []))
            out[field] = [v for v in out.get(field) or [] if _hashable(v) not in drop]
            continue
        if key.startswith("$"):
            continue  # $patch handled above; $setElementOrder only orders; $retainKeys below
        if value is None:
            out.pop(key, None)
        elif isinstance(value, Mapping):
            merged = _smp_map(out.get(key), value, kind)
            if merged is _DELETE:
                out.pop(key, None)
            else:
                out[key] = merged
        elif isinstance(value, list):
            out[key] = _smp_list(out.get(key), value, _merge_key(key, kind), kind)
        else:
            out[key] = copy.deepcopy(value)
    if isinstance(retain, list):
        out = {k: v for k, v in out.items() if k in retain}
    return out


def _hashable(value: Any) -> Any:
    return repr(value) if isinstance(value, (dict, list)) else value


def _smp_list(original: Any, patch: list[Any], merge_key: str | None, kind: str) -> list[Any]:
    if merge_key is None:
        return _strip_directives(patch)  # atomic: replaced whole
    current = list(copy.deepcopy(original)) if isinstance(original, list) else []
    if merge_key == "":  # a set of primitives (finalizers)
        for item in patch:
            if item not in current:
                current.append(item)
        return current
    if any(isinstance(i, Mapping) and i.get("$patch") == "replace" for i in patch):
        return _strip_directives(
            [i for i in patch if not (isinstance(i, Mapping) and i.get("$patch") == "replace")]
        )
    for item in patch:
        if not isinstance(item, Mapping):
            raise PatchError(f"merging a list by {merge_key!r} needs objects, got {item!r}")
        index = next(
            (
                n
                for n, old in enumerate(current)
                if isinstance(old, Mapping) and old.get(merge_key) == item.get(merge_key)
            ),
            None,
        )
        if item.get("$patch") == "delete":
            if index is not None:
                del current[index]
            continue
        if index is None:
            current.append(_strip_directives(item))
        else:
            current[index] = _smp_map(current[index], item, kind)
    return current
