"""Pods waiting for a release, as the controller's cache keeps them: from their metadata alone.

The controller follows labelled pods that autowrap has not released (its watch selects
``workload.codeflare.dev/appwrapper,!autowrap.io/released``), and anyone who may create pods
can label theirs so, and fill them up to what the apiserver stores. So the watch asks for
metadata only (PartialObjectMetadata), and the cache keeps of it a few bounded fields: which
AppWrapper the pod names, its podSet, its controller, whether it is being deleted and its
``generation``. That is enough to know which AppWrapper to look at and when; the decisions
themselves (what to release, which pods run without Kueue's admission) read the pods live,
and ``decision_view`` cuts each pod so read to what those decisions use.

``generation`` says whether anything may have taken the gate off: the apiserver counts every
change of a pod's spec in it (KEP-5067, Pod Generation, from Kubernetes 1.33), and a pod is
created with its gate, so a pod at generation 1 still has it. Autowrap's own release changes
the spec too, but the same write labels the pod released, which takes it out of the watch.
A cluster that does not count (no ``generation``) is read live whenever it matters.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webhook.core import adoption, provenance, release
from webhook.core.adoption import PODSET_ANNOTATION
from webhook.model import names, objects
from webhook.model.objects import as_list, as_map

Obj = dict[str, Any]

# Anything longer is not a podSet index admission wrote; cut, so that it costs nothing kept.
_PODSET_CHARS = 8
_KEPT = ("name", "namespace", "uid", "resourceVersion", "generation", "deletionTimestamp")
_OWNER_KEYS = ("apiVersion", "kind", "name", "uid", "controller")


def waiting_pod(pod: Mapping[str, Any]) -> Obj | None:
    """A labelled pod not released yet, from its metadata, as the cache keeps it; None for a
    pod no admission of autowrap's prepared (no podSet annotation): never released, so never
    cached. The result holds the same few short fields whatever the pod carries."""
    metadata = as_map(pod.get("metadata"))
    annotations = as_map(metadata.get("annotations"))
    podset = annotations.get(PODSET_ANNOTATION)
    if podset is None:
        return None
    kept: Obj = {k: metadata[k] for k in _KEPT if k in metadata}
    aw_name = as_map(metadata.get("labels")).get(names.APPWRAPPER_LABEL)
    kept["labels"] = {names.APPWRAPPER_LABEL: aw_name} if isinstance(aw_name, str) else {}
    kept["annotations"] = {PODSET_ANNOTATION: str(podset)[:_PODSET_CHARS]}
    controller = next(
        (as_map(r) for r in as_list(metadata.get("ownerReferences"))
         if as_map(r).get("controller") is True),
        None,
    )  # fmt: skip
    if controller is not None:
        kept["ownerReferences"] = [{k: controller[k] for k in _OWNER_KEYS if k in controller}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": kept}


def spec_changed(pod: Mapping[str, Any]) -> bool:
    """Whether the pod's spec may have changed since it was created (its gate taken off among
    other things): a ``generation`` above 1, or none counted."""
    generation = as_map(pod.get("metadata")).get("generation")
    return not isinstance(generation, int) or generation > 1


# --- pods read live, as the release decisions read them ------------------------------------------

# What ``release.release_plan`` and ``release.escaped`` read of a pod, and nothing else: the
# live read keeps each pod so cut as soon as its page is decoded, so that what it holds is one
# page and these fields, whatever someone put in the pods that name the AppWrapper.
_CLAIM_LABELS = (names.APPWRAPPER_LABEL, names.VOLCANO_JOB_NAME)  # claims, claim_selectors
_OWN_ANNOTATIONS = (PODSET_ANNOTATION, names.VOLCANO_JOB_NAME, names.VOLCANO_TASK_SPEC)
_IDENTITY = ("name", "namespace", "uid", "resourceVersion")
_CONTAINER_PARTS = ("requests", "limits")  # release.containers_mismatch


def decision_view(pod: Mapping[str, Any], appwrapper: Mapping[str, Any]) -> Obj | None:
    """``pod`` cut to what the release decisions on ``appwrapper`` read of it, or None for a
    pod none of them reads (being deleted, or finished and no longer gated). ``release_plan``
    and ``escaped`` decide the same on the view as on the pod.

    A pod that does not belong to the object (``release.belongs``: anyone may label a pod with
    the AppWrapper's name) is only counted: whose it is, its podSet, whether it is gated and
    its phase. A pod of the object keeps what releasing it reads besides: the labels,
    annotations, nodeSelector keys and tolerations Kueue's placement names (``release``), its
    gates as stored, and what says it was made from the admitted template (its controller's
    annotations, its priority class, its containers' names, images and resources)."""
    if adoption.is_terminating(pod):
        return None
    gated = adoption.is_gated(pod)
    status = as_map(pod.get("status"))
    if not gated and status.get("phase") in ("Succeeded", "Failed"):
        return None
    metadata = as_map(pod.get("metadata"))
    spec = as_map(pod.get("spec"))
    kept: Obj = {k: metadata[k] for k in _IDENTITY if k in metadata}
    controller = adoption.controller_of(pod)
    if controller is not None:
        kept["ownerReferences"] = [{"uid": controller.get("uid"), "controller": True}]
    view: Obj = {"apiVersion": "v1", "kind": "Pod", "metadata": kept}
    if "phase" in status:
        view["status"] = {"phase": status["phase"]}
    placements = _placements(appwrapper)
    podset = _podset(objects.annotations_of(pod).get(PODSET_ANNOTATION))
    if not release.belongs(pod, appwrapper):
        kept["labels"] = _only(metadata.get("labels"), _CLAIM_LABELS)
        job = objects.name_of(as_map(provenance.component_template(appwrapper)))
        annotations = objects.annotations_of(pod)
        kept["annotations"] = {PODSET_ANNOTATION: podset} if podset is not None else {}
        if job and annotations.get(names.VOLCANO_JOB_NAME) == job:
            kept["annotations"][names.VOLCANO_JOB_NAME] = job  # claims: by the annotation
        view["spec"] = {"schedulingGates": [{"name": names.ADMISSION_GATE}]} if gated else {}
        return view
    for field, read in (
        ("labels", _CLAIM_LABELS + _keys(placements, "labels")),
        ("annotations", _OWN_ANNOTATIONS + _keys(placements, "annotations")),
    ):
        if isinstance(metadata.get(field), dict):
            kept[field] = _only(metadata[field], read)
    if podset is not None:
        kept["annotations"][PODSET_ANNOTATION] = podset
    kept_spec: Obj = {k: spec[k] for k in ("schedulingGates", "priorityClassName") if k in spec}
    if isinstance(spec.get("nodeSelector"), dict):
        kept_spec["nodeSelector"] = _only(spec["nodeSelector"], _keys(placements, "nodeSelector"))
    if isinstance(spec.get("tolerations"), list):
        assigned = [t for p in placements for t in as_list(p.get("tolerations"))]
        kept_spec["tolerations"] = [t for t in spec["tolerations"] if t in assigned]
    for field in ("initContainers", "containers"):
        if field in spec:
            kept_spec[field] = [_container(as_map(c)) for c in as_list(spec[field])]
    view["spec"] = kept_spec
    return view


def _placements(appwrapper: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """Kueue's placement of each podSet (``podSetInfos``), which ``release.ungate`` applies."""
    components = as_list(as_map(appwrapper.get("spec")).get("components"))
    infos = as_list(as_map(components[0]).get("podSetInfos")) if components else []
    return [as_map(i) for i in infos]


def _keys(placements: list[Mapping[str, Any]], field: str) -> tuple[str, ...]:
    return tuple(k for p in placements for k in as_map(p.get(field)))


def _only(value: object, keys: tuple[str, ...]) -> Obj:
    found = as_map(value)
    return {k: found[k] for k in keys if k in found}


def _podset(value: object) -> str | None:
    """The podSet annotation as ``release.podset_index`` reads it, in at most a few
    characters: a longer number names no podSet an AppWrapper has (Kueue allows 8), and is
    kept as a sign that names none (which ``int`` could not even read past 4,300 digits)."""
    if not isinstance(value, str) or len(value) <= _PODSET_CHARS:
        return value if isinstance(value, str) else None
    short = (value.lstrip("0") or "0") if value.isascii() and value.isdigit() else value
    return short if len(short) <= _PODSET_CHARS else "-"


def _container(container: Mapping[str, Any]) -> Obj:
    kept: Obj = {k: container[k] for k in ("name", "image") if k in container}
    resources = as_map(container.get("resources"))
    if resources:
        kept["resources"] = {k: resources[k] for k in _CONTAINER_PARTS if k in resources}
    return kept
