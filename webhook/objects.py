"""Helpers over Kubernetes objects kept as plain dicts.

Upstream objects are never decoded into models: a field autowrap does not know must survive
untouched (the lesson of Kueue PR #3132, where a typed round trip produced spurious ``remove``
ops). These helpers read defensively, because admission input can hold any JSON at any place.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Mapping
from typing import Any

import orjson

from webhook.fields import FieldPath

Obj = dict[str, Any]


def as_map(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def as_list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def as_str_map(value: object) -> dict[str, str]:
    return {k: v for k, v in as_map(value).items() if isinstance(k, str) and isinstance(v, str)}


def labels_of(obj: Mapping[str, Any]) -> dict[str, str]:
    return as_str_map(as_map(obj.get("metadata")).get("labels"))


def annotations_of(obj: Mapping[str, Any]) -> dict[str, str]:
    return as_str_map(as_map(obj.get("metadata")).get("annotations"))


def name_of(obj: Mapping[str, Any]) -> str:
    value = as_map(obj.get("metadata")).get("name")
    return value if isinstance(value, str) else ""


def get(obj: object, path: FieldPath) -> Any:
    """The value at ``path``, or None where the path does not resolve."""
    node: Any = obj
    for part in path.parts:
        if isinstance(part, int):
            if not isinstance(node, list) or not 0 <= part < len(node):
                return None
            node = node[part]
        else:
            if not isinstance(node, Mapping):
                return None
            node = node.get(part)
    return node


def put(obj: Obj, path: FieldPath, value: Any) -> None:
    """Set ``value`` at ``path`` in place, creating the maps on the way (never lists)."""
    node: Any = obj
    *head, last = path.parts
    for part in head:
        if isinstance(part, int):
            node = node[part]
        else:
            nxt = node.get(part)
            if not isinstance(nxt, dict | list):
                nxt = {}
                node[part] = nxt
            node = nxt
    node[last] = value


def ensure_map(parent: dict[str, Any], key: str) -> dict[str, Any]:
    """``parent[key]`` as a map, replacing whatever non-map value stood there (admission input
    can hold ``null`` or a list where a map belongs; the apiserver rejects such objects anyway,
    and the engine must not fall over on them first)."""
    current = parent.get(key)
    if not isinstance(current, dict):
        current = parent[key] = {}
    return current


def deep_copy(obj: Obj) -> Obj:
    return copy.deepcopy(obj)


def int_or_none(value: object) -> int | None:
    """Kubernetes int fields; a bool is not an int here even though Python says so."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def canonical_hash(value: object) -> str:
    """A stable content hash: same JSON content, same hash, whatever the key order."""
    data = orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(data).hexdigest()
