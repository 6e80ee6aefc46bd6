"""The AppWrapper controller (project-codeflare/appwrapper v1.2.1), simulated.

Citations are ``internal/controller/appwrapper/appwrapper_controller.go`` (``:N``) and
``resource_management.go`` (``rm:N``) as quoted in shared/reference/adopt-mode.md A1-A7 and
appwrapper.md §4. What adopt mode relies on:

* the phase machine ``""`` → Suspended → Resuming → Running → Succeeded, ``suspend=true`` →
  Suspending → Suspended, Failed, and Terminating under deletion (A5);
* components are created from ``spec.components[i].template`` with the AppWrapper label, the
  podSetInfos injected into each podSet template and a controller ownerReference (A2,
  rm:217-348), as the controller's ServiceAccount, so the create passes admission (A4);
* AlreadyExists is adoption only when the existing object's controller ownerReference has the
  AppWrapper's *name* (A1, rm:365-375); otherwise the AppWrapper fails;
* a component that is missing or being deleted while Running fails the AppWrapper with
  ``MissingComponent`` and no retry (A5 :261-272);
* pods are counted by the label ``workload.codeflare.dev/appwrapper=<name>`` only (A6 :533-538);
* components are deleted by name, Background propagation, no UID precondition; a phase is left
  only when every component is NotFound and no labelled pod remains (A7, rm:419-499).

Not modelled: grace periods and their clocks (admission, warmup, failure, forceful deletion),
Resetting and retries, failed-pod and exit-code handling, the Autopilot anti-affinity, the
``schedulerName`` config, component health for known kinds, the AppWrapper's own webhook,
the success TTL clock (a test calls :meth:`AppWrapperController.expire_success_ttl`), and the
cache lag of appwrapper#416.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import Any

from testbed.cluster import resources
from testbed.cluster.cluster import FakeCluster
from testbed.cluster.resources import APPWRAPPERS, PODS, VCJOBS, Resource
from testbed.cluster.store import ApiError
from testbed.sim.objects import (
    JsonDict,
    Key,
    condition,
    controller_of,
    controller_ref,
    is_deleting,
    key_of,
    meta,
    set_condition,
)
from testbed.sim.runtime import KeyMapper, Simulator, by_label, by_owner, sa, same_key

CONTROLLER = sa("appwrapper-system", "appwrapper-controller-manager")
AW_LABEL = "workload.codeflare.dev/appwrapper"
FINALIZER = "workload.codeflare.dev/finalizer"
MANAGED_BY = "workload.codeflare.dev/appwrapper-controller"
DEPLOYED = "ResourcesDeployed"


class ComponentError(Exception):
    """A fatal component error: the AppWrapper goes Failed (rm:376-390 NoMatch/Invalid, A1)."""


def resource_for(api_version: str, kind: str) -> Resource | None:
    """The REST mapping, over the resources the fake API serves."""
    for value in vars(resources).values():
        if isinstance(value, Resource) and (value.api_version, value.kind) == (api_version, kind):
            return value
    return None


# -- podSets and paths (pkg/utils/utils.go) -------------------------------------------------------

_STEP = re.compile(r"\.([^.\[\]]+)|\[(\d+)\]")


def value_at_path(template: JsonDict, path: str) -> Any:
    """``getValueAtPath``: ``template`` names the component template, then ``.field`` and
    ``[N]`` steps."""
    if not path.startswith("template"):
        raise ComponentError(f"first element of the path must be 'template': {path!r}")
    value: Any = template
    rest = path[len("template") :]
    while rest:
        match = _STEP.match(rest)
        if match is None:
            raise ComponentError(f"invalid path element {rest!r}")
        field, index = match.groups()
        try:
            value = value[field] if field is not None else value[int(index)]
        except (KeyError, IndexError, TypeError) as err:
            raise ComponentError(f"path {path!r} does not resolve: {err}") from err
        rest = rest[match.end() :]
    return value


def pod_sets(component: Mapping[str, Any]) -> list[JsonDict]:
    """Declared podSets, else the inferred ones of the kinds that matter here (``InferPodSets``)."""
    if component.get("podSets"):
        return [dict(ps) for ps in component["podSets"]]
    template = component.get("template") or {}
    kind = (template.get("apiVersion"), template.get("kind"))
    if kind == ("v1", "Pod"):
        return [{"path": "template", "replicas": 1}]
    if kind == ("batch/v1", "Job"):
        spec = template.get("spec") or {}
        replicas = min(spec.get("parallelism", 1), spec.get("completions", 1))
        return [{"path": "template.spec.template", "replicas": replicas}]
    return []


def replicas(pod_set: Mapping[str, Any]) -> int:
    value = pod_set.get("replicas")
    return 1 if value is None else int(value)


def _merge(into: dict[str, str], extra: Mapping[str, str], what: str) -> None:
    for k, v in extra.items():
        if k in into and into[k] != v:
            raise ComponentError(
                f"conflict updating {what}: conflict for key={k}, value1={into[k]}, value2={v}"
            )
        into[k] = v


def build_component(aw: JsonDict, index: int) -> JsonDict:
    """What ``createComponent`` sends: the template plus the AppWrapper's injections (A2)."""
    ns, name = key_of(aw)
    component = aw["spec"]["components"][index]
    obj = copy.deepcopy(component.get("template") or {})
    m = obj.setdefault("metadata", {})
    if m.get("namespace") not in (None, "", ns):
        raise ComponentError("AppWrappers cannot create objects in other namespaces")
    m["namespace"] = ns
    m.setdefault("labels", {}).setdefault(AW_LABEL, name)  # MergeKeepFirst: the template wins
    infos = component.get("podSetInfos") or []
    for j, pod_set in enumerate(pod_sets(component)):
        target = value_at_path(obj, pod_set["path"]).setdefault("metadata", {})
        info = infos[j] if j < len(infos) else {}
        _merge(
            target.setdefault("labels", {}),
            {**(info.get("labels") or {}), AW_LABEL: name},
            "labels",
        )
        _merge(target.setdefault("annotations", {}), info.get("annotations") or {}, "annotations")
        spec = value_at_path(obj, pod_set["path"]).setdefault("spec", {})
        if info.get("nodeSelector"):
            _merge(spec.setdefault("nodeSelector", {}), info["nodeSelector"], "nodeSelector")
        if info.get("tolerations"):
            spec.setdefault("tolerations", []).extend(copy.deepcopy(info["tolerations"]))
        gates = spec.get("schedulingGates") or []
        for gate in info.get("schedulingGates") or []:
            if all(g.get("name") != gate.get("name") for g in gates):
                gates.append(dict(gate))
        if gates:
            spec["schedulingGates"] = gates
    owner = controller_of(obj)
    if owner is not None and owner.get("uid") != meta(aw).get("uid"):
        raise ComponentError(
            f"object is already owned by another {owner.get('kind')} controller {owner.get('name')}"
        )
    refs = [r for r in m.get("ownerReferences") or [] if r.get("uid") != meta(aw).get("uid")]
    m["ownerReferences"] = [*refs, controller_ref(aw)]
    return obj


# -- the controller -------------------------------------------------------------------------------


class AppWrapperController(Simulator):
    """The AppWrapper phase machine; one reconcile moves an AppWrapper by at most one step."""

    name = "appwrapper"
    primary = APPWRAPPERS

    def __init__(self, cluster: FakeCluster) -> None:
        super().__init__(cluster, CONTROLLER)
        self._ttl_expired: set[Key] = set()

    def sources(self) -> list[tuple[Resource, KeyMapper]]:
        owned = by_owner("AppWrapper")
        return [(APPWRAPPERS, same_key), (PODS, by_label(AW_LABEL)), (VCJOBS, owned)]

    async def expire_success_ttl(self, namespace: str, name: str) -> None:
        """Let the success TTL of a Succeeded AppWrapper elapse (:484-506): components go."""
        self._ttl_expired.add((namespace, name))
        self.queue_key((namespace, name))

    async def reconcile(self, key: Key) -> None:
        aw = self.store.get(APPWRAPPERS, *key)
        if aw is None:
            return
        spec = aw.setdefault("spec", {})
        if spec.get("managedBy") not in (None, "", MANAGED_BY):
            return  # :108-110, a MultiKueue-managed AppWrapper is not ours
        status = aw.setdefault("status", {})
        if is_deleting(aw):
            await self._terminate(aw)
            return
        phase = status.get("phase") or ""
        suspend = bool(spec.get("suspend"))
        if phase == "":
            await self._to_suspended(aw)
        elif phase == "Suspended" and not suspend:
            await self._to_resuming(aw)
        elif phase in ("Resuming", "Running") and suspend:
            status["phase"] = "Suspending"  # :246-249
            await self.update_status(APPWRAPPERS, aw)
        elif phase == "Resuming":
            await self._create_components(aw)
        elif phase == "Running":
            await self._monitor(aw)
        elif phase == "Suspending":
            await self._suspending(aw)
        elif phase == "Failed" or (phase == "Succeeded" and key in self._ttl_expired):
            await self._cleanup(aw)

    # -- transitions -------------------------------------------------------------------------------

    async def _to_suspended(self, aw: JsonDict) -> None:
        """:163-169: freeze the effective podSets in ``componentStatus``."""
        status = aw["status"]
        status["phase"] = "Suspended"
        status["componentStatus"] = [
            {
                "name": (c.get("template") or {}).get("metadata", {}).get("name", ""),
                "kind": (c.get("template") or {}).get("kind", ""),
                "apiVersion": (c.get("template") or {}).get("apiVersion", ""),
                "podSets": pod_sets(c),
                "conditions": [],
            }
            for c in aw["spec"].get("components") or []
        ]
        await self.update_status(APPWRAPPERS, aw)

    async def _to_resuming(self, aw: JsonDict) -> None:
        """:171-210: finalizer, QuotaReserved and ResourcesDeployed (its time starts the clocks)."""
        finalizers = meta(aw).setdefault("finalizers", [])
        if FINALIZER not in finalizers:
            finalizers.append(FINALIZER)
            status = aw["status"]
            aw = await self.update(APPWRAPPERS, aw)
            aw["status"] = status
        status = aw["status"]
        status["phase"] = "Resuming"
        set_condition(status, "QuotaReserved", True, "Resuming", "Suspend is false")
        set_condition(status, DEPLOYED, True, "Resuming", "Suspend is false")
        await self.update_status(APPWRAPPERS, aw)

    async def _create_components(self, aw: JsonDict) -> None:
        """:212-242 and ``createComponent``; a fatal error fails the AppWrapper."""
        status = aw["status"]
        try:
            for i, cstatus in enumerate(status.get("componentStatus") or []):
                if (condition(cstatus, DEPLOYED) or {}).get("status") == "True":
                    continue
                actual = await self._create_one(aw, i)
                if actual is None:
                    await self.update_status(
                        APPWRAPPERS, aw
                    )  # keep what was deployed; retry the rest
                    return
                cstatus["name"] = actual
                set_condition(cstatus, DEPLOYED, True, "ComponentCreated")
        except ComponentError as err:
            status["phase"] = "Failed"
            set_condition(status, "Unhealthy", True, "CreateFailed", str(err))
            await self.update_status(APPWRAPPERS, aw)
            return
        status["phase"] = "Running"
        await self.update_status(APPWRAPPERS, aw)

    async def _create_one(self, aw: JsonDict, index: int) -> str | None:
        """Create (or adopt) component ``index``; ``None`` means retry later (A3)."""
        ns, name = key_of(aw)
        obj = build_component(aw, index)
        res = resource_for(obj.get("apiVersion", ""), obj.get("kind", ""))
        if res is None:
            raise ComponentError(
                f"no matches for kind {obj.get('kind')} in version {obj.get('apiVersion')}"
            )
        try:
            created = await self.create(res, obj, ns)
            return str(meta(created)["name"])
        except ApiError as err:
            if err.reason == "AlreadyExists":
                existing = self.store.get(res, ns, meta(obj).get("name", ""))
                if existing is None:
                    return None  # gone between the create and the GET
                owner = controller_of(existing)
                if owner is None or owner.get("name") != name:  # A1: the name only
                    raise ComponentError(
                        f"resource {meta(obj).get('name')} exists, but is not controlled by appwrapper"
                    ) from err
                return str(meta(existing)["name"])
            if err.status == 422:
                raise ComponentError(str(err.message)) from err
            self.reject(f"create {res.plural} {ns}/{meta(obj).get('name')}", err)
            set_condition(aw["status"], "Unhealthy", True, "CreateFailed", str(err.message))
            return None

    async def _monitor(self, aw: JsonDict) -> None:
        """Running: components must all exist (:261-272); pods decide success (:289-304)."""
        ns, name = key_of(aw)
        status = aw["status"]
        expected_components = status.get("componentStatus") or []
        deployed = 0
        for cstatus in expected_components:
            res = resource_for(cstatus.get("apiVersion", ""), cstatus.get("kind", ""))
            obj = self.store.get(res, ns, cstatus.get("name", "")) if res else None
            if obj is not None and not is_deleting(obj):
                deployed += 1
        if deployed != len(expected_components):
            status["phase"] = "Failed"
            set_condition(
                status,
                "Unhealthy",
                True,
                "MissingComponent",
                f"Only found {deployed} deployed components, but was expecting {len(expected_components)}",
            )
            await self.update_status(APPWRAPPERS, aw)
            return
        expected = sum(replicas(ps) for c in expected_components for ps in c.get("podSets") or [])
        counts = {"Pending": 0, "Running": 0, "Succeeded": 0, "Failed": 0}
        for pod in self.store.list(PODS, ns, labels={AW_LABEL: name}):
            phase = (pod.get("status") or {}).get("phase") or "Pending"
            counts[phase] = counts.get(phase, 0) + 1
        busy = counts["Pending"] + counts["Running"] + counts["Failed"]
        changed = False
        if counts["Succeeded"] >= expected and busy == 0:
            status["phase"] = "Succeeded"
            changed = True
        ready = counts["Running"] + counts["Succeeded"] >= expected
        reason = "PodsReady" if ready else "InsufficientPodsReady"
        changed |= set_condition(status, "PodsReady", ready, reason, f"{counts}")
        if changed:
            await self.update_status(APPWRAPPERS, aw)

    async def _suspending(self, aw: JsonDict) -> None:
        """:376-398: delete everything, then Suspended with quota and deployment released."""
        if not await self._delete_components(aw):
            return
        status = aw["status"]
        status["phase"] = "Suspended"
        set_condition(status, "QuotaReserved", False, "Suspended", "Suspend is true")
        set_condition(status, DEPLOYED, False, "Suspended", "Suspend is true")
        self._forget_components(aw)
        await self.update_status(APPWRAPPERS, aw)

    async def _cleanup(self, aw: JsonDict) -> None:
        """Failed (:437-482) and Succeeded after its TTL (:484-506) remove the components."""
        if (condition(aw, DEPLOYED) or {}).get("status") == "False":
            return
        if await self._delete_components(aw):
            set_condition(aw["status"], DEPLOYED, False, "DeletionComplete", "")
            self._forget_components(aw)
            await self.update_status(APPWRAPPERS, aw)

    async def _terminate(self, aw: JsonDict) -> None:
        """Deletion: the finalizer holds the AppWrapper until its components are gone."""
        finalizers = meta(aw).get("finalizers") or []
        if FINALIZER not in finalizers:
            return
        if aw["status"].get("phase") != "Terminating":
            aw["status"]["phase"] = "Terminating"
            set_condition(aw["status"], "DeletingResources", True, "DeletionInitiated", "")
            await self.update_status(APPWRAPPERS, aw)
            return
        if await self._delete_components(aw):
            meta(aw)["finalizers"] = [f for f in finalizers if f != FINALIZER]
            await self.update(APPWRAPPERS, aw)

    # -- deletion (rm:419-499) -------------------------------------------------------------------

    async def _delete_components(self, aw: JsonDict) -> bool:
        """Delete by name (no UID precondition); done when all are NotFound and no pod is left."""
        ns, name = key_of(aw)
        remaining = 0
        for cstatus in aw["status"].get("componentStatus") or []:
            res = resource_for(cstatus.get("apiVersion", ""), cstatus.get("kind", ""))
            cname = cstatus.get("name", "")
            obj = self.store.get(res, ns, cname) if res and cname else None
            if obj is None or res is None:
                continue
            remaining += 1
            if not is_deleting(obj):
                try:
                    await self.delete(res, ns, cname)
                except ApiError as err:
                    if err.status != 404:
                        raise
                    remaining -= 1
        pods = self.store.list(PODS, ns, labels={AW_LABEL: name})
        return remaining == 0 and not pods

    @staticmethod
    def _forget_components(aw: JsonDict) -> None:
        for c, cstatus in zip(
            aw["spec"].get("components") or [],
            aw["status"].get("componentStatus") or [],
            strict=False,
        ):
            set_condition(cstatus, DEPLOYED, False, "ComponentDeleted")
            if not ((c.get("template") or {}).get("metadata") or {}).get("name"):
                cstatus["name"] = ""  # generateName: the next deployment gets a new name
