"""A JSONPatch (RFC 6902) diff for admission responses: ``add``, ``replace``, ``remove`` only.

``jsonpatch.make_patch`` looks for moved and copied values, which costs time quadratic in the
size of a list (about 1.8 s for a 1 MiB AppWrapper); admission only ever needs the ops that
turn the submitted object into the completed one, and kube-apiserver applies any valid
patch. This diff walks both trees once: equal subtrees are recognised at C speed (``==``, then
an exact ``orjson`` comparison so that ``true`` and ``1``, or ``1`` and ``1.0``, stay
different), maps are compared key by key, and lists by their common head and tail with the
middle compared position by position. Paths escape ``~`` as ``~0`` and ``/`` as ``~1``.
"""

from __future__ import annotations

from typing import Any

import orjson

Op = dict[str, Any]


def make_patch(src: Any, dst: Any) -> list[Op]:
    """The ops that turn ``src`` into ``dst`` when applied in order; [] when they are equal."""
    ops: list[Op] = []
    _diff(src, dst, "", ops)
    return ops


def escape(key: object) -> str:
    """One JSON Pointer reference token (RFC 6901)."""
    token = key if type(key) is str else str(key)
    if "~" in token or "/" in token:
        return token.replace("~", "~0").replace("/", "~1")
    return token


def same(a: Any, b: Any) -> bool:
    """Equal as JSON: same values and same types (``true`` is not ``1``, ``1`` is not ``1.0``)."""
    if a is b:
        return True
    if type(a) is not type(b) or a != b:
        return False
    if type(a) is dict or type(a) is list:
        try:
            if orjson.dumps(a) == orjson.dumps(b):
                return True
        except TypeError:
            pass
        # Equal under Python's == but not byte for byte: key order, or a bool/int/float
        # somewhere inside. Decide element by element.
        if type(a) is dict:
            return all(same(v, b[k]) for k, v in a.items())
        return all(same(x, y) for x, y in zip(a, b, strict=True))
    return True


def _diff(src: Any, dst: Any, path: str, ops: list[Op]) -> None:
    # Two maps or two lists are walked without comparing them whole first: the walk skips
    # shared members by identity, and a whole comparison would descend the same way again.
    if type(src) is dict and type(dst) is dict:
        _diff_dicts(src, dst, path, ops)
    elif type(src) is list and type(dst) is list:
        _diff_lists(src, dst, path, ops)
    elif not same(src, dst):
        ops.append({"op": "replace", "path": path, "value": dst})


_ABSENT = object()


def _diff_dicts(src: dict[Any, Any], dst: dict[Any, Any], path: str, ops: list[Op]) -> None:
    # The engine shares every subtree it did not change with the submitted object, so most
    # values are the very same object on both sides: skip those before building a path.
    removed = 0
    for key, value in src.items():
        other = dst.get(key, _ABSENT)
        if other is value:
            continue
        if other is _ABSENT:
            ops.append({"op": "remove", "path": f"{path}/{escape(key)}"})
            removed += 1
        else:
            _diff(value, other, f"{path}/{escape(key)}", ops)
    # dst holds every key of src that was not removed; any more are additions.
    if len(dst) > len(src) - removed:
        for key, value in dst.items():
            if key not in src:
                ops.append({"op": "add", "path": f"{path}/{escape(key)}", "value": value})


def _diff_lists(src: list[Any], dst: list[Any], path: str, ops: list[Op]) -> None:
    shortest = min(len(src), len(dst))
    head = 0
    while head < shortest and (src[head] is dst[head] or same(src[head], dst[head])):
        head += 1
    tail = 0
    while tail < shortest - head and (
        src[-1 - tail] is dst[-1 - tail] or same(src[-1 - tail], dst[-1 - tail])
    ):
        tail += 1
    src_mid = src[head : len(src) - tail]
    dst_mid = dst[head : len(dst) - tail]
    common = min(len(src_mid), len(dst_mid))
    for i in range(common):
        _diff(src_mid[i], dst_mid[i], f"{path}/{head + i}", ops)
    # The list now holds dst's first head+common items, then src's leftovers, then the tail.
    for i in range(len(src_mid) - 1, common - 1, -1):
        ops.append({"op": "remove", "path": f"{path}/{head + i}"})
    for i in range(common, len(dst_mid)):
        ops.append({"op": "add", "path": f"{path}/{head + i}", "value": dst_mid[i]})
