"""Kueue's handling of AppWrappers (the built-in integration), simulated.

Citations are kubernetes-sigs/kueue @ff69552 as quoted in shared/reference/adopt-mode.md Q1-Q5
and appwrapper.md §5. What adopt mode relies on:

* an AppWrapper without ``kueue.x-k8s.io/queue-name`` is ignored (Q1, ``reconciler.go:375-386``);
  one with it gets a Workload owned by it, whose ``queueName`` follows the label while it is
  not admitted (Q2, ``reconciler.go:634-664``);
* ``kueue.x-k8s.io/admission-gated-by`` is copied to the Workload and makes it inadmissible,
  said on its ``QuotaReserved`` condition (False, reason ``AdmissionGated``, "Admission is
  gated by: <gate>"; once removed, reason ``Pending``, "AdmissionGatedBy cleared, waiting for
  quota reservation"), as v0.19.2 says it: there is no ``AdmissionGated`` condition (Q4,
  ``reconciler.go:1148-1153``, ``workload.go:1282-1299``, ``workload_controller.go:1136-1187``);
* admission is two steps as upstream: the scheduler reserves quota on the Workload, then the job
  reconciler starts the AppWrapper, writing ``podSetInfos`` and ``suspend: false`` in one update
  (Q5, ``appwrapper_controller.go:165-180``; sources ``podset.go:56-93``: the flavor's
  nodeLabels and tolerations, the labels ``kueue.x-k8s.io/podset``,
  ``kueue.x-k8s.io/cluster-queue-name`` and ``kueue.x-k8s.io/local-queue-name`` and the
  annotation ``kueue.x-k8s.io/workload``, as Kueue 0.19 writes them);
* an unsuspended AppWrapper whose Workload is not admitted is suspended (StopJob), and
  preemption suspends it and clears ``podSetInfos`` (RestorePodSetsInfo).

Admission happens by itself with ``auto_admit`` (the gate gone and the LocalQueue present),
or on :meth:`Kueue.admit`. With ``quota`` (a nominal quota per resource in the first flavor),
the scheduler admits only what fits beside the Workloads already admitted; one that does not
fit keeps ``QuotaReserved=False`` with reason ``Pending`` and the flavor assigner's message, as
Kueue's scheduler writes it, and a ``Pending`` Event on the Workload (pkg/scheduler/scheduler.go
requeueAndUpdate: ``workload.UnsetQuotaReservationWithCondition(e.Obj, "Pending",
e.inadmissibleMsg)`` then ``recorder.Eventf(..., "Pending", api.TruncateEventMessage(...))``;
the message from pkg/scheduler/flavorassigner/flavorassigner.go: ``couldn't assign flavors to
pod set <name>: insufficient unused quota for <resource> in flavor <flavor>, <n> more
needed``). Not modelled: ClusterQueue and cohort accounting beyond that, priorities,
TAS (its gate and annotation), admission checks, MultiKueue, waitForPodsReady, the
LocalQueue defaulting webhook (Q3), ``manageJobsWithoutQueueName``.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

import yaml

from testbed.cluster.cluster import FakeCluster
from testbed.cluster.resources import APPWRAPPERS, CONFIGMAPS, LOCALQUEUES, WORKLOADS, Resource
from testbed.sim.appwrapper import pod_sets, replicas, value_at_path
from testbed.sim.objects import (
    JsonDict,
    Key,
    annotations_of,
    condition,
    controller_ref,
    is_deleting,
    key_of,
    labels_of,
    meta,
    set_condition,
)
from testbed.sim.runtime import (
    KeyMapper,
    Simulator,
    by_owner,
    retry_on_conflict,
    sa,
    same_key,
)

CONTROLLER = sa("kueue-system", "kueue-controller-manager")
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
GATED_BY = "kueue.x-k8s.io/admission-gated-by"
PODSET_LABEL = "kueue.x-k8s.io/podset"
CLUSTER_QUEUE_LABEL = "kueue.x-k8s.io/cluster-queue-name"
LOCAL_QUEUE_LABEL = "kueue.x-k8s.io/local-queue-name"
WORKLOAD_ANNOTATION = "kueue.x-k8s.io/workload"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
APPWRAPPER_FRAMEWORK = "workload.codeflare.dev/appwrapper"
DEFAULT_FLAVORS: dict[str, JsonDict] = {"default-flavor": {}}


class NotAdmissible(Exception):
    """:meth:`Kueue.admit` on an AppWrapper Kueue would not admit; the message says why."""


def workload_name(aw: JsonDict) -> str:
    """The shape of Kueue's ``GetWorkloadNameForOwnerWithGVK``: kind-name-hash."""
    digest = hashlib.sha1(f"{meta(aw)['name']}/{meta(aw).get('uid')}".encode()).hexdigest()
    return f"appwrapper-{meta(aw)['name']}-{digest[:5]}"


def podset_names(aw: JsonDict) -> list[list[str]]:
    """Kueue PodSet names per component and podSet: ``<aw>-<n>``, counted across components."""
    names, n = [], 0
    for component in (aw.get("spec") or {}).get("components") or []:
        names.append([f"{meta(aw)['name']}-{n + j}" for j in range(len(pod_sets(component)))])
        n += len(names[-1])
    return names


class Kueue(Simulator):
    """Kueue's AppWrapper job reconciler and a scheduler that admits without quota."""

    name = "kueue"
    primary = APPWRAPPERS

    def __init__(
        self,
        cluster: FakeCluster,
        *,
        flavors: Mapping[str, Mapping[str, Any]] | None = None,
        auto_admit: bool = True,
        quota: Mapping[str, int] | None = None,
    ) -> None:
        """``quota``: the nominal quota of the first flavor per resource (None: unlimited);
        tests may change it and call :meth:`queue_key` for Kueue to look again."""
        super().__init__(cluster, CONTROLLER)
        self.flavors = {k: dict(v) for k, v in (flavors or DEFAULT_FLAVORS).items()}
        self.auto_admit = auto_admit
        self.quota = dict(quota) if quota is not None else None
        self._held: set[Key] = set()

    def sources(self) -> list[tuple[Resource, KeyMapper]]:
        return [
            (APPWRAPPERS, same_key),
            (WORKLOADS, by_owner("AppWrapper")),
            (LOCALQUEUES, self._queued_in),
        ]

    def _queued_in(self, lq: JsonDict) -> Iterable[Key]:
        ns, name = key_of(lq)
        return [key_of(aw) for aw in self.store.list(APPWRAPPERS, ns, labels={QUEUE_LABEL: name})]

    # -- what tests call -------------------------------------------------------------------------

    def workload(self, namespace: str, name: str) -> JsonDict | None:
        aw = self.store.get(APPWRAPPERS, namespace, name)
        return aw and self.store.get(WORKLOADS, namespace, workload_name(aw))

    def why_not_admissible(self, aw: JsonDict) -> str | None:
        queue = labels_of(aw).get(QUEUE_LABEL)
        ns, name = key_of(aw)
        if not queue:
            return f"AppWrapper {ns}/{name} has no {QUEUE_LABEL} label"
        if annotations_of(aw).get(GATED_BY):
            return f"AppWrapper {ns}/{name} is gated by {annotations_of(aw)[GATED_BY]}"
        if self.store.get(LOCALQUEUES, ns, queue) is None:
            return f"LocalQueue {ns}/{queue} doesn't exist"
        return None

    async def admit(self, namespace: str, name: str, *, flavor: str | None = None) -> None:
        """Reserve quota in ``flavor`` (default: the first); the job reconciler then starts the
        AppWrapper (``settle()`` to see it). Raises :class:`NotAdmissible` when Kueue would not
        admit it now."""
        chosen = flavor or next(iter(self.flavors))
        if chosen not in self.flavors:
            raise NotAdmissible(f"unknown flavor {chosen!r}; known: {sorted(self.flavors)}")

        async def attempt() -> None:
            aw = self.store.get(APPWRAPPERS, namespace, name)
            if aw is None:
                raise NotAdmissible(f"AppWrapper {namespace}/{name} not found")
            why = self.why_not_admissible(aw)
            if why:
                raise NotAdmissible(why)
            wl = await self._workload(aw)
            if not _admitted(wl):
                await self._reserve(wl, chosen)

        self._held.discard((namespace, name))
        await retry_on_conflict(attempt)
        self.queue_key((namespace, name))

    async def preempt(self, namespace: str, name: str) -> None:
        """Evict the Workload as Kueue does, in two phases. The scheduler's preemption writes
        ``Evicted=True`` alone: ``Admitted``, ``QuotaReserved`` and ``status.admission`` stay.
        The job reconciler then stops the AppWrapper (``suspend: true``) and clears the
        reservation only once the AppWrapper is no longer active (jobframework reconciler.go,
        "6. handle eviction": stopJob, then, when ``!job.IsActive()``,
        UnsetQuotaReservationWithCondition; the AppWrapper is active while its QuotaReserved
        condition is true, which its controller sets false once Suspended). Pausing this
        simulator right after ``preempt`` holds the first window (Evicted and still Admitted, the
        AppWrapper still running); pausing the AppWrapper controller holds the second (stopped,
        not yet inactive). It waits for :meth:`admit` or :meth:`release`, even with
        ``auto_admit``."""
        self._held.add((namespace, name))

        async def attempt() -> None:
            wl = self.workload(namespace, name)
            if wl is None:
                raise LookupError(f"no Workload for AppWrapper {namespace}/{name}")
            status = wl.setdefault("status", {})
            message = "Preempted to accommodate a workload"
            set_condition(status, "Evicted", True, "Preempted", message)
            await self.update_status(WORKLOADS, wl)

        await retry_on_conflict(attempt)
        self.queue_key((namespace, name))

    async def _clear_reservation(self, wl: JsonDict) -> None:
        """UnsetQuotaReservationWithCondition: the admission dropped, QuotaReserved and
        Admitted false (workload.go)."""
        status = wl.setdefault("status", {})
        status.pop("admission", None)
        set_condition(status, "QuotaReserved", False, "Pending", "Preempted")
        set_condition(status, "Admitted", False, "NoReservation", "The workload has no reservation")
        await self.update_status(WORKLOADS, wl)

    def release(self, namespace: str, name: str) -> None:
        """Let ``auto_admit`` admit a preempted AppWrapper again."""
        self._held.discard((namespace, name))
        self.queue_key((namespace, name))

    # -- the reconcile --------------------------------------------------------------------------

    def manages_appwrappers(self) -> bool:
        """Whether the manager's configuration enables the AppWrapper integration, where the
        cluster holds one (``kueue-system/kueue-manager-config``, testbed/installation.py):
        ``integrations.frameworks`` must list it, an empty list meaning batch/job alone
        (apis/config/v1beta1/defaults.go). Read at every reconcile, as if Kueue were restarted
        after each edit of the ConfigMap."""
        if not self.store.served(CONFIGMAPS):
            return True
        cm = self.store.get(CONFIGMAPS, "kueue-system", "kueue-manager-config")
        if cm is None:
            return True
        config = yaml.safe_load((cm.get("data") or {}).get("controller_manager_config.yaml") or "")
        frameworks = ((config or {}).get("integrations") or {}).get("frameworks") or ["batch/job"]
        return APPWRAPPER_FRAMEWORK in frameworks

    async def reconcile(self, key: Key) -> None:
        aw = self.store.get(APPWRAPPERS, *key)
        if aw is None or is_deleting(aw) or not labels_of(aw).get(QUEUE_LABEL):
            return
        if not self.manages_appwrappers():
            return
        wl = await self._workload(aw)
        suspended = bool((aw.get("spec") or {}).get("suspend"))
        if _admitted(wl) and (condition(wl, "Evicted") or {}).get("status") == "True":
            if not suspended:
                await self._stop(aw)
            elif (condition(aw, "QuotaReserved") or {}).get("status") != "True":
                await self._clear_reservation(wl)
            return
        if _admitted(wl):
            if suspended and key not in self._held:
                await self._start(aw, wl)
            else:
                await self._finish(aw, wl)
            return
        if not suspended:
            await self._stop(aw)
        elif self.auto_admit and key not in self._held and self.why_not_admissible(aw) is None:
            flavor = next(iter(self.flavors))
            lacking = self._lacking(wl, flavor)
            if lacking:
                await self._pending(wl, lacking)
            else:
                await self._reserve(wl, flavor)

    async def _workload(self, aw: JsonDict) -> JsonDict:
        """Create the Workload, or sync its queue and gate from the AppWrapper (Q2, Q4)."""
        ns = key_of(aw)[0]
        gate = annotations_of(aw).get(GATED_BY)
        queue = labels_of(aw)[QUEUE_LABEL]
        wl = self.store.get(WORKLOADS, ns, workload_name(aw))
        if wl is None:
            wl = await self.create(WORKLOADS, self._new_workload(aw), ns)
            # jobframework/reconciler.go handleJobWithNoWorkload: "CreatedWorkload" on the job.
            await self.event(aw, "CreatedWorkload", f"Created Workload: {ns}/{meta(wl)['name']}",
                             component="kueue-controller-manager")  # fmt: skip
        changed = False
        annotations = meta(wl).setdefault("annotations", {})
        if annotations.get(GATED_BY) != gate:
            if gate:
                annotations[GATED_BY] = gate
            else:
                annotations.pop(GATED_BY, None)
            changed = True
        if not _admitted(wl) and wl["spec"].get("queueName") != queue:
            wl["spec"]["queueName"] = queue
            changed = True
        if changed:
            wl = await self.update(WORKLOADS, wl)
        # workload_controller.go mayUpdateConditionForAdmissionGatedBy (v0.19.2): a gate is
        # said on QuotaReserved (False, reason AdmissionGated); its removal is said there too
        # (reason Pending, UnadmittedWorkloadsObservability being off), each with an Event.
        status = wl.setdefault("status", {})
        reserved = condition(wl, "QuotaReserved") or {}
        said_gated = reserved.get("reason") == "AdmissionGated"
        if gate and not said_gated:
            said = ("AdmissionGated", f"Admission is gated by: {gate}",
                    f"Workload admission is gated by: {gate}")  # fmt: skip
        elif not gate and said_gated:
            said = ("Pending", "AdmissionGatedBy cleared, waiting for quota reservation",
                    "Admission gate cleared, workload is now admissible")  # fmt: skip
        else:
            return wl
        set_condition(status, "QuotaReserved", False, said[0], said[1])
        wl = await self.update_status(WORKLOADS, wl)
        await self.event(wl, "AdmissionGated" if gate else "AdmissionGateCleared", said[2],
                         component="kueue-controller-manager")  # fmt: skip
        return wl

    def _new_workload(self, aw: JsonDict) -> JsonDict:
        ns = key_of(aw)[0]
        podsets = []
        for component, names in zip(
            aw["spec"].get("components") or [], podset_names(aw), strict=True
        ):
            for pod_set, ps_name in zip(pod_sets(component), names, strict=True):
                try:
                    template = value_at_path(component["template"], pod_set["path"])
                except Exception:  # a bad path is the AppWrapper webhook's business
                    template = {}
                podsets.append(
                    {
                        "name": ps_name,
                        "count": replicas(pod_set),
                        "template": {
                            k: copy.deepcopy(template.get(k) or {}) for k in ("metadata", "spec")
                        },
                    }
                )
        return {
            "apiVersion": WORKLOADS.api_version,
            "kind": WORKLOADS.kind,
            "metadata": {
                "name": workload_name(aw),
                "namespace": ns,
                "labels": {JOB_UID_LABEL: str(meta(aw).get("uid", ""))},
                "ownerReferences": [controller_ref(aw)],
            },
            "spec": {"queueName": labels_of(aw)[QUEUE_LABEL], "podSets": podsets, "active": True},
        }

    def _lacking(self, wl: JsonDict, flavor: str) -> str:
        """Why the Workload does not fit the unused quota, in the flavor assigner's words, or
        "" when it fits. PodSets are assigned in order, each adding its pods' requests (limits
        where a container requests nothing, as Kueue's defaulting of requests from limits)."""
        if self.quota is None:
            return ""
        used: dict[str, int] = {}
        for other in self.store.list(WORKLOADS):
            if _admitted(other) and meta(other).get("uid") != meta(wl).get("uid"):
                for resource, amount in _requests(other).items():
                    used[resource] = used.get(resource, 0) + amount
        wanted: dict[str, int] = {}
        for podset in wl["spec"].get("podSets") or []:
            for resource, amount in _podset_requests(podset).items():
                wanted[resource] = wanted.get(resource, 0) + amount
                if resource not in self.quota:
                    continue
                available = self.quota[resource] - used.get(resource, 0)
                if wanted[resource] > available:
                    return (f"couldn't assign flavors to pod set {podset['name']}: insufficient "
                            f"unused quota for {resource} in flavor {flavor}, "
                            f"{wanted[resource] - available} more needed")  # fmt: skip
        return ""

    async def _pending(self, wl: JsonDict, message: str) -> None:
        """The scheduler's answer to a Workload that does not fit: QuotaReserved False, reason
        Pending, the message (written and announced only when it changes)."""
        status = wl.setdefault("status", {})
        if set_condition(status, "QuotaReserved", False, "Pending", message):
            await self.update_status(WORKLOADS, wl)
            await self.event(wl, "Pending", message, component="kueue-admission")

    async def _reserve(self, wl: JsonDict, flavor: str) -> None:
        """The scheduler: quota reserved and admitted in one step (no admission checks)."""
        ns = key_of(wl)[0]
        lq = self.store.get(LOCALQUEUES, ns, wl["spec"]["queueName"]) or {}
        status = wl.setdefault("status", {})
        status["admission"] = {
            "clusterQueue": (lq.get("spec") or {}).get("clusterQueue", ""),
            "podSetAssignments": [
                {"name": ps["name"], "flavors": {"cpu": flavor}, "count": ps["count"]}
                for ps in wl["spec"].get("podSets") or []
            ],
        }
        set_condition(status, "QuotaReserved", True, "QuotaReserved", "Quota reserved")
        set_condition(status, "Admitted", True, "Admitted", "The workload is admitted")
        if condition(wl, "Evicted") is not None:
            set_condition(status, "Evicted", False, "QuotaReserved", "Previously: Preempted")
        await self.update_status(WORKLOADS, wl)
        # scheduler/scheduler.go admit: the QuotaReserved and Admitted Events on the Workload.
        queue = status["admission"]["clusterQueue"]
        for reason, message in (
            (
                "QuotaReserved",
                f"Quota reserved in ClusterQueue {queue}, wait time since queued was 0s",
            ),
            ("Admitted", f"Admitted by ClusterQueue {queue}, wait time since reservation was 0s"),
        ):
            await self.event(wl, reason, message, component="kueue-admission")

    async def _start(self, aw: JsonDict, wl: JsonDict) -> None:
        """RunWithPodSetsInfo: every podSetInfo and ``suspend: false`` in one update (Q5),
        stored as no ``suspend`` at all (``omitempty``)."""
        flavors = {
            a["name"]: next(iter((a.get("flavors") or {}).values()), "")
            for a in (wl.get("status") or {}).get("admission", {}).get("podSetAssignments") or []
        }
        admission = (wl.get("status") or {}).get("admission") or {}
        # podset.go FromAssignment and jobframework's PodSetInfo: the podSet, ClusterQueue and
        # LocalQueue labels, and the Workload's name as an annotation, on every podSet.
        labels = {CLUSTER_QUEUE_LABEL: str(admission.get("clusterQueue") or ""),
                  LOCAL_QUEUE_LABEL: str(wl["spec"].get("queueName") or "")}  # fmt: skip
        for component, names in zip(aw["spec"]["components"], podset_names(aw), strict=True):
            infos = []
            for ps_name in names:
                flavor = self.flavors.get(flavors.get(ps_name, ""), {})
                info: JsonDict = {
                    "annotations": {WORKLOAD_ANNOTATION: str(meta(wl)["name"])},
                    "labels": {**labels, PODSET_LABEL: ps_name},
                }
                if flavor.get("nodeLabels"):
                    info["nodeSelector"] = dict(flavor["nodeLabels"])
                if flavor.get("tolerations"):
                    info["tolerations"] = copy.deepcopy(list(flavor["tolerations"]))
                infos.append(info)
            component["podSetInfos"] = infos
        # Kueue writes the typed AppWrapper, whose `Suspend bool json:"suspend,omitempty"`
        # leaves false out: an admitted AppWrapper stores no spec.suspend at all.
        aw["spec"].pop("suspend", None)
        aw = await self.update(APPWRAPPERS, aw)
        # jobframework/reconciler.go startJob: "Started" on the job.
        queue = ((wl.get("status") or {}).get("admission") or {}).get("clusterQueue", "")
        await self.event(aw, "Started", f"Admitted by clusterQueue {queue}",
                         component="kueue-controller-manager")  # fmt: skip

    async def _stop(self, aw: JsonDict) -> None:
        """StopJob then RestorePodSetsInfo: ``suspend: true``, podSetInfos cleared."""
        for component in aw["spec"].get("components") or []:
            component.pop("podSetInfos", None)
        aw["spec"]["suspend"] = True
        await self.update(APPWRAPPERS, aw)

    async def _finish(self, aw: JsonDict, wl: JsonDict) -> None:
        """Finished: Succeeded, or Failed once its resources are gone (appwrapper.md §5)."""
        status = aw.get("status") or {}
        phase = status.get("phase")
        deployed = (condition(aw, "ResourcesDeployed") or {}).get("status")
        finished = phase == "Succeeded" or (phase == "Failed" and deployed == "False")
        if finished and set_condition(wl.setdefault("status", {}), "Finished", True, str(phase)):
            await self.update_status(WORKLOADS, wl)


def _podset_requests(podset: JsonDict) -> dict[str, int]:
    """A podSet's requests in whole units: count × each container's request (or limit)."""
    total: dict[str, int] = {}
    spec = (podset.get("template") or {}).get("spec") or {}
    for container in spec.get("containers") or []:
        resources = container.get("resources") or {}
        amounts = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        for resource, amount in amounts.items():
            try:
                whole = int(str(amount))
            except ValueError:
                continue  # quantities with units (cpu "100m", memory) are not counted here
            total[resource] = total.get(resource, 0) + whole * int(podset.get("count", 1))
    return total


def _requests(wl: JsonDict) -> dict[str, int]:
    total: dict[str, int] = {}
    for podset in wl["spec"].get("podSets") or []:
        for resource, amount in _podset_requests(podset).items():
            total[resource] = total.get(resource, 0) + amount
    return total


def _admitted(wl: JsonDict) -> bool:
    return (condition(wl, "Admitted") or {}).get("status") == "True"


def admitted_workload(aw: JsonDict, queue: str, cluster_queue: str = "cq") -> JsonDict:
    """The Workload Kueue holds for ``aw`` once admitted, whole, for callers that write Kueue's
    part by hand instead of running :class:`Kueue`: owned by the AppWrapper, labelled with its
    uid (JobUIDLabel), every podSet admitted at its declared count, ``QuotaReserved`` and
    ``Admitted`` true (``_reserve`` writes the same in two steps)."""
    podsets = [ps for c in aw["spec"].get("components") or [] for ps in pod_sets(c)] or [{}]
    counts = [replicas(ps) for ps in podsets]
    names = [f"{meta(aw)['name']}-{i}" for i in range(len(counts))]
    workload = {
        "apiVersion": WORKLOADS.api_version,
        "kind": WORKLOADS.kind,
        "metadata": {
            "name": workload_name(aw),
            "namespace": key_of(aw)[0],
            "labels": {JOB_UID_LABEL: str(meta(aw).get("uid", ""))},
            "ownerReferences": [controller_ref(aw)],
        },
        "spec": {"queueName": queue, "active": True,
                 "podSets": [{"name": n, "count": c} for n, c in zip(names, counts, strict=True)]},
        "status": {"admission": {"clusterQueue": cluster_queue, "podSetAssignments": [
            {"name": n, "count": c} for n, c in zip(names, counts, strict=True)]}},
    }  # fmt: skip
    status = workload["status"]
    set_condition(status, "QuotaReserved", True, "QuotaReserved", "Quota reserved")
    set_condition(status, "Admitted", True, "Admitted", "The workload is admitted")
    return workload
