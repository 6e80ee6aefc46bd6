"""``autowrap status``: the chain from a user's object to its pods, assembled from fetched objects.

What a user otherwise walks by hand with kubectl: the object (its adoption label and status
annotation), the AppWrapper that wraps it (phase, conditions, retries), Kueue's Workload owned
by that AppWrapper (the LocalQueue it waits in; the ClusterQueue and flavors it was admitted to,
or the conditions that say why not), its pods by state, and the last Events of the object and
the AppWrapper. Pure: the CLI fetches, this module only reads dicts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from webhook.core import adoption
from webhook.model import names, objects

Obj = Mapping[str, Any]
LAST_EVENTS = 10
POD_STATES = ("gated", "pending", "running", "succeeded", "failed", "unknown")


@dataclass(frozen=True)
class Fetched:
    """What the CLI read: the object, its AppWrapper (None when there is none), every Workload
    and Pod of the namespace that may belong to it, and the namespace's Events."""

    obj: Obj
    appwrapper: Obj | None
    workloads: Sequence[Obj]
    pods: Sequence[Obj]
    events: Sequence[Obj]


def appwrapper_name(obj: Obj) -> str:
    """The AppWrapper to look for: the object itself when it is one, else the one its pod
    templates name (adopt mode), else an AppWrapper of the object's own name (redirect)."""
    if obj.get("kind") == "AppWrapper":
        return objects.name_of(obj)
    return adoption.appwrapper_name_of(obj) or objects.name_of(obj)


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _conditions(obj: Obj) -> list[dict[str, str]]:
    return [
        {k: str(c.get(k) or "") for k in ("type", "status", "reason", "message")}
        for c in _list(_map(obj.get("status")).get("conditions"))
        if isinstance(c, Mapping)
    ]


def _uid(obj: Obj | None) -> str:
    return str(_map((obj or {}).get("metadata")).get("uid") or "")


def pod_state(pod: Obj) -> str:
    if _list(_map(pod.get("spec")).get("schedulingGates")):
        return "gated"
    phase = str(_map(pod.get("status")).get("phase") or "Pending").lower()
    return phase if phase in POD_STATES else "unknown"


def workload_of(appwrapper: Obj | None, workloads: Sequence[Obj]) -> Obj | None:
    """Kueue's Workload for the AppWrapper: the one it controls (ownerReference by uid)."""
    uid = _uid(appwrapper)
    if not uid:
        return None
    for wl in workloads:
        for ref in _list(_map(wl.get("metadata")).get("ownerReferences")):
            if isinstance(ref, Mapping) and ref.get("uid") == uid:
                return wl
    return None


def workload_report(wl: Obj) -> dict[str, Any]:
    spec, status = _map(wl.get("spec")), _map(wl.get("status"))
    admission = _map(status.get("admission"))
    conditions = _conditions(wl)
    admitted = any(c["type"] == "Admitted" and c["status"] == "True" for c in conditions)
    flavors = sorted(
        {
            str(flavor)
            for assignment in _list(admission.get("podSetAssignments"))
            if isinstance(assignment, Mapping)
            for flavor in _map(assignment.get("flavors")).values()
        }
    )
    why_not = ""
    if not admitted:
        pending = [c for c in conditions if c["status"] != "True"]
        why_not = (
            "; ".join(
                f"{c['type']}: {c['message'] or c['reason']}"
                for c in pending
                if c["type"] != "Finished" and (c["message"] or c["reason"])
            )
            or "waiting in its LocalQueue for quota"
        )
    return {
        "name": objects.name_of(wl),
        "localQueue": str(spec.get("queueName") or ""),
        "admitted": admitted,
        "clusterQueue": str(admission.get("clusterQueue") or "") or None,
        "flavors": flavors,
        "whyNotAdmitted": why_not or None,
        "conditions": conditions,
    }


def _events_of(events: Sequence[Obj], *targets: Obj | None) -> list[dict[str, Any]]:
    wanted = {(str(t.get("kind") or ""), objects.name_of(t)): _uid(t) for t in targets if t}
    picked = []
    for event in events:
        involved = _map(event.get("involvedObject"))
        key = (str(involved.get("kind") or ""), str(involved.get("name") or ""))
        if key not in wanted:
            continue
        uid = str(involved.get("uid") or "")
        if uid and wanted[key] and uid != wanted[key]:
            continue  # an Event of an earlier object of the same name
        picked.append(event)
    picked.sort(key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""))
    return [
        {
            "time": str(e.get("lastTimestamp") or e.get("eventTime") or ""),
            "object": f"{_map(e.get('involvedObject')).get('kind')}/"
            f"{_map(e.get('involvedObject')).get('name')}",
            "type": str(e.get("type") or ""),
            "reason": str(e.get("reason") or ""),
            "message": str(e.get("message") or ""),
        }
        for e in picked[-LAST_EVENTS:]
    ]


def report(fetched: Fetched) -> dict[str, Any]:
    """The chain as one JSON-ready mapping (``autowrap status -o json`` prints it as is)."""
    obj, aw = fetched.obj, fetched.appwrapper
    labels, annotations = objects.labels_of(obj), objects.annotations_of(obj)
    out: dict[str, Any] = {
        "object": {
            "kind": str(obj.get("kind") or ""),
            "name": objects.name_of(obj),
            "namespace": str(_map(obj.get("metadata")).get("namespace") or ""),
            "adoption": labels.get(names.ADOPTION_LABEL),
            "status": annotations.get(names.STATUS_ANNOTATION),
        },
        "appWrapper": None,
        "workload": None,
        "pods": {"counts": dict.fromkeys(POD_STATES, 0), "byState": {}},
        "events": _events_of(fetched.events, obj, aw if aw is not obj else None),
    }
    if aw is not None:
        aw_status = _map(aw.get("status"))
        out["appWrapper"] = {
            "name": objects.name_of(aw),
            "phase": adoption.phase_of(aw) or None,
            "suspended": objects.is_suspended(aw),
            "queue": objects.labels_of(aw).get(names.QUEUE_LABEL),
            "retries": int(aw_status.get("retries") or 0),
            "conditions": _conditions(aw),
        }
        wl = workload_of(aw, fetched.workloads)
        if wl is not None:
            out["workload"] = workload_report(wl)
        pods = adoption.pods_of(fetched.pods, objects.name_of(aw))
    else:
        pods = [p for p in fetched.pods if p is obj]
    by_state: dict[str, list[str]] = {}
    for pod in sorted(pods, key=objects.name_of):
        state = pod_state(pod)
        out["pods"]["counts"][state] += 1
        by_state.setdefault(state, []).append(objects.name_of(pod))
    out["pods"]["byState"] = by_state
    return out


def render(rep: Mapping[str, Any]) -> str:
    """The report as text, one section per link of the chain."""
    obj = rep["object"]
    lines = [f"{obj['kind']} {obj['namespace']}/{obj['name']}"]
    if obj["adoption"] is not None:
        lines.append(f"  adoption:  {obj['adoption']}")
    if obj["status"]:
        lines.append(f"  status:    {obj['status']}")
    aw = rep["appWrapper"]
    if aw is None:
        lines.append("AppWrapper: none")
    else:
        state = aw["phase"] or "no phase yet"
        lines.append(
            f"AppWrapper {aw['name']}: {state}" + (" (suspended)" if aw["suspended"] else "")
        )
        lines.append(f"  retries:   {aw['retries']}")
        lines += [_condition_line(c) for c in aw["conditions"]]
    wl = rep["workload"]
    if wl is None:
        lines.append("Workload: none" + ("" if aw is None else " (Kueue has not queued it yet)"))
    else:
        lines.append(f"Workload {wl['name']}: queued in LocalQueue {wl['localQueue']!r}")
        if wl["admitted"]:
            flavors = ", ".join(wl["flavors"]) or "none"
            lines.append(f"  admitted to ClusterQueue {wl['clusterQueue']!r}, flavor(s) {flavors}")
        else:
            lines.append(f"  not admitted: {wl['whyNotAdmitted']}")
        lines += [_condition_line(c) for c in wl["conditions"]]
    counts = rep["pods"]["counts"]
    summary = ", ".join(f"{n} {s}" for s, n in counts.items() if n) or "none"
    lines.append(f"Pods: {summary}")
    for state, pod_names in rep["pods"]["byState"].items():
        lines.append(f"  {state}: {' '.join(pod_names)}")
    lines.append("Events:" + ("" if rep["events"] else " none"))
    for e in rep["events"]:
        lines.append(f"  {e['time']}  {e['type']:<7}  {e['object']}  {e['reason']}: {e['message']}")
    return "\n".join(lines) + "\n"


def _condition_line(c: Mapping[str, str]) -> str:
    detail = c["message"] or c["reason"]
    return f"  {c['type']}={c['status']}" + (f" ({detail})" if detail else "")
