"""The simulated upstream controllers on the fake cluster, without autowrap.

Each test drives the simulators the way autowrap's adopt mode will meet them and asserts the
upstream behaviour the simulator claims to model (adopt-mode.md A1-A7, Q1-Q5, V2-V5).
"""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator
from typing import Any

import pytest

from testbed.cluster.cluster import FakeCluster
from testbed.cluster.resources import (
    APPWRAPPERS,
    CONFIGMAPS,
    EVENTS,
    LOCALQUEUES,
    PODGROUPS,
    PODS,
    SERVICES,
    VCJOBS,
    Resource,
)
from testbed.cluster.store import ApiError
from testbed.sim import (
    NotAdmissible,
    SettleError,
    SimulatorFailed,
    Simulators,
    resolved_env,
    simulated,
)
from testbed.sim.appwrapper import AW_LABEL, FINALIZER
from testbed.sim.kueue import (
    CLUSTER_QUEUE_LABEL,
    GATED_BY,
    LOCAL_QUEUE_LABEL,
    PODSET_LABEL,
    QUEUE_LABEL,
)
from testbed.sim.objects import JsonDict, condition, controller_of
from testbed.sim.volcano import FROZEN_MESSAGE, defaulted, podgroup_name
from tests.builders import VolcanoJobBuilder

NS = "team-a"
GATE = "autowrap.io/admission"
FLAVORS = {
    "cpu": {},
    "gpu": {
        "nodeLabels": {"pool": "gpu"},
        "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
    },
}
NODES = {"cpu-node": {"pool": "cpu"}, "gpu-node": {"pool": "gpu"}}


@pytest.fixture
async def cluster() -> AsyncIterator[FakeCluster]:
    fake = FakeCluster()
    fake.add_namespace(NS)
    yield fake


def vcjob(
    name: str = "train",
    tasks: tuple[tuple[str, int], ...] = (("master", 1), ("worker", 2)),
    *,
    gated: bool = False,
    aw_label: str | None = None,
    plugins: dict[str, list[str]] | None = None,
) -> JsonDict:
    job = VolcanoJobBuilder(name).spec(
        plugins=plugins if plugins is not None else {"svc": [], "env": []}
    )
    for task, n in tasks:
        job.task(task, replicas=n)
        job.template_meta(task, labels={AW_LABEL: aw_label} if aw_label else {})
        job.template_spec(task, containers=[{"name": "main", "image": "trainer:1"}])
        if gated:
            job.template_spec(task, schedulingGates=[{"name": GATE}])
    return defaulted(job.build())


def appwrapper(job: JsonDict, *, queue: str | None = "q", gated_by: str | None = None) -> JsonDict:
    name = job["metadata"]["name"]
    template = copy.deepcopy(job)
    template["metadata"] = {"name": name}
    meta: JsonDict = {"name": name, "labels": {QUEUE_LABEL: queue} if queue else {}}
    if gated_by:
        meta["annotations"] = {GATED_BY: gated_by}
    return {
        "apiVersion": APPWRAPPERS.api_version,
        "kind": APPWRAPPERS.kind,
        "metadata": meta,
        "spec": {
            "suspend": True,
            "components": [
                {
                    "template": template,
                    "podSets": [
                        {"path": f"template.spec.tasks[{i}].template", "replicas": t["replicas"]}
                        for i, t in enumerate(job["spec"]["tasks"])
                    ],
                }
            ],
        },
    }


async def add_local_queue(cluster: FakeCluster, name: str = "q") -> None:
    lq = {
        "apiVersion": LOCALQUEUES.api_version,
        "kind": LOCALQUEUES.kind,
        "metadata": {"name": name},
        "spec": {"clusterQueue": "cq"},
    }
    await cluster.create(LOCALQUEUES, lq, namespace=NS)


def phase(cluster: FakeCluster, name: str) -> str | None:
    aw = cluster.store.get(APPWRAPPERS, NS, name)
    return aw and (aw.get("status") or {}).get("phase")


def stored(cluster: FakeCluster, res: Resource, name: str) -> JsonDict:
    obj = cluster.store.get(res, NS, name)
    assert obj is not None, f"{res.plural} {NS}/{name} not found"
    return obj


def cond(obj: JsonDict | None, kind: str) -> JsonDict:
    found = condition(obj or {}, kind)
    assert found is not None, f"no {kind} condition in {obj and obj.get('status')}"
    return found


def pods(cluster: FakeCluster, **labels: str) -> dict[str, JsonDict]:
    return {p["metadata"]["name"]: p for p in cluster.store.list(PODS, NS, labels=labels)}


def manual(**extra: Any) -> dict[str, Any]:
    return {
        "kueue": {"flavors": FLAVORS, "auto_admit": False},
        "kubelet": {"nodes": NODES},
        **extra,
    }


async def running_aw(cluster: FakeCluster, sims: Simulators, job: JsonDict) -> JsonDict:
    await add_local_queue(cluster)
    await cluster.create(APPWRAPPERS, appwrapper(job), namespace=NS)
    await sims.settle()
    await sims.kueue.admit(NS, job["metadata"]["name"], flavor="gpu")
    await sims.settle()
    assert phase(cluster, job["metadata"]["name"]) == "Running"
    stored = cluster.store.get(VCJOBS, NS, job["metadata"]["name"])
    assert stored is not None
    return stored


# -- Kueue + AppWrapper + Volcano + kubelet -------------------------------------------------------


async def test_admitted_appwrapper_deploys_its_vcjob_with_the_podset_infos(
    cluster: FakeCluster,
) -> None:
    async with simulated(cluster, **manual()) as sims:
        await add_local_queue(cluster)
        await cluster.create(APPWRAPPERS, appwrapper(vcjob()), namespace=NS)
        await sims.settle()
        assert phase(cluster, "train") == "Suspended"
        assert cluster.store.get(VCJOBS, NS, "train") is None
        workload = sims.kueue.workload(NS, "train")
        assert workload is not None
        assert [(p["name"], p["count"]) for p in workload["spec"]["podSets"]] == [
            ("train-0", 1),
            ("train-1", 2),
        ]

        await sims.kueue.admit(NS, "train", flavor="gpu")
        await sims.settle()

        aw = cluster.store.get(APPWRAPPERS, NS, "train")
        assert aw is not None
        assert aw["status"]["phase"] == "Running"
        assert FINALIZER in aw["metadata"]["finalizers"]
        assert cond(aw, "ResourcesDeployed")["status"] == "True"
        infos = aw["spec"]["components"][0]["podSetInfos"]
        assert infos[1] == {
            "annotations": {"kueue.x-k8s.io/workload": workload["metadata"]["name"]},
            "labels": {PODSET_LABEL: "train-1", CLUSTER_QUEUE_LABEL: "cq",
                       LOCAL_QUEUE_LABEL: workload["spec"]["queueName"]},
            "nodeSelector": {"pool": "gpu"},
            "tolerations": FLAVORS["gpu"]["tolerations"],
        }  # fmt: skip
        placed = {PODSET_LABEL: "train-1", CLUSTER_QUEUE_LABEL: "cq",
                  LOCAL_QUEUE_LABEL: workload["spec"]["queueName"]}  # fmt: skip
        job = cluster.store.get(VCJOBS, NS, "train")
        assert job is not None
        assert job["metadata"]["labels"][AW_LABEL] == "train"
        owner = controller_of(job)
        assert owner is not None
        assert (owner["kind"], owner["name"], owner["uid"]) == (
            "AppWrapper",
            "train",
            aw["metadata"]["uid"],
        )
        worker = job["spec"]["tasks"][1]["template"]
        assert worker["metadata"]["labels"] == {**placed, AW_LABEL: "train"}
        assert worker["spec"]["nodeSelector"] == {"pool": "gpu"}

        running = pods(cluster, **{AW_LABEL: "train"})
        assert sorted(running) == ["train-master-0", "train-worker-0", "train-worker-1"]
        assert {p["spec"]["nodeName"] for p in running.values()} == {"gpu-node"}
        assert {p["status"]["phase"] for p in running.values()} == {"Running"}
        assert stored(cluster, VCJOBS, "train")["status"]["state"]["phase"] == "Running"
        group = stored(cluster, PODGROUPS, podgroup_name(job))["status"]
        assert (group["phase"], group["running"]) == ("Running", 3)
        reasons = {
            (e["involvedObject"]["kind"], e["reason"]) for e in cluster.store.list(EVENTS, NS)
        }
        assert {("AppWrapper", "CreatedWorkload"), ("Workload", "QuotaReserved"),
                ("Workload", "Admitted"), ("AppWrapper", "Started")} <= reasons  # fmt: skip

        await sims.kubelet.finish_all(NS, labels={AW_LABEL: "train"})
        await sims.settle()
        assert phase(cluster, "train") == "Succeeded"
        assert stored(cluster, VCJOBS, "train")["status"]["state"]["phase"] == "Completed"
        assert cond(sims.kueue.workload(NS, "train"), "Finished")["status"] == "True"
        assert cluster.store.get(VCJOBS, NS, "train") is not None  # kept until the success TTL

        await sims.appwrapper.expire_success_ttl(NS, "train")
        await sims.settle()
        assert cluster.store.get(VCJOBS, NS, "train") is None
        assert pods(cluster) == {}


async def test_preemption_deletes_the_components_then_suspends(cluster: FakeCluster) -> None:
    async with simulated(cluster, **manual()) as sims:
        first = await running_aw(cluster, sims, vcjob())
        await sims.kueue.preempt(NS, "train")
        await sims.settle()

        aw = cluster.store.get(APPWRAPPERS, NS, "train")
        assert aw is not None
        assert aw["status"]["phase"] == "Suspended"
        assert aw["spec"]["suspend"] is True
        assert "podSetInfos" not in aw["spec"]["components"][0]
        assert cond(aw, "QuotaReserved")["status"] == "False"
        assert cluster.store.get(VCJOBS, NS, "train") is None
        assert pods(cluster) == {}

        await sims.kueue.admit(NS, "train", flavor="cpu")
        await sims.settle()
        again = cluster.store.get(VCJOBS, NS, "train")
        assert again is not None
        assert again["metadata"]["uid"] != first["metadata"]["uid"]
        assert {p["spec"]["nodeName"] for p in pods(cluster).values()} == {"cpu-node"}


async def test_an_eviction_keeps_the_admission_until_the_appwrapper_is_inactive(
    cluster: FakeCluster,
) -> None:
    """Kueue's two phases (jobframework reconciler.go, "handle eviction"): Evicted first, with
    Admitted and status.admission kept; the reservation cleared once the job is stopped and
    no longer active."""
    async with simulated(cluster, **manual()) as sims:
        await running_aw(cluster, sims, vcjob())
        sims.appwrapper.pause()  # it has not finished suspending
        await sims.kueue.preempt(NS, "train")
        await sims.settle()

        wl = sims.kueue.workload(NS, "train")
        assert wl is not None
        assert cond(wl, "Evicted")["status"] == "True"
        assert cond(wl, "Admitted")["status"] == "True" and wl["status"]["admission"]
        aw = cluster.store.get(APPWRAPPERS, NS, "train")
        assert aw is not None and aw["spec"]["suspend"] is True  # stopped, still active

        sims.appwrapper.resume()
        await sims.settle()
        wl = sims.kueue.workload(NS, "train")
        assert wl is not None and cond(wl, "Admitted")["status"] == "False"
        assert "admission" not in wl["status"]


async def test_suspending_waits_until_no_labelled_pod_remains(cluster: FakeCluster) -> None:
    async with simulated(cluster, **manual()) as sims:
        await running_aw(cluster, sims, vcjob())
        straggler = bare_pod("straggler")
        straggler["metadata"]["labels"] = {AW_LABEL: "train"}
        straggler["metadata"]["finalizers"] = ["test.io/hold"]
        await cluster.create(PODS, straggler, namespace=NS)
        await sims.kueue.preempt(NS, "train")
        await sims.settle()
        assert cluster.store.get(VCJOBS, NS, "train") is None
        assert phase(cluster, "train") == "Suspending"  # the straggler still runs

        await cluster.delete(PODS, NS, "straggler")
        await sims.settle()
        assert phase(cluster, "train") == "Suspending"  # terminating, held by its finalizer

        held = cluster.store.get(PODS, NS, "straggler")
        assert held is not None
        held["metadata"]["finalizers"] = []
        await cluster.update(PODS, held)
        await sims.settle()
        assert phase(cluster, "train") == "Suspended"


async def test_admission_gated_by_holds_the_appwrapper_until_removed(
    cluster: FakeCluster,
) -> None:
    async with simulated(cluster, kueue={"auto_admit": True}) as sims:
        await add_local_queue(cluster)
        aw = appwrapper(vcjob(), gated_by="autowrap.io/adoption")
        await cluster.create(APPWRAPPERS, aw, namespace=NS)
        await sims.settle()
        assert phase(cluster, "train") == "Suspended"
        gated = condition(sims.kueue.workload(NS, "train"), "QuotaReserved")
        assert gated is not None
        assert (gated["status"], gated["reason"]) == ("False", "AdmissionGated")
        assert gated["message"] == "Admission is gated by: autowrap.io/adoption"
        with pytest.raises(NotAdmissible, match="gated by autowrap.io/adoption"):
            await sims.kueue.admit(NS, "train")

        stored = cluster.store.get(APPWRAPPERS, NS, "train")
        assert stored is not None
        del stored["metadata"]["annotations"][GATED_BY]
        await cluster.update(APPWRAPPERS, stored)
        await sims.settle()
        assert phase(cluster, "train") == "Running"
        workload = sims.kueue.workload(NS, "train")
        assert condition(workload, "AdmissionGated") is None
        reserved = condition(workload, "QuotaReserved")
        assert reserved is not None and reserved["status"] == "True"


async def test_auto_admission_waits_for_the_local_queue(cluster: FakeCluster) -> None:
    async with simulated(cluster) as sims:
        await cluster.create(APPWRAPPERS, appwrapper(vcjob()), namespace=NS)
        await sims.settle()
        assert phase(cluster, "train") == "Suspended"
        await add_local_queue(cluster)
        await sims.settle()
        assert phase(cluster, "train") == "Running"


async def test_kueue_ignores_an_appwrapper_without_queue_label(cluster: FakeCluster) -> None:
    async with simulated(cluster) as sims:
        await add_local_queue(cluster)
        await cluster.create(APPWRAPPERS, appwrapper(vcjob(), queue=None), namespace=NS)
        await sims.settle()
        assert phase(cluster, "train") == "Suspended"
        assert sims.kueue.workload(NS, "train") is None


async def test_controllers_write_as_their_service_accounts_through_admission(
    cluster: FakeCluster,
) -> None:
    creators: dict[str, set[str]] = {}

    def record(request: JsonDict) -> None:
        if request["operation"] == "CREATE":
            kind = request["kind"]["kind"]
            creators.setdefault(kind, set()).add(request["userInfo"]["username"])

    cluster.add_validating_webhook("recorder", record)
    async with simulated(cluster, **manual()) as sims:
        await running_aw(cluster, sims, vcjob())
    sa = "system:serviceaccount:"
    assert creators["Job"] == {sa + "appwrapper-system:appwrapper-controller-manager"}
    assert creators["Pod"] == {sa + "volcano-system:volcano-controllers"}
    assert creators["PodGroup"] == {sa + "volcano-system:volcano-controllers"}
    assert creators["Workload"] == {sa + "kueue-system:kueue-controller-manager"}


async def test_a_denied_component_create_is_retried_until_admission_allows_it(
    cluster: FakeCluster,
) -> None:
    denying = True

    def deny_vcjobs(request: JsonDict) -> str | None:
        creating_job = request["operation"] == "CREATE" and request["kind"]["kind"] == "Job"
        return "queue closed" if denying and creating_job else None

    cluster.add_validating_webhook("closed-queue", deny_vcjobs)
    async with simulated(cluster, **manual()) as sims:
        await running_aw_admission(cluster, sims)
        aw = cluster.store.get(APPWRAPPERS, NS, "train")
        assert aw is not None
        assert aw["status"]["phase"] == "Resuming"  # A3: not fatal, retried
        assert "queue closed" in cond(aw, "Unhealthy")["message"]
        assert any("queue closed" in r for r in sims.appwrapper.rejections)

        denying = False
        await sims.settle()
        assert phase(cluster, "train") == "Running"


# -- AppWrapper adoption and failure (A1, A5, A7) ------------------------------------------------


async def test_existing_job_controlled_by_the_appwrapper_name_is_adopted_untouched(
    cluster: FakeCluster,
) -> None:
    async with simulated(cluster, **manual()) as sims:
        await add_local_queue(cluster)
        aw = await cluster.create(APPWRAPPERS, appwrapper(vcjob()), namespace=NS)
        job = vcjob(gated=True, aw_label="train")
        job["metadata"]["ownerReferences"] = [
            {
                "apiVersion": APPWRAPPERS.api_version,
                "kind": "AppWrapper",
                "name": "train",
                "uid": aw["metadata"]["uid"],
                "controller": True,
            }
        ]
        created = await cluster.create(VCJOBS, job, namespace=NS)
        await sims.settle()
        gated = pods(cluster, **{AW_LABEL: "train"})
        assert len(gated) == 3
        for pod in gated.values():
            assert "nodeName" not in pod["spec"]
            assert cond(pod, "PodScheduled")["reason"] == "SchedulingGated"

        await sims.kueue.admit(NS, "train", flavor="gpu")
        await sims.settle()
        assert phase(cluster, "train") == "Running"
        adopted = cluster.store.get(VCJOBS, NS, "train")
        assert adopted is not None
        assert adopted["metadata"]["uid"] == created["metadata"]["uid"]
        assert adopted["spec"] == created["spec"]  # A2: nothing injected into an adopted object
        assert all("nodeName" not in p["spec"] for p in pods(cluster).values())


async def test_existing_job_without_controller_ref_fails_the_appwrapper(
    cluster: FakeCluster,
) -> None:
    async with simulated(cluster, **manual()) as sims:
        await cluster.create(VCJOBS, vcjob(gated=True), namespace=NS)
        await running_aw_admission(cluster, sims)
        aw = cluster.store.get(APPWRAPPERS, NS, "train")
        assert aw is not None
        assert aw["status"]["phase"] == "Failed"
        unhealthy = condition(aw, "Unhealthy")
        assert unhealthy is not None
        assert unhealthy["reason"] == "CreateFailed"
        assert "train exists, but is not controlled by appwrapper" in unhealthy["message"]
        # A7: the failed AppWrapper deletes its components by name, even one it never owned.
        assert cluster.store.get(VCJOBS, NS, "train") is None


async def running_aw_admission(cluster: FakeCluster, sims: Simulators) -> None:
    await add_local_queue(cluster)
    await cluster.create(APPWRAPPERS, appwrapper(vcjob()), namespace=NS)
    await sims.settle()
    await sims.kueue.admit(NS, "train")
    await sims.settle()


async def test_a_component_deleted_while_running_fails_the_appwrapper(
    cluster: FakeCluster,
) -> None:
    async with simulated(cluster, **manual()) as sims:
        await running_aw(cluster, sims, vcjob())
        await cluster.delete(VCJOBS, NS, "train")
        await sims.settle()
        aw = cluster.store.get(APPWRAPPERS, NS, "train")
        assert aw is not None
        assert aw["status"]["phase"] == "Failed"
        assert cond(aw, "Unhealthy")["reason"] == "MissingComponent"
        assert cond(aw, "ResourcesDeployed")["status"] == "False"


async def test_deleting_the_appwrapper_removes_components_then_itself(
    cluster: FakeCluster,
) -> None:
    async with simulated(cluster, **manual()) as sims:
        await running_aw(cluster, sims, vcjob())
        await cluster.delete(APPWRAPPERS, NS, "train")
        await sims.settle()
        assert cluster.store.get(APPWRAPPERS, NS, "train") is None
        assert cluster.store.get(VCJOBS, NS, "train") is None
        assert pods(cluster) == {}


# -- Volcano ------------------------------------------------------------------------------------


async def test_volcano_creates_pods_only_once_the_podgroup_is_inqueue(
    cluster: FakeCluster,
) -> None:
    options = {"kueue": False, "appwrapper": False, "volcano": {"auto_enqueue": False}}
    async with simulated(cluster, **options) as sims:
        job = await cluster.create(VCJOBS, vcjob(gated=True), namespace=NS)
        await sims.settle()
        pg = cluster.store.get(PODGROUPS, NS, podgroup_name(job))
        assert pg is not None
        assert pg["spec"]["minMember"] == 3
        assert pods(cluster) == {}

        await sims.volcano.inqueue(NS, "train")
        await sims.settle()
        created = pods(cluster)
        assert sorted(created) == ["train-master-0", "train-worker-0", "train-worker-1"]
        worker = created["train-worker-1"]
        assert worker["metadata"]["annotations"]["volcano.sh/task-index"] == "1"
        assert worker["metadata"]["annotations"]["volcano.sh/task-spec"] == "worker"
        assert worker["metadata"]["annotations"]["volcano.sh/job-name"] == "train"
        assert worker["metadata"]["labels"]["volcano.sh/job-name"] == "train"
        assert (worker["spec"]["hostname"], worker["spec"]["subdomain"]) == (
            "train-worker-1",
            "train",
        )
        assert worker["spec"]["schedulingGates"] == [{"name": GATE}]  # V3: gates copied
        assert worker["spec"]["schedulerName"] == "volcano"
        assert (controller_of(worker) or {}).get("uid") == job["metadata"]["uid"]
        assert stored(cluster, SERVICES, "train")["spec"]["clusterIP"] == "None"
        # V4: gated pods keep the job Pending.
        assert stored(cluster, VCJOBS, "train")["status"]["state"]["phase"] == "Pending"

        env = sims.kubelet.env(worker)
        assert env["VC_WORKER_HOSTS"] == "train-worker-0.train,train-worker-1.train"
        assert env["VC_MASTER_NUM"] == "1"
        assert env["VC_TASK_INDEX"] == "1"
        assert cluster.store.get(CONFIGMAPS, NS, "train-svc") is not None


async def test_volcano_recreates_a_missing_pod(cluster: FakeCluster) -> None:
    async with simulated(cluster, kueue=False, appwrapper=False) as sims:
        await cluster.create(VCJOBS, vcjob(), namespace=NS)
        await sims.settle()
        before = pods(cluster)["train-worker-0"]
        await cluster.delete(PODS, NS, "train-worker-0")
        await sims.settle()
        after = pods(cluster)["train-worker-0"]
        assert after["metadata"]["uid"] != before["metadata"]["uid"]
        assert after["status"]["phase"] == "Running"


async def test_volcano_freezes_the_job_spec_except_replicas(cluster: FakeCluster) -> None:
    async with simulated(cluster, kueue=False, appwrapper=False, kubelet=False) as sims:
        await cluster.create(VCJOBS, vcjob(), namespace=NS)
        await sims.settle()
        job = cluster.store.get(VCJOBS, NS, "train")
        assert job is not None
        ungated = copy.deepcopy(job)
        ungated["spec"]["tasks"][0]["template"]["metadata"]["labels"] = {"x": "y"}
        with pytest.raises(ApiError) as denied:
            await cluster.update(VCJOBS, ungated)
        assert FROZEN_MESSAGE in denied.value.message
        assert "validatejob.volcano.sh" in denied.value.message

        job["spec"]["tasks"][1]["replicas"] = 3
        job["spec"]["minAvailable"] = 4
        await cluster.update(VCJOBS, job)
        await sims.settle()
        assert "train-worker-2" in pods(cluster)


# -- kubelet -------------------------------------------------------------------------------------


def bare_pod(name: str, **spec: Any) -> JsonDict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "x"}},
        "spec": {"containers": [{"name": "main", "image": "busybox"}], **spec},
    }


async def test_kubelet_leaves_gated_pods_pending_and_runs_them_once_ungated(
    cluster: FakeCluster,
) -> None:
    async with simulated(cluster, kueue=False, appwrapper=False, volcano=False) as sims:
        await cluster.create(PODS, bare_pod("p", schedulingGates=[{"name": GATE}]), namespace=NS)
        await sims.settle()
        pod = cluster.store.get(PODS, NS, "p")
        assert pod is not None
        assert pod["status"]["phase"] == "Pending"
        assert "nodeName" not in pod["spec"]
        assert cond(pod, "PodScheduled")["reason"] == "SchedulingGated"

        pod["spec"]["schedulingGates"] = []
        await cluster.update(PODS, pod)
        await sims.settle()
        pod = cluster.store.get(PODS, NS, "p")
        assert pod is not None
        assert (pod["spec"]["nodeName"], pod["status"]["phase"]) == ("node-0", "Running")


async def test_a_pod_is_bound_then_started_in_the_writes_the_scheduler_and_kubelet_make(
    cluster: FakeCluster,
) -> None:
    seen: list[JsonDict] = []
    cluster.store.on_write(
        lambda kind, res, obj, old: seen.append(copy.deepcopy(obj)) if res == PODS else None
    )
    async with simulated(cluster, kueue=False, appwrapper=False, volcano=False) as sims:
        await cluster.create(PODS, bare_pod("p"), namespace=NS)
        await sims.settle()
    bound, creating, running = seen[1:4]
    assert bound["spec"]["nodeName"] == "node-0"
    assert cond(bound, "PodScheduled")["status"] == "True"
    assert "phase" not in bound.get("status", {}) or bound["status"]["phase"] == "Pending"
    assert creating["status"]["phase"] == "Pending"
    assert creating["status"]["containerStatuses"][0]["state"] == {
        "waiting": {"reason": "ContainerCreating"}
    }
    assert cond(creating, "Initialized")["status"] == "True"
    assert cond(creating, "ContainersReady")["reason"] == "ContainersNotReady"
    assert creating["status"]["startTime"] and creating["status"]["hostIP"]
    assert running["status"]["phase"] == "Running"
    assert running["status"]["podIP"]
    assert running["status"]["containerStatuses"][0]["ready"] is True
    assert "running" in running["status"]["containerStatuses"][0]["state"]
    assert all(
        cond(running, c)["status"] == "True"
        for c in ("Initialized", "Ready", "ContainersReady", "PodScheduled")
    )
    assert len(seen) == 4
    reasons = [e["reason"] for e in cluster.store.list(EVENTS, NS)
               if e["involvedObject"]["name"] == "p"]  # fmt: skip
    assert sorted(reasons) == ["Created", "Pulled", "Scheduled", "Started"]


async def test_kubelet_keeps_a_pod_whose_node_selector_matches_no_node(
    cluster: FakeCluster,
) -> None:
    async with simulated(cluster, kueue=False, appwrapper=False, volcano=False) as sims:
        await cluster.create(PODS, bare_pod("p", nodeSelector={"pool": "tpu"}), namespace=NS)
        await sims.settle()
        pod = cluster.store.get(PODS, NS, "p")
        assert pod is not None
        assert cond(pod, "PodScheduled")["reason"] == "Unschedulable"


def test_resolved_env_follows_the_kubelet() -> None:
    ref = {
        "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['volcano.sh/task-index']"}}
    }
    pod = {
        "metadata": {
            "name": "train-worker-1",
            "namespace": NS,
            "labels": {"rank": "3"},
            "annotations": {"volcano.sh/task-index": "1"},
        },
        "spec": {
            "nodeName": "gpu-node",
            "containers": [
                {
                    "name": "main",
                    "env": [
                        {"name": "INDEX", **ref},
                        {
                            "name": "RANK",
                            "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['rank']"}},
                        },
                        {
                            "name": "MISSING",
                            "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['nope']"}},
                        },
                        {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                        {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                        {"name": "ADDR", "value": "$(POD).train:$(PORT)"},
                        {"name": "PORT", "value": "29500"},
                        {"name": "LATER", "value": "$(PORT) $$(PORT) $(UNSET"},
                        {"name": "INDEX", "value": "override-$(INDEX)"},
                    ],
                }
            ],
        },
    }
    assert resolved_env(pod) == {
        "INDEX": "override-1",
        "RANK": "3",
        "MISSING": "",
        "POD": "train-worker-1",
        "NODE": "gpu-node",
        "ADDR": "train-worker-1.train:$(PORT)",
        "PORT": "29500",
        "LATER": "29500 $(PORT) $(UNSET",
    }
    with pytest.raises(ValueError, match="needs store"):
        resolved_env({**pod, "spec": {"containers": [{"name": "c", "env": [
            {"name": "X", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "k"}}}]}]}})  # fmt: skip


# -- the harness ---------------------------------------------------------------------------------


async def test_a_simulator_exception_surfaces_in_settle(cluster: FakeCluster) -> None:
    async with simulated(cluster, kueue=False, appwrapper=False, volcano=False) as sims:

        async def broken(key: tuple[str, str]) -> None:
            raise KeyError(f"boom {key}")

        sims.kubelet.reconcile = broken  # type: ignore[method-assign]
        await cluster.create(PODS, bare_pod("p"), namespace=NS)
        with pytest.raises(SimulatorFailed) as failed:
            await sims.settle()
        assert isinstance(failed.value.__cause__, KeyError)
        sims._failure = None  # handled: let the block exit cleanly


async def test_settle_reports_a_simulator_that_never_stops_writing(cluster: FakeCluster) -> None:
    async with simulated(cluster, kueue=False, appwrapper=False, volcano=False) as sims:
        kubelet = sims.kubelet

        async def restless(key: tuple[str, str]) -> None:
            pod = cluster.store.get(PODS, *key)
            if pod is not None:
                pod["metadata"].setdefault("labels", {})["tick"] = pod["metadata"][
                    "resourceVersion"
                ]
                await kubelet.update(PODS, pod)

        kubelet.reconcile = restless  # type: ignore[method-assign]
        await cluster.create(PODS, bare_pod("p"), namespace=NS)
        with pytest.raises(SettleError, match=r"kubelet: .*update pods team-a/p"):
            await sims.settle(rounds=5, timeout=0.5)


async def test_settle_also_waits_for_another_actor(cluster: FakeCluster) -> None:
    answers = iter([False, False, True])
    asked: list[bool] = []

    def idle() -> bool:
        asked.append(next(answers))
        return asked[-1]

    async with simulated(cluster, kueue=False, appwrapper=False, volcano=False) as sims:
        await sims.settle(idle=idle)
    assert asked == [False, False, True]
