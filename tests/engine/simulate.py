"""What the cluster does with a rendered AppWrapper's pod templates, as far as env is concerned.

Volcano creates pod ``{job}-{task}-{i}`` from the task template, sets ``volcano.sh/task-index``
as label and annotation, and its svc plugin fills an empty hostname/subdomain; autowrap's pod
mutation then runs (``webhook.core.plumbing.pods.mutate``); kubelet resolves each env entry (a
literal, expanded against the entries above it, or a downward-API fieldRef) and keeps the last
entry of a name.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from testbed.sim.kubelet import expand
from webhook.core.plumbing import pods
from webhook.model import names

_FIELD_REF = re.compile(r"^metadata\.(annotations|labels)\[['\"](.+)['\"]\]$")


@dataclass(frozen=True)
class SimPod:
    task: str
    index: int
    pod: dict[str, Any]

    @property
    def name(self) -> str:
        return str(self.pod["metadata"]["name"])

    @property
    def fqdn(self) -> str:
        spec = self.pod["spec"]
        return f"{spec['hostname']}.{spec['subdomain']}"

    def env(self, container: int = 0, *, init: bool = False) -> dict[str, str]:
        key = "initContainers" if init else "containers"
        return resolve_env(self.pod, self.pod["spec"][key][container])


class Unresolvable(AssertionError):
    pass


def resolve_env(pod: Mapping[str, Any], container: Mapping[str, Any]) -> dict[str, str]:
    """Every env entry of a container as kubelet would see it on this pod: a literal value is
    expanded against the entries defined before it (``$(NAME)``; ``$$`` is a ``$``; a name not
    yet defined stays as written), as makeEnvironmentVariables does."""
    out: dict[str, str] = {}
    for entry in container.get("env") or []:
        name = entry["name"]
        if "value" in entry or "valueFrom" not in entry:
            out[name] = expand(str(entry.get("value", "")), out)
            continue
        ref = entry["valueFrom"].get("fieldRef")
        if ref is None:
            continue
        out[name] = _field(pod, ref["fieldPath"])
    return out


def _field(pod: Mapping[str, Any], path: str) -> str:
    meta = pod.get("metadata", {})
    if path in ("metadata.name", "metadata.namespace"):
        return str(meta[path.split(".")[1]])
    m = _FIELD_REF.match(path)
    if m is None:
        raise Unresolvable(f"unsupported fieldPath {path!r}")
    section = meta.get(m.group(1)) or {}
    if m.group(2) not in section:
        raise Unresolvable(f"pod {meta.get('name')} has no {m.group(1)}[{m.group(2)}] for {path}")
    return str(section[m.group(2)])


def volcano_pods(job: Mapping[str, Any]) -> Iterator[SimPod]:
    """The pods Volcano creates for a (wrapped) Job, after autowrap's pod mutation."""
    job_name = job["metadata"]["name"]
    for position, task in enumerate(job["spec"]["tasks"]):
        task_name = task.get("name") or f"default{position}"
        for i in range(task.get("replicas") or 0):
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                **copy.deepcopy({k: v for k, v in task["template"].items()}),
            }
            meta = pod.setdefault("metadata", {})
            meta["name"] = f"{job_name}-{task_name}-{i}"
            meta.setdefault("labels", {})[names.VOLCANO_TASK_INDEX] = str(i)
            meta.setdefault("annotations", {})[names.VOLCANO_TASK_INDEX] = str(i)
            meta["labels"]["volcano.sh/job-name"] = job_name
            meta["labels"]["volcano.sh/task-spec"] = task_name
            meta["ownerReferences"] = [
                {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "name": job_name}
            ]
            spec = pod["spec"]
            if not spec.get("hostname"):
                spec["hostname"] = meta["name"]
            if not spec.get("subdomain"):
                spec["subdomain"] = job_name
            mutation = pods.mutate(pod)
            if mutation.violations:
                raise AssertionError(
                    f"pod mutation refused {meta['name']}: {[v.render() for v in mutation.violations]}"
                )
            yield SimPod(task_name, i, mutation.pod if mutation.pod is not None else pod)


def component_job(appwrapper: Mapping[str, Any]) -> dict[str, Any]:
    """The one Volcano Job among an AppWrapper's components."""
    jobs = [
        c["template"]
        for c in appwrapper["spec"]["components"]
        if c["template"].get("kind") == "Job"
    ]
    assert len(jobs) == 1, f"expected one Volcano Job component, found {len(jobs)}"
    return jobs[0]


def pods_of(appwrapper: Mapping[str, Any]) -> list[SimPod]:
    return list(volcano_pods(component_job(appwrapper)))


def rank_order(job: Mapping[str, Any]) -> list[tuple[str, int]]:
    """(task, index) in global node order: master task first, then the others in spec order."""
    tasks = [
        (t.get("name") or f"default{i}", t.get("replicas") or 0)
        for i, t in enumerate(job["spec"]["tasks"])
    ]
    task_names = [n for n, _ in tasks]
    wanted = (job["metadata"].get("annotations") or {}).get(names.MASTER_TASK_ANNOTATION)
    if wanted in task_names:
        master = wanted
    elif "master" in task_names:
        master = "master"
    else:
        master = task_names[0]
    first = next(t for t in tasks if t[0] == master)
    ordered = [first] + [t for t in tasks if t is not first]
    return [(n, i) for n, r in ordered for i in range(r)]
