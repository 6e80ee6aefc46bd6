"""managedFields and server-side apply, reduced to what the adopt-mode tests depend on.

Upstream (k8s.io/apiserver pkg/endpoints/handlers/fieldmanager, sigs.k8s.io/structured-merge-
diff) tracks which manager owns which field. Modelled here:

* ownership of leaf fields, list-map items (``k:{...}``) and set items (``v:...``), encoded as
  FieldsV1 in ``metadata.managedFields``;
* list types: built-in lists with a ``patchMergeKey`` are maps keyed by it (and finalizers a
  set); every other list, and every list of a custom resource except ownerReferences and
  finalizers, is **atomic**: the Volcano CRD's ``spec.tasks`` has no ``x-kubernetes-list-type``,
  so an apply replaces it whole (adopt-mode.md K6);
* apply: conflicts with other managers whose value differs (409 unless ``force``), removal of
  fields the applier owned before and no longer applies (unless someone else owns them);
* update (PUT/PATCH/create): the manager takes over the fields it changed.

Ownership is computed before mutating admission (create.go:198-203, patch.go:211-245), so
fields a webhook adds are owned by no one, as kubernetes#87671 describes.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Mapping
from typing import Any

from testbed.apiserver import rfc3339_now
from testbed.cluster.patches import MERGE_KEYS
from testbed.cluster.resources import Resource

JsonDict = dict[str, Any]
Path = tuple[str, ...]
Owners = dict[tuple[str, str], set[Path]]

_UNTRACKED_META = frozenset(
    {
        "name", "namespace", "uid", "resourceVersion", "generation", "creationTimestamp",
        "managedFields", "deletionTimestamp", "deletionGracePeriodSeconds", "selfLink",
    }
)  # fmt: skip
_MISSING = object()


class ApplyConflict(Exception):
    """Fields owned by other managers would change; the message is the apiserver's."""

    def __init__(self, conflicts: list[tuple[str, Path]]) -> None:
        self.conflicts = conflicts
        lines = [f'conflict with "{m}": {render(p)}' for m, p in conflicts]
        noun = "conflict" if len(conflicts) == 1 else "conflicts"
        super().__init__(f"Apply failed with {len(conflicts)} {noun}: " + "\n".join(lines))

    def causes(self) -> list[JsonDict]:
        return [
            {
                "reason": "FieldManagerConflict",
                "message": f'conflict with "{m}"',
                "field": render(p),
            }
            for m, p in self.conflicts
        ]


def render(path: Path) -> str:
    """A path as structured-merge-diff prints it: ``.spec.tasks``, ``.metadata.labels.a``."""
    out = ""
    for seg in path:
        kind, _, value = seg.partition(":")
        out += f".{value}" if kind == "f" else f"[{value}]"
    return out


def _list_type(res: Resource, field: str, metadata_child: bool) -> str | None:
    """None for atomic, "" for a set, else the map key."""
    if metadata_child and field in ("ownerReferences", "finalizers"):
        return MERGE_KEYS[field]
    if res.custom:
        return None
    return MERGE_KEYS.get(field)


def leaf_paths(obj: Mapping[str, Any], res: Resource) -> set[Path]:
    paths: set[Path] = set()
    for key, value in obj.items():
        if key in ("apiVersion", "kind") or (key == "status" and res.status_subresource):
            continue
        if key == "metadata" and isinstance(value, Mapping):
            meta = {k: v for k, v in value.items() if k not in _UNTRACKED_META}
            _walk(meta, ("f:metadata",), res, True, paths)
            continue
        _walk({key: value}, (), res, False, paths)
    return paths


def _walk(
    node: Mapping[str, Any], prefix: Path, res: Resource, in_meta: bool, out: set[Path]
) -> None:
    for key, value in node.items():
        path = (*prefix, f"f:{key}")
        if isinstance(value, Mapping) and value:
            _walk(value, path, res, in_meta, out)
        elif isinstance(value, list):
            list_type = _list_type(res, key, in_meta and len(prefix) == 1)
            if list_type is None or not value:
                out.add(path)
            elif list_type == "":
                out.update((*path, f"v:{json.dumps(v, separators=(',', ':'))}") for v in value)
            else:
                for item in value:
                    if not isinstance(item, Mapping):
                        out.add(path)
                        continue
                    key = json.dumps({list_type: item.get(list_type)}, separators=(",", ":"))
                    item_path = (*path, f"k:{key}")
                    out.add(item_path)
                    _walk(item, item_path, res, in_meta, out)
        else:
            out.add(path)


def _child(node: Any, seg: str) -> Any:
    kind, _, value = seg.partition(":")
    if kind == "f":
        return node.get(value, _MISSING) if isinstance(node, Mapping) else _MISSING
    if not isinstance(node, list):
        return _MISSING
    if kind == "v":
        wanted = json.loads(value)
        return wanted if wanted in node else _MISSING
    ((key, wanted),) = json.loads(value).items()
    return next((i for i in node if isinstance(i, Mapping) and i.get(key) == wanted), _MISSING)


def get_at(obj: Any, path: Path) -> Any:
    for seg in path:
        obj = _child(obj, seg)
        if obj is _MISSING:
            return _MISSING
    return obj


def delete_at(obj: Any, path: Path) -> None:
    parent = get_at(obj, path[:-1])
    kind, _, value = path[-1].partition(":")
    if kind == "f" and isinstance(parent, dict):
        parent.pop(value, None)
    elif isinstance(parent, list):
        target = _child(parent, path[-1])
        if target is not _MISSING:
            parent.remove(target)


def _merge(live: Any, applied: Any, res: Resource, parents: tuple[str, ...]) -> Any:
    """Apply's merge: maps key by key, list-maps by key, sets by value, atomic lists whole."""
    if isinstance(applied, Mapping) and isinstance(live, Mapping):
        out = dict(copy.deepcopy(live))
        for key, value in applied.items():
            out[key] = _merge(live.get(key), value, res, (*parents, key))
        return out
    if isinstance(applied, list) and isinstance(live, list):
        field = parents[-1] if parents else ""
        list_type = _list_type(res, field, parents[:-1] == ("metadata",))
        if list_type is None:
            return copy.deepcopy(applied)
        out_list = list(copy.deepcopy(live))
        for item in applied:
            if list_type == "" or not isinstance(item, Mapping):
                if item not in out_list:
                    out_list.append(copy.deepcopy(item))
                continue
            index = next(
                (n for n, old in enumerate(out_list)
                 if isinstance(old, Mapping) and old.get(list_type) == item.get(list_type)),
                None,
            )  # fmt: skip
            if index is None:
                out_list.append(copy.deepcopy(item))
            else:
                out_list[index] = _merge(out_list[index], item, res, (*parents, "[]"))
        return out_list
    return copy.deepcopy(applied)


# -- FieldsV1 encoding -----------------------------------------------------------------------


def encode(paths: Iterable[Path]) -> JsonDict:
    tree: JsonDict = {}
    ordered = sorted(paths)
    prefixes = {p[:n] for p in ordered for n in range(1, len(p))}
    for path in ordered:
        node = tree
        for seg in path:
            node = node.setdefault(seg, {})
        if path in prefixes:
            node["."] = {}
    return tree


def decode(tree: Mapping[str, Any], prefix: Path = ()) -> set[Path]:
    out: set[Path] = set()
    for seg, sub in tree.items():
        if seg == ".":
            out.add(prefix)
            continue
        path = (*prefix, seg)
        if isinstance(sub, Mapping) and sub:
            out |= decode(sub, path)
        else:
            out.add(path)
    return out


def owners(obj: Mapping[str, Any]) -> Owners:
    result: Owners = {}
    for entry in (obj.get("metadata") or {}).get("managedFields") or []:
        key = (str(entry.get("manager", "")), str(entry.get("operation", "Update")))
        result.setdefault(key, set()).update(decode(entry.get("fieldsV1") or {}))
    return result


def _store(obj: JsonDict, res: Resource, table: Owners, previous: Mapping[str, Any]) -> None:
    times = {
        (e.get("manager"), e.get("operation")): e.get("time")
        for e in (previous.get("metadata") or {}).get("managedFields") or []
    }
    entries = []
    for (manager, operation), paths in table.items():
        if not paths:
            continue
        entries.append(
            {
                "manager": manager,
                "operation": operation,
                "apiVersion": res.api_version,
                "time": times.get((manager, operation)) or rfc3339_now(),
                "fieldsType": "FieldsV1",
                "fieldsV1": encode(paths),
            }
        )
    meta = obj.setdefault("metadata", {})
    if entries:
        meta["managedFields"] = entries
    else:
        meta.pop("managedFields", None)


def track_update(
    old: Mapping[str, Any] | None, new: JsonDict, res: Resource, manager: str
) -> JsonDict:
    """``new`` with ``manager`` owning the fields it set or changed (operation Update)."""
    out = copy.deepcopy(new)
    table = owners(old or {})
    now = leaf_paths(out, res)
    changed = {p for p in now if old is None or get_at(old, p) != get_at(out, p)}
    for key, paths in table.items():
        paths &= now
        if key != (manager, "Update"):
            paths -= changed
    if changed:
        table.setdefault((manager, "Update"), set()).update(changed)
    _store(out, res, table, old or {})
    return out


def apply(
    live: Mapping[str, Any] | None,
    applied: Mapping[str, Any],
    res: Resource,
    manager: str,
    *,
    force: bool = False,
) -> JsonDict:
    """Server-side apply of ``applied`` by ``manager`` onto ``live`` (None: create)."""
    base: JsonDict = copy.deepcopy(dict(live)) if live is not None else {}
    table = owners(base)
    mine = (manager, "Apply")
    wanted = leaf_paths(applied, res)
    conflicts: list[tuple[str, Path]] = []
    for key, paths in table.items():
        if key == mine:
            continue
        for path in sorted(paths & wanted):
            if get_at(base, path) != get_at(applied, path):
                conflicts.append((key[0], path))
    if conflicts and not force:
        raise ApplyConflict(conflicts)
    for key, paths in table.items():
        if key != mine:
            paths -= {p for _, p in conflicts}
    merged = _merge(base, dict(applied), res, ()) if base else copy.deepcopy(dict(applied))
    others = set().union(*(p for k, p in table.items() if k != mine)) if table else set()
    # What the applier owned and applies no more goes, unless another manager owns it or
    # something under it; an item of a list-map goes whole, its key with it (deleting its
    # fields first would leave an empty item behind, no longer found by its key).
    removed = {
        path for path in table.get(mine, set()) - wanted
        if not any(o[: len(path)] == path for o in others)
        and not any(w[: len(path)] == path for w in wanted)
    }  # fmt: skip
    for path in sorted(removed, key=len, reverse=True):
        if not any(path[:n] in removed for n in range(1, len(path))):
            delete_at(merged, path)
    table[mine] = wanted
    _store(merged, res, table, base)
    return merged
