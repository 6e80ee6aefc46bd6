"""The reads behind ``autowrap status``: with the user's own kubeconfig, never the server's.

Only gets and lists the user can already make with kubectl; nothing here is in ``API_CALLS``
(the server never reads Workloads).
"""

from __future__ import annotations

from typing import Final

from webhook.cli import status
from webhook.model.names import APPWRAPPER_LABEL
from webhook.shell.kube import APPWRAPPERS, EVENTS, PODS, VOLCANO_JOBS, WORKLOADS, Api, Kind

KINDS: Final = {
    "vcjob": VOLCANO_JOBS,
    "vcjobs": VOLCANO_JOBS,
    "job": VOLCANO_JOBS,
    "jobs": VOLCANO_JOBS,
    "pod": PODS,
    "pods": PODS,
    "po": PODS,
    "appwrapper": APPWRAPPERS,
    "appwrappers": APPWRAPPERS,
    "aw": APPWRAPPERS,
}
TIMEOUT = 15.0


class NotFound(Exception):
    pass


async def fetch(api: Api, kind: Kind, namespace: str, name: str) -> status.Fetched:
    obj = await api.get(kind, namespace, name, timeout=TIMEOUT)
    if obj is None:
        raise NotFound(f"{kind.kind.lower()} {namespace}/{name} not found")
    obj.setdefault("apiVersion", kind.api_version)
    obj.setdefault("kind", kind.kind)
    aw_name = status.appwrapper_name(obj)
    appwrapper = (
        obj
        if kind == APPWRAPPERS
        else await api.get(APPWRAPPERS, namespace, aw_name, timeout=TIMEOUT)
    )
    workloads: list[dict[str, object]] = []
    if appwrapper is not None:
        workloads = (await api.list(WORKLOADS, namespace, timeout=TIMEOUT)).get("items") or []
    pods = (
        await api.list(PODS, namespace, timeout=TIMEOUT, labels=f"{APPWRAPPER_LABEL}={aw_name}")
    ).get("items") or []
    if kind == PODS and not any(p.get("metadata", {}).get("name") == name for p in pods):
        pods = [obj, *pods]
    events = (await api.list(EVENTS, namespace, timeout=TIMEOUT)).get("items") or []
    return status.Fetched(obj, appwrapper, workloads, pods, events)


async def run(kubeconfig: str | None, kind: Kind, namespace: str, name: str) -> status.Fetched:
    api = await Api.connect(kubeconfig)
    try:
        return await fetch(api, kind, namespace, name)
    finally:
        await api.close()
