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
from dataclasses import dataclass
from typing import Any

from webhook.core import adoption
from webhook.model.objects import as_list, as_map

Obj = dict[str, Any]
REASON_LIMIT = 512


@dataclass(frozen=True)
class Said:
    """What Kueue's Workload says of the AppWrapper: admitted, or why not yet ("" when it has
    said nothing)."""

    admitted: bool = False
    reason: str = ""


def _said(workload: Mapping[str, Any]) -> Said:
    conditions = {
        str(c.get("type")): c
        for c in map(as_map, as_list(as_map(workload.get("status")).get("conditions")))
    }
    if as_map(conditions.get("Admitted")).get("status") == "True":
        return Said(admitted=True)
    reserved = as_map(conditions.get("QuotaReserved"))
    if reserved.get("status") != "False" or _about_the_hold(reserved):
        return Said()
    return Said(reason=_cut(str(reserved.get("message") or reserved.get("reason") or "")))


def _about_the_hold(condition: Mapping[str, Any]) -> bool:
    """Whether Kueue speaks of autowrap's own hold (the ``admission-gated-by`` annotation the
    controller lifts once the object names the AppWrapper): "Admission is gated by: ..." while
    it is there, "AdmissionGatedBy cleared, waiting for quota reservation" once it is gone
    (kueue v0.19.2 workload_controller.go:1157-1171). Neither is a reason Kueue does not admit
    the work, so neither is mirrored."""
    return condition.get("reason") == "AdmissionGated" or str(
        condition.get("message") or ""
    ).startswith("AdmissionGatedBy cleared")


def workload_view(workload: Mapping[str, Any]) -> Obj | None:
    """A Workload as the controller keeps it: which AppWrapper it stands for and what Kueue
    says (:class:`Said`), or None (not kept) while it says nothing, and for one that stands
    for no AppWrapper (Kueue makes one for every job it queues, of any kind). So only a new
    reason, or the admission, wakes the AppWrapper's key; Kueue's other writes do not."""
    metadata = as_map(workload.get("metadata"))
    owners = [
        {k: r.get(k) for k in ("apiVersion", "kind", "name", "uid", "controller")}
        for r in map(as_map, as_list(metadata.get("ownerReferences")))
        if r.get("controller") is True and r.get("kind") == "AppWrapper"
    ]
    said = _said(workload)
    if not owners or not (said.admitted or said.reason):
        return None
    condition = ({"type": "Admitted", "status": "True"} if said.admitted else
                 {"type": "QuotaReserved", "status": "False", "message": said.reason})  # fmt: skip
    return {
        "apiVersion": workload.get("apiVersion"),
        "kind": workload.get("kind"),
        "metadata": {k: metadata[k] for k in ("name", "namespace", "uid", "resourceVersion")
                     if k in metadata} | {"ownerReferences": owners},
        "status": {"conditions": [condition]},
    }  # fmt: skip


def wakes(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> bool:
    """Whether a change of a kept Workload can change the object's status: a reason said, or
    one said before (now another, or the admission that ends it). An admission with no reason
    before it changes nothing the AppWrapper's own start does not."""
    return any(view is not None and _said(view).reason for view in (old, new))


def appwrapper_of(workload: Mapping[str, Any]) -> str:
    """The name of the AppWrapper a Workload stands for (its controller reference)."""
    for reference in map(as_map, as_list(as_map(workload.get("metadata")).get("ownerReferences"))):
        if reference.get("controller") is True and reference.get("kind") == "AppWrapper":
            return str(reference.get("name") or "")
    return ""


def kueue_says(
    appwrapper: Mapping[str, Any] | None, workloads: Sequence[Mapping[str, Any]]
) -> Said:
    """What the Workload that stands for the AppWrapper (its controller reference names the
    AppWrapper's uid) says; nothing when there is none."""
    if appwrapper is None:
        return Said()
    uid = as_map(appwrapper.get("metadata")).get("uid")
    for workload in workloads:
        owner = adoption.controller_of(workload)
        if uid and owner is not None and owner.get("uid") == uid:
            return _said(workload)
    return Said()


def _cut(text: str) -> str:
    text = " ".join(text.split())
    if len(text) <= REASON_LIMIT:
        return text
    return text[: REASON_LIMIT - 1].rstrip() + "…"


def with_kueue(
    status: adoption.Status, appwrapper: Mapping[str, Any] | None, said: Said
) -> adoption.Status:
    """The object's status while its AppWrapper is queued, with what Kueue says: its reason
    for not admitting yet (the ``Queued`` Event that goes with a change says it too), or, once
    it admitted and before it un-suspends the AppWrapper, "Admitted" (rather than a
    ``Queued`` without a reason in between); and never "Admitted" or "Running" while the
    Workload says why Kueue does not admit it, whatever the AppWrapper's own spec says."""
    if appwrapper is None:
        return status
    if status.reason in ("Running", "Admitted") and said.reason and not said.admitted:
        # The AppWrapper is not suspended, but its Workload (Kueue's alone to write) says Kueue
        # has not admitted it, or took the admission back: whoever may edit the AppWrapper can
        # write spec.suspend, and Kueue suspends it again.
        name = as_map(appwrapper.get("metadata")).get("name")
        return adoption.Status(
            f"Not admitted by Kueue (AppWrapper {name}); pods wait, gated. Kueue: {said.reason}",
            "Queued",
        )
    if status.reason != "Queued":
        return status
    if said.admitted:
        name = as_map(appwrapper.get("metadata")).get("name")
        return adoption.Status(f"Admitted by Kueue; AppWrapper {name} is starting", "Admitted")
    if said.reason:
        return adoption.Status(f"{status.text}. Kueue: {said.reason}", status.reason, status.type)
    return status
