"""Small helpers over Kubernetes objects as plain dicts, shared by the simulated controllers.

The simulators keep objects as the JSON the fake API stores (as kopf does), reading only the
fields they act on, so whatever else autowrap or a test put into an object survives a write.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, MutableMapping
from typing import Any

JsonDict = dict[str, Any]
Key = tuple[str, str]
"""(namespace, name) of a namespaced object: the unit of work of every simulator."""


def meta(obj: Mapping[str, Any]) -> JsonDict:
    value = obj.get("metadata")
    return value if isinstance(value, dict) else {}


def key_of(obj: Mapping[str, Any]) -> Key:
    m = meta(obj)
    return str(m.get("namespace") or ""), str(m.get("name") or "")


def labels_of(obj: Mapping[str, Any]) -> dict[str, str]:
    return dict(meta(obj).get("labels") or {})


def annotations_of(obj: Mapping[str, Any]) -> dict[str, str]:
    return dict(meta(obj).get("annotations") or {})


def is_deleting(obj: Mapping[str, Any] | None) -> bool:
    return bool(obj is not None and meta(obj).get("deletionTimestamp"))


def controller_of(obj: Mapping[str, Any]) -> JsonDict | None:
    """metav1.GetControllerOf: the ownerReference with ``controller: true``, if any."""
    for ref in meta(obj).get("ownerReferences") or []:
        if ref.get("controller"):
            return dict(ref)
    return None


def controller_ref(owner: Mapping[str, Any]) -> JsonDict:
    """The reference controllerutil.SetControllerReference / metav1.NewControllerRef write."""
    m = meta(owner)
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": m["name"],
        "uid": m.get("uid", ""),
        "controller": True,
        "blockOwnerDeletion": True,
    }


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def set_condition(
    status: MutableMapping[str, Any], kind: str, value: bool, reason: str, message: str = ""
) -> bool:
    """meta.SetStatusCondition: replace the condition of that type; report whether it changed.

    lastTransitionTime moves only when the status flips, as in apimachinery, so a reconcile
    that changes nothing writes nothing and the simulators can settle.
    """
    conditions: list[JsonDict] = status.setdefault("conditions", [])
    text = "True" if value else "False"
    for cond in conditions:
        if cond.get("type") != kind:
            continue
        if (cond.get("status"), cond.get("reason"), cond.get("message")) == (text, reason, message):
            return False
        if cond.get("status") != text:
            cond["lastTransitionTime"] = now()
        cond.update(status=text, reason=reason, message=message)
        return True
    conditions.append(
        {
            "type": kind,
            "status": text,
            "reason": reason,
            "message": message,
            "lastTransitionTime": now(),
        }
    )
    return True


def condition(obj: Mapping[str, Any], kind: str) -> JsonDict | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind:
            return dict(cond)
    return None
