"""Why Kueue has not admitted an AppWrapper yet, as its Workload says, for the adopted
object's status and Events (``kubectl describe`` shows both).

Kueue's scheduler writes the reason on the Workload it cannot admit:
``QuotaReserved=False``, reason ``Pending`` (or a finer one: ``WaitingForQuota``, ...), and the
flavor assigner's message, e.g. "couldn't assign flavors to pod set train-0: insufficient
unused quota for nvidia.com/gpu in flavor a100, 16 more needed"
(kueue pkg/scheduler/scheduler.go ``requeueAndUpdate``:
``workload.UnsetQuotaReservationWithCondition(e.Obj, "Pending", e.inadmissibleMsg)``;
pkg/scheduler/flavorassigner/flavorassigner.go for the message). The Workload's status is
Kueue's alone (a subresource users do not write), so what is mirrored is what Kueue said.

The message is cut to ``REASON_LIMIT`` characters (a long one lists every flavor tried for every
podSet); the status changes, and one Event is written, only when the mirrored text changes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from webhook.core import adoption
from webhook.model.objects import as_list, as_map

Obj = dict[str, Any]
REASON_LIMIT = 512
# The conditions a reason is read from; the rest of a Workload is not kept.
_KEPT_CONDITIONS = frozenset({"QuotaReserved", "Admitted", "Evicted"})


def workload_view(workload: Mapping[str, Any]) -> Obj | None:
    """A Workload as the controller keeps it: which AppWrapper it stands for and the conditions
    a reason is read from; None (not kept) for one that stands for no AppWrapper (Kueue makes
    one for every job it queues, of any kind)."""
    metadata = as_map(workload.get("metadata"))
    owners = [
        {k: r.get(k) for k in ("apiVersion", "kind", "name", "uid", "controller")}
        for r in map(as_map, as_list(metadata.get("ownerReferences")))
        if r.get("controller") is True and r.get("kind") == "AppWrapper"
    ]
    if not owners:
        return None
    conditions = [
        {k: c.get(k) for k in ("type", "status", "reason", "message") if k in c}
        for c in map(as_map, as_list(as_map(workload.get("status")).get("conditions")))
        if c.get("type") in _KEPT_CONDITIONS
    ]
    return {
        "apiVersion": workload.get("apiVersion"),
        "kind": workload.get("kind"),
        "metadata": {k: metadata[k] for k in ("name", "namespace", "uid", "resourceVersion")
                     if k in metadata} | {"ownerReferences": owners},
        "status": {"conditions": conditions},
    }  # fmt: skip


def appwrapper_of(workload: Mapping[str, Any]) -> str:
    """The name of the AppWrapper a Workload stands for (its controller reference)."""
    for reference in map(as_map, as_list(as_map(workload.get("metadata")).get("ownerReferences"))):
        if reference.get("controller") is True and reference.get("kind") == "AppWrapper":
            return str(reference.get("name") or "")
    return ""


def pending_reason(
    appwrapper: Mapping[str, Any] | None, workloads: Sequence[Mapping[str, Any]]
) -> str:
    """Kueue's reason for not admitting the AppWrapper, from the Workload that stands for it
    (its controller reference names the AppWrapper's uid), cut to ``REASON_LIMIT``; "" when
    Kueue has said nothing (or has admitted it)."""
    if appwrapper is None:
        return ""
    uid = as_map(appwrapper.get("metadata")).get("uid")
    for workload in workloads:
        owner = adoption.controller_of(workload)
        if not uid or owner is None or owner.get("uid") != uid:
            continue
        conditions = {
            str(c.get("type")): c
            for c in map(as_map, as_list(as_map(workload.get("status")).get("conditions")))
        }
        admitted = as_map(conditions.get("Admitted")).get("status") == "True"
        reserved = as_map(conditions.get("QuotaReserved"))
        if admitted or reserved.get("status") != "False":
            return ""
        return _cut(str(reserved.get("message") or reserved.get("reason") or ""))
    return ""


def _cut(text: str) -> str:
    text = " ".join(text.split())
    if len(text) <= REASON_LIMIT:
        return text
    return text[: REASON_LIMIT - 1].rstrip() + "…"


def with_reason(status: adoption.Status, reason: str) -> adoption.Status:
    """The object's status with Kueue's reason, while it is queued (the Event that goes with
    the change, ``Queued``, says it too)."""
    if not reason or status.reason != "Queued":
        return status
    return adoption.Status(f"{status.text}. Kueue: {reason}", status.reason, status.type)
