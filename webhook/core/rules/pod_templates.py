"""Pod templates as AppWrapper and Kubernetes will read them.

Every pod group's template becomes an AppWrapper podSet, and AppWrapper refuses a podSet path
that holds no map or a map without ``spec`` (project-codeflare/appwrapper
pkg/utils/utils.go:52-66, via internal/webhook/appwrapper_webhook.go:209), or a ``spec`` that
does not parse as a PodSpec (``webhook.model.podschema``). Kubernetes' own pod validation, which
Volcano runs on every task template (volcano-sh/volcano
pkg/webhooks/admission/jobs/validate/admit_job.go:334-359, ``ValidatePodTemplate``), refuses
negative quantities, requests above limits and pod-level resources below what the containers
ask for together (the cases of admit_job_test.go:1817-2025), and an extended resource
(``nvidia.com/gpu``, ``huawei.com/ascend-1980``) or hugepages that are not whole, requested
without a limit or with a request other than the limit: kubernetes/kubernetes
pkg/apis/core/validation/validation.go, ``ValidateResourceRequirements`` (a request of a
resource for which ``helper.IsOvercommitAllowed`` is false needs a limit and must equal it) and
``ValidateResourceQuantityValue`` (``helper.IsIntegerResourceName``: whole numbers only).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

from webhook.core.rules import podsets
from webhook.core.workload import PodGroup
from webhook.model import objects, podschema, quantity
from webhook.model.fields import FieldPath, Violation, error
from webhook.model.objects import as_list, as_map

CONTAINER_LISTS = ("initContainers", "containers")
# What pod-level resources may set (Kubernetes: cpu, memory and hugepages).
POD_LEVEL = ("cpu", "memory")


def check(obj: Mapping[str, Any], groups: Iterable[PodGroup]) -> list[Violation]:
    found: list[Violation] = []
    for group in groups:
        template = objects.get(obj, group.template_path)
        found += check_template(template, group.template_path, owner=f"{group.name!r}")
    return found


def check_podsets(
    template: Mapping[str, Any], declared: object, component: FieldPath
) -> list[Violation]:
    """The pod templates of a component of a kind autowrap does not wrap itself: every declared
    podSet path must reach one (appwrapper_webhook.go:202-212), and the templates of the podSets
    AppWrapper infers for the kinds it knows are checked as well (utils.go:576-580)."""
    found: list[Violation] = []
    seen: set[str] = set()
    for j, podset in enumerate(as_list(declared)):
        where = component.child("podSets").index(j).child("path")
        path = as_map(podset).get("path")
        if not isinstance(path, str) or not path:
            found.append(
                error(
                    where,
                    "missing; set the path of the pod template inside the component, such as "
                    "template.spec.template",
                )
            )
            continue
        seen.add(path)
        found += _check_at(template, path, component, where)
    for podset in podsets.inferred(template):
        if podset.path not in seen:
            found += _check_at(template, podset.path, component, component.child("template"))
    return found


def _check_at(
    template: Mapping[str, Any], path: str, component: FieldPath, blame: FieldPath
) -> list[Violation]:
    resolved = podsets.resolve(template, path)
    if isinstance(resolved, str):
        return [
            error(
                blame,
                f"{path!r} does not reach a pod template: {resolved}; point it at a map with "
                "metadata and spec, such as template.spec.template",
            )
        ]
    value, where = resolved
    return check_template(value, component.join(where), owner=f"pod set {path!r}")


def check_template(template: object, path: FieldPath, *, owner: str) -> list[Violation]:
    """A pod template (or a Pod) at ``path``: present, with a spec that is a valid PodSpec."""
    if not isinstance(template, Mapping):
        return [
            error(
                path,
                f"{owner} has no pod template; add one with spec.containers (AppWrapper refuses a "
                "pod set without a template, and Volcano a task without containers)",
            )
        ]
    spec = template.get("spec")
    if not isinstance(spec, Mapping):
        return [
            error(
                path.child("spec"),
                f"the pod template of {owner} has no spec; add spec.containers (AppWrapper refuses "
                "a pod set whose template has no spec)",
            )
        ]
    spec_path = path.child("spec")
    return podschema.check_spec(spec, spec_path) + check_resources(spec, spec_path)


def check_resources(spec: Mapping[str, Any], path: FieldPath) -> list[Violation]:
    found: list[Violation] = []
    for list_name in CONTAINER_LISTS:
        for ci, container in enumerate(as_list(spec.get(list_name))):
            resources = as_map(as_map(container).get("resources"))
            found += _check_requirements(
                resources, path.child(list_name).index(ci).child("resources")
            )
    pod_resources = as_map(spec.get("resources"))
    if pod_resources:
        where = path.child("resources")
        found += _check_requirements(pod_resources, where)
        found += _check_pod_level(spec, pod_resources, where)
    return found


def _check_requirements(resources: Mapping[str, Any], path: FieldPath) -> list[Violation]:
    found: list[Violation] = []
    amounts: dict[str, dict[str, Decimal]] = {}
    for kind in ("limits", "requests"):
        parsed: dict[str, Decimal] = {}
        for name, raw in as_map(resources.get(kind)).items():
            if refused_name(str(name)):
                found.append(
                    error(
                        path.child(kind).key(str(name)),
                        f"{name} is not a resource name Kubernetes accepts in a pod: a name with "
                        "a domain must not start with 'requests.' (the prefix of quota names); "
                        "use the name the device plugin advertises, such as nvidia.com/gpu",
                    )
                )
                continue
            value = quantity.parse(raw)
            if value is None:
                continue  # the schema check names a value that is not a quantity
            if value < 0:
                found.append(
                    error(
                        path.child(kind).key(str(name)),
                        f"{raw} is negative; a resource quantity must be ≥ 0",
                    )
                )
                continue
            parsed[str(name)] = value
        amounts[kind] = parsed
    for kind, parsed in amounts.items():
        for name, value in parsed.items():
            if is_extended(name) and value != value.to_integral_value():
                found.append(
                    error(
                        path.child(kind).key(name),
                        f"{quantity.show(value)} is not a whole number; {name} is an extended "
                        "resource, which Kubernetes counts in whole devices",
                    )
                )
    for name, request in amounts["requests"].items():
        limit = amounts["limits"].get(name)
        if not overcommit_allowed(name):
            found += _exact(name, request, limit, path)
            continue
        if limit is not None and request > limit:
            found.append(
                error(
                    path.child("requests").key(name),
                    f"the request {quantity.show(request)} is more than the limit "
                    f"{quantity.show(limit)}; lower the request or raise the limit",
                )
            )
    return found


def is_native(name: str) -> bool:
    """A resource Kubernetes defines itself: no domain, or a ``kubernetes.io/`` one
    (``helper.IsNativeResource``)."""
    return "/" not in name or "kubernetes.io/" in name


def is_extended(name: str) -> bool:
    """An extended resource (``helper.IsExtendedResourceName``): one a device plugin or an
    operator advertises, such as ``nvidia.com/gpu``."""
    return not is_native(name) and not name.startswith("requests.")


def refused_name(name: str) -> bool:
    """A name with a domain that is neither native nor extended, such as
    ``requests.nvidia.com/gpu``: Kubernetes refuses it in a container ("doesn't follow extended
    resource name standard": validation.go ``validateContainerResourceName``)."""
    return not is_native(name) and not is_extended(name)


def overcommit_allowed(name: str) -> bool:
    """``helper.IsOvercommitAllowed``: native resources other than hugepages."""
    return is_native(name) and not name.startswith("hugepages-")


def _exact(name: str, request: Decimal, limit: Decimal | None, path: FieldPath) -> list[Violation]:
    """A resource Kubernetes never overcommits: the request needs a limit, and the same one."""
    what = "an extended resource" if is_extended(name) else "hugepages"
    amount = quantity.show(request)
    if limit is None:
        return [
            error(
                path.child("limits").key(name),
                f"required: {name} is {what}, which Kubernetes never overcommits, so a request "
                f"needs a limit and the pod is refused without one; set limits: {{{name}: "
                f"{amount}}} (a limit alone is enough: the request defaults to it)",
            )
        ]
    if request != limit:
        return [
            error(
                path.child("requests").key(name),
                f"the request {amount} differs from the limit {quantity.show(limit)}; {name} is "
                f"{what}, which Kubernetes never overcommits, so the request must equal the "
                "limit: set both to the same amount, or drop the request (it defaults to the "
                "limit)",
            )
        ]
    return []


def _check_pod_level(
    spec: Mapping[str, Any], pod_resources: Mapping[str, Any], path: FieldPath
) -> list[Violation]:
    """Pod-level requests (limits where requests are unset) cover what the containers request
    together: regular containers and sidecars side by side, each init container alone."""
    found: list[Violation] = []
    pod = _effective(pod_resources)
    for name, pod_amount in pod.items():
        if name not in POD_LEVEL and not name.startswith("hugepages-"):
            continue
        needed = _aggregate(spec, name)
        if pod_amount < needed:
            where = "requests" if name in _quantities(pod_resources, "requests") else "limits"
            found.append(
                error(
                    path.child(where).key(name),
                    f"the pod-level {quantity.show(pod_amount)} is less than the "
                    f"{quantity.show(needed)} its containers request together; raise it to at "
                    "least that or lower the containers' requests",
                )
            )
    return found


def _quantities(resources: Mapping[str, Any], kind: str) -> dict[str, Decimal]:
    out: dict[str, Decimal] = {}
    for name, raw in as_map(resources.get(kind)).items():
        value = quantity.parse(raw)
        if value is not None and value >= 0:
            out[str(name)] = value
    return out


def _effective(resources: Mapping[str, Any]) -> dict[str, Decimal]:
    """Requests, with limits standing in where a request is unset (Kubernetes' defaulting)."""
    return {**_quantities(resources, "limits"), **_quantities(resources, "requests")}


def _aggregate(spec: Mapping[str, Any], name: str) -> Decimal:
    sidecars = Decimal(0)
    peak_init = Decimal(0)
    for container in as_list(spec.get("initContainers")):
        amount = _effective(as_map(as_map(container).get("resources"))).get(name, Decimal(0))
        if as_map(container).get("restartPolicy") == "Always":
            sidecars += amount
        else:
            peak_init = max(peak_init, sidecars + amount)
    regular = sum(
        (
            _effective(as_map(as_map(c).get("resources"))).get(name, Decimal(0))
            for c in as_list(spec.get("containers"))
        ),
        Decimal(0),
    )
    return max(regular + sidecars, peak_init)
