"""AppWrapper's podSets: at most 8 over all components (Kueue's Workload allows more, but the
AppWrapper webhook refuses a ninth), the podSets AppWrapper infers for the kinds it knows, and
its path syntax.

Source: project-codeflare/appwrapper v1.2.1 (b47a99e), ``internal/webhook/appwrapper_webhook.go``
:202-235 (declared paths must reach a pod template; each component counts the larger of its
declared and inferred podSets; at most 8) and ``pkg/utils/utils.go`` :239-296 (``getValueAtPath``)
and :475-583 (``InferPodSets``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from webhook.model import names
from webhook.model.fields import FieldPath, Violation, error
from webhook.model.objects import as_list, as_map, int_or_none

TEMPLATE = "template"


def check(count: int, *, path: FieldPath, at_least_one: bool = False) -> list[Violation]:
    """The podSet count; ``at_least_one`` for a whole AppWrapper, which AppWrapper refuses
    without any pod template (appwrapper_webhook.go:230-232)."""
    if at_least_one and count == 0:
        return [
            error(
                path,
                "no component holds a pod template, and an AppWrapper needs at least one pod set; "
                "add the workload, or declare podSets for a kind AppWrapper cannot infer them for",
            )
        ]
    limit = names.APPWRAPPER_MAX_PODSETS
    if count > limit:
        return [
            error(
                path,
                f"{count} pod sets (one per pod template) but an AppWrapper holds at most {limit}; merge "
                "groups that share a template, or split the workload",
            )
        ]
    return []


def appwrapper_path(template_path: FieldPath) -> str:
    """A path inside a component's template in AppWrapper's syntax: ``template`` for the
    template itself, then ``.field`` and ``[i]`` (``template.spec.tasks[0].template``)."""
    out = TEMPLATE
    for part in template_path.parts:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


_STEP = re.compile(r"\.([^.\[]+)|\[([^\]]*)\]")


def resolve(template: Mapping[str, Any], path: str) -> tuple[object, FieldPath] | str:
    """The value at an AppWrapper path and where it is (``template`` first), or why it is not
    there, as AppWrapper's ``getValueAtPath`` walks it (utils.go:239-296)."""
    if not path.startswith(TEMPLATE):
        return "the first element of the path must be 'template'"
    where = FieldPath((TEMPLATE,))
    node: object = template
    rest = path[len(TEMPLATE) :]
    while rest:
        step = _STEP.match(rest)
        if step is None:
            return f"{rest!r} at {where} is neither .field nor [index]"
        key, index = step.groups()
        if key is not None:
            if not isinstance(node, Mapping) or key not in node:
                return f"{where} has no field {key!r}"
            node, where = node[key], where.child(key)
        else:
            if not index.isdigit():
                return f"{index!r} at {where} is not an array index"
            if not isinstance(node, list) or int(index) >= len(node):
                return f"{where} has no item [{index}]"
            node, where = node[int(index)], where.index(int(index))
        rest = rest[step.end() :]
    return node, where


@dataclass(frozen=True)
class Inferred:
    path: str
    replicas: int


def inferred(template: Mapping[str, Any]) -> list[Inferred]:
    """The podSets AppWrapper infers for a component of a kind it knows (utils.go:475-574);
    [] for any other kind (a Volcano Job among them: its podSets must be declared)."""
    api_version, kind = template.get("apiVersion"), template.get("kind")
    spec = as_map(template.get("spec"))
    if (api_version, kind) == ("v1", "Pod"):
        return [Inferred("template", 1)]
    if (api_version, kind) in (("apps/v1", "Deployment"), ("apps/v1", "StatefulSet")):
        if "template" not in spec:
            return []
        return [Inferred("template.spec.template", _replicas(spec.get("replicas")))]
    if (api_version, kind) == ("batch/v1", "Job"):
        return [Inferred("template.spec.template", _job_pods(spec))]
    if (api_version, kind) == ("jobset.x-k8s.io/v1alpha2", "JobSet"):
        found = []
        for i, job in enumerate(as_list(spec.get("replicatedJobs"))):
            job = as_map(job)
            if "template" in job:
                pods = _job_pods(as_map(as_map(job.get("template")).get("spec")))
                found.append(
                    Inferred(
                        f"template.spec.replicatedJobs[{i}].template.spec.template",
                        _replicas(job.get("replicas")) * pods,
                    )
                )
        return found
    if (api_version, kind) == ("kubeflow.org/v1", "PyTorchJob"):
        specs = as_map(spec.get("pytorchReplicaSpecs"))
        return [
            Inferred(
                f"template.spec.pytorchReplicaSpecs.{role}.template",
                _replicas(as_map(specs[role]).get("replicas")),
            )
            for role in ("Master", "Worker")
            if role in specs and "template" in as_map(specs[role])
        ]
    if (api_version, kind) == ("ray.io/v1", "RayCluster"):
        return _ray(spec, "template.spec.")
    if (api_version, kind) == ("ray.io/v1", "RayJob"):
        return _ray(as_map(spec.get("rayClusterSpec")), "template.spec.rayClusterSpec.")
    return []


def _replicas(value: object) -> int:
    number = int_or_none(value)
    return 1 if number is None else number


def _job_pods(job_spec: Mapping[str, Any]) -> int:
    pods = _replicas(job_spec.get("parallelism"))
    completions = int_or_none(job_spec.get("completions"))
    return completions if completions is not None and completions < pods else pods


def _ray(cluster: Mapping[str, Any], prefix: str) -> list[Inferred]:
    found = [Inferred(prefix + "headGroupSpec.template", 1)]
    for i, group in enumerate(as_list(cluster.get("workerGroupSpecs"))):
        if "template" in as_map(group):
            found.append(
                Inferred(
                    f"{prefix}workerGroupSpecs[{i}].template",
                    _replicas(as_map(group).get("replicas")),
                )
            )
    return found
