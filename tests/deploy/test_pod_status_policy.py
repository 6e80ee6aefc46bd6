"""``autowrap-wrapped-pods`` on ``pods/status``, applied by the apiserver emulator to the rendered
manifests: a status write keeps a pod's spec and ownerReferences but takes the labels it sends
(podStatusStrategy.PrepareForUpdate, kubernetes pkg/registry/core/pod/strategy.go:216-233), so
the claim a pod's AppWrapper label makes is kept there as through the pod itself, while status
writes that leave it alone (the kubelet's, all the time) pass."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from testbed.apiserver import AdmissionResult, ApiserverEmulator, UserInfo
from tests.deploy.test_manifests import render
from webhook.model import names

Obj = dict[str, Any]
ALICE = UserInfo(username="alice", groups=("system:authenticated",))
KUBELET = UserInfo(username="system:node:gpu-node", groups=("system:nodes", "system:authenticated"))
APPWRAPPER_CONTROLLER = UserInfo(
    username="system:serviceaccount:appwrapper-system:appwrapper-controller-manager",
    groups=("system:serviceaccounts", "system:authenticated"),
)
POLICY = "autowrap-wrapped-pods"


def _pod(*, owned: bool = False) -> Obj:
    """A running pod of the AppWrapper ``train``'s component: labelled for it, with no
    controller of its own (a bare Pod's), or (``owned``) Volcano's pod of the Job ``train``."""
    pod: Obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "train-0", "namespace": "team-a",
                     "labels": {names.APPWRAPPER_LABEL: "train"}},
        "spec": {"nodeName": "gpu-node", "containers": [{"name": "main", "image": "train:1"}]},
        "status": {"phase": "Running"},
    }  # fmt: skip
    if owned:
        pod["metadata"]["ownerReferences"] = [
            {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "name": "train",
             "uid": "job-uid", "controller": True}
        ]  # fmt: skip
    return pod


async def _status_write(old: Obj, change: Callable[[Obj], None], user: UserInfo) -> AdmissionResult:
    """``change`` sent to ``pods/status`` (the object as the status strategy stores it: spec
    and ownerReferences are the old ones whatever the request said)."""
    new = copy.deepcopy(old)
    change(new)
    new["spec"] = copy.deepcopy(old["spec"])
    new["metadata"].pop("ownerReferences", None)
    if "ownerReferences" in old["metadata"]:
        new["metadata"]["ownerReferences"] = copy.deepcopy(old["metadata"]["ownerReferences"])
    emulator = ApiserverEmulator("127.0.0.1", 9, admission_policies=render("base"))
    return await emulator.admit("UPDATE", new, old_object=old, user=user, subresource="status")


def _relabel(pod: Obj) -> None:
    pod["metadata"]["labels"][names.APPWRAPPER_LABEL] = "serve"


def _unlabel(pod: Obj) -> None:
    del pod["metadata"]["labels"][names.APPWRAPPER_LABEL]


def _ready(pod: Obj) -> None:
    pod["status"]["conditions"] = [{"type": "Ready", "status": "True"}]


def _note(pod: Obj) -> None:
    pod["metadata"]["labels"]["example.com/checked"] = "yes"
    pod["metadata"].setdefault("annotations", {})["example.com/note"] = "seen"


@pytest.mark.parametrize("owned", [False, True])
@pytest.mark.parametrize("change", [_relabel, _unlabel])
async def test_the_claim_cannot_move_through_pod_status(
    change: Callable[[Obj], None], owned: bool
) -> None:
    for user in (ALICE, KUBELET):
        result = await _status_write(_pod(owned=owned), change, user)
        assert not result.allowed and result.status_code == 403, result.message
        assert f"ValidatingAdmissionPolicy '{POLICY}' with binding '{POLICY}'" in result.message
        assert "metadata: the label workload.codeflare.dev/appwrapper" in result.message


@pytest.mark.parametrize("change", [_ready, _note])
@pytest.mark.parametrize("owned", [False, True])
async def test_status_writes_that_leave_the_claim_alone_pass(
    change: Callable[[Obj], None], owned: bool
) -> None:
    # Not a create, whoever writes: the create rule (only controllers make a claiming pod)
    # never judges a status write.
    for user in (KUBELET, ALICE):
        result = await _status_write(_pod(owned=owned), change, user)
        assert result.allowed, result.message


async def test_the_controllers_still_move_a_claim_through_pod_status() -> None:
    result = await _status_write(_pod(), _relabel, APPWRAPPER_CONTROLLER)
    assert result.allowed, result.message


# --- what admission wrote on a pod stays true through pods/status as well -------------------------

SCHEDULER = UserInfo(username="system:kube-scheduler", groups=("system:authenticated",))


def _waiting_pod() -> Obj:
    """A bare Pod as autowrap's admission prepared it, waiting for its AppWrapper's admission."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "notebook", "namespace": "team-a",
            "labels": {names.ADOPTION_LABEL: names.ADOPTION_PENDING},
            "annotations": {names.REQUESTED_BY_ANNOTATION: "alice"},
        },
        "spec": {"schedulingGates": [{"name": names.ADMISSION_GATE}],
                 "containers": [{"name": "main", "image": "torch:2.4"}]},
        "status": {"phase": "Pending"},
    }  # fmt: skip


def _released(pod: Obj) -> None:
    pod["metadata"]["labels"][names.RELEASED_LABEL] = "true"


def _requested_by_bob(pod: Obj) -> None:
    pod["metadata"]["annotations"][names.REQUESTED_BY_ANNOTATION] = "bob"


def _adopted(pod: Obj) -> None:
    pod["metadata"]["labels"][names.ADOPTION_LABEL] = names.ADOPTION_ADOPTED


def _gated_condition(pod: Obj) -> None:  # kube-scheduler's SchedulingGates plugin
    pod["status"]["conditions"] = [{"type": "PodScheduled", "status": "False",
                                    "reason": "SchedulingGated"}]  # fmt: skip


@pytest.mark.parametrize(
    ("change", "policy", "field"),
    [
        (_released, "autowrap-admission-gate", "metadata.labels: autowrap.io/released"),
        (_requested_by_bob, "autowrap-requested-by",
         "metadata.annotations[autowrap.io/requested-by]"),
        (_adopted, "autowrap-requested-by", "metadata.labels[autowrap.io/adoption]"),
    ],
)  # fmt: skip
async def test_admissions_marks_on_a_waiting_pod_cannot_change_through_pod_status(
    change: Callable[[Obj], None], policy: str, field: str
) -> None:
    result = await _status_write(_waiting_pod(), change, ALICE)
    assert not result.allowed and result.status_code == 403, result.message
    assert f"ValidatingAdmissionPolicy '{policy}' with binding '{policy}'" in result.message
    assert f"denied request: {field}" in result.message


async def test_the_schedulers_status_write_on_a_waiting_pod_passes() -> None:
    result = await _status_write(_waiting_pod(), _gated_condition, SCHEDULER)
    assert result.allowed, result.message
