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
