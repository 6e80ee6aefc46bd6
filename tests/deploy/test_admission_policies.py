"""The ValidatingAdmissionPolicies autowrap ships (deploy/base/admission-policies.yaml), applied
by the apiserver emulator to the rendered manifests as kube-apiserver applies them: what an
ordinary namespace user (alice) and autowrap's own ServiceAccount may and may not write."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from testbed.apiserver import AdmissionResult, ApiserverEmulator, UserInfo
from tests.deploy.test_manifests import render
from webhook.model import names

Obj = dict[str, Any]
AUTOWRAP = UserInfo(
    username=f"system:serviceaccount:{names.SERVICE_NAMESPACE}:{names.SERVICE_NAME}",
    groups=("system:serviceaccounts", "system:authenticated"),
)
ALICE = UserInfo(username="alice", groups=("system:authenticated",))
GATE = {"name": names.ADMISSION_GATE}
APPWRAPPER_LABEL = "workload.codeflare.dev/appwrapper"
OWNER = {
    "apiVersion": "workload.codeflare.dev/v1beta2",
    "kind": "AppWrapper",
    "name": "aw-train",
    "uid": "0b7f0c1e-4a4e-4c1d-9f7e-8d0a5a1f2b3c",
    "controller": True,
    "blockOwnerDeletion": True,
}


def emulator(variant: str = "base") -> ApiserverEmulator:
    # No webhook configuration: only the policies answer (nothing listens on the port).
    return ApiserverEmulator("127.0.0.1", 9, admission_policies=render(variant))


def gated_pod(namespace: str = "team-a", **labels: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "train-worker-0",
            "namespace": namespace,
            "labels": {APPWRAPPER_LABEL: "aw-train", **labels},
            "annotations": {"volcano.sh/task-spec": "worker"},
            "finalizers": [],
        },
        "spec": {
            "schedulingGates": [GATE],
            "nodeSelector": {"kubernetes.io/arch": "amd64"},
            "tolerations": [{"key": "gpu", "operator": "Exists"}],
            "containers": [{"name": "main", "image": "registry.example/train:1"}],
        },
    }


def adopted_job(*, replicas: int = 1, gated: bool = True) -> Obj:
    template: Obj = {"spec": {"containers": [{"name": "main", "image": "train:1"}]}}
    if gated:
        template["spec"]["schedulingGates"] = [GATE]
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {
            "name": "train",
            "namespace": "team-a",
            "labels": {names.ADOPTION_LABEL: names.ADOPTION_PENDING},
            "annotations": {names.REQUESTED_BY_ANNOTATION: "alice"},
            "finalizers": [names.ADOPTION_FINALIZER],
        },
        "spec": {
            "minAvailable": 2,
            "tasks": [
                {"name": "master", "replicas": 1, "template": copy.deepcopy(template)},
                {"name": "worker", "replicas": replicas, "template": copy.deepcopy(template)},
            ],
        },
    }


async def update(old: Obj, change: Any, user: UserInfo, variant: str = "base") -> AdmissionResult:
    new = copy.deepcopy(old)
    change(new)
    return await emulator(variant).admit("UPDATE", new, old_object=old, user=user)


def denied_by(result: AdmissionResult, policy: str) -> str:
    assert not result.allowed, "the write was allowed"
    assert result.status_code == 403 and result.reason == "Forbidden", result.message
    assert (
        f"ValidatingAdmissionPolicy '{policy}' with binding '{policy}' denied request: "
        in result.message
    ), result.message
    return result.message


def allowed(result: AdmissionResult) -> None:
    assert result.allowed, result.message


# --- 1. only autowrap removes the gate ---------------------------------------------------------


def remove_gate(obj: Obj) -> None:
    obj["spec"]["schedulingGates"] = []


async def test_a_user_cannot_remove_the_gate_from_her_own_pod() -> None:
    message = denied_by(await update(gated_pod(), remove_gate, ALICE), "autowrap-admission-gate")
    assert 'pods "train-worker-0" is forbidden' in message
    assert "spec.schedulingGates: the gate autowrap.io/admission is removed by autowrap" in message


async def test_a_user_cannot_patch_the_gate_away_among_other_gates() -> None:
    def keep_the_others(pod: Obj) -> None:
        pod["spec"]["schedulingGates"] = [{"name": "example.com/other"}]

    pod = gated_pod()
    pod["spec"]["schedulingGates"].append({"name": "example.com/other"})
    denied_by(await update(pod, keep_the_others, ALICE), "autowrap-admission-gate")


async def test_a_user_cannot_mark_a_waiting_pod_released() -> None:
    def mark(pod: Obj) -> None:
        pod["metadata"]["labels"][names.RELEASED_LABEL] = "true"

    message = denied_by(await update(gated_pod(), mark, ALICE), "autowrap-admission-gate")
    assert "metadata.labels: autowrap.io/released is written by autowrap" in message
    allowed(await update(gated_pod(), mark, AUTOWRAP))


async def test_autowrap_removes_the_gate_and_a_user_may_change_the_rest() -> None:
    allowed(await update(gated_pod(), remove_gate, AUTOWRAP))

    def relabel(pod: Obj) -> None:
        pod["metadata"]["labels"]["team"] = "vision"
        pod["spec"]["schedulingGates"].append({"name": "example.com/other"})

    allowed(await update(gated_pod(), relabel, ALICE))


# --- 2. an adopted Volcano Job keeps its admitted size ------------------------------------------


def scale_workers(count: int) -> Any:
    def change(job: Obj) -> None:
        job["spec"]["tasks"][1]["replicas"] = count

    return change


async def test_scaling_an_adopted_job_is_refused_with_the_way_out() -> None:
    message = denied_by(
        await update(adopted_job(), scale_workers(6), ALICE), "autowrap-adopted-job-size"
    )
    assert "spec.tasks[*].replicas" in message
    assert "delete the job and create it again" in message


@pytest.mark.parametrize(
    "change",
    [
        lambda job: job["spec"].update(minAvailable=7),
        lambda job: job["spec"]["tasks"][1].update(minAvailable=1),
        lambda job: job["spec"]["tasks"].append(copy.deepcopy(job["spec"]["tasks"][1])),
    ],
    ids=["minAvailable", "task-minAvailable", "another-task"],
)
async def test_the_gang_of_an_adopted_job_is_fixed(change: Any) -> None:
    denied_by(await update(adopted_job(), change, ALICE), "autowrap-adopted-job-size")


async def test_scaling_autowrap_never_adopted_is_not_its_business() -> None:
    job = adopted_job()
    del job["metadata"]["labels"][names.ADOPTION_LABEL]
    allowed(await update(job, scale_workers(6), ALICE))


async def test_other_changes_to_an_adopted_job_pass() -> None:
    def annotate(job: Obj) -> None:
        job["metadata"]["annotations"]["team"] = "vision"

    allowed(await update(adopted_job(), annotate, ALICE))


# --- 3. requested-by names the creator; pending means gated -------------------------------------


async def test_a_forged_requested_by_is_refused_on_create() -> None:
    pod = gated_pod(**{names.ADOPTION_LABEL: names.ADOPTION_PENDING})
    pod["metadata"]["annotations"][names.REQUESTED_BY_ANNOTATION] = "bob"
    result = await emulator().admit("CREATE", pod, user=ALICE)
    message = denied_by(result, "autowrap-requested-by")
    assert "metadata.annotations[autowrap.io/requested-by]" in message
    pod["metadata"]["annotations"][names.REQUESTED_BY_ANNOTATION] = "alice"
    allowed(await emulator().admit("CREATE", pod, user=ALICE))


async def test_requested_by_cannot_be_added_or_changed_afterwards_except_by_autowrap() -> None:
    def claim(job: Obj) -> None:
        job["metadata"]["annotations"][names.REQUESTED_BY_ANNOTATION] = "bob"

    def drop(job: Obj) -> None:
        del job["metadata"]["annotations"][names.REQUESTED_BY_ANNOTATION]

    denied_by(await update(adopted_job(), claim, ALICE), "autowrap-requested-by")
    allowed(await update(adopted_job(), claim, AUTOWRAP))
    # Removing names no one: a server-side re-apply of the user's own manifest does it.
    allowed(await update(adopted_job(), drop, ALICE))
    unattributed = adopted_job()
    drop(unattributed)
    denied_by(await update(unattributed, claim, ALICE), "autowrap-requested-by")


async def test_an_object_labelled_pending_must_be_gated_on_every_template() -> None:
    ungated = adopted_job(gated=False)
    message = denied_by(
        await emulator().admit("CREATE", ungated, user=ALICE), "autowrap-requested-by"
    )
    assert "metadata.labels[autowrap.io/adoption]" in message
    half = adopted_job()
    del half["spec"]["tasks"][0]["template"]["spec"]["schedulingGates"]
    denied_by(await emulator().admit("CREATE", half, user=ALICE), "autowrap-requested-by")
    allowed(await emulator().admit("CREATE", adopted_job(), user=ALICE))
    pod = gated_pod(**{names.ADOPTION_LABEL: names.ADOPTION_PENDING})
    pod["metadata"]["annotations"][names.REQUESTED_BY_ANNOTATION] = "alice"
    allowed(await emulator().admit("CREATE", pod, user=ALICE))
    pod["spec"]["schedulingGates"] = []
    denied_by(await emulator().admit("CREATE", pod, user=ALICE), "autowrap-requested-by")


async def test_a_user_cannot_label_an_object_as_adopted_afterwards() -> None:
    job = adopted_job(gated=False)
    del job["metadata"]["labels"][names.ADOPTION_LABEL]
    del job["metadata"]["annotations"][names.REQUESTED_BY_ANNOTATION]

    def pose(obj: Obj) -> None:
        obj["metadata"]["labels"][names.ADOPTION_LABEL] = names.ADOPTION_PENDING

    denied_by(await update(job, pose, ALICE), "autowrap-requested-by")


# --- 4. autowrap's own writes ------------------------------------------------------------------


def swap_image(pod: Obj) -> None:
    pod["spec"]["containers"][0]["image"] = "attacker.example/shell:latest"


async def test_autowrap_cannot_swap_the_image_of_a_kube_system_pod() -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "kube-proxy-x2", "namespace": "kube-system"},
        "spec": {
            "hostNetwork": True,
            "containers": [{"name": "kube-proxy", "image": "registry.k8s.io/kube-proxy:v1.30.0"}],
        },
    }
    message = denied_by(await update(pod, swap_image, AUTOWRAP), "autowrap-own-writes")
    assert "changes only objects autowrap prepared" in message


async def test_autowrap_cannot_swap_the_image_of_a_pod_it_prepared() -> None:
    message = denied_by(await update(gated_pod(), swap_image, AUTOWRAP), "autowrap-own-writes")
    assert "never changes a pod's containers" in message


async def test_a_release_patch_is_what_autowrap_may_write() -> None:
    def release(pod: Obj) -> None:
        remove_gate(pod)
        pod["spec"]["nodeSelector"]["cloud.example/flavor"] = "a100"
        pod["spec"]["tolerations"].append({"key": "a100", "operator": "Exists"})
        pod["metadata"]["labels"]["kueue.x-k8s.io/podset"] = "worker"
        pod["metadata"]["annotations"][names.STATUS_ANNOTATION] = "admitted"
        pod["metadata"]["labels"][names.RELEASED_LABEL] = "true"

    allowed(await update(gated_pod(), release, AUTOWRAP))


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda p: p["metadata"]["labels"].update({APPWRAPPER_LABEL: "other"}), "metadata"),
        (lambda p: p["metadata"]["annotations"].pop("volcano.sh/task-spec"), "metadata"),
        (lambda p: p["spec"]["nodeSelector"].update({"kubernetes.io/arch": "arm64"}), "nodeSelector"),
        (lambda p: p["spec"].update(tolerations=[]), "tolerations"),
        (lambda p: p["spec"].update(schedulingGates=[GATE, {"name": "x.example/y"}]), "schedulingGates"),
        (lambda p: p["spec"].update(activeDeadlineSeconds=1), "activeDeadlineSeconds"),
        (lambda p: p["metadata"]["finalizers"].append("example.com/hold"), "finalizers"),
        (
            lambda p: p["metadata"].update(
                ownerReferences=[{"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "1"}]
            ),
            "ownerReferences",
        ),
    ],
    ids=["label", "annotation", "nodeSelector", "tolerations", "gates", "deadline", "finalizer",
         "owner"],
)  # fmt: skip
async def test_autowrap_may_not_write_anything_else_on_a_pod(change: Any, field: str) -> None:
    message = denied_by(await update(gated_pod(), change, AUTOWRAP), "autowrap-own-writes")
    assert field in message


async def test_autowrap_adopts_a_job_by_its_metadata_only() -> None:
    def adopt(job: Obj) -> None:
        job["metadata"]["labels"][names.ADOPTION_LABEL] = names.ADOPTION_ADOPTED
        job["metadata"]["annotations"][names.STATUS_ANNOTATION] = "queued in team-a/default"
        job["metadata"]["ownerReferences"] = [OWNER]
        job["metadata"]["finalizers"] = []

    allowed(await update(adopted_job(), adopt, AUTOWRAP))

    def respec(job: Obj) -> None:
        job["spec"]["tasks"][1]["template"]["spec"]["containers"][0]["image"] = "other:2"

    message = denied_by(await update(adopted_job(), respec, AUTOWRAP), "autowrap-own-writes")
    assert "never changes a Volcano Job's spec" in message


async def test_autowrap_creates_only_dry_runs_and_deletes_nothing() -> None:
    pod = gated_pod("kube-system")
    message = denied_by(await emulator().admit("CREATE", pod, user=AUTOWRAP), "autowrap-own-writes")
    assert "only as server-side dry runs" in message
    allowed(await emulator().admit("CREATE", pod, user=AUTOWRAP, dry_run=True))
    denied_by(
        await emulator().admit("DELETE", pod, old_object=pod, user=AUTOWRAP), "autowrap-own-writes"
    )
    allowed(await emulator().admit("DELETE", pod, old_object=pod, user=ALICE))


@pytest.mark.parametrize("variant", ["self-managed", "cert-manager", "without-component-create"])
async def test_every_variant_ships_the_policies(variant: str) -> None:
    denied_by(await update(gated_pod(), remove_gate, ALICE, variant), "autowrap-admission-gate")
    denied_by(await update(gated_pod(), swap_image, AUTOWRAP, variant), "autowrap-own-writes")


# --- 5. a pod of a wrapped object is its controller's (0.3 review g01) ----------------------------

VOLCANO = UserInfo(username="system:serviceaccount:volcano-system:volcano-controllers",
                   groups=("system:serviceaccounts", "system:authenticated"))  # fmt: skip
COLLECTOR = UserInfo(username="system:serviceaccount:kube-system:generic-garbage-collector",
                     groups=("system:serviceaccounts", "system:authenticated"))  # fmt: skip
JOB_OWNER = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "name": "train",
             "uid": "job-uid", "controller": True}  # fmt: skip


def volcano_pod() -> Obj:
    pod = gated_pod()
    pod["metadata"]["ownerReferences"] = [copy.deepcopy(JOB_OWNER)]
    return pod


async def test_only_its_controller_creates_a_pod_that_claims_a_wrapped_object() -> None:
    denied_by(await emulator().admit("CREATE", volcano_pod(), user=ALICE), "autowrap-wrapped-pods")
    allowed(await emulator().admit("CREATE", volcano_pod(), user=VOLCANO))
    for claim in ("owner", "label", "gate"):
        pod = volcano_pod()
        if claim != "owner":
            del pod["metadata"]["ownerReferences"]
        if claim != "label":
            del pod["metadata"]["labels"][APPWRAPPER_LABEL]
        if claim != "gate":
            del pod["spec"]["schedulingGates"]
        message = denied_by(await emulator().admit("CREATE", pod, user=ALICE),
                            "autowrap-wrapped-pods")  # fmt: skip
        assert "user 'alice' is not it" in message, claim
    # A Pod as autowrap's admission prepares it for its own requester.
    prepared = gated_pod(**{names.ADOPTION_LABEL: names.ADOPTION_PENDING})
    prepared["metadata"]["annotations"][names.REQUESTED_BY_ANNOTATION] = "alice"
    allowed(await emulator().admit("CREATE", prepared, user=ALICE))
    prepared["metadata"]["ownerReferences"] = [copy.deepcopy(JOB_OWNER)]
    denied_by(await emulator().admit("CREATE", prepared, user=ALICE), "autowrap-wrapped-pods")
    # autowrap's dry runs of an AppWrapper's components.
    allowed(await emulator().admit("CREATE", volcano_pod(), user=AUTOWRAP, dry_run=True))


async def test_the_claim_of_a_pod_stays_as_it_was_created() -> None:
    def unlabel(pod: Obj) -> None:
        del pod["metadata"]["labels"][APPWRAPPER_LABEL]

    def relabel(pod: Obj) -> None:
        pod["metadata"]["labels"][APPWRAPPER_LABEL] = "other"

    def disown(pod: Obj) -> None:
        pod["metadata"]["ownerReferences"] = []

    def annotate(pod: Obj) -> None:
        pod["metadata"]["annotations"]["note"] = "mine"

    for change in (unlabel, relabel, disown):
        denied_by(await update(volcano_pod(), change, ALICE), "autowrap-wrapped-pods")
    allowed(await update(volcano_pod(), annotate, ALICE))
    allowed(await update(volcano_pod(), disown, COLLECTOR))  # orphaning


async def test_an_adopted_jobs_priority_class_is_frozen_and_left_out_defaults_are_not_judged() -> (
    None
):
    def prioritize(job: Obj) -> None:
        job["spec"]["priorityClassName"] = "cluster-critical-training"

    message = denied_by(await update(adopted_job(), prioritize, ALICE), "autowrap-adopted-job-size")
    assert message.split("denied request: ")[1].startswith("spec.priorityClassName:")

    def reapplied(job: Obj) -> None:  # kubectl apply: the manifest has no minAvailable defaults
        del job["spec"]["minAvailable"]
        for task in job["spec"]["tasks"]:
            task.pop("minAvailable", None)
            task["template"]["spec"]["containers"][0]["image"] = "train:2"

    old = adopted_job()
    for task in old["spec"]["tasks"]:
        task["minAvailable"] = 1
    allowed(await update(old, reapplied, ALICE))  # Volcano's own webhook judges the image

    def lower(job: Obj) -> None:
        job["spec"]["tasks"][1]["minAvailable"] = 0

    message = denied_by(await update(old, lower, ALICE), "autowrap-adopted-job-size")
    assert message.split("denied request: ")[1].startswith("spec.tasks[*].minAvailable:")
