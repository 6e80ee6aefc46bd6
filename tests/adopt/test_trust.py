"""A pod runs only on its own object's admission, whoever created it (issue 26; the 0.3 review's
g01, g02 and g03, and its item 4).

Each scenario runs on the simulated cluster (autowrap's webhooks, ValidatingAdmissionPolicies
and controller real; Kueue, the AppWrapper controller, Volcano and a kubelet simulated, Volcano
creating pods under its own ServiceAccount) with an ordinary namespace user, mallory, who may
write labels, annotations, gates and ownerReferences on the pods she creates, read every uid
in the namespace, and patch and delete pods and Volcano Jobs there.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from testbed.apiserver import UserInfo
from testbed.cluster.patches import MERGE_PATCH
from testbed.cluster.resources import APPWRAPPERS, PODS, VCJOBS, Resource
from testbed.cluster.store import ApiError
from testbed.pki import ServingPki
from tests.adopt.cluster import ALICE, NAMESPACE, Cluster, running_cluster, vcjob
from tests.adopt.harness import eventually
from tests.adopt.test_safety import ALWAYS, _unlabelled
from webhook.core import adoption
from webhook.model import names

Obj = dict[str, Any]
MALLORY = UserInfo(username="mallory", groups=("system:authenticated",))
REPLICASET_CONTROLLER = UserInfo(
    username="system:serviceaccount:kube-system:replicaset-controller",
    groups=("system:serviceaccounts", "system:serviceaccounts:kube-system",
            "system:authenticated"),
)  # fmt: skip


def _claiming_pod(job: Obj, name: str = "aa-borrow", *, gpus: int = 8) -> Obj:
    """What autowrap looks for on a Job's worker, written by mallory on a pod of hers (review
    g01, step 2): the AppWrapper label, the podSet annotation, the gate and a controller
    ownerReference naming the Job by uid; 8 GPUs and her image."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "labels": {names.APPWRAPPER_LABEL: "train"},
            "annotations": {adoption.PODSET_ANNOTATION: "1"},
            "ownerReferences": [{"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
                                 "name": "train", "uid": job["metadata"]["uid"],
                                 "controller": True}],
        },
        "spec": {
            "restartPolicy": "Never",
            "schedulingGates": [{"name": names.ADMISSION_GATE}],
            "containers": [{"name": "main", "image": "mallory/miner",
                            "resources": {"limits": {"nvidia.com/gpu": gpus}}}],
        },
    }  # fmt: skip


def _gated(pod: Obj | None) -> bool:
    return pod is not None and adoption.is_gated(pod)


def _running(pod: Obj | None) -> bool:
    return (
        pod is not None
        and not pod["spec"].get("schedulingGates")
        and (pod.get("status") or {}).get("phase") == "Running"
    )


def _event_messages(cluster: Cluster, reason: str) -> list[str]:
    from testbed.cluster.resources import EVENTS

    return [
        str(e.get("message"))
        for e in cluster.api.store.list(EVENTS, NAMESPACE)
        if e.get("reason") == reason
    ]


async def _alices_job(
    cluster: Cluster, name: str = "train", *, workers: int = 1, manifest: Obj | None = None
) -> Obj:
    """alice's Volcano Job (a master and ``workers`` workers, 1 GPU each, or ``manifest``),
    created and settled."""
    submitted = vcjob(name, workers=workers, gpus=1) if manifest is None else manifest
    await cluster.api.create(VCJOBS, submitted, user=ALICE)
    await cluster.settle()
    job = cluster.job(name)
    assert job is not None
    return job


async def _refused(call: Any) -> ApiError:
    with pytest.raises(ApiError) as refused:
        await call
    return refused.value


async def _patch_refused(
    cluster: Cluster, resource: Resource, name: str, patch: Obj, *, user: UserInfo
) -> ApiError:
    """The refusal of ``user``'s merge patch of ``name`` in the namespace."""
    return await _refused(cluster.api.patch(resource, NAMESPACE, name, patch, MERGE_PATCH,
                                            user=user))  # fmt: skip


# --- g01: a pod someone else created never spends a job's admission ------------------------------


async def test_g01_a_pod_made_to_claim_another_users_job_is_refused(
    webhook_pki: ServingPki, tmp_path: Path
) -> None:
    async with running_cluster(webhook_pki, tmp_path, auto_admit=False) as cluster:
        job = await _alices_job(cluster)

        refused = await _refused(cluster.api.create(PODS, _claiming_pod(job), user=MALLORY))
        assert refused.status == 403, refused.message
        assert "autowrap-wrapped-pods" in refused.message
        assert "user 'mallory' is not it" in refused.message
        assert cluster.get(PODS, "aa-borrow") is None
        # The gate or the label alone claims the job as much.
        for claim in ("gate", "label"):
            pod = _claiming_pod(job, f"aa-{claim}")
            del pod["metadata"]["ownerReferences"]
            if claim == "gate":
                del pod["metadata"]["labels"][names.APPWRAPPER_LABEL]
            else:
                del pod["spec"]["schedulingGates"]
            refused = await _refused(cluster.api.create(PODS, pod, user=MALLORY))
            assert refused.status == 403 and "autowrap-wrapped-pods" in refused.message, claim


async def test_g01_a_claiming_pod_from_before_the_policy_is_held_and_the_jobs_own_pod_runs(
    webhook_pki: ServingPki, tmp_path: Path
) -> None:
    async with running_cluster(webhook_pki, tmp_path, auto_admit=False) as cluster:
        job = await _alices_job(cluster, workers=3)  # admitted for 3 workers: room to spare
        # Stored as it is where the pod was created before autowrap-wrapped-pods existed (the
        # release must hold whatever the admission chain let through once).
        cluster.api.store.create(PODS, _claiming_pod(job))

        await cluster.sims.kueue.admit(NAMESPACE, "train")
        await cluster.settle()

        assert _gated(cluster.get(PODS, "aa-borrow"))
        for name in ("train-master-0", "train-worker-0", "train-worker-1", "train-worker-2"):
            assert _running(cluster.get(PODS, name)), name
        held = [m for m in _event_messages(cluster, "ReleaseFailed") if "aa-borrow" in m]
        assert held and "not a pod the admission covers" in held[0], held


async def test_g01_the_claim_of_a_running_pod_cannot_be_taken_off_and_every_claim_counts(
    webhook_pki: ServingPki, tmp_path: Path
) -> None:
    async with running_cluster(webhook_pki, tmp_path) as cluster:
        await _alices_job(cluster)
        assert _running(cluster.get(PODS, "train-worker-0"))

        # Step 4 of the review: the AppWrapper label off a running pod of the job.
        unlabel = {"metadata": {"labels": {names.APPWRAPPER_LABEL: None}}}
        refused = await _patch_refused(cluster, PODS, "train-worker-0", unlabel, user=MALLORY)
        assert refused.status == 403 and "autowrap-wrapped-pods" in refused.message
        disown = {"metadata": {"ownerReferences": []}}
        refused = await _patch_refused(cluster, PODS, "train-worker-0", disown, user=MALLORY)
        assert refused.status == 403 and "autowrap-wrapped-pods" in refused.message

        # A pod of hers that runs and claims the job by its controller reference only (no
        # label left; stored as before the policy): it counts against the admission, so the
        # job's own worker, deleted and made again by Volcano, waits rather than run beside it.
        job = cluster.job()
        assert job is not None
        stray = _claiming_pod(job, "aa-runner", gpus=1)
        del stray["metadata"]["labels"][names.APPWRAPPER_LABEL]
        del stray["spec"]["schedulingGates"]
        stray["metadata"]["labels"][names.VOLCANO_JOB_NAME] = "train"  # found by this label
        stray["spec"]["nodeName"] = "gpu-node"
        stray["status"] = {"phase": "Running"}
        cluster.api.store.create(PODS, stray)
        await cluster.api.delete(PODS, NAMESPACE, "train-worker-0", user=MALLORY)

        await eventually(lambda: any("aa-runner" in m for m in
                                     _event_messages(cluster, "ReleaseHeld")),
                         what="the hold, naming the stray pod")  # fmt: skip
        await cluster.settle()
        assert _gated(cluster.get(PODS, "train-worker-0"))


async def test_an_owner_reference_costs_its_writer_only_what_upstream_asks(
    webhook_pki: ServingPki, tmp_path: Path
) -> None:
    """OwnerReferencesPermissionEnforcement (gc_admission.go): naming an owner needs nothing at
    create, delete on the object to change it later, and update on the owner's finalizers only
    to block its deletion. Why a pod's ownerReference proves nothing about who made it."""
    async with running_cluster(webhook_pki, tmp_path, auto_admit=False) as cluster:
        cluster.api.deny("mallory", verb="update", resource="jobs", subresource="finalizers")
        cluster.api.deny("mallory", verb="delete", resource="pods", name="mine")
        job = await _alices_job(cluster)
        owner = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "name": "train",
                 "uid": job["metadata"]["uid"]}  # fmt: skip
        pod = _side_pod({**owner, "blockOwnerDeletion": True})
        pod["metadata"]["name"] = "mine"
        refused = await _refused(cluster.api.create(PODS, pod, user=MALLORY))
        assert "you can't set finalizers on" in refused.message, refused.message

        pod["metadata"]["ownerReferences"] = [owner]  # not a controller: no claim
        await cluster.api.create(PODS, pod, user=MALLORY)
        disown = {"metadata": {"ownerReferences": []}}
        refused = await _patch_refused(cluster, PODS, "mine", disown, user=MALLORY)
        assert "cannot set an ownerRef on a resource you can't delete" in refused.message


# --- g02: no pod escapes a wrap: Always namespace by naming an owner -----------------------------


def _side_pod(owner: Obj) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "side", "namespace": NAMESPACE, "ownerReferences": [owner]},
        "spec": {"restartPolicy": "Never", "containers": [
            {"name": "main", "image": "mallory/miner",
             "resources": {"limits": {"nvidia.com/gpu": 8}}}]},
    }  # fmt: skip


async def test_g02_a_borrowed_controller_reference_keeps_no_pod_out_of_an_always_namespace(
    webhook_pki: ServingPki, tmp_path: Path
) -> None:
    async with running_cluster(
        webhook_pki, tmp_path, auto_admit=False, extra_policies=ALWAYS,
        namespace_labels={names.WRAP_LABEL: "Always"},
    ) as cluster:  # fmt: skip
        cluster.api.deny("mallory", verb="create", resource="appwrappers", reason="no RBAC rule")
        holder = await _alices_job(
            cluster, "holder", manifest=_unlabelled(vcjob("holder", workers=1, gpus=1))
        )
        assert holder is not None and cluster.appwrapper("holder") is not None

        plain = _side_pod({"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "1"})
        del plain["metadata"]["ownerReferences"]
        refused = await _refused(cluster.api.create(PODS, plain, user=MALLORY))
        assert refused.status == 403 and "may not create appwrappers" in refused.message

        volcano_job = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
                       "name": "holder", "uid": holder["metadata"]["uid"], "controller": True}  # fmt: skip
        replicaset = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-5d8f",
                      "uid": "rs-uid", "controller": True}  # fmt: skip
        for owner in (volcano_job, replicaset):
            refused = await _refused(cluster.api.create(PODS, _side_pod(owner), user=MALLORY))
            assert refused.status in (403, 422), (owner["kind"], refused.message)
            assert cluster.get(PODS, "side") is None, owner["kind"]

        # alice may create AppWrappers: autowrap itself says what is wrong and how to fix it.
        refused = await _refused(cluster.api.create(PODS, _side_pod(replicaset), user=ALICE))
        assert "metadata.ownerReferences" in refused.message, refused.message
        assert "user 'alice' created it" in refused.message
        assert "Remove the ownerReference" in refused.message

        # The ReplicaSet controller's own pod is left alone, as before.
        made = await cluster.api.create(PODS, _side_pod(replicaset), user=REPLICASET_CONTROLLER)
        assert not made["spec"].get("schedulingGates")
        assert names.ADOPTION_LABEL not in (made["metadata"].get("labels") or {})
        assert cluster.appwrapper("side") is None


# --- g03: nothing Kueue priced changes under a running admission --------------------------------


async def test_g03_the_priority_class_of_an_adopted_job_is_frozen(
    webhook_pki: ServingPki, tmp_path: Path
) -> None:
    async with running_cluster(webhook_pki, tmp_path) as cluster:
        await _alices_job(cluster, "prio")
        assert _running(cluster.get(PODS, "prio-worker-0"))

        raise_it = {"spec": {"priorityClassName": "cluster-critical-training"}}
        refused = await _patch_refused(cluster, VCJOBS, "prio", raise_it, user=MALLORY)
        assert refused.status == 403
        assert "spec.priorityClassName" in refused.message
        assert "delete the job and create it again" in refused.message
        job = cluster.job("prio")
        assert job is not None and not job["spec"].get("priorityClassName")


async def test_f3_a_changed_image_is_refused_for_the_image_not_for_min_available(
    webhook_pki: ServingPki, tmp_path: Path
) -> None:
    async with running_cluster(webhook_pki, tmp_path) as cluster:
        manifest = vcjob(workers=1, gpus=1)
        await _alices_job(cluster, manifest=copy.deepcopy(manifest))

        # kubectl apply of the manifest with a new image: a merge patch of spec.tasks as the
        # manifest has them, without Volcano's minAvailable defaults (journey F3).
        for task in manifest["spec"]["tasks"]:
            task["template"]["spec"]["containers"][0]["image"] = "torch:2.5"
        patch = {"spec": {"tasks": manifest["spec"]["tasks"]}}
        refused = await _patch_refused(cluster, VCJOBS, "train", patch, user=ALICE)
        assert "minAvailable" not in refused.message.split("denied")[0], refused.message
        assert "autowrap-adopted-job-size" not in refused.message, refused.message
        assert "validatejob.volcano.sh" in refused.message, refused.message

        # A task's minAvailable the update does set is still judged, and named.
        manifest["spec"]["tasks"][1]["minAvailable"] = 0
        refused = await _patch_refused(cluster, VCJOBS, "train", patch, user=ALICE)
        assert "spec.tasks[*].minAvailable" in refused.message, refused.message


# --- item 4: an orphaned AppWrapper never keeps a re-created job waiting --------------------------


@pytest.mark.parametrize("restart", [False, True], ids=["", "controller-restarted"])
async def test_an_appwrapper_whose_job_is_gone_never_keeps_a_recreated_job_waiting(
    webhook_pki: ServingPki, tmp_path: Path, restart: bool
) -> None:
    async with running_cluster(webhook_pki, tmp_path, auto_admit=False) as cluster:
        await _alices_job(cluster)
        old = cluster.appwrapper()
        assert old is not None

        # The user removes the finalizer by hand, deletes the Job, and creates it again,
        # changed, well within the grace period a GitOps re-create gets.
        await cluster.api.patch(VCJOBS, NAMESPACE, "train", {"metadata": {"finalizers": None}},
                                MERGE_PATCH, user=ALICE)  # fmt: skip
        await cluster.api.delete(VCJOBS, NAMESPACE, "train", user=ALICE)
        await eventually(lambda: cluster.job() is None, what="the Job gone")
        if restart:
            await cluster.restart_controller()
        await _alices_job(cluster, workers=2)

        job = cluster.job()
        aw = cluster.appwrapper()
        assert job is not None and aw is not None
        assert aw["metadata"]["uid"] != old["metadata"]["uid"]
        assert aw["metadata"]["annotations"][names.ORIGIN_UID_ANNOTATION] == job["metadata"]["uid"]
        assert job["metadata"]["labels"][names.ADOPTION_LABEL] == names.ADOPTION_ADOPTED
        status = job["metadata"]["annotations"][names.STATUS_ANNOTATION]
        assert status.startswith("Queued in LocalQueue"), status
        assert [a["metadata"]["name"] for a in cluster.api.store.list(APPWRAPPERS, NAMESPACE)] == [
            "train"
        ]


# --- T-02: a pod made while Kueue evicts stays gated --------------------------------------------


async def test_a_pod_created_between_the_two_phases_of_an_eviction_stays_gated(
    webhook_pki: ServingPki, tmp_path: Path
) -> None:
    async with running_cluster(webhook_pki, tmp_path) as cluster:
        await _alices_job(cluster)
        assert _running(cluster.get(PODS, "train-worker-0"))

        # Kueue's first phase: the Workload says Evicted while Admitted and status.admission
        # remain, and the job reconciler has not stopped the AppWrapper yet.
        cluster.sims.kueue.pause()
        await cluster.sims.kueue.preempt(NAMESPACE, "train")
        workload = cluster.sims.kueue.workload(NAMESPACE, "train")
        assert workload is not None and workload["status"].get("admission")
        aw = cluster.appwrapper()
        assert aw is not None and "suspend" not in aw["spec"]
        # A pod of the job is made again in that window (Volcano replaces a deleted one).
        await cluster.api.delete(PODS, NAMESPACE, "train-worker-0", user=ALICE)
        await eventually(lambda: _gated(cluster.get(PODS, "train-worker-0")),
                         what="the worker made again, gated", timeout=60)  # fmt: skip
        await cluster.settle(timeout=60)  # autowrap has looked at it (the release would show here)
        assert _gated(cluster.get(PODS, "train-worker-0"))

        # The second phase: the AppWrapper is stopped and suspends; nothing was released.
        cluster.sims.kueue.resume()
        await cluster.settle(timeout=60)
        assert cluster.appwrapper()["status"]["phase"] == "Suspended"  # type: ignore[index]
        assert all(_gated(p) or p["metadata"].get("deletionTimestamp") for p in cluster.pods())
