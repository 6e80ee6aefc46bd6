"""The pods a produced object makes the cluster run, and what each one sees.

``autowrap render --pods`` prints this so that nobody resolves downward-API env by hand. For
every pod group of the object (every component of an AppWrapper), the pods are built the way
their controller builds them (the template, the pod's name, the controller's pod-index
annotation such as Volcano's ``volcano.sh/task-index``), then autowrap's own pod mutation runs
on them (``plumbing.pods.mutate``, the code the pod webhook runs: it writes
``autowrap.io/node-rank``), and the first container's env is resolved as kubelet resolves it
(literals with ``$(VAR)`` references, ``fieldRef`` to the pod's name, namespace, labels and
annotations; the last entry of a name wins). Pure.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from webhook.core import kinds
from webhook.core.plumbing import env as env_plumbing
from webhook.core.plumbing import pods as pod_plumbing
from webhook.core.workload import (
    KindAdapter,
    PodAdditions,
    PodGroup,
    pod_additions,
    with_additions,
)
from webhook.model import objects
from webhook.model.objects import Obj, as_list, as_map

NOT_SET = "-"  # autowrap injects nothing of that name into this pod
UNKNOWN = "?"  # set, but to something only the running pod knows (see the row's notes)

_FIELD_REF = re.compile(r"^metadata\.(annotations|labels)\[['\"](.+)['\"]\]$")
_RUNTIME_FIELDS = {
    "metadata.uid": "the pod's uid",
    "spec.nodeName": "the node's name",
    "spec.serviceAccountName": "the service account",
    "status.hostIP": "the node's IP",
    "status.podIP": "the pod's IP",
    "status.podIPs": "the pod's IPs",
}


@dataclass(frozen=True)
class PodRow:
    workload: str  # "Job ml/train": the object whose controller creates the pod
    task: str  # the pod group (a Volcano task; a Pod's own name)
    pod: str
    node_rank: str
    master_addr: str
    master_port: str
    nnodes: str
    nproc: str
    world_size: str
    gates: tuple[str, ...]  # scheduling gates the pod starts with (it waits until all are gone)
    notes: tuple[str, ...] = ()  # why a value is UNKNOWN, or what the pod webhook refused
    # The first container's entries whose value refers to other variables (``$(MASTER_ADDR)``),
    # as the process sees them once kubelet expanded them.
    expanded: tuple[tuple[str, str], ...] = ()

    @property
    def master(self) -> str:
        if self.master_addr == NOT_SET and self.master_port == NOT_SET:
            return NOT_SET
        return f"{self.master_addr}:{self.master_port}"


def pods(obj: Mapping[str, Any], namespace: str = "default") -> list[PodRow]:
    """One row per pod the object makes the cluster run, in spec order (empty for objects
    that make none, such as a Service or a ConfigMap)."""
    ns = str(as_map(obj.get("metadata")).get("namespace") or namespace)
    if objects.is_appwrapper(obj):
        rows: list[PodRow] = []
        for component in as_list(as_map(obj.get("spec")).get("components")):
            template = as_map(as_map(component).get("template"))
            rows += _workload_pods(template, ns)
        return rows
    return _workload_pods(obj, ns)


def _workload_pods(obj: Mapping[str, Any], namespace: str) -> list[PodRow]:
    adapter = kinds.find(obj.get("apiVersion"), obj.get("kind"))
    if adapter is None:
        return []
    ns = str(as_map(obj.get("metadata")).get("namespace") or namespace)
    workload = f"{obj.get('kind')} {ns}/{objects.name_of(obj) or '<generated>'}"
    rows = []
    groups = adapter.pod_groups(obj)
    additions = pod_additions(adapter, obj, groups)
    for group in groups:
        for index in range(group.replicas):
            pod, refused = _created_pod(obj, adapter, group, index, ns)
            added = additions(group, index) if additions else []
            created = with_additions(pod, added)
            row = _row(workload, group.name, created, refused)
            rows.append(_noting_replaced(row, pod, created, added) if added else row)
    return rows


def _first_container(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    containers = as_list(as_map(pod.get("spec")).get("containers"))
    return as_map(containers[0]) if containers else {}


def _noting_replaced(
    row: PodRow, template_pod: Obj, created: Obj, added: list[PodAdditions]
) -> PodRow:
    """The row with a note naming each value the controller's additions replace (kubelet keeps
    the last entry of a name), and the PET_* mirror torchrun still reads."""
    before, _ = resolve_env(template_pod, _first_container(template_pod))
    after, _ = resolve_env(created, _first_container(created))
    notes = []
    for a in added:
        replaced = [n for n, _ in a.env if n in before and before[n] != after.get(n)]
        if not replaced:
            continue
        values = ", ".join(
            f"{n}={after.get(n)} (autowrap's: {before[n] or UNKNOWN})" for n in replaced
        )
        mirrors = [f"PET_{n}={after[f'PET_{n}']}" for n in replaced if f"PET_{n}" in after]
        still = f"; torchrun still reads {', '.join(mirrors)}" if mirrors else ""
        notes.append(
            f"{a.source} ({a.path}) appends {values} after autowrap's entries, and kubelet "
            f"keeps the last, so this pod runs with them{still}"
        )
    return replace(row, notes=(*row.notes, *notes)) if notes else row


def _created_pod(
    obj: Mapping[str, Any], adapter: KindAdapter, group: PodGroup, index: int, namespace: str
) -> tuple[Obj, tuple[str, ...]]:
    """The pod as its controller creates it, after autowrap's pod webhook."""
    template_meta = as_map(group.template.get("metadata"))
    annotations = dict(as_map(template_meta.get("annotations")))
    if group.pod_index_key is not None:
        annotations[group.pod_index_key] = str(index)
    pod: Obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": adapter.pod_name(obj, group, index),
            "namespace": namespace,
            "labels": dict(as_map(template_meta.get("labels"))),
            "annotations": annotations,
        },
        "spec": as_map(group.template.get("spec")),
    }
    mutation = pod_plumbing.mutate(pod)
    refused = tuple(f"the pod webhook refuses it: {v.render()}" for v in mutation.violations)
    return (mutation.pod if mutation.pod is not None else pod), refused


def _row(workload: str, task: str, pod: Obj, refused: tuple[str, ...]) -> PodRow:
    spec = as_map(pod.get("spec"))
    containers = as_list(spec.get("containers"))
    env, notes = resolve_env(pod, as_map(containers[0])) if containers else ({}, [])
    gates = tuple(
        str(as_map(g).get("name")) for g in as_list(spec.get("schedulingGates")) if as_map(g)
    )

    def value(name: str) -> str:
        got = env.get(name)
        return NOT_SET if got is None else (got or UNKNOWN)

    referring = _referring(as_map(containers[0])) if containers else []

    return PodRow(
        workload=workload,
        task=task,
        pod=objects.name_of(pod),
        node_rank=value("NODE_RANK"),
        master_addr=value("MASTER_ADDR"),
        master_port=value("MASTER_PORT"),
        nnodes=value("NNODES"),
        nproc=value("NPROC_PER_NODE"),
        world_size=value("WORLD_SIZE"),
        gates=gates,
        notes=(*refused, *notes),
        expanded=tuple((n, env.get(n, "")) for n in referring),
    )


def _referring(container: Mapping[str, Any]) -> list[str]:
    """Names of the entries whose literal value refers to other variables, once each."""
    found = [
        str(entry["name"])
        for entry in (as_map(e) for e in as_list(container.get("env")))
        if isinstance(entry.get("name"), str)
        and "valueFrom" not in entry
        and env_plumbing.references(entry.get("value"))
    ]
    return list(dict.fromkeys(found))


def resolve_env(
    pod: Mapping[str, Any], container: Mapping[str, Any]
) -> tuple[dict[str, str], list[str]]:
    """A container's env as kubelet gives it to the process, and notes on what only the
    running pod can know (those values are empty here)."""
    out: dict[str, str] = {}
    notes: list[str] = []
    for raw in as_list(container.get("env")):
        entry = as_map(raw)
        name = entry.get("name")
        if not isinstance(name, str):
            continue
        source = as_map(entry.get("valueFrom"))
        if not source:
            text = str(entry.get("value", ""))
            later = sorted(env_plumbing.references(text) - out.keys())
            if later:
                listed = ", ".join(f"$({n})" for n in later)
                notes.append(
                    f"{name}: {listed} stays as written: kubelet expands only variables "
                    "defined above it in env; move the entry below them"
                )
            out[name] = _expand(text, out)
            continue
        field_path = as_map(source.get("fieldRef")).get("fieldPath")
        if not isinstance(field_path, str):
            out[name] = ""
            notes.append(f"{name} comes from {', '.join(source) or 'nothing'}, read at run time")
            continue
        value, note = _field(pod, field_path)
        out[name] = value
        if note:
            notes.append(f"{name}: {note}")
    return out, notes


def _expand(text: str, defined: Mapping[str, str]) -> str:
    """Kubelet's ``$(VAR)`` expansion (third_party/forked/golang/expansion/expand.go): earlier
    entries only; ``$$`` is a literal ``$``; an unknown reference stays as written."""

    def one(m: re.Match[str]) -> str:
        if m.group(1) is None:
            return "$"
        return defined.get(m.group(1), m.group(0))

    return env_plumbing.REFERENCE.sub(one, text)


def _field(pod: Mapping[str, Any], path: str) -> tuple[str, str]:
    meta = as_map(pod.get("metadata"))
    if path in ("metadata.name", "metadata.namespace"):
        return str(meta.get(path.split(".")[1], "")), ""
    m = _FIELD_REF.match(path)
    if m is None:
        what = _RUNTIME_FIELDS.get(path, path)
        return "", f"{what} ({path}) is known only once the pod runs"
    section, key = m.group(1), m.group(2)
    value = as_map(meta.get(section)).get(key)
    if value is None:
        kind = "annotation" if section == "annotations" else "label"
        return "", f"the pod has no {kind} {key}, so kubelet gives an empty value"
    return str(value), ""
