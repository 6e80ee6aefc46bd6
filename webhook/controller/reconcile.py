"""One reconcile: everything the controller does for one AppWrapper name, from what is stored.

The key is ``(namespace, AppWrapper name)``: the adopted object's pod templates name their
AppWrapper, the AppWrapper keeps that name, and its pods carry it as a label, so every event
of the three maps to the same key. Each step reads the informers' copies (and the API itself
where a stale copy would do harm: who deletes an object, the AppWrapper holding a name autowrap
wanted, Kueue's admission and the pods a release acts on), decides with the pure functions of
``webhook.core.adoption``, and writes with a precondition or in an idempotent form, so that a
repeat, a restart or a second replica never does a step twice. Where one write can carry two
changes to the object (its owner and its status, its finalizer and its status), it does.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from webhook.controller.events import Recorder
from webhook.core import adoption, audit, builder, engine, podmeta, provenance, release, waiting
from webhook.core.policy import PolicySet
from webhook.core.ports import AlreadyExists, ApiFailure, Conflict
from webhook.model import names, objects
from webhook.model.objects import as_map
from webhook.shell import opevents
from webhook.shell.kube import APPWRAPPERS, JSON_PATCH, KUEUE_GROUP, Kind, KubeClient

log = logging.getLogger("autowrap")

Key = tuple[str, str]
Obj = dict[str, Any]
API_TIMEOUT = 30.0
KUEUE_HOLD_IGNORED = (
    "Kueue admitted AppWrapper {name} while it still carried kueue.x-k8s.io/admission-gated-by: "
    "this Kueue does not honour the hold adopt mode relies on (it needs Kueue 0.19 or later, or "
    "the AdmissionGatedBy feature gate on 0.17 and 0.18); until then set mode: Redirect in the "
    "policies"
)
# Statuses written per object uid (the oldest forgotten first).
STATUSES_KEPT = 10_000
# How often an object waiting for a missing resource (the AppWrapper CRD) is looked at again.
MISSING_RETRY = 30.0
# kube-apiserver's OwnerReferencesPermissionEnforcement asks `delete` on the object for any
# ownerReference set on it (plugin/pkg/admission/gc/gc_admission.go); the documented component
# grants exactly that.
OWNER_REFERENCE_REFUSED = (
    "the cluster refused to record its AppWrapper as the {kind}'s owner ({message}); where the "
    "OwnerReferencesPermissionEnforcement admission plugin is on (OpenShift, hardened clusters) "
    "autowrap needs delete on what it adopts: install the component "
    "deploy/components/owner-references-enforcement (docs/install.md, Prerequisites), and "
    "autowrap adopts it within a minute"
)
# How long an AppWrapper queued for an object that is gone is kept: a GitOps tool that deleted
# the object to re-create it gets it back (re-adopted) rather than a new queue position.
ORPHAN_GRACE = 60.0
# How long to wait before looking again at something that waits on another party (an earlier
# AppWrapper to go, Kueue to write podSetInfos); the watch usually wakes the key sooner.
WAIT = 5.0
# How soon to look again after a write lost a race to another writer.
RACED = 0.2


@dataclass
class Result:
    """What a reconcile asks of the queue: look again after ``requeue`` seconds (None: only on
    the next event)."""

    requeue: float | None = None


class Counters:
    """What the reconciler did, for the metrics (the shell owns the Prometheus objects)."""

    def __init__(self) -> None:
        self.adopted = 0
        self.released = 0
        self.collected = 0
        self.failed: dict[str, int] = {}

    def fail(self, step: str) -> None:
        self.failed[step] = self.failed.get(step, 0) + 1


class Reconciler:
    def __init__(
        self,
        api: KubeClient,
        policies: Callable[[], PolicySet],
        recorder: Recorder,
        *,
        objects_of: Callable[[Key], Sequence[Obj]],
        pods_of: Callable[[Key], Sequence[Obj]],
        appwrapper_of: Callable[[Key], Obj | None],
        kinds: Mapping[tuple[str, str], Kind],
        counters: Counters | None = None,
        now: Callable[[], float] = time.time,
        served: Callable[[str], bool] = lambda source: True,
        workloads_of: Callable[[Key], Sequence[Obj]] = lambda key: (),
    ) -> None:
        """``workloads_of``: Kueue's Workloads for the key (``waiting.workload_view``), whose
        reason for not admitting is mirrored while the object is queued."""
        self._api = api
        self._policies = policies
        self._recorder = recorder
        self._objects_of = objects_of
        self._pods_of = pods_of
        self._appwrapper_of = appwrapper_of
        self._workloads_of = workloads_of
        self._kinds = kinds
        self._origins = {f"{k.kind}.{k.group}" if k.group else k.kind: k for k in kinds.values()}
        self.counters = counters or Counters()
        self._now = now
        self._served = served
        # The status last written per object uid.
        self._statuses: dict[str, str] = {}
        # Why pods of an admitted object stay gated, per object uid, from the last release
        # decision: the status says so rather than "Running" (recomputed on every release).
        self._held: dict[str, tuple[str, ...]] = {}

    async def reconcile(self, key: Key) -> Result:
        namespace, aw_name = key
        appwrapper = self._appwrapper_of(key)
        result = Result()
        live_objects = []
        for obj in self._objects_of(key):
            if adoption.is_terminating(obj):
                if names.ADOPTION_FINALIZER in _finalizers(obj):
                    await self._finish_delete(obj, key)
                continue
            live_objects.append(obj)
            if objects.labels_of(obj).get(names.ADOPTION_LABEL) == names.ADOPTION_PENDING:
                step = await self._adopt(obj, appwrapper, key)
                appwrapper = step.appwrapper
                if step.requeue is not None:
                    result.requeue = step.requeue
            else:
                appwrapper = await self._keep_adopted(obj, appwrapper, key)
        admitted = appwrapper is not None and adoption.is_admitted(appwrapper)
        if admitted and (again := await self._release(appwrapper or {}, live_objects, key)):
            result.requeue = again
        if appwrapper is not None and not live_objects:
            later = await self._collect(appwrapper, key)
            if later is not None and (result.requeue is None or later < result.requeue):
                result.requeue = later
        return result

    # --- 1. adopt ------------------------------------------------------------------------------

    @dataclass
    class _Adopted:
        appwrapper: Obj | None
        requeue: float | None = None

    async def _adopt(self, obj: Obj, appwrapper: Obj | None, key: Key) -> Reconciler._Adopted:
        namespace, aw_name = key
        owner = adoption.controller_of(obj)
        if owner is not None and owner.get("name") != aw_name:
            await self._report_failure(obj, [
                f"it is controlled by {owner.get('kind')} {owner.get('name')!r}; objects that "
                "belong to a controller are not wrapped"])  # fmt: skip
            return self._Adopted(appwrapper)
        if not self._served("appwrappers"):
            await self._report_failure(obj, [
                f"the cluster does not serve {names.APPWRAPPER_PLURAL}.{names.APPWRAPPER_GROUP}: "
                "install the AppWrapper controller and its CRD; autowrap adopts this object "
                "once it is there"])  # fmt: skip
            return self._Adopted(appwrapper, requeue=MISSING_RETRY)
        if not adoption.is_prepared(obj):
            await self._report_failure(obj, [
                "autowrap's admission did not prepare it (a pod template lacks the scheduling "
                f"gate {names.ADMISSION_GATE}), so its pods may already run outside Kueue; "
                f"delete it and create it again without the {names.ADOPTION_LABEL} label, which "
                "only autowrap writes"])  # fmt: skip
            return self._Adopted(appwrapper)
        labels = await self._api.namespace_labels(namespace, timeout=API_TIMEOUT)
        context = engine.Context(
            policies=self._policies(),
            namespace=namespace,
            namespace_labels=labels,
            uid=str((obj.get("metadata") or {}).get("uid") or ""),
        )
        plan = adoption.plan(obj, context)
        if plan.appwrapper is None:
            await self._report_failure(obj, plan.errors)
            return self._Adopted(appwrapper)
        wanted = plan.appwrapper
        if objects.name_of(wanted) != aw_name:
            await self._report_failure(obj, [
                f"its pod templates name AppWrapper {aw_name!r} but its name gives "
                f"{objects.name_of(wanted)!r}; create it again"])  # fmt: skip
            return self._Adopted(appwrapper)
        created = False
        if appwrapper is None:
            # Not in the cache (which holds only AppWrappers autowrap made): created, and only
            # if the name is taken is the AppWrapper there read, to be judged below.
            refused = await self._api.refusal(
                namespace, builder.deployed_components(wanted), timeout=API_TIMEOUT
            )
            if refused:
                await self._report_failure(obj, [refused])
                return self._Adopted(None)
            try:
                appwrapper = await self._api.create(
                    APPWRAPPERS, namespace, wanted, timeout=API_TIMEOUT
                )
                created = True
            except AlreadyExists:
                appwrapper = await self._api.get(
                    APPWRAPPERS, namespace, aw_name, timeout=API_TIMEOUT
                )
                if appwrapper is None:  # deleted meanwhile: look again
                    return self._Adopted(None, requeue=0.0)
            except ApiFailure as exc:
                if (
                    exc.status is not None
                    and 400 <= exc.status < 500
                    and exc.status not in (408, 429)
                ):
                    await self._report_failure(obj, [f"the AppWrapper was refused: {exc.message}"])
                    return self._Adopted(None)
                raise
        if not created and (who := await self._stranger(appwrapper)) is not None:
            # Looked at again until that AppWrapper is gone; the status is written once.
            await self._set_status(obj, adoption.Status(
                f"not adopted: AppWrapper {namespace}/{aw_name} already exists and {who}, so it "
                "cannot stand for this object; rename the object, or ask whoever made that "
                "AppWrapper to remove it", "AdoptionFailed", "Warning"))  # fmt: skip
            return self._Adopted(None, requeue=WAIT)
        elif not created and not adoption.owns(appwrapper, obj):
            # Whether it wraps the very same work is judged on the AppWrapper read live (the
            # cache keeps no copy of the wrapped object).
            live = await self._api.get(APPWRAPPERS, namespace, aw_name, timeout=API_TIMEOUT)
            if live is not None and (
                adoption.may_readopt(live, wanted) or adoption.may_take_over(live, wanted)
            ):
                appwrapper = await self._readopt(live, obj)
            elif live is not None and await self._collect_orphan(live, obj):
                return self._Adopted(None, requeue=0.0)
            else:
                await self._wait_for_earlier(obj, appwrapper)
                return self._Adopted(appwrapper, requeue=WAIT)
        status = self._waiting(adoption.status(appwrapper, pending=False), appwrapper, key)
        try:
            await self._set_owner(obj, appwrapper, status)
        except ApiFailure as exc:
            if exc.status != 403:
                raise
            # The cluster refuses the controller reference (OwnerReferencesPermissionEnforcement
            # without its grant, or an operator's RBAC edit): said on the object and to the
            # operator, and looked at again slowly; the AppWrapper keeps its hold meanwhile,
            # so Kueue admits nothing.
            self.counters.fail("owner-reference")
            text = OWNER_REFERENCE_REFUSED.format(kind=kind_name(obj), message=exc.message)
            opevents.emit("OwnerReferenceRefused", text, warning=True)
            await self._report_failure(obj, [text])
            return self._Adopted(appwrapper, requeue=MISSING_RETRY)
        appwrapper = await self._lift_hold(appwrapper)
        self.counters.adopted += 1
        if status.reason != "Queued":  # the Adopted Event below names the queue
            await self._recorder.emit(obj, status.reason, status.text,
                                      warning=status.type == "Warning")  # fmt: skip
        await self._recorder.emit(
            obj, "Adopted", f"AppWrapper {namespace}/{aw_name} stands for it in Kueue's queue "
            f"{objects.labels_of(appwrapper).get(names.QUEUE_LABEL, '')!r}",
        )  # fmt: skip
        # Audit leaves a record: each finding the policy let through, naming policy, rule
        # and field (the AppWrapper carries them too, in autowrap.io/audit-findings).
        audited = audit.recorded(wanted)
        for finding in audited:
            await self._recorder.emit(obj, "PolicyAudit", finding.render(), warning=True)
        for warning in plan.warnings:
            if not (audited and warning.startswith("(audit) ")):
                await self._recorder.emit(obj, "AdmissionWarning", warning, warning=True)
        return self._Adopted(appwrapper)

    async def _readopt(self, appwrapper: Obj, obj: Obj) -> Obj:
        """The AppWrapper now stands for the re-created object (same spec, new uid)."""
        uid = str((obj.get("metadata") or {}).get("uid") or "")
        patch = [
            {"op": "test", "path": "/metadata/resourceVersion",
             "value": (appwrapper.get("metadata") or {}).get("resourceVersion")},
            {"op": "replace", "path": _annotation_path(names.ORIGIN_UID_ANNOTATION), "value": uid},
        ]  # fmt: skip
        namespace, name = _namespace_name(appwrapper)
        return await self._api.patch(APPWRAPPERS, namespace, name, patch, timeout=API_TIMEOUT,
                                     content_type=JSON_PATCH)  # fmt: skip

    async def _collect_orphan(self, appwrapper: Obj, obj: Obj) -> bool:
        """Remove an AppWrapper autowrap made for an earlier object of this name that is gone
        (``adoption.orphaned``, judged on a live read of the object and of the AppWrapper,
        deleted with a uid precondition), so that the new object is adopted now rather than
        after its grace period, or never."""
        namespace, aw_name = _namespace_name(appwrapper)
        kind = self._kind_of(obj)
        if kind is None or adoption.collect(appwrapper) is not adoption.Collect.LATER:
            return False
        component = await self._api.get(kind, namespace, objects.name_of(obj), timeout=API_TIMEOUT)
        if not adoption.orphaned(appwrapper, component):
            return False
        if await self._stranger(appwrapper) is not None:
            return False  # not autowrap's to remove, whatever its labels say
        try:
            await self._api.delete(APPWRAPPERS, namespace, aw_name, uid=_uid(appwrapper),
                                   timeout=API_TIMEOUT)  # fmt: skip
        except Conflict:
            return False  # replaced meanwhile: judged again on the next look
        self.counters.collected += 1
        log.info("removed a queued AppWrapper whose object is gone, for a new one of its name",
                 extra={"fields": {"appwrapper": f"{namespace}/{aw_name}"}})  # fmt: skip
        return True

    async def _wait_for_earlier(self, obj: Obj, appwrapper: Obj) -> None:
        """Why a new object waits for an AppWrapper of its name, and what ends the wait. Deleting
        that AppWrapper while this object exists would take this object along: the AppWrapper
        controller deletes its components by name (resource_management.go:426-430, A7)."""
        namespace, name = _namespace_name(appwrapper)
        earlier = objects.annotations_of(appwrapper).get(names.ORIGIN_KIND_ANNOTATION, "object")
        earlier = earlier.split(".", 1)[0]
        phase = adoption.phase_of(appwrapper) or "Suspended"
        kind = str(obj.get("kind") or "object")
        if adoption.is_terminating(appwrapper):
            text = (f"AppWrapper {namespace}/{name} of an earlier {earlier} of the same name is "
                    "being deleted; this one waits until it is gone")  # fmt: skip
        else:
            text = (
                f"AppWrapper {namespace}/{name} of an earlier {earlier} of the same name is "
                f"{phase} and keeps the name"
            )
            running_other = phase == "Running" and not adoption.stands_for(appwrapper, obj)
            if running_other and earlier == kind:
                # An earlier object of this kind and name is gone (names are unique per kind).
                # The AppWrapper controller deletes its components by name (A7): removing it
                # now would take this object along, so it goes once the name is free.
                text += (
                    f"; autowrap removes it once no {kind} of this name is left, since the one "
                    f"it ran is gone: delete this {kind} and create it again, or give it "
                    "another name"
                )
            elif running_other:
                # It runs an object of another kind and this name, which may well still be
                # there: only a new name lets this one run now.
                text += (
                    f"; give this {kind} another name: AppWrapper {name} runs the {earlier} "
                    f"{namespace}/{name}"
                )
            else:
                # Removing it while this object exists would take this one along (A7).
                text += (
                    f"; give this {kind} another name, or delete it, have AppWrapper {name} "
                    "removed by someone who may delete AppWrappers here (kubectl delete "
                    f"appwrapper {name} -n {namespace}), and create it again"
                )
        await self._set_status(obj, adoption.Status(text, "WaitingForEarlierAppWrapper", "Warning"))

    async def _set_owner(self, obj: Obj, appwrapper: Obj, status: adoption.Status) -> None:
        """The object's controller reference, the adopted label and its status, in one JSON
        patch that fails (a Conflict) if the object is another one or its owners changed since
        they were read; its controller's status writes, which move its resourceVersion all the
        time, do not make it fail."""
        kind = self._kind_of(obj)
        assert kind is not None
        metadata = obj.get("metadata") or {}
        reference = adoption.owner_reference(appwrapper)
        current = metadata.get("ownerReferences")
        others = [
            r for r in current or [] if not r.get("controller") and r.get("uid") != reference["uid"]
        ]
        ops: list[dict[str, Any]] = [{"op": "test", "path": "/metadata/uid", "value": _uid(obj)}]
        if current:
            ops.append({"op": "test", "path": "/metadata/ownerReferences", "value": current})
        ops += [
            {"op": "add", "path": "/metadata/ownerReferences", "value": [*others, reference]},
            {"op": "add", "path": _label_path(names.ADOPTION_LABEL),
             "value": names.ADOPTION_ADOPTED},
        ]  # fmt: skip
        status_ops = self._status_ops(obj, status)
        namespace, name = _namespace_name(obj)
        await self._api.patch(kind, namespace, name, ops + status_ops, timeout=API_TIMEOUT,
                              content_type=JSON_PATCH)  # fmt: skip
        if status_ops:
            self._wrote_status(obj, status)

    async def _lift_hold(self, appwrapper: Obj) -> Obj:
        """Kueue may admit the AppWrapper once the object names it as its controller; the hold
        can only be removed, never added back (validation_admissiongatedby.go:36-88)."""
        if names.ADMISSION_GATED_BY_ANNOTATION not in objects.annotations_of(appwrapper):
            return appwrapper
        if not objects.is_suspended(appwrapper):
            # Admitted although it still carries the hold: this Kueue ignores it.
            self.counters.fail("kueue-hold")
            opevents.emit("KueueIgnoresHold", KUEUE_HOLD_IGNORED.format(
                name=f"{_namespace_name(appwrapper)[0]}/{objects.name_of(appwrapper)}"),
                warning=True)  # fmt: skip
        patch = {"metadata": {"annotations": {names.ADMISSION_GATED_BY_ANNOTATION: None}}}
        namespace, name = _namespace_name(appwrapper)
        return await self._api.patch(APPWRAPPERS, namespace, name, patch, timeout=API_TIMEOUT)

    async def _keep_adopted(self, obj: Obj, appwrapper: Obj | None, key: Key) -> Obj | None:
        """An adopted object: hold lifted, finalizer dropped once running, status current (and
        never "pods wait" while some run because their gate was taken off)."""
        owned = await self._owner(obj, appwrapper, key)
        if owned is not None:
            appwrapper = owned = await self._lift_hold(owned)
        escaped = await self._escaped(owned, key) if owned is not None else 0
        status = adoption.status(owned, pending=False, escaped_pods=escaped)
        status = adoption.held(self._waiting(status, owned, key), self._held.get(_uid(obj), ()))
        if names.ADOPTION_FINALIZER in _finalizers(obj) and adoption.finalizer_done(appwrapper):
            await self._drop_finalizer(obj, status)
        await self._set_status(obj, status)
        return appwrapper

    async def _owner(self, obj: Obj, cached: Obj | None, key: Key) -> Obj | None:
        """The AppWrapper that stands for an adopted object, or None when it is gone. The
        cache is trusted when it shows it; its absence is no proof (a watch behind the store, a
        list under way), so "gone" is said only on a live read, as the AppWrapper controller
        counts a component gone only on NotFound (resource_management.go:431-438, A7; the
        false MissingComponent of appwrapper#416 is that cache lag). Read only while the
        object does not say it already. What is read live is taken as the cache would take it
        (the informer follows only AppWrappers labelled adopted)."""
        if cached is not None and adoption.owns(cached, obj):
            return cached
        if not self._status_due(obj, adoption.status(None, pending=False)):
            return None
        namespace, aw_name = key
        live = await self._api.get(APPWRAPPERS, namespace, aw_name, timeout=API_TIMEOUT)
        if live is None or objects.labels_of(live).get(names.ADOPTED_LABEL) != "true":
            return None
        return live if adoption.owns(live, obj) else None

    async def _escaped(self, appwrapper: Obj, key: Key) -> int:
        """Pods running without Kueue's admission, counted on the pods read live, and read
        only when the cache (pod metadata) says a pod's spec changed since it was created."""
        if not objects.is_suspended(appwrapper):
            return 0
        if not any(
            release.belongs(p, appwrapper) and podmeta.spec_changed(p) for p in self._pods_of(key)
        ):
            return 0
        return release.escaped(appwrapper, await self._live_pods(appwrapper, key))

    # --- 2. release ----------------------------------------------------------------------------

    async def _release(self, appwrapper: Obj, owners: Sequence[Obj], key: Key) -> float | None:
        """Release the gated pods of an admitted AppWrapper; when to look again if some must
        wait (Kueue has not written their podSet's placement yet, or a write lost a race to
        another writer, often the scheduler's status update on the gated pod).

        Only pods of the object this AppWrapper stands for are released, never more per podSet
        than Kueue admitted, and only once Kueue's Workload (not the AppWrapper's own spec,
        which its editors can write) says it is admitted: read live, since a release cannot be
        taken back."""
        owned = [o for o in owners if adoption.owns(appwrapper, o)]
        if not owned:
            return None
        # The cache holds the metadata of pods not released yet: gated, or escaped.
        if not any(release.belongs(p, appwrapper) for p in self._pods_of(key)):
            await self._report_held(owned, appwrapper, ())
            return None
        admitted = await self._admission(appwrapper)
        if admitted is None:
            return WAIT  # Kueue has not admitted (its Workload says so), whatever the spec says
        # Whole, for the template each pod is compared with (the cache keeps no template).
        namespace, aw_name = key
        whole = await self._api.get(APPWRAPPERS, namespace, aw_name, timeout=API_TIMEOUT)
        if whole is None or _uid(whole) != _uid(appwrapper):
            return RACED  # replaced meanwhile: look again once the watch brings it
        plan = release.release_plan(whole, await self._live_pods(whole, key), admitted)
        again = WAIT if plan.waiting else None
        for pod, released in plan.released:
            namespace, name = _namespace_name(pod)
            try:
                await self._api.patch(_PODS, namespace, name, list(released.patch),
                                      timeout=API_TIMEOUT, content_type=JSON_PATCH)  # fmt: skip
            except Conflict:
                # The pod changed since the cache saw it (a status write, which wakes no
                # reconcile): look again as soon as the watch has brought the new version.
                again = RACED
                continue
            except ApiFailure as exc:
                if exc.status == 404:
                    continue
                raise
            self.counters.released += 1
        for pod, problem in plan.problems:
            await self._report_release_problem(owned, pod, problem)
        for why in plan.held:
            for owner in owned:
                await self._recorder.emit(owner, "ReleaseHeld", why, warning=True)
        reasons = [f"pod {objects.name_of(pod)}: {problem}" for pod, problem in plan.problems]
        await self._report_held(owned, whole, (*reasons, *plan.held))
        return again

    async def _report_held(
        self, owned: Sequence[Obj], appwrapper: Obj, reasons: Sequence[str]
    ) -> None:
        """Remember why pods stay gated, and say it in each object's status at once."""
        for obj in owned:
            uid = _uid(obj)
            if tuple(reasons) == self._held.get(uid, ()):
                continue
            if reasons:
                self._held[uid] = tuple(reasons)
                if len(self._held) > STATUSES_KEPT:
                    self._held.pop(next(iter(self._held)))
            else:
                self._held.pop(uid, None)
            status = adoption.status(appwrapper, pending=False)
            await self._set_status(obj, adoption.held(status, reasons))

    async def _live_pods(self, appwrapper: Obj, key: Key) -> list[Obj]:
        """Every pod that claims the object by a label (the AppWrapper's, or the one the
        wrapped kind's controller writes: ``release.claim_selectors``), read live: the cache
        holds only pods not released yet, and a release, which cannot be taken back, counts
        every pod already running and uses the gates and versions as stored. Read page by page
        and each pod cut to what the decisions read (``podmeta.decision_view``) as its page
        arrives: anyone may label hundreds of pods filled up to 1.5 MiB with this name, and
        the leader, which also serves the webhooks, holds one page of them at a time."""
        namespace, _ = key

        def keep(pod: Obj) -> Obj | None:
            return podmeta.decision_view(pod, appwrapper)

        pods: dict[str, Obj] = {}  # by uid: a pod both selectors find is one pod
        for selector in release.claim_selectors(appwrapper):
            for pod in await self._api.list_kept(_PODS, namespace, timeout=API_TIMEOUT,
                                                 labels=selector, keep=keep,
                                                 first_page=_LIVE_FIRST_PAGE):  # fmt: skip
                pods.setdefault(str(as_map(pod.get("metadata")).get("uid")), pod)
        return list(pods.values())

    async def _admission(self, appwrapper: Obj) -> release.Admission | None:
        """Kueue's admission of the AppWrapper from its Workload, read live before every
        release (Kueue labels each Workload with the uid of the job it stands for:
        constants.JobUIDLabel). Never reused from an earlier read: Kueue evicts in two phases,
        and in the first its Workload says Evicted while the AppWrapper is not yet written
        (jobframework reconciler.go, "handle eviction"), so an admission remembered by the
        AppWrapper's version would release a pod created in that window."""
        namespace, _ = _namespace_name(appwrapper)
        uid = str((appwrapper.get("metadata") or {}).get("uid") or "")
        version = await self._api.kueue_version(timeout=API_TIMEOUT)
        if not uid or version is None:
            return None
        kind = Kind(KUEUE_GROUP, version, "workloads", "Workload")
        listed = await self._api.list(
            kind, namespace, timeout=API_TIMEOUT, labels=f"{names.KUEUE_JOB_UID_LABEL}={uid}"
        )
        return release.admission(appwrapper, listed.get("items") or [])

    async def _report_release_problem(
        self, owners: Sequence[Obj], pod: Mapping[str, Any], problem: str
    ) -> None:
        self.counters.fail("release")
        message = f"pod {objects.name_of(pod)} stays gated: {problem}"
        for owner in owners:
            await self._recorder.emit(owner, "ReleaseFailed", message, warning=True)
        await self._recorder.emit(dict(pod), "ReleaseFailed", message, warning=True)

    # --- 3. delete -----------------------------------------------------------------------------

    async def _finish_delete(self, obj: Obj, key: Key) -> None:
        """Who deletes the object decides from live reads of the object and of its AppWrapper,
        never from cached copies: a user's delete takes the AppWrapper along, the AppWrapper
        controller's own is let through."""
        namespace, aw_name = key
        kind = self._kind_of(obj)
        assert kind is not None
        live_obj = await self._api.get(kind, namespace, objects.name_of(obj), timeout=API_TIMEOUT)
        if (
            live_obj is None
            or _uid(live_obj) != _uid(obj)
            or names.ADOPTION_FINALIZER not in _finalizers(live_obj)
        ):
            return  # gone, or the finalizer already dropped: the watch brings the news
        live = await self._api.get(APPWRAPPERS, namespace, aw_name, timeout=API_TIMEOUT)
        if adoption.deletion(live, live_obj) is adoption.Deletion.BY_USER and live is not None:
            await self._api.delete(APPWRAPPERS, namespace, aw_name, uid=_uid(live),
                                   timeout=API_TIMEOUT)  # fmt: skip
            await self._recorder.emit(
                obj, "Deleted", f"deleted with its AppWrapper {namespace}/{aw_name}, which was "
                f"{adoption.phase_of(live) or 'queued'}",
            )  # fmt: skip
        await self._drop_finalizer(live_obj)

    async def _collect(self, appwrapper: Obj, key: Key) -> float | None:
        """Remove an AppWrapper autowrap made whose component is gone (``adoption.collect``),
        decided on live reads: the component's name must be free and the AppWrapper unchanged
        (uid precondition). Returns when to look again, for one whose grace period runs."""
        if not objects.labels_of(appwrapper).get(names.ADOPTED_LABEL):
            return None
        verdict = adoption.collect(appwrapper)
        if verdict is adoption.Collect.KEEP:
            return None
        origin = objects.annotations_of(appwrapper).get(names.ORIGIN_KIND_ANNOTATION, "")
        kind = self._origins.get(origin)
        name = adoption.component_name(appwrapper)
        if kind is None or not name:
            return None
        if verdict is adoption.Collect.LATER:
            left = ORPHAN_GRACE - _age(appwrapper, self._now())
            if left > 0:
                return left
        namespace, aw_name = key
        live = await self._api.get(APPWRAPPERS, namespace, aw_name, timeout=API_TIMEOUT)
        if live is None or _uid(live) != _uid(appwrapper) or adoption.collect(live) != verdict:
            return None
        if await self._stranger(live) is not None:
            return None  # not autowrap's to remove, whatever its labels say
        # Read last, right before the delete: an object of the component's name stored since
        # the AppWrapper was read is found here (the AppWrapper's own, behind the cache, or a
        # new one, which deleting the AppWrapper would take along, deleted by name: A7). Until
        # the AppWrapper is being deleted admission lets such a create through, so the time
        # from this read to the delete is the only time in which one can be lost.
        if await self._api.get(kind, namespace, name, timeout=API_TIMEOUT) is not None:
            return None
        await self._api.delete(APPWRAPPERS, namespace, aw_name, uid=_uid(live), timeout=API_TIMEOUT)
        self.counters.collected += 1
        log.info("removed an AppWrapper whose object is gone", extra={"fields": {
            "appwrapper": f"{namespace}/{aw_name}", "phase": adoption.phase_of(live) or "new"}})  # fmt: skip
        return None

    async def _drop_finalizer(self, obj: Obj, status: adoption.Status | None = None) -> None:
        """The adoption finalizer removed (with the status, when one is given and due: one
        write rather than two)."""
        kind = self._kind_of(obj)
        assert kind is not None
        current = _finalizers(obj)
        kept = [f for f in current if f != names.ADOPTION_FINALIZER]
        # Guarded by the finalizers as read, not the resourceVersion its controller keeps moving.
        ops: list[dict[str, Any]] = [
            {"op": "test", "path": "/metadata/uid", "value": _uid(obj)},
            {"op": "test", "path": "/metadata/finalizers", "value": current},
            {"op": "replace", "path": "/metadata/finalizers", "value": kept}
            if kept
            else {"op": "remove", "path": "/metadata/finalizers"},
        ]
        status_ops = self._status_ops(obj, status) if status is not None else []
        namespace, name = _namespace_name(obj)
        try:
            await self._api.patch(kind, namespace, name, ops + status_ops, timeout=API_TIMEOUT,
                                  content_type=JSON_PATCH)  # fmt: skip
        except ApiFailure as exc:
            if exc.status != 404:
                raise
            return
        if status is not None and status_ops:
            self._wrote_status(obj, status)
            await self._recorder.emit(obj, status.reason, status.text,
                                      warning=status.type == "Warning")  # fmt: skip

    # --- 4. report -----------------------------------------------------------------------------

    def _waiting(
        self, status: adoption.Status, appwrapper: Obj | None, key: Key
    ) -> adoption.Status:
        """The status with what Kueue's Workload says while the AppWrapper is queued: its
        reason for not admitting yet, or that it admitted (from the watch: a new reason wakes
        the key, and the status and a ``Queued`` Event follow it)."""
        said = waiting.kueue_says(appwrapper, self._workloads_of(key))
        return waiting.with_kueue(status, appwrapper, said)

    def _kind_of(self, obj: Mapping[str, Any]) -> Kind | None:
        return self._kinds.get((str(obj.get("apiVersion")), str(obj.get("kind"))))

    async def _stranger(self, appwrapper: Obj) -> str | None:
        """None for an AppWrapper autowrap created; otherwise who did (``webhook.core.provenance``)."""
        me = await self._api.own_identity(timeout=API_TIMEOUT)
        return provenance.stranger(appwrapper, me)

    async def _report_failure(self, obj: Obj, errors: Sequence[str]) -> None:
        self.counters.fail("adopt")
        text = "not adopted: " + "; ".join(errors)
        await self._set_status(obj, adoption.Status(text, "AdoptionFailed", "Warning"))

    def _status_due(self, obj: Obj, status: adoption.Status) -> bool:
        text = adoption.bounded(status.text)
        if objects.annotations_of(obj).get(names.STATUS_ANNOTATION) == text:
            return False
        # Written already, and the cache has not caught up with the write yet: nothing to do.
        return self._statuses.get(_uid(obj)) != text

    def _status_ops(self, obj: Obj, status: adoption.Status) -> list[dict[str, Any]]:
        """The status as JSON patch operations, to ride on another write of the object: none
        when it is current, or when the object has no annotations to add it to (a whole new
        map could replace annotations written since the cache saw the object)."""
        if not self._status_due(obj, status) or not objects.annotations_of(obj):
            return []
        return [{"op": "add", "path": _annotation_path(names.STATUS_ANNOTATION),
                 "value": adoption.bounded(status.text)}]  # fmt: skip

    def _wrote_status(self, obj: Obj, status: adoption.Status) -> None:
        if len(self._statuses) >= STATUSES_KEPT:
            self._statuses.pop(next(iter(self._statuses)))
        self._statuses[_uid(obj)] = adoption.bounded(status.text)

    async def _set_status(self, obj: Obj, status: adoption.Status) -> None:
        status = adoption.Status(adoption.bounded(status.text), status.reason, status.type)
        if not self._status_due(obj, status):
            return
        kind = self._kind_of(obj)
        assert kind is not None
        namespace, name = _namespace_name(obj)
        patch = {"metadata": {"annotations": {names.STATUS_ANNOTATION: status.text}}}
        try:
            await self._api.patch(kind, namespace, name, patch, timeout=API_TIMEOUT)
        except ApiFailure as exc:
            if exc.status != 404:
                raise
            return
        self._wrote_status(obj, status)
        await self._recorder.emit(obj, status.reason, status.text, warning=status.type == "Warning")


_PODS = Kind("", "v1", "pods", "Pod")
# The live read's first page: the pods of most objects in one request, and what someone filled
# up to 1.5 MiB a pod, a few MiB; the pages after it are sized by bytes.
_LIVE_FIRST_PAGE = 8


def kind_name(obj: Mapping[str, Any]) -> str:
    """How a user calls the object's kind: Volcano Job, Pod."""
    kind = str(obj.get("kind") or "object")
    return "Volcano Job" if kind == "Job" and "volcano" in str(obj.get("apiVersion")) else kind


def _finalizers(obj: Mapping[str, Any]) -> list[str]:
    return [str(f) for f in (obj.get("metadata") or {}).get("finalizers") or []]


def _namespace_name(obj: Mapping[str, Any]) -> tuple[str, str]:
    metadata = obj.get("metadata") or {}
    return str(metadata.get("namespace") or ""), str(metadata.get("name") or "")


def _annotation_path(key: str) -> str:
    return "/metadata/annotations/" + key.replace("~", "~0").replace("/", "~1")


def _label_path(key: str) -> str:
    return "/metadata/labels/" + key.replace("~", "~0").replace("/", "~1")


def _uid(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("uid") or "")


def _age(obj: Mapping[str, Any], now: float) -> float:
    """Seconds since the object was created, by the apiserver's creationTimestamp."""
    stamp = str((obj.get("metadata") or {}).get("creationTimestamp") or "")
    try:
        created = datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0
    return max(0.0, now - created)
