"""Adopt mode's pure core (SPEC section 11): what admission writes, what the controller builds.

In adopt mode the user's create succeeds. Admission only mutates the object: the plumbing of
section 4, a scheduling gate on every pod template (no pod is scheduled before Kueue admits),
the AppWrapper label on every pod template (the AppWrapper controller counts pods by it), and
the adoption label and finalizer on the object. The controller then creates the AppWrapper
from the object the apiserver stored, releases gated pods when Kueue admits, and reports.

Every function here is pure: the webhook, the controller, the CLI and the tests call the same
code, and each controller step is a function of what is stored, so it can be repeated safely.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from webhook.core import audit, engine, kinds, provenance
from webhook.core.policy import PolicySpec
from webhook.core.workload import KindAdapter, has_server_defaults
from webhook.model import names, objects, quantity
from webhook.model.objects import Obj, as_list, as_map

# Template annotation: which podSet of the AppWrapper a pod belongs to (its index in
# ``spec.components[0].podSets``, the order Kueue writes ``podSetInfos`` in). Written at
# admission so that releasing a pod needs no knowledge of the workload kind.
PODSET_ANNOTATION = names.PREFIX + "podset"

# AppWrapper phases (workload.codeflare.dev/v1beta2 AppWrapperPhase).
QUEUED_PHASES = frozenset({"", "Suspended"})
ACTIVE_PHASES = frozenset({"", "Suspended", "Resuming", "Running"})


# --- admission: CREATE ---------------------------------------------------------------------------


def prepare(obj: Mapping[str, Any], target: engine.Candidate | engine.Outcome, *, user: str) -> Obj:
    """The object as admission stores it in adopt mode. ``target`` names the AppWrapper and
    the queue: the engine's ``wrap_candidate`` (the webhook's fast path) or its WRAP outcome.

    A Pod's queue label is removed (Kueue's own pod webhook would queue the Pod a second time)
    and the chosen queue kept in an annotation; a Volcano Job keeps its labels, since Kueue
    never reads Volcano Jobs. Nothing of ``obj`` is written: the maps on the way to each change
    are copied and the rest shared, so the patch diff skips untouched parts.
    """
    candidate = _as_candidate(obj, target)
    aw_name = candidate.appwrapper_name
    result = dict(obj)
    metadata = objects.own_map(result, "metadata")
    if not objects.name_of(result):
        # A generateName object has no name before storage, yet the AppWrapper's name (carried
        # by every pod template) and MASTER_ADDR derive from it: name it now, as redirect does.
        metadata["name"] = aw_name
        metadata.pop("generateName", None)
    result = _adopted_templates(result, candidate.adapter, candidate.match.policy.spec, aw_name)
    metadata = objects.own_map(result, "metadata")
    objects.own_map(metadata, "labels")[names.ADOPTION_LABEL] = names.ADOPTION_PENDING
    annotations = objects.own_map(metadata, "annotations")
    if candidate.queue:
        annotations[names.QUEUE_ANNOTATION] = candidate.queue
    if user:
        annotations[names.REQUESTED_BY_ANNOTATION] = user
    finalizers = [f for f in as_list(metadata.get("finalizers")) if f != names.ADOPTION_FINALIZER]
    metadata["finalizers"] = [*finalizers, names.ADOPTION_FINALIZER]
    return result


def _as_candidate(
    obj: Mapping[str, Any], target: engine.Candidate | engine.Outcome
) -> engine.Candidate:
    if isinstance(target, engine.Candidate):
        return target
    assert target.action is engine.Action.WRAP and target.result is not None
    assert target.match is not None
    adapter = kinds.find(obj.get("apiVersion"), obj.get("kind"))
    assert adapter is not None
    queue = objects.labels_of(target.result).get(names.QUEUE_LABEL, "")
    return engine.Candidate(adapter, target.match, objects.name_of(target.result), queue)


def _adopted_templates(obj: Obj, adapter: KindAdapter, policy: PolicySpec, aw_name: str) -> Obj:
    """Plumbing, then the gate, the AppWrapper label and the podSet index on every template."""
    plumbed = engine.plumb(obj, adapter, policy)
    result = plumbed.result
    # Plumbing keeps the groups and where their templates are (``engine.Plumbed``): no second
    # walk of the plumbed object to find them.
    for index, group in enumerate(plumbed.groups):
        template = objects.get(result, group.template_path)
        if not isinstance(template, dict):
            continue
        gated = dict(template)
        _gate_template(gated, aw_name, index)
        if group.template_path.parts:
            objects.put(result, group.template_path, gated)
        else:
            result = gated
    return result


def _gate_template(template: dict[str, Any], aw_name: str, podset: int) -> None:
    """Writes into ``template`` (the caller's own shallow copy) and maps it copies."""
    metadata = objects.own_map(template, "metadata")
    labels = objects.own_map(metadata, "labels")
    labels.pop(names.QUEUE_LABEL, None)
    # A pod born with it would never be seen by the controller's watch of pods to release.
    labels.pop(names.RELEASED_LABEL, None)
    labels[names.APPWRAPPER_LABEL] = aw_name
    objects.own_map(metadata, "annotations")[PODSET_ANNOTATION] = str(podset)
    spec = objects.own_map(template, "spec")
    gates = [g for g in as_list(spec.get("schedulingGates")) if isinstance(g, dict)]
    if not any(g.get("name") == names.ADMISSION_GATE for g in gates):
        gates.append({"name": names.ADMISSION_GATE})
    spec["schedulingGates"] = gates


def is_prepared(obj: Mapping[str, Any]) -> bool:
    """Whether the mutating webhook prepared this object: labelled pending *and* every pod
    template gated. The label alone is not enough: a user could set it, and the AppWrapper
    label with it, to slip past the mutating webhook's selector with ungated pods."""
    adapter = kinds.find(obj.get("apiVersion"), obj.get("kind"))
    if (
        adapter is None
        or objects.labels_of(obj).get(names.ADOPTION_LABEL) != names.ADOPTION_PENDING
    ):
        return False
    groups = adapter.pod_groups(obj)
    return bool(groups) and all(
        is_gated(as_map(g.template))
        and names.RELEASED_LABEL not in objects.labels_of(as_map(g.template))
        for g in groups
    )


def is_adopted_object(obj: Mapping[str, Any]) -> bool:
    """Whether admission prepared this object for adoption (pending or done)."""
    return names.ADOPTION_LABEL in objects.labels_of(obj)


# --- admission: UPDATE of an adopted object -------------------------------------------------------


def normalize_update(
    new: Mapping[str, Any], old: Mapping[str, Any], policy: PolicySpec
) -> Obj | None:
    """``new`` with the stored spec, when it differs from it only by what admission added; else
    None (a real change, which goes on to the workload's own webhook unchanged).

    Volcano freezes ``spec.tasks`` after create and the list is atomic, so re-applying the
    unchanged manifest (client-side apply sends the whole list in a merge patch, server-side
    apply replaces it) would be denied (adopt-mode.md K6, V5). What admission added is
    recognised by adding it again: ``new`` gets the same mutation, and what the workload's own
    admission fills in (task names, minAvailable, plugins) is taken from ``old`` where ``new``
    leaves it out. Any other field ``new`` leaves out is a removal: not normalized, so the
    workload's webhook judges it (Volcano refuses changes to ``spec.tasks``).
    """
    adapter = kinds.find(new.get("apiVersion"), new.get("kind"))
    if adapter is None or not is_adopted_object(old):
        return None
    old_spec = old.get("spec")
    if not isinstance(old_spec, dict) or new.get("spec") == old_spec:
        return None
    aw_name = _appwrapper_of(old, adapter)
    if not aw_name:
        return None
    candidate = objects.deep_copy(dict(new))
    names_of_old = objects.name_of(old)
    objects.own_map(candidate, "metadata").setdefault("name", names_of_old)
    candidate["spec"] = _defaulted(adapter, candidate.get("spec"), old_spec)
    prepared = _adopted_templates(candidate, adapter, policy, aw_name)
    if _by_value(_defaulted(adapter, prepared.get("spec"), old_spec)) != _by_value(old_spec):
        return None
    result = objects.deep_copy(dict(new))
    result["spec"] = objects.deep_copy(old_spec)
    return result


def _by_value(value: Any) -> Any:
    """``value`` with every container resource quantity as its number: the stored object may
    spell them otherwise than the manifest (Volcano's webhook writes the typed Job back, so
    ``nvidia.com/gpu: 1`` is stored as ``"1"``, ``0.5`` as ``"500m"``, ``1024Mi`` as
    ``"1Gi"``), and a re-apply of the same manifest is no change."""
    if isinstance(value, list):
        return [_by_value(v) for v in value]
    if not isinstance(value, Mapping):
        return value
    out: dict[str, Any] = {}
    for key, item in value.items():
        if key in ("requests", "limits") and isinstance(item, Mapping):
            out[key] = {name: _quantity(q) for name, q in item.items()}
        else:
            out[key] = _by_value(item)
    return out


def _quantity(raw: Any) -> Any:
    exact = quantity.parse(raw)
    return raw if exact is None else exact.normalize()


def _appwrapper_of(obj: Mapping[str, Any], adapter: KindAdapter) -> str:
    for group in adapter.pod_groups(obj):
        name = objects.labels_of(as_map(group.template)).get(names.APPWRAPPER_LABEL)
        if name:
            return name
    return ""


def appwrapper_name_of(obj: Mapping[str, Any]) -> str:
    """The AppWrapper an adopted object belongs to, as its pod templates name it."""
    adapter = kinds.find(obj.get("apiVersion"), obj.get("kind"))
    return _appwrapper_of(obj, adapter) if adapter is not None else ""


def _defaulted(adapter: KindAdapter, spec: Any, stored: Any) -> Any:
    """``spec`` with what the kind's own admission filled into the stored spec (and only that:
    a field the user's re-apply leaves out is a removal, which goes on to be judged)."""
    if has_server_defaults(adapter):
        return adapter.with_server_defaults(spec, stored)
    return spec


# --- the controller: the AppWrapper for a stored object -------------------------------------------


def unadopted(obj: Mapping[str, Any]) -> Obj:
    """The stored object without adoption's bookkeeping: what the AppWrapper's component is
    built from, so that a Job the AppWrapper re-creates (after preemption) starts ungated."""
    result = objects.deep_copy(dict(obj))
    metadata = as_map(result.get("metadata"))
    if isinstance(metadata, dict):
        _drop(metadata, "labels", (names.ADOPTION_LABEL,))
        _drop(
            metadata,
            "annotations",
            (names.QUEUE_ANNOTATION, names.REQUESTED_BY_ANNOTATION, names.STATUS_ANNOTATION),
        )
        finalizers = [
            f for f in as_list(metadata.get("finalizers")) if f != names.ADOPTION_FINALIZER
        ]
        if finalizers:
            metadata["finalizers"] = finalizers
        else:
            metadata.pop("finalizers", None)
        metadata.pop("ownerReferences", None)
    adapter = kinds.find(obj.get("apiVersion"), obj.get("kind"))
    if adapter is None:
        return result
    for group in adapter.pod_groups(result):
        template = objects.get(result, group.template_path)
        if not isinstance(template, dict):
            continue
        template_meta = template.get("metadata")
        if isinstance(template_meta, dict):
            _drop(template_meta, "annotations", (PODSET_ANNOTATION,))
            # The AppWrapper controller writes it again on every component it creates.
            _drop(template_meta, "labels", (names.APPWRAPPER_LABEL,))
        spec = template.get("spec")
        if isinstance(spec, dict):
            ungate_spec(spec)
    return result


def ungate_spec(spec: dict[str, Any]) -> None:
    """Remove autowrap's admission gate from a pod spec (the caller's own copy)."""
    gates = [
        g
        for g in as_list(spec.get("schedulingGates"))
        if as_map(g).get("name") != names.ADMISSION_GATE
    ]
    if gates:
        spec["schedulingGates"] = gates
    else:
        spec.pop("schedulingGates", None)


def _drop(metadata: dict[str, Any], field: str, keys: Sequence[str]) -> None:
    current = metadata.get(field)
    if not isinstance(current, dict):
        return
    for key in keys:
        current.pop(key, None)
    if not current:
        del metadata[field]


@dataclass(frozen=True)
class Plan:
    """What the controller creates for an object, or why it cannot."""

    appwrapper: Obj | None
    errors: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()


def plan(stored: Mapping[str, Any], context: engine.Context) -> Plan:
    """The AppWrapper for a stored object labelled for adoption, checked by the same rules as
    admission (an object that skipped the webhooks is judged all the same)."""
    adapter = kinds.find(stored.get("apiVersion"), stored.get("kind"))
    if adapter is None:
        return Plan(None, (f"autowrap does not wrap {stored.get('kind')}",))
    match = context.policies.match(context.namespace, context.namespace_labels)
    if match is None:
        return Plan(
            None, (f"namespace {context.namespace!r} is not covered by any autowrap policy",)
        )
    annotations = objects.annotations_of(stored)
    source = unadopted(stored)
    queue = annotations.get(names.QUEUE_ANNOTATION)
    if queue and names.QUEUE_LABEL not in objects.labels_of(source):
        objects.own_map(objects.own_map(source, "metadata"), "labels")[names.QUEUE_LABEL] = queue
    user = annotations.get(names.REQUESTED_BY_ANNOTATION, context.user)
    outcome = engine.wrap(source, adapter, match, engine.Context(
        policies=context.policies, namespace=context.namespace,
        namespace_labels=context.namespace_labels, user=user, uid=context.uid,
    ))  # fmt: skip
    verdict = outcome.verdict()
    if verdict.denied or outcome.result is None:
        return Plan(None, verdict.errors, verdict.warnings)
    appwrapper = outcome.result
    metadata = objects.own_map(appwrapper, "metadata")
    metadata["namespace"] = context.namespace
    objects.own_map(metadata, "labels")[names.ADOPTED_LABEL] = "true"
    aw_annotations = objects.own_map(metadata, "annotations")
    uid = as_map(stored.get("metadata")).get("uid")
    if uid:
        aw_annotations[names.ORIGIN_UID_ANNOTATION] = str(uid)
    # Kueue queues a Workload that carries this but never admits it (Kueue >= 0.19,
    # pkg/workload/workload.go:1282-1299): the hold until the object's ownerReference is set.
    aw_annotations[names.ADMISSION_GATED_BY_ANNOTATION] = names.ADOPTION_FINALIZER
    audit.annotate(appwrapper, audit.audited(outcome))
    return Plan(appwrapper, (), verdict.warnings)


def preview(obj: Mapping[str, Any], outcome: engine.Outcome, context: engine.Context) -> list[Obj]:
    """What the cluster ends up with in adopt mode, for ``autowrap render``: the object as
    admission stores it, and the AppWrapper the controller creates for it."""
    prepared = prepare(obj, outcome, user=context.user)
    objects.own_map(prepared, "metadata").setdefault("namespace", context.namespace)
    built = plan(prepared, context)
    return [prepared] if built.appwrapper is None else [prepared, built.appwrapper]


def owner_reference(appwrapper: Mapping[str, Any]) -> dict[str, Any]:
    """The controller ownerReference the object gets: the AppWrapper controller adopts an
    existing component only when the controller reference names it (resource_management.go
    :365-375). ``blockOwnerDeletion`` is left unset: under OwnerReferencesPermissionEnforcement
    it would need update on ``appwrappers/finalizers`` (adopt-mode.md K4)."""
    metadata = as_map(appwrapper.get("metadata"))
    return {
        "apiVersion": names.APPWRAPPER_API_VERSION,
        "kind": "AppWrapper",
        "name": metadata.get("name"),
        "uid": metadata.get("uid"),
        "controller": True,
    }


def controller_of(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for ref in as_list(as_map(obj.get("metadata")).get("ownerReferences")):
        if as_map(ref).get("controller") is True:
            return as_map(ref)
    return None


def owns(appwrapper: Mapping[str, Any], obj: Mapping[str, Any]) -> bool:
    """Whether the AppWrapper was created for this very object (same uid)."""
    uid = as_map(obj.get("metadata")).get("uid")
    return bool(uid) and objects.annotations_of(appwrapper).get(names.ORIGIN_UID_ANNOTATION) == uid


def phase_of(appwrapper: Mapping[str, Any]) -> str:
    phase = as_map(appwrapper.get("status")).get("phase")
    return phase if isinstance(phase, str) else ""


def is_terminating(obj: Mapping[str, Any]) -> bool:
    return bool(as_map(obj.get("metadata")).get("deletionTimestamp"))


def may_readopt(appwrapper: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    """An AppWrapper autowrap made for an earlier object of the same name may stand for a new
    one only while it is Suspended and wraps the very same work in the same queue: a GitOps
    tool re-created the object after the AppWrapper deleted it on preemption (adopt-mode.md
    §3, "self-heal"). The wrapped object is compared whole, not the spec-hash annotation,
    which anyone could copy; who made the AppWrapper is the caller's check
    (``webhook.core.provenance.stranger``)."""
    queue = names.QUEUE_LABEL
    return (
        phase_of(appwrapper) == "Suspended"
        and not is_terminating(appwrapper)
        and objects.is_suspended(appwrapper)
        and provenance.same_work(appwrapper, wanted)
        and objects.labels_of(appwrapper).get(queue) == objects.labels_of(wanted).get(queue)
    )


def is_gated(pod: Mapping[str, Any]) -> bool:
    return any(
        as_map(g).get("name") == names.ADMISSION_GATE
        for g in as_list(as_map(pod.get("spec")).get("schedulingGates"))
    )


def is_admitted(appwrapper: Mapping[str, Any]) -> bool:
    """Kueue admitted it: ``suspend: false`` with ``podSetInfos`` written in the same update
    (RunWithPodSetsInfo, appwrapper_controller.go:165-180 in Kueue), stored as no ``suspend``
    at all (``omitempty``: ``objects.is_suspended``)."""
    return not objects.is_suspended(appwrapper) and not is_terminating(appwrapper)


# --- the controller: deleting ------------------------------------------------------------------------


class Deletion(StrEnum):
    BY_USER = "user"  # delete the AppWrapper too: nothing may be resurrected
    BY_APPWRAPPER = "appwrapper"  # preemption, reset, TTL: let it go


def deletion(appwrapper: Mapping[str, Any] | None, obj: Mapping[str, Any]) -> Deletion:
    """Who deletes the object, judged from live reads of it and of its AppWrapper (adopt-mode.md
    §2, 6b): while the AppWrapper is queued, resuming or running, only the user deletes its
    component; while it is suspending, resetting or finished, the AppWrapper controller does.
    A ``Suspended`` AppWrapper that was admitted before (it carries ``QuotaReserved``, set at
    Resuming, appwrapper_controller.go:171-210) was preempted: its controller deleted the object
    on the way (Suspending deletes the components, :376-398), so that delete is its own."""
    if appwrapper is None or is_terminating(appwrapper) or not owns(appwrapper, obj):
        return Deletion.BY_APPWRAPPER
    phase = phase_of(appwrapper)
    suspended = objects.is_suspended(appwrapper)
    if phase in ("Resuming", "Running") and suspended:
        return Deletion.BY_APPWRAPPER
    if phase in QUEUED_PHASES and was_admitted(appwrapper):
        return Deletion.BY_APPWRAPPER
    if phase in ACTIVE_PHASES:
        return Deletion.BY_USER
    return Deletion.BY_APPWRAPPER


def was_admitted(appwrapper: Mapping[str, Any]) -> bool:
    """Whether Kueue ever admitted the AppWrapper: its controller records ``QuotaReserved``
    (True, then False once suspended again) from the first Resuming on."""
    return any(
        as_map(c).get("type") == "QuotaReserved"
        for c in as_list(as_map(appwrapper.get("status")).get("conditions"))
    )


def stands_for(appwrapper: Mapping[str, Any], obj: Mapping[str, Any]) -> bool:
    """Whether ``obj`` is the AppWrapper's component: the object it was created for, or one its
    controller created again from the template (after a preemption or a reset), which names the
    AppWrapper's uid in its controller reference."""
    if owns(appwrapper, obj):
        return True
    owner = controller_of(obj)
    uid = as_map(appwrapper.get("metadata")).get("uid")
    return bool(uid) and owner is not None and owner.get("uid") == uid


class Collect(StrEnum):
    """What becomes of an AppWrapper autowrap made once its component is gone."""

    KEEP = "keep"  # its controller is bringing the component back, or it is finished: history
    NOW = "now"  # it holds an admission for nothing: remove it at once
    LATER = "later"  # queued for nothing: remove it once the grace period has passed


def collect(appwrapper: Mapping[str, Any]) -> Collect:
    """Whether an AppWrapper whose component is gone (a live read found no object of its
    component's name that it stands for) should be removed.

    Queued and never admitted (the object went before it was adopted, or its finalizer was
    removed by hand): nothing will ever come of it but a resurrection when Kueue admits it, so
    it goes, after a grace period for a GitOps tool re-creating the object. Running: the object
    was deleted after it first ran (the finalizer is gone by then); the AppWrapper would fail on
    the missing component (MissingComponent, :261-272) but only at its next poll, up to a
    minute during which it holds its quota, and a re-created object of the same name would be
    counted as its component meanwhile (A6). Failed on MissingComponent: it says nothing more.
    Suspending, resetting and resuming: its controller deletes and re-creates the component."""
    if is_terminating(appwrapper):
        return Collect.KEEP
    phase = phase_of(appwrapper)
    suspended = objects.is_suspended(appwrapper)
    if phase in QUEUED_PHASES and suspended and not was_admitted(appwrapper):
        return Collect.LATER
    if phase == "Running" and not suspended:
        return Collect.NOW
    if phase == "Failed" and _missing_component(appwrapper):
        return Collect.NOW
    return Collect.KEEP


def orphaned(appwrapper: Mapping[str, Any], component: Mapping[str, Any] | None) -> bool:
    """Whether an AppWrapper autowrap made for an object that is gone may be removed although
    the name was taken again: queued and never admitted (``collect`` says LATER), and the
    object of its component's name, read live, is not the one it was created for (its origin
    uid is gone). Nothing of it was ever deployed, so removing it takes nothing along (the
    AppWrapper controller deletes components by name only from Resuming on, A5, A7), and the
    new object, not adopted yet, names no owner. The grace period ``collect`` gives is for
    the same work coming back, which ``may_readopt`` re-adopts before this is asked."""
    if collect(appwrapper) is not Collect.LATER:
        return False
    if component is None:
        return True
    return not owns(appwrapper, component) and not any(
        as_map(r).get("uid") == as_map(appwrapper.get("metadata")).get("uid")
        for r in as_list(as_map(component.get("metadata")).get("ownerReferences"))
    )


def _missing_component(appwrapper: Mapping[str, Any]) -> bool:
    for condition in as_list(as_map(appwrapper.get("status")).get("conditions")):
        condition = as_map(condition)
        if _MISSING_COMPONENT in (str(condition.get("reason")), str(condition.get("message"))):
            return True
    return False


# The AppWrapper controller's reason when a component of a running AppWrapper is gone
# (appwrapper_controller.go, adopt-mode.md A5).
_MISSING_COMPONENT = "MissingComponent"


def component_name(appwrapper: Mapping[str, Any]) -> str:
    """The name of the object the AppWrapper wraps (its first component's template)."""
    return objects.name_of(as_map(provenance.component_template(appwrapper)))


def may_take_over(appwrapper: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    """A running AppWrapper autowrap made may stand for a new object of the same name when the
    object it ran was deleted (its component is gone) and the new one is the very same work in
    the same queue: ``kubectl delete -f`` then ``apply -f``. The AppWrapper controller already
    counts the new object as its component (it looks components up by name, A6), so the new
    object's pods run under the admission the AppWrapper holds."""
    queue = names.QUEUE_LABEL
    return (
        phase_of(appwrapper) in ("Resuming", "Running")
        and not is_terminating(appwrapper)
        and not objects.is_suspended(appwrapper)
        and provenance.same_work(appwrapper, wanted)
        and objects.labels_of(appwrapper).get(queue) == objects.labels_of(wanted).get(queue)
    )


def finalizer_done(appwrapper: Mapping[str, Any] | None) -> bool:
    """The adoption finalizer stays until the AppWrapper first runs: from then on a missing
    component makes it fail rather than re-create the object (A5 :261-272)."""
    if appwrapper is None:
        return False
    return phase_of(appwrapper) in ("Running", "Succeeded", "Failed")


# --- the controller: reporting ------------------------------------------------------------------------


@dataclass(frozen=True)
class Status:
    """What the object's ``autowrap.io/status`` annotation says, and the Event that goes with a
    change of it (reason, type)."""

    text: str
    reason: str
    type: str = "Normal"


# The status annotation is read by people (kubectl describe); annotations share 256 KiB per
# object, so a long list of findings is cut, pointing at the full list.
STATUS_LIMIT = 4096


def bounded(text: str) -> str:
    if len(text) <= STATUS_LIMIT:
        return text
    return (
        text[: STATUS_LIMIT - 80].rstrip() + " … (cut; `autowrap check` on the manifest lists all)"
    )


def status(appwrapper: Mapping[str, Any] | None, *, pending: bool, escaped_pods: int = 0) -> Status:
    if appwrapper is not None and escaped_pods:
        return Status(
            f"{escaped_pods} pod(s) run without Kueue's admission: their scheduling gate "
            f"{names.ADMISSION_GATE} was removed by someone other than autowrap while AppWrapper "
            f"{objects.name_of(appwrapper)} is queued; delete those pods (they are created again, "
            "gated), and see who removed the gate in the audit log",
            "GateRemoved",
            "Warning",
        )
    if appwrapper is None:
        if pending:
            return Status("waiting for its AppWrapper to be created", "Pending")
        return Status("its AppWrapper is gone", "AppWrapperGone", "Warning")
    name = objects.name_of(appwrapper)
    queue = objects.labels_of(appwrapper).get(names.QUEUE_LABEL, "")
    phase = phase_of(appwrapper) or "Suspended"
    suspended = objects.is_suspended(appwrapper)
    if phase in QUEUED_PHASES and suspended:
        return Status(
            f"Queued in LocalQueue {queue!r} (AppWrapper {name}); pods wait, gated, until Kueue admits it",
            "Queued",
        )
    if phase == "Running" and not suspended:
        return Status(f"Admitted by Kueue; AppWrapper {name} is Running", "Running")
    if (phase == "Resuming" or phase in QUEUED_PHASES) and not suspended:
        # Kueue has admitted; the AppWrapper controller has yet to start it (one status, not a
        # write for each step of its way there).
        return Status(f"Admitted by Kueue; AppWrapper {name} is starting", "Admitted")
    if phase == "Suspending" or (phase in ("Resuming", "Running") and suspended):
        return Status(
            f"Preempted: AppWrapper {name} is suspending; the object is deleted and re-created "
            "when Kueue admits it again",
            "Preempted",
            "Warning",
        )
    if phase == "Resetting":
        return Status(f"AppWrapper {name} is resetting after a failure", "Resetting", "Warning")
    if phase == "Succeeded":
        return Status(f"AppWrapper {name} succeeded", "Succeeded")
    if phase == "Failed":
        return Status(f"AppWrapper {name} failed: {_failure(appwrapper)}", "Failed", "Warning")
    return Status(f"AppWrapper {name} is {phase}", phase)


def held(status: Status, reasons: Sequence[str]) -> Status:
    """``status`` unless Kueue admitted the object and some of its pods stay gated for
    ``reasons`` (a release refused, or more pods than admitted): then the object does not
    run, whatever its AppWrapper's phase says, and its status says which pod waits and why."""
    if not reasons or status.reason not in ("Running", "Admitted"):
        return status
    more = f" ({len(reasons) - 1} more in kubectl get events)" if len(reasons) > 1 else ""
    return Status(f"Admitted by Kueue, but pods stay gated: {reasons[0]}{more}", "ReleaseHeld",
                  "Warning")  # fmt: skip


def _failure(appwrapper: Mapping[str, Any]) -> str:
    for condition in as_list(as_map(appwrapper.get("status")).get("conditions")):
        condition = as_map(condition)
        if condition.get("status") == "True" and condition.get("type") in ("Unhealthy", "Failed"):
            return str(condition.get("message") or condition.get("reason") or "see the AppWrapper")
    return f"see kubectl describe appwrapper {objects.name_of(appwrapper)}"


def pods_of(pods: Sequence[Mapping[str, Any]], aw_name: str) -> list[Mapping[str, Any]]:
    return [p for p in pods if objects.labels_of(p).get(names.APPWRAPPER_LABEL) == aw_name]


# --- the controller: what its caches keep -------------------------------------------------------------
# Each cache holds what the controller's decisions read and nothing else: less memory per
# object, and a write to anything else (a kubelet's container statuses, Volcano's job status)
# leaves the kept copy as it was, so it wakes no reconcile. (Pods waiting for release are kept
# as ``webhook.core.podmeta`` cuts their metadata.)


def object_view(obj: Mapping[str, Any]) -> Obj:
    """An object prepared for adoption, without what no decision reads: its status (written by
    its controller, often), managedFields and kubectl's last-applied copy. Once adopted, its pod
    templates are cut to the AppWrapper label that keys it: nothing reads the rest until it is
    deleted, and that decision reads it live. A pending object is kept whole, since its
    AppWrapper is built from it."""
    view = dict(obj)
    view.pop("status", None)
    metadata = dict(as_map(view.get("metadata")))
    metadata.pop("managedFields", None)
    view["metadata"] = metadata
    if objects.labels_of(view).get(names.ADOPTION_LABEL) != names.ADOPTION_ADOPTED:
        return view
    annotations = as_map(metadata.get("annotations"))
    if names.LAST_APPLIED_ANNOTATION in annotations:
        metadata["annotations"] = {
            k: v for k, v in annotations.items() if k != names.LAST_APPLIED_ANNOTATION
        }
    adapter = kinds.find(view.get("apiVersion"), view.get("kind"))
    if adapter is None:
        return view
    for group in adapter.pod_groups(view):
        name = objects.labels_of(as_map(group.template)).get(names.APPWRAPPER_LABEL)
        if not group.template_path.parts:
            view.pop("spec", None)  # the object is its own template: its labels stay
            continue
        skeleton = {"metadata": {"labels": {names.APPWRAPPER_LABEL: name}}} if name else {}
        view = _with(view, group.template_path.parts, skeleton)
    return view


def _with(obj: Obj, path: Sequence[str | int], value: Any) -> Obj:
    """``obj`` with ``value`` at ``path``, copying only the maps and lists on the way."""
    head, rest = path[0], path[1:]
    if isinstance(obj, dict):
        copied: Any = dict(obj)
    else:
        copied = list(obj)
    copied[head] = value if not rest else _with(copied[head], rest, value)
    return copied  # type: ignore[no-any-return]


def appwrapper_view(appwrapper: Mapping[str, Any]) -> Obj:
    """An AppWrapper as the controller's decisions read it: its metadata (managedFields cut to
    autowrap's own entry, which ``provenance.stranger`` reads), ``suspend``, the first component's podSets
    and Kueue's podSetInfos with the component named but not copied (comparing the wrapped work
    reads the AppWrapper live), and its phase and conditions."""
    view = dict(appwrapper)
    metadata = dict(as_map(view.get("metadata")))
    managed = as_list(metadata.get("managedFields"))
    if managed:
        # Only whether autowrap wrote the object itself (not a subresource) is read: the other
        # managers' entries come and go with every controller that writes, and would wake a
        # reconcile each time.
        metadata["managedFields"] = [
            {"manager": names.FIELD_MANAGER, "operation": as_map(e).get("operation")}
            for e in managed
            if as_map(e).get("manager") == names.FIELD_MANAGER and not as_map(e).get("subresource")
        ][:1]
    view["metadata"] = metadata
    spec = dict(as_map(view.get("spec")))
    components = as_list(spec.get("components"))
    if components:
        first = dict(as_map(components[0]))
        template = as_map(first.get("template"))
        first["template"] = {
            "apiVersion": template.get("apiVersion"),
            "kind": template.get("kind"),
            "metadata": {"name": as_map(template.get("metadata")).get("name")},
        }
        spec["components"] = [first]
    view["spec"] = spec
    status = as_map(view.get("status"))
    kept: Obj = {"phase": status["phase"]} if "phase" in status else {}
    if "conditions" in status:
        # Only the conditions decisions read (whether Kueue reserved quota, a failure and why);
        # the others (ResourcesDeployed, PodsReady) change as pods come and go and would wake
        # a reconcile each time. A message is said only for a failure.
        kept["conditions"] = [
            {k: c[k] for k in _CONDITION_KEYS if k in c
             and (k != "message" or c.get("type") in _FAILURE_CONDITIONS)}
            for c in map(as_map, as_list(status.get("conditions")))
            if c.get("type") in _READ_CONDITIONS or _MISSING_COMPONENT in str(c.get("reason"))
        ]  # fmt: skip
    view["status"] = kept
    return view


_CONDITION_KEYS = ("type", "status", "reason", "message")
_FAILURE_CONDITIONS = frozenset({"Unhealthy", "Failed"})
_READ_CONDITIONS = _FAILURE_CONDITIONS | {"QuotaReserved"}
