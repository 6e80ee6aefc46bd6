"""Helpers over Kubernetes objects kept as plain dicts.

Upstream objects are never decoded into models: a field autowrap does not know must survive
untouched (the lesson of Kueue PR #3132, where a typed round trip produced spurious ``remove``
ops). These helpers read defensively, because admission input can hold any JSON at any place.
"""

from __future__ import annotations

import copy
import hashlib
import json
import marshal
from collections.abc import Mapping
from typing import Any

import orjson

from webhook.model import names
from webhook.model.fields import FieldPath

Obj = dict[str, Any]


def as_map(value: object) -> Mapping[str, Any]:
    # Decoded JSON holds plain dicts; the exact-type test spares the ABC check on the hot path.
    if type(value) is dict or isinstance(value, Mapping):
        return value
    return {}


def as_list(value: object) -> list[Any]:
    return value if type(value) is list or isinstance(value, list) else []


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


def own_map(parent: dict[str, Any], key: str) -> dict[str, Any]:
    """A shallow copy of ``parent[key]`` put in its place, for the caller to write into.

    The engine never writes into the object it was given: it copies the maps on the way to
    what it changes and shares everything else, so the result costs little to build and the
    patch diff recognises untouched parts by identity. ``parent`` must already be the caller's
    own copy. A non-map value (``null``, a list) is replaced by an empty map.
    """
    current = parent.get(key)
    fresh = dict(current) if isinstance(current, dict) else {}
    parent[key] = fresh
    return fresh


def put(root: Obj, path: FieldPath, value: Any) -> bool:
    """Set ``value`` at ``path`` in ``root`` (the caller's own copy), copying every map and list
    on the way first, so nothing shared with the original object is written; missing maps are
    created (never lists).

    Returns False, changing nothing, where the path runs through something that is not a map
    or a list (a user's ``spec: []``): such an object is invalid and is reported, not repaired.
    """
    steps: list[tuple[Any, str | int, Any]] = []
    node: Any = root
    *head, last = path.parts
    for part in head:
        if isinstance(part, int):
            if not isinstance(node, list) or not 0 <= part < len(node):
                return False
            child = node[part]
        else:
            if not isinstance(node, dict):
                return False
            child = node.get(part)
            if child is None:
                child = {}
        if isinstance(child, dict):
            child = dict(child)
        elif isinstance(child, list):
            child = list(child)
        else:
            return False
        steps.append((node, part, child))
        node = child
    if isinstance(last, int):
        if not isinstance(node, list) or not 0 <= last < len(node):
            return False
    elif not isinstance(node, dict):
        return False
    for parent, part, child in steps:
        parent[part] = child
    node[last] = value
    return True


def deep_copy(obj: Obj) -> Obj:
    """A deep copy of a decoded JSON object, as ``copy.deepcopy`` makes it.

    ``marshal`` copies dicts, lists and scalars in C, shared references and exact types
    (bool, big int, NaN) included, several times faster than ``copy.deepcopy``; anything it
    does not know (a type of our own, a dict subclass) falls back to ``copy.deepcopy``.
    """
    try:
        copied: Obj = marshal.loads(marshal.dumps(obj))
    except ValueError:
        return copy.deepcopy(obj)
    return copied


def is_appwrapper(obj: Mapping[str, Any]) -> bool:
    return obj.get("apiVersion") == names.APPWRAPPER_API_VERSION and obj.get("kind") == "AppWrapper"


def is_suspended(obj: Mapping[str, Any]) -> bool:
    """``spec.suspend`` as its Go owner reads it. The AppWrapper declares
    ``Suspend bool json:"suspend,omitempty"``, so when Kueue admits one (sets it false) the
    field vanishes from the stored object: absent is false, never "not yet decided"."""
    return as_map(obj.get("spec")).get("suspend") is True


def int_or_none(value: object) -> int | None:
    """Kubernetes int fields; a bool is not an int here even though Python says so."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def canonical_hash(value: object) -> str:
    """A stable content hash: same JSON content, same hash, whatever the key order."""
    try:
        data = orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # an integer beyond 64 bits, which JSON allows and orjson does not
        data = json.dumps(value, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(data).hexdigest()
