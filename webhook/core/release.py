"""Which pods of an adopted object may run: the release decisions of adopt mode.

Once Kueue admits an AppWrapper autowrap made, the pods of its object wait behind autowrap's
scheduling gate until this module says they may go. Three questions are decided here, each on
what is stored, never on what a pod says of itself:

* ``claims``: does a pod say, by any sign its object's pods carry, that it is one of them? A
  claiming pod counts against the admission while it runs, whoever made it.
* ``made_by_controller``: did the object's own controller make the pod from the template Kueue
  admitted? Resources are compared as Kubernetes computes them (``effective_resources``),
  since kube-apiserver defaults a Pod's requests from its limits and stores canonical
  quantities, LimitRanger adds defaults, and the kind's plugins add what the adapter declares.
* ``release_plan``: how many of the gated pods fit in what Kueue admitted, counting every
  running claimant, and the patch that releases each.

docs/security.md's trust table names what each decision reads.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from webhook.core import kinds, provenance
from webhook.core.adoption import (
    PODSET_ANNOTATION,
    controller_of,
    is_gated,
    is_terminating,
    ungate_spec,
)
from webhook.core.workload import has_controller_pods, pod_additions, with_additions
from webhook.model import names, objects, quantity
from webhook.model.objects import Obj, as_list, as_map


@dataclass(frozen=True)
class Release:
    """A gated pod made ready to schedule (``pod``, and ``patch``: the JSON patch that makes
    it so on the stored pod), or why it stays gated."""

    pod: Obj | None
    problem: str = ""
    patch: tuple[dict[str, Any], ...] = ()


def podset_index(pod: Mapping[str, Any]) -> int | None:
    """The podSet a pod belongs to, from the annotation admission wrote on its template."""
    index = objects.annotations_of(pod).get(PODSET_ANNOTATION, "0")
    # ASCII digits only: ``"²".isdigit()`` is true and ``int("²")`` raises. Anyone who may
    # create pods can write the annotation; a value that names no podSet holds the pod.
    return int(index) if index.isascii() and index.isdigit() else None


def podset_info(appwrapper: Mapping[str, Any], pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """Kueue's placement for the pod's podSet, or None when the pod names no written podSet."""
    position = podset_index(pod)
    if position is None:
        return None
    components = as_list(as_map(appwrapper.get("spec")).get("components"))
    infos = as_list(as_map(components[0]).get("podSetInfos")) if components else []
    return as_map(infos[position]) if position < len(infos) else None


def ungate(pod: Mapping[str, Any], info: Mapping[str, Any]) -> Release:
    """The pod with Kueue's placement applied and autowrap's gate removed, in one write.

    A gated pod accepts new labels, annotations, nodeSelector keys and tolerations and the
    removal of gates (KEP-3838, ValidatePodUpdate; adopt-mode.md K2); it does not accept a
    changed nodeSelector value or a new gate (K1). Those conflicts are the ones the AppWrapper
    controller itself treats as fatal (resource_management.go:258-263), so the pod stays gated
    and the problem is reported.

    The write is a JSON patch that only adds and removes what release changes, guarded by the
    pod's resourceVersion and by the gate's position: nothing else of the pod is sent, so the
    write cannot carry a stale copy of any other field (autowrap holds no ``update`` on pods).
    """
    result = objects.deep_copy(dict(pod))
    metadata = objects.own_map(result, "metadata")
    spec = objects.own_map(result, "spec")
    # Whether the stored pod has labels (the apiserver never stores an empty map), not what
    # they are: a pod read for a decision keeps only the labels decisions read.
    had_labels = isinstance(metadata.get("labels"), dict)
    problems: list[str] = []
    patch: list[dict[str, Any]] = [
        {
            "op": "test",
            "path": "/metadata/resourceVersion",
            "value": metadata.get("resourceVersion"),
        }
    ]
    for field, target, base in (
        ("labels", metadata, "/metadata"),
        ("annotations", metadata, "/metadata"),
        ("nodeSelector", spec, "/spec"),
    ):
        wanted = objects.as_str_map(info.get(field))
        if not wanted:
            continue
        had = isinstance(target.get(field), dict)
        current = objects.own_map(target, field)
        added = {}
        for k, v in wanted.items():
            if k in current and current[k] != v:
                problems.append(f"{field} {k!r} is {current[k]!r} on the pod, Kueue assigns {v!r}")
            elif k not in current:
                current[k] = added[k] = v
        if not had:
            patch.append({"op": "add", "path": f"{base}/{field}", "value": added})
        else:
            patch += [{"op": "add", "path": f"{base}/{field}/{_pointer(k)}", "value": v}
                      for k, v in added.items()]  # fmt: skip
    tolerations = list(as_list(spec.get("tolerations")))
    new_tolerations = [t for t in as_list(info.get("tolerations")) if t not in tolerations]
    if new_tolerations:
        if isinstance(spec.get("tolerations"), list):
            patch += [{"op": "add", "path": "/spec/tolerations/-", "value": t}
                      for t in new_tolerations]  # fmt: skip
        else:
            patch.append({"op": "add", "path": "/spec/tolerations", "value": new_tolerations})
        spec["tolerations"] = tolerations + new_tolerations
    for gate in as_list(info.get("schedulingGates")):
        name = as_map(gate).get("name")
        problems.append(
            f"Kueue asks for the scheduling gate {name!r} (topology-aware scheduling), which "
            "cannot be added to an existing pod; set mode: Redirect in the policy for this queue"
        )
    if problems:
        return Release(None, "; ".join(problems))
    # Added (or set: an ``add`` on an existing member replaces it, RFC 6902 4.1) with the gate's
    # removal, in the same write: the pod leaves the controller's watch as it is released.
    labels = objects.own_map(metadata, "labels")
    if had_labels or any(op["path"] == "/metadata/labels" for op in patch):
        patch.append({"op": "add", "path": f"/metadata/labels/{_pointer(names.RELEASED_LABEL)}",
                      "value": "true"})  # fmt: skip
    else:
        patch.append(
            {"op": "add", "path": "/metadata/labels", "value": {names.RELEASED_LABEL: "true"}}
        )
    labels[names.RELEASED_LABEL] = "true"
    for position, gate in enumerate(as_list(spec.get("schedulingGates"))):
        if as_map(gate).get("name") == names.ADMISSION_GATE:
            path = f"/spec/schedulingGates/{position}"
            patch += [{"op": "test", "path": path, "value": gate}, {"op": "remove", "path": path}]
            break
    ungate_spec(spec)
    return Release(result, patch=tuple(patch))


def _pointer(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def belongs(pod: Mapping[str, Any], appwrapper: Mapping[str, Any]) -> bool:
    """Whether the pod is the object this AppWrapper was created for (a bare Pod) or is
    controlled by it (a Volcano Job's pod): by uid, never by the AppWrapper label alone, which
    any pod of any object can carry."""
    origin = objects.annotations_of(appwrapper).get(names.ORIGIN_UID_ANNOTATION)
    if not origin:
        return False
    metadata = as_map(pod.get("metadata"))
    if metadata.get("uid") == origin:
        return True
    owner = controller_of(pod)
    return owner is not None and owner.get("uid") == origin


@dataclass(frozen=True)
class Admission:
    """Kueue's admission of an AppWrapper, as its Workload's status says: written by Kueue's
    scheduler, never by the user (``status`` is a subresource; the AppWrapper's own
    ``suspend`` and ``podSetInfos`` are fields anyone who may edit it can write). ``counts``
    is the number of pods admitted per podSet, in the AppWrapper's podSet order."""

    counts: tuple[int, ...]


def admission(
    appwrapper: Mapping[str, Any], workloads: Sequence[Mapping[str, Any]]
) -> Admission | None:
    """The admission of the Workload Kueue made for this AppWrapper (its controller reference
    names the AppWrapper's uid), or None while it is not admitted (or evicted, or finished)."""
    uid = as_map(appwrapper.get("metadata")).get("uid")
    for workload in workloads:
        owner = controller_of(workload)
        if not uid or owner is None or owner.get("uid") != uid:
            continue
        if (
            not _condition(workload, "Admitted")
            or _condition(workload, "Evicted")
            or _condition(workload, "Finished")
        ):
            continue
        declared = as_list(as_map(workload.get("spec")).get("podSets"))
        assigned = as_list(
            as_map(as_map(workload.get("status")).get("admission")).get("podSetAssignments")
        )
        counts = []
        for position, podset in enumerate(declared):
            count = as_map(assigned[position]).get("count") if position < len(assigned) else None
            if not isinstance(count, int):
                count = as_map(podset).get("count")
            counts.append(count if isinstance(count, int) and count >= 0 else 0)
        return Admission(tuple(counts))
    return None


def _condition(obj: Mapping[str, Any], kind: str) -> bool:
    return any(
        as_map(c).get("type") == kind and as_map(c).get("status") == "True"
        for c in as_list(as_map(obj.get("status")).get("conditions"))
    )


def podset_replicas(appwrapper: Mapping[str, Any]) -> tuple[int, ...]:
    """Pods per podSet of the AppWrapper's first component: its declared podSets, or the one
    pod of a Pod component, whose podSet the AppWrapper controller infers (utils.go:306-317)."""
    components = as_list(as_map(appwrapper.get("spec")).get("components"))
    first = as_map(components[0]) if components else {}
    podsets = as_list(first.get("podSets"))
    if not podsets and as_map(first.get("template")).get("kind") == "Pod":
        return (1,)
    found = []
    for podset in podsets:
        replicas = as_map(podset).get("replicas", 1)
        found.append(replicas if isinstance(replicas, int) and replicas >= 0 else 0)
    return tuple(found)


@dataclass(frozen=True)
class ReleasePlan:
    """Which gated pods of an admitted AppWrapper to release now, and what holds the rest."""

    released: tuple[tuple[Mapping[str, Any], Release], ...] = ()
    problems: tuple[tuple[Mapping[str, Any], str], ...] = ()
    waiting: bool = False  # Kueue has not written a podSet's placement yet
    held: tuple[str, ...] = ()  # why pods beyond the admitted count stay gated


def claims(pod: Mapping[str, Any], appwrapper: Mapping[str, Any]) -> bool:
    """Whether the pod says, by any of the signs its object's pods carry, that it is one of
    them: its controller reference names the origin uid, its AppWrapper label names the
    AppWrapper, or the wrapped kind's controller wrote the object's name on it (Volcano's
    job-name annotation or label). Any one of them counts the pod against the admission while
    it runs, whoever wrote it and whatever it says now; none of them is enough to release it
    (``made_by_controller``)."""
    if belongs(pod, appwrapper):
        return True
    if objects.labels_of(pod).get(names.APPWRAPPER_LABEL) == objects.name_of(appwrapper):
        return True
    template = as_map(provenance.component_template(appwrapper))
    adapter = kinds.find(template.get("apiVersion"), template.get("kind"))
    return has_controller_pods(adapter) and adapter.pod_claims(template, pod)


def claim_selectors(appwrapper: Mapping[str, Any]) -> list[str]:
    """Label selectors that together find every pod ``claims`` can see by a label: the
    AppWrapper label, and the labels the wrapped kind's controller writes. (A pod that claims
    the object only by its controller reference carries both, and cannot shed them:
    ``autowrap-wrapped-pods`` freezes them.)"""
    found = [f"{names.APPWRAPPER_LABEL}={objects.name_of(appwrapper)}"]
    template = as_map(provenance.component_template(appwrapper))
    adapter = kinds.find(template.get("apiVersion"), template.get("kind"))
    if has_controller_pods(adapter) and objects.name_of(template):
        found += adapter.claim_selectors(objects.name_of(template))
    return found


# Resources a LimitRange may write into a container that names none (kube-apiserver's
# LimitRanger admission, plugin/pkg/admission/limitranger, defaultContainerResourceRequirements):
# a pod may carry these beyond its template; any other difference is not the admitted template.
_DEFAULTED_RESOURCES = frozenset({"cpu", "memory", "ephemeral-storage"})


def made_by_controller(pod: Mapping[str, Any], appwrapper: Mapping[str, Any]) -> str:
    """Empty when the pod is one Kueue's admission of this AppWrapper covers: the adopted Pod
    itself (the AppWrapper's origin uid), or a pod the wrapped object's own controller made
    from the template the AppWrapper carries (its name, its controller's annotations, its
    priority class, and its containers' names, images and effective resources, with what the
    kind's plugins add). Otherwise what differs, for the reader of the Event. ``appwrapper``
    must be read whole (its component template), not the controller's cached view of it."""
    origin = objects.annotations_of(appwrapper).get(names.ORIGIN_UID_ANNOTATION)
    if not origin:
        return "its AppWrapper names no origin"
    if as_map(pod.get("metadata")).get("uid") == origin:
        return ""
    owner = controller_of(pod)
    if owner is None or owner.get("uid") != origin:
        return "its controller is not the adopted object"
    template = as_map(provenance.component_template(appwrapper))
    adapter = kinds.find(template.get("apiVersion"), template.get("kind"))
    groups = adapter.pod_groups(template) if adapter is not None else []
    if not has_controller_pods(adapter):
        return f"autowrap does not know how {template.get('kind')} makes its pods"
    index = podset_index(pod)
    if index is None or index >= len(groups):
        return f"its annotation {PODSET_ANNOTATION} names no podSet of the AppWrapper"
    group = groups[index]
    if problem := adapter.pod_mismatch(template, group, pod):
        return problem
    expected: Obj = {"spec": as_map(group.template.get("spec"))}
    added = pod_additions(adapter, template, groups)
    if added is not None:
        position = adapter.pod_position(template, group, pod)
        expected = with_additions(expected, added(group, position))
    return containers_mismatch(as_map(expected["spec"]), as_map(pod.get("spec")))


def containers_mismatch(template: Mapping[str, Any], spec: Mapping[str, Any]) -> str:
    """Empty when the pod spec's containers are the template's: the same names in the same
    order, the same images, and the same effective resources (``resources_mismatch``)."""
    for field in ("initContainers", "containers"):
        wanted = [as_map(c) for c in as_list(template.get(field))]
        have = [as_map(c) for c in as_list(spec.get(field))]
        if [c.get("name") for c in wanted] != [c.get("name") for c in have]:
            return (
                f"spec.{field} are {[c.get('name') for c in have]}, and the template's are "
                f"{[c.get('name') for c in wanted]}"
            )
        for want, got in zip(wanted, have, strict=True):
            where = f"spec.{field}[{want.get('name')}]"
            if want.get("image") != got.get("image"):
                return (
                    f"{where}.image is {got.get('image')!r}, the template's {want.get('image')!r}"
                )
            if problem := resources_mismatch(
                as_map(want.get("resources")), as_map(got.get("resources"))
            ):
                return f"{where}.{problem}"
    return ""


def resources_mismatch(template: Mapping[str, Any], pod: Mapping[str, Any]) -> str:
    """Empty when a container of the pod asks for what the template's container asks for, as
    Kubernetes computes it: quantities by value, requests defaulted from limits on both sides
    (``quantity.effective_requirements``), and cpu, memory or ephemeral-storage the template
    leaves out allowed on the pod (a LimitRange's defaults). Anything else, more or less,
    is not the template Kueue admitted."""
    asked = quantity.effective_requirements(template)
    given = quantity.effective_requirements(pod)
    for part, want, got in zip(("requests", "limits"), asked, given, strict=True):
        extra = set(got) - set(want) - _DEFAULTED_RESOURCES
        if extra or any(got.get(name) != value for name, value in want.items()):
            return (
                f"resources.{part} are {_shown(got)}, and Kueue admitted the template's "
                f"{_shown(want)}"
            )
    return ""


def _shown(values: Mapping[str, Any]) -> str:
    return (
        "{"
        + ", ".join(
            f"{name}: {quantity.show(v) if not isinstance(v, str) else v}"
            for name, v in sorted(values.items())
        )
        + "}"
    )


def release_plan(
    appwrapper: Mapping[str, Any], pods: Sequence[Mapping[str, Any]], admitted: Admission
) -> ReleasePlan:
    """At most as many pods run per podSet as Kueue admitted (and the AppWrapper declares),
    counting every running pod that claims the object (``claims``: whoever made it, whatever
    labels it has now); only pods the object's own controller made from the admitted template
    (``made_by_controller``) are released. ``appwrapper`` is read whole (its component
    template); ``pods`` are read live, found by ``claim_selectors``."""
    declared = podset_replicas(appwrapper)
    active: dict[int, int] = {}
    everywhere = 0  # running pods that claim the object but name no podSet: count in each
    strangers: list[str] = []  # running pods that claim the object but are not the admitted ones
    gated: dict[int, list[Mapping[str, Any]]] = {}
    problems: list[tuple[Mapping[str, Any], str]] = []
    seen: set[str] = set()
    for pod in pods:
        uid = str(as_map(pod.get("metadata")).get("uid") or objects.name_of(pod))
        if uid in seen or is_terminating(pod) or not claims(pod, appwrapper):
            continue
        seen.add(uid)
        index = podset_index(pod)
        if not is_gated(pod):
            if as_map(pod.get("status")).get("phase") in ("Succeeded", "Failed"):
                continue
            if made_by_controller(pod, appwrapper):
                strangers.append(objects.name_of(pod))
            if index is None or index >= len(declared):
                everywhere += 1
            else:
                active[index] = active.get(index, 0) + 1
            continue
        if not belongs(pod, appwrapper):
            continue  # another object's pod (it carries this AppWrapper's label): not ours
        if problem := made_by_controller(pod, appwrapper):
            problems.append((pod, f"it is not a pod the admission covers: {problem}"))
            continue
        assert index is not None  # made_by_controller checked it
        gated.setdefault(index, []).append(pod)
    released: list[tuple[Mapping[str, Any], Release]] = []
    held: list[str] = []
    waiting = False
    for index in sorted(gated):
        allowed = min(
            declared[index] if index < len(declared) else 0,
            admitted.counts[index] if index < len(admitted.counts) else 0,
        )
        running = active.get(index, 0) + everywhere
        room = allowed - running
        group = sorted(gated[index], key=objects.name_of)
        if len(group) > room:
            why = (
                f"{len(group) - max(room, 0)} pod(s) of podSet {index} stay gated: Kueue admitted "
                f"{allowed} for it and {running} pod(s) that claim the object already run"
            )
            if strangers:
                why += (
                    f", among them {', '.join(sorted(strangers))}, which the object's controller "
                    "did not make from the admitted template (delete them; see who created them "
                    "in the audit log)"
                )
            else:
                why += (
                    "; a podSet's replicas cannot grow after its AppWrapper was created (delete "
                    "the object and create it again with the new size)"
                )
            held.append(why)
        for pod in group[: max(room, 0)]:
            info = podset_info(appwrapper, pod)
            if info is None:
                waiting = True
                continue
            outcome = ungate(pod, info)
            if outcome.pod is None:
                problems.append((pod, outcome.problem))
            else:
                released.append((pod, outcome))
    return ReleasePlan(tuple(released), tuple(problems), waiting, tuple(held))


def escaped(appwrapper: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]) -> int:
    """Pods of the object that run, or may, although the AppWrapper is queued: someone other
    than autowrap removed their gate."""
    if not objects.is_suspended(appwrapper):
        return 0
    return sum(
        1
        for pod in pods
        if belongs(pod, appwrapper)
        and not is_gated(pod)
        and not is_terminating(pod)
        and as_map(pod.get("status")).get("phase") not in ("Succeeded", "Failed")
    )
